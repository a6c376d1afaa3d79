"""The check `timeout_dump_signal`, behind LS104 (rules/LS104_timeout_dump_signal.yaml): ProcessGroupNCCL's
"Received a dump signal due to a collective timeout" where no watchdog timeout line survived. PyTorch prints the same
words "from this local rank" after any watchdog failure, also after an NCCL error such as a peer that went away
("ncclRemoteError ... remote process exiting"): on a rank whose own NCCL error came first in its file and which
printed no timeout, the dump says nothing about a timeout."""

from __future__ import annotations

from typing import Any

from logscope.events.catalogue import kinds
from logscope.rules.api import TAGGED, Context, Hit, Rule, check
from logscope.vocab import Event

# Lines that say a timeout happened (the PG status line follows any watchdog failure, a timeout or an error).
TIMEOUT_KINDS = TAGGED("timeout") - kinds("nccl_dump_signal", "nccl_pg_status")
# A failure of the communication layer itself that the watchdog reports before signalling the dump.
NCCL_ERROR_KINDS = kinds("nccl_error", "nccl_result", "nccl_peer_closed")


@check("timeout_dump_signal")
def timeout_dump_signal(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Dump signals that stand for a collective timeout."""
    kept = [e for e in events if not _after_own_nccl_error(ctx, e)]
    if not kept:
        return None
    return Hit(kept, {e["rank"] for e in kept if e["rank"] is not None})


def _after_own_nccl_error(ctx: Context, signal: Event) -> bool:
    """The signal came "from this local rank" after an NCCL error in its own file, with no timeout line before it."""
    if not str(ctx.field(signal, "from") or "").startswith("this"):
        return False
    pool = ctx.by_rank.get(signal["rank"], []) if signal["rank"] is not None else ctx.rows
    before = [r for r in pool if r["sid"] == signal["sid"] and r["line"] < signal["line"]]
    return any(r["kind"] in NCCL_ERROR_KINDS for r in before) and not any(r["kind"] in TIMEOUT_KINDS for r in before)
