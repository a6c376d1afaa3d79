"""The check `launcher_failed`, behind LS602 (rules/LS602_launcher_failed.yaml): the launcher's own traceback
(torchrun's, DeepSpeed's runner) and no worker ever printed, so the launch itself failed."""

from __future__ import annotations

from typing import Any

from logscope.align.job import launcher_stopped
from logscope.events.catalogue import kinds
from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event

# Lines only a started worker (or the launcher's report of one) prints.
WORKER_KINDS = kinds(
    "sync_start",
    "iteration",
    "config_values",
    "rank_identity",
    "pg_initialized",
    "child_failure",
    "worker_failed",
    "error_file",
    "nccl_comm_init",
    "training_time",
)


@check("launcher_failed")
def launcher_failed(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The launcher's own traceback (torchrun's, DeepSpeed's runner) and no worker ever printed: the launch failed."""
    if not events or any(ctx.by_kind.get(k) for k in WORKER_KINDS) or ctx.visible:
        return None
    if launcher_stopped({kind for kind, rows in ctx.by_kind.items() if rows}):
        return None  # its traceback is the signal that stopped it from outside (SignalException), not a failed launch
    rdzv = [e for e in events if "rendezvous" in str(e["_f"].get("module", "")) or e["_f"].get("fn") == "_rendezvous"]
    hit = Hit(
        (rdzv or events)[:6],
        set(),
        culprits=[],
        values={"where": f"{events[-1]['_f'].get('module')}.py in {events[-1]['_f'].get('fn')}"},
    )
    hit.confidence_factor = 1.0 if rdzv else 0.8
    return hit
