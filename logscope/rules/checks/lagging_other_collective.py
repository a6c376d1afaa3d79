"""The check `lagging_other_collective`, behind LS202 (rules/LS202_lagging_rank_other_collective.yaml): timed-out
collectives differ in SeqNum *and* op across ranks, so the rank in the earlier one is stuck there."""

from __future__ import annotations

from typing import Any

from logscope.align.flight import NEEDS_EVERY_RANK
from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.collectives import timed_out_late
from logscope.vocab import Event


@check("lagging_other_collective")
def lagging_other_collective(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Timed-out collectives differ in SeqNum *and* op across ranks: the rank in the earlier one is stuck."""
    pending: dict[int, Event] = {}
    seqs: dict[int, int] = {}  # rank -> the SeqNum of its pending event
    for e in events:
        rank, seq = e["rank"], e["seq"]
        if rank is None or seq is None or (e["pg"] or "0") != "0":
            continue
        if rank not in pending or seq < seqs[rank]:
            pending[rank], seqs[rank] = e, seq
    if len(pending) < 2 or timed_out_late(ctx, events) is not None:
        # A rank whose own timeout came well after its peers' was a straggler: the SeqNums differ because it was
        # late (LS101 names it), not because a rank took another code path.
        return None
    low = min(seqs.values())
    high = max(seqs.values())
    # The timeout lines' signatures always capture the op (signatures.yaml): no None to sort among the names.
    low_ops: set[Any] = {e["op"] for r, e in pending.items() if seqs[r] == low}
    high_ops: set[Any] = {e["op"] for r, e in pending.items() if seqs[r] == high}
    if low == high or low_ops & high_ops:
        return None
    laggards = sorted(r for r in pending if seqs[r] == low)
    ahead = sorted(r for r in pending if seqs[r] != low)
    # Most ranks agreeing on the collective they wait in, and fewer ahead of them: those few went past it without
    # joining (they skipped it); one rank stuck behind peers that moved on is the laggard.
    # (Only a collective that completes on no rank before every rank joined: a broadcast's root may go on first.)
    skipped = len(laggards) > len(ahead) and len(low_ops) == 1 and str(next(iter(low_ops))).lower() in NEEDS_EVERY_RANK
    reading = (
        f"most ranks wait in it together, so rank(s) {', '.join(map(str, ahead))} went past it without joining"
        if skipped
        else "the laggard never finished an earlier collective"
    )
    return Hit(
        sorted(pending.values(), key=lambda e: e["seq"] or 0),
        set(pending),
        culprits=ahead if skipped else laggards,
        values={
            "laggards": laggards,
            "reading": reading,
            "low_seq": low,
            "high_seq": high,
            "low_op": "/".join(sorted(low_ops)),
            "high_op": "/".join(sorted(high_ops)),
            "ahead": ahead,
        },
    )
