"""The torch.distributed call each failing rank was in, for the checks that compare them across ranks."""

from __future__ import annotations

from logscope.rules.api import API_OPTYPE, Context
from logscope.rules.checks.failures import comm_ranks
from logscope.vocab import Event

# The call a rank was in when its gradient collective failed: DDP's all_reduce runs in the autograd engine's hooks.
BACKWARD = "backward"


def call_name(e: Event) -> str | None:
    """The collective a frame of `c10d_call` is in: the torch.distributed function, or backward (autograd's frame)."""
    api = e["_f"].get("api")
    if api in API_OPTYPE:
        return str(api)
    return BACKWARD if e["_f"].get("grad") else None


def last_calls(ctx: Context, events: list[Event]) -> dict[int, Event]:
    """Each failing rank's last collective frame (its traceback's innermost torch.distributed call, or backward's
    where that is the innermost), final attempt."""
    comm = comm_ranks(ctx)
    last: dict[int, Event] = {}
    for e in events:
        if e["rank"] is None or call_name(e) is None or e["rank"] not in comm:
            continue
        if not ctx.in_final_attempt(e):
            continue
        last[e["rank"]] = e
    return last
