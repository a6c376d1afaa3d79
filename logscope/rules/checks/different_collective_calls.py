"""The check `different_collective_calls`, behind LS206 (rules/LS206_different_collective_calls.yaml): ranks failed
inside different torch.distributed calls (their tracebacks' last c10d frame differs); the odd ones out are the
culprits where most ranks agree."""

from __future__ import annotations

from typing import Any

from logscope.events.catalogue import catalogue
from logscope.rules.api import LAUNCHER_EXIT_KINDS, REMOTE_KINDS, Context, Hit, Rule, check
from logscope.rules.checks.collectives import call_name, last_calls
from logscope.rules.checks.rows import TRACEBACK_SPAN
from logscope.vocab import Event

# Lines that do not say a rank failed of its own: a peer went away, a process's exit status, a traceback's header.
NOT_ITS_OWN = REMOTE_KINDS | catalogue().tagged("exit") | LAUNCHER_EXIT_KINDS | {"traceback_start"}
# Collectives with a root, through which data flows one way: a rank may return from its part before every rank has.
ROOTED_CALLS = frozenset({"broadcast", "reduce", "gather", "scatter", "broadcast_object_list", "gather_object"})


@check("different_collective_calls")
def different_collective_calls(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Ranks failed inside different torch.distributed calls (their tracebacks' last c10d frame differs)."""
    last = last_calls(ctx, events)
    if len(last) < 2:
        return None
    calls = {r: str(call_name(e)) for r, e in last.items()}
    if any(_failed_by_itself(ctx, r) for r in set(ctx.by_rank) - set(calls)):
        # Another rank failed by itself: ranks that only lost their connection to it were interrupted in whatever
        # call each had reached, not stuck in calls that disagree.
        calls = {r: api for r, api in calls.items() if _failed_by_itself(ctx, r)}
    if len(set(calls.values())) == 1 and next(iter(calls.values())) not in ROOTED_CALLS:
        # The same function, called from different lines of the script (a subgroup's all_reduce in one place, the
        # world's in another): different collectives. (A rooted call is often written twice, for root and others.)
        calls = {r: f"{api} ({site})" for r, api in calls.items() if (site := _call_site(ctx, last[r]))} or calls
        if len(calls) < len(last):
            return None
    if len(set(calls.values())) < 2 or _drifted_past_a_rooted_call(ctx, calls):
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
        [last[r] for r in calls], set(calls), culprits=culprits, confidence_factor=factor, values={"per_rank": per_rank}
    )


def _drifted_past_a_rooted_call(ctx: Context, calls: dict[int, str]) -> bool:
    """A rank that printed no error and never finished (stuck outside torch.distributed: the one the others wait
    for) beside ranks in a rooted collective and others past it: a broadcast (reduce, gather, scatter) returns on
    its root and on the ranks that passed their part on, so they went on to the next call while a rank that must
    still forward to the stuck one waits. Different calls, but one program: LS101 names the stuck rank."""
    if not any(api in ROOTED_CALLS for api in calls.values()):
        return False
    return any(
        s.status == "visible" and s.first_error is None and not s.failed_by_itself and not s.ended
        for r, s in ctx.states.items()
        if r not in calls
    )


def _call_site(ctx: Context, call: Event) -> str | None:
    """Where the program called the collective: the innermost frame of its traceback outside torch ("train.py:97")."""
    frames = [
        f
        for f in ctx.by_kind.get("traceback_frame", [])
        if f["sid"] == call["sid"]
        and f["rank"] == call["rank"]
        and call["line"] - TRACEBACK_SPAN < f["line"] < call["line"]
    ]
    for f in sorted(frames, key=lambda f: f["line"], reverse=True):
        path = str(f["_f"].get("file") or "")
        if f["_f"].get("lineno") and "/torch/" not in path:
            return f"{path.rsplit('/', 1)[-1]}:{f['_f']['lineno']}"
    return None


def _failed_by_itself(ctx: Context, rank: int | None) -> bool:
    """An error line of the rank's own that is not a lost connection, an exit status or a traceback's header."""
    return rank is not None and any(
        x["level"] == "error" and x["kind"] not in NOT_ITS_OWN for x in ctx.by_rank.get(rank, [])
    )
