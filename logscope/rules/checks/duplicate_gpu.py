"""The check `duplicate_gpu`, behind LS501 (rules/LS501_duplicate_gpu.yaml): NCCL's "Duplicate GPU detected"; of the
two ranks it names, the one not on cuda:<local_rank> is the culprit."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event


@check("duplicate_gpu")
def duplicate_gpu(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """NCCL's "Duplicate GPU detected": of the two ranks, the one not on cuda:<local_rank> is the culprit."""
    if not events:
        return None
    named: set[int] = set()
    for e in events:
        for key in ("rank_a", "rank_b"):
            if str(e["_f"].get(key, "")).isdigit():
                named.add(int(e["_f"][key]))
    misplaced = set()
    for rank in named:
        info = ctx.ranks.get(rank)
        local = info["local_rank"] if info is not None else None
        devs = {
            str(x["_f"].get("cuda_dev"))
            for x in ctx.by_kind.get("nccl_comm_init", [])
            if x["rank"] == rank and x["_f"].get("cuda_dev") is not None
        }
        if local is not None and devs and str(local) not in devs:
            misplaced.add(rank)
    culprits = sorted(misplaced or named)
    return Hit(events, named | {e["rank"] for e in events if e["rank"] is not None}, culprits=culprits)
