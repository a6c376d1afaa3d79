"""The check `skipped_startup_collectives`, behind LS309 (rules/LS309_skipped_startup_collectives.yaml): before any
rank made progress, a rank's watchdog timed out in a training collective at a SeqNum that every peer had already
completed. A collective completes on a rank only once its members joined it, so at that SeqNum the rank ran
something else than its peers: it came into its first training collective while they were still in (or past) the
start-up collectives it never ran, the initial parameter broadcast."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event

# What the initial sync runs: a rank pending in one of these is in the sync, not past it.
SYNC_OPS = frozenset({"BROADCAST", "_BROADCAST_OOP", "COALESCED"})
MIN_PEERS = 2  # peers whose completed SeqNum is known: with one, "every peer" says little


@check("skipped_startup_collectives")
def skipped_startup_collectives(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    if any(s.progress_count for s in ctx.states.values()):
        return None  # past start-up: a SeqNum gap there is a straggler's or a mid-run mismatch's (LS205, LS201)
    pending: dict[int, Event] = {}  # rank -> its timed-out collective of the default group (the earliest)
    for e in events:
        if e["rank"] is None or e["seq"] is None or (e["pg"] or "0") != "0" or not ctx.in_final_attempt(e):
            continue
        if e["rank"] not in pending or e["seq"] < (pending[e["rank"]]["seq"] or 0):
            pending[e["rank"]] = e
    completed = {
        r: c.completed
        for r, s in ctx.states.items()
        if (c := s.collectives.get("0")) is not None and c.completed is not None
    }
    ops = {rank: _op(ctx, rank, e) for rank, e in pending.items()}
    skipped = []
    for rank, e in pending.items():
        peers = [done for r, done in completed.items() if r != rank]
        op, seq = ops[rank], e["seq"]
        if seq is None or not op or op in SYNC_OPS or len(peers) < MIN_PEERS:
            continue
        if all(done >= seq for done in peers):
            skipped.append(rank)
    if not skipped or len(skipped) * 2 >= len(pending):
        return None
    per_rank = ", ".join(
        f"rank {r}: SeqNum {e['seq']}"
        + (f" {ops[r]}" if ops[r] else "")
        + (f", completed {completed[r]}" if r in completed else ", none completed")
        for r, e in sorted(pending.items())
    )
    values = {"per_rank": per_rank, "skipped": sorted(skipped)}
    return Hit([pending[r] for r in sorted(pending)], set(pending), culprits=sorted(skipped), values=values)


def _op(ctx: Context, rank: int, pending: Event) -> str | None:
    """The op of the rank's timed-out collective (the watchdog's line names it; the PG status line does not)."""
    if pending["op"]:
        return str(pending["op"])
    for e in ctx.by_rank.get(rank, []):
        if e["seq"] == pending["seq"] and e["op"] and (e["pg"] or "0") == "0":
            return str(e["op"])
    return None
