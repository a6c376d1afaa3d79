"""The check `peer_connection_lost`, behind LS504 (rules/LS504_peer_connection_lost.yaml): a rank lost its
connection to a peer; the peer that went away first is the culprit, not the rank that reports it."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event


@check("peer_connection_lost")
def peer_connection_lost(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """A rank lost its connection to a peer: the peer that went away first is the culprit, not the reporter."""
    # "Rank 1 failed to pass monitoredBarrier" is a timeout naming the rank that never came (LS101), not a lost peer.
    events = [e for e in events if not e["_f"].get("failed_ranks")]
    if not events:
        return None
    reporters = {e["rank"] for e in events if e["rank"] is not None}
    culprits: list[int] = []
    # The peer a rank names: its pending send/recv, or the rank a monitored barrier's errors came from.
    named = [
        int(e["_f"]["peer_rank"])
        for e in ctx.by_kind.get("p2p_call", []) + events
        if e["_f"].get("peer_rank") and (e["rank"] is None or str(e["_f"]["peer_rank"]) != str(e["rank"]))
    ]
    if named:
        culprits = sorted(set(named) - reporters) or sorted(set(named))
    elif reporters:
        peers = ctx.visible - reporters
        world = ctx.job.get("world_size")
        # A peer that exited by itself (killed, crashed) went away before the ones its launcher then stopped.
        own = {r for r in peers if (state := ctx.states.get(r)) is not None and state.failed_by_itself}
        if peers:
            culprits = sorted(own or peers)
        elif world == 2 and len(reporters) == 1:
            culprits = [1 - next(iter(reporters))]
    hit = Hit(events, reporters, culprits=culprits, values={"reporters": sorted(reporters) or "unknown"})
    if culprits and all(_died_silently(ctx, r) for r in culprits):
        # The peers' own logs stop with no error and no end: they died without a word (killed, their node lost),
        # and the lost connection is only how the others learnt of it.
        hit.category = "crash"
    return hit


def _died_silently(ctx: Context, rank: int) -> bool:
    state = ctx.states.get(rank)
    return (
        state is not None
        and state.status == "visible"
        and state.complete
        and state.first_error is None
        and not state.ended
        and (state.exit_code in (None, -9) or state.stopped_by == "outside")
    )
