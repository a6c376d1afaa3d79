"""The torch.distributed call each failing rank was in, for the checks that compare them across ranks."""

from __future__ import annotations

from logscope.rules.api import API_OPTYPE, Context
from logscope.rules.checks.failures import comm_ranks
from logscope.vocab import Event


def last_calls(ctx: Context, events: list[Event]) -> dict[int, Event]:
    """Each failing rank's last torch.distributed frame (its traceback's innermost collective), final attempt."""
    comm = comm_ranks(ctx)
    last: dict[int, Event] = {}
    for e in events:
        api = e["_f"].get("api")
        if e["rank"] is None or api not in API_OPTYPE or e["rank"] not in comm:
            continue
        if not ctx.in_final_attempt(e):
            continue
        last[e["rank"]] = e
    return last
