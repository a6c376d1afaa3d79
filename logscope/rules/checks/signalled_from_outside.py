"""The check `signalled_from_outside`, behind LS704 (rules/LS704_signalled_from_outside.yaml): a minority of the
ranks said they received a termination signal before anything failed and before the launcher stopped anyone. Nothing
in the job sent it (a scheduler, an operator, another program's kill): those ranks were stopped from outside, and
what their peers then report (a closed connection, a timeout, a collective their handler ran) is its consequence."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event

# The launcher's own stop: a signal it forwards to every worker is teardown, not an outside kill.
LAUNCHER_STOP_KINDS = ("agent_death_signal", "worker_sigterm_sent")


@check("signalled_from_outside")
def signalled_from_outside(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    first: dict[int, Event] = {}  # rank -> its first line saying it received the signal
    for e in sorted(events, key=ctx.order):
        if e["rank"] is not None and ctx.in_final_attempt(e):
            first.setdefault(e["rank"], e)
    ranks = set(ctx.ranks) or set(first)
    # Most ranks signalled: the whole job was stopped (a stall's kill) or the launcher forwarded its teardown.
    if not first or len(first) * 2 >= len(ranks):
        return None
    earliest = min(ctx.order(e) for e in first.values())
    for x in ctx.rows:
        if ctx.order(x) >= earliest or not ctx.in_final_attempt(x):
            continue
        if x["kind"] in LAUNCHER_STOP_KINDS or (x["level"] == "error" and x["rank"] not in first):
            return None  # something failed (or was stopped) first: the signal is its teardown
    culprits = sorted(first)
    what = "; ".join(f"rank {r}: {first[r]['text'].strip()[:120]}" for r in culprits)
    return Hit(list(first.values()), set(first), culprits=culprits, values={"what": what})
