"""The check `all_ranks_aborted`, behind LS103 (rules/LS103_all_ranks_aborted.yaml): every failed rank died of
SIGABRT with no traceback (ProcessGroupNCCL's watchdog tearing them down) and no watchdog timeout says why. A
single aborted rank counts only where something of NCCL's is in the logs."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import LAUNCHER_EXIT_KINDS, Context, Hit, Rule, check
from logscope.rules.checks.failures import aborted_failures
from logscope.vocab import Event


@check("all_ranks_aborted")
def all_ranks_aborted(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Every failed rank was aborted with no traceback, and no watchdog timeout is in the logs."""
    failures = aborted_failures(ctx)
    if not failures or any(e["kind"] == "nccl_watchdog_timeout" for e in ctx.rows):
        return None
    ranks = {e["rank"] for e in failures if e["rank"] is not None}
    if len(ranks) < 2 and not any(_watchdog_trace(e) for e in ctx.rows):
        # One rank's SIGABRT and nothing of NCCL's in the logs: its own abort (a C++ terminate, an assert), not the
        # watchdog's teardown, which leaves its timeout or its thread's C++ frames on the way (LS700 reads it).
        return None
    if ranks and all(_said_nothing(ctx, rank) for rank in ranks):
        # The aborted ranks' whole output is here and holds no error of theirs: the watchdog writes its timeout or
        # exception to the rank's stderr before it aborts, so these aborts are not its (a signal from outside).
        return None
    return Hit(
        failures, ranks, culprits=[], values={"count": len(failures)}, confidence_factor=1.0 if len(ranks) >= 2 else 0.8
    )


def _said_nothing(ctx: Context, rank: int) -> bool:
    """The rank's own files are here (its whole output) and none of its lines is an error of its own."""
    state = ctx.states.get(rank)
    return (
        state is not None
        and state.complete
        and not any(e["level"] == "error" and e["kind"] not in LAUNCHER_EXIT_KINDS for e in ctx.by_rank.get(rank, []))
    )


def _watchdog_trace(e: Event) -> bool:
    """A line of NCCL's, or the end of the C++ frame list c10 prints for an exception on a thread without Python
    (the watchdog's: "frame #5: clone + 0x43")."""
    return e["kind"] == "cpp_thread_frame" or "NCCL" in e["text"]
