"""The check `different_collective_calls`, behind LS206 (rules/LS206_different_collective_calls.yaml): ranks failed
inside different torch.distributed calls (their tracebacks' last c10d frame differs); the odd ones out are the
culprits where most ranks agree."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.collectives import call_name, last_calls
from logscope.vocab import Event


@check("different_collective_calls")
def different_collective_calls(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Ranks failed inside different torch.distributed calls (their tracebacks' last c10d frame differs)."""
    last = last_calls(ctx, events)
    if len(last) < 2:
        return None
    calls = {r: str(call_name(e)) for r, e in last.items()}
    if len(set(calls.values())) < 2:
        return None
    counts: dict[str, int] = {}
    for api in calls.values():
        counts[api] = counts.get(api, 0) + 1
    top = max(counts.values())
    factor = 1.0
    if list(counts.values()).count(top) == 1 and len(calls) >= 3:
        usual = max(counts, key=lambda k: counts[k])
        culprits = sorted(r for r, api in calls.items() if api != usual)
    elif len(left := [r for r in calls if ctx.states[r].ended]) == 1 and len(calls) > 1:
        # One rank had said its training loop was over and the others were still in it: it left early, and its
        # closing collective (a barrier, wait_for_everyone) met theirs.
        culprits = left
    else:
        culprits, factor = sorted(calls), 0.7
    per_rank = ", ".join(f"rank {r}: {api}" for r, api in sorted(calls.items()))
    return Hit(
        list(last.values()), set(calls), culprits=culprits, confidence_factor=factor, values={"per_rank": per_rank}
    )
