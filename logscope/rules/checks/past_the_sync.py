"""The check `past_the_sync`, behind LS304 (rules/LS304_went_past_the_sync.yaml): some ranks wait in the framework's
initial parameter-sync broadcast while others are already in a later collective; those went past the sync without
taking part in it."""

from __future__ import annotations

from typing import Any

from logscope.events.catalogue import kinds
from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.collectives import call_name, last_calls
from logscope.vocab import Event

# Lines only a rank that trains prints (a rank still in the sync has none).
TRAINING_KINDS = kinds("iteration", "progress", "progress_bar", "throughput")
# The framework's initial parameter sync is a broadcast (rsl_rl, skrl) or broadcast_object_list (rl_games).
SYNC_APIS = {"broadcast", "broadcast_object_list"}


@check("past_the_sync")
def past_the_sync(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Some ranks wait in the parameter-sync broadcast while others are already in a later collective: those went
    past the sync without taking part in it (program order: the sync is the first collective of the run)."""
    if not ctx.by_kind.get("sync_start"):
        return None
    last = last_calls(ctx, events)
    # A rank that trained, or printed that the sync was done, is in a later broadcast of its loop (rl_games
    # broadcasts its stop flag every epoch), not in the initial sync.
    in_sync = {
        r
        for r, e in last.items()
        if call_name(e) in SYNC_APIS and not ctx.states[r].kinds & (TRAINING_KINDS | {"sync_done"})
    }
    ahead = {r for r, e in last.items() if call_name(e) not in SYNC_APIS}
    if not in_sync or not ahead:
        return None
    # One rank that skips the sync leaves all the others in it; a sync only a few ranks are still in, while the many
    # ahead of them printed it done, is one those few called again (or late): LS206 names them.
    if len(ahead) > len(in_sync) and all("sync_done" in ctx.states[r].kinds for r in ahead):
        return None
    calls = ", ".join(f"rank {r}: {call_name(e)}" for r, e in sorted(last.items()))
    return Hit(
        [last[r] for r in sorted(ahead)] + [last[r] for r in sorted(in_sync)] + ctx.by_kind["sync_start"][:2],
        set(last),
        culprits=sorted(ahead),
        values={"ahead": sorted(ahead), "waiting": sorted(in_sync), "per_rank": calls},
    )
