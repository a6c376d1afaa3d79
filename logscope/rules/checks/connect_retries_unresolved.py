"""The check `connect_retries_unresolved`, behind LS506 (rules/LS506_connect_retries_unresolved.yaml), of the
fallback stage: NCCL keeps retrying a connect and the log ends there; nothing failed loudly and nothing after the
retries shows a connection."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.failures import nothing_failed_nor_finished
from logscope.vocab import PHASE_ORDER, Event

# A connect that NCCL retried this often with nothing after it never went through.
MIN_CONNECT_RETRIES = 3


@check("connect_retries_unresolved")
def connect_retries_unresolved(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """NCCL keeps retrying a connect and the log ends there: nothing failed loudly, nothing after shows a connection.

    Fallback stage: only when no main rule found a failure and nothing proves the run finished.
    """
    if not nothing_failed_nor_finished(ctx):
        return None
    if len(events) < MIN_CONNECT_RETRIES:
        return None
    last = max(events, key=lambda e: (e["sid"], e["line"]))
    after = [
        e
        for e in ctx.rows
        if e["sid"] == last["sid"]
        and e["line"] > last["line"]
        and (PHASE_ORDER.get(e["phase"], -1) > PHASE_ORDER["init"] or e["seq"] is not None)
    ]
    if after:
        return None
    ranks = {e["rank"] for e in events if e["rank"] is not None}
    return Hit(
        [*events[:3], last], ranks, culprits=[], values={"reason": last["_f"].get("reason"), "retries": len(events)}
    )
