"""The check `gpu_unusable_at_sync`, behind LS303 (rules/LS303_gpu_unusable_at_sync.yaml): Isaac Sim could not use a
rank's GPU and the job never got past the initial parameter broadcast; that rank is the culprit."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event


@check("gpu_unusable_at_sync")
def gpu_unusable_at_sync(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Isaac Sim could not use a rank's GPU and the job never got past the initial parameter broadcast."""
    if not events or not ctx.by_kind.get("sync_start") or ctx.by_kind.get("iteration"):
        return None
    culprits: set[int] = set()
    for e in events:
        if e["rank"] is not None:
            culprits.add(e["rank"])
        elif str(e["_f"].get("gpu", "")).isdigit():
            culprits.add(int(e["_f"]["gpu"]))  # Kit numbers GPUs by local device, = the rank on one node
    hit = Hit(events + ctx.by_kind["sync_start"][:2], culprits, culprits=sorted(culprits))
    if ctx.job.get("nnodes") not in (None, 1):
        hit.confidence_factor = 0.7
    return hit
