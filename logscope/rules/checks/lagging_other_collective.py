"""The check `lagging_other_collective`, behind LS202 (rules/LS202_lagging_rank_other_collective.yaml): timed-out
collectives differ in SeqNum *and* op across ranks, so the rank in the earlier one is stuck there."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check


@check("lagging_other_collective")
def lagging_other_collective(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """Timed-out collectives differ in SeqNum *and* op across ranks: the rank in the earlier one is stuck."""
    pending: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["rank"] is None or e["seq"] is None or (e["pg"] or "0") != "0":
            continue
        if e["rank"] not in pending or e["seq"] < pending[e["rank"]]["seq"]:
            pending[e["rank"]] = e
    if len(pending) < 2:
        return None
    low = min(e["seq"] for e in pending.values())
    high = max(e["seq"] for e in pending.values())
    low_ops = {e["op"] for e in pending.values() if e["seq"] == low}
    high_ops = {e["op"] for e in pending.values() if e["seq"] == high}
    if low == high or low_ops & high_ops:
        return None
    laggards = sorted(r for r, e in pending.items() if e["seq"] == low)
    ahead = sorted(r for r, e in pending.items() if e["seq"] != low)
    return Hit(
        sorted(pending.values(), key=lambda e: e["seq"]),
        set(pending),
        culprits=laggards,
        values={
            "low_seq": low,
            "high_seq": high,
            "low_op": "/".join(sorted(low_ops)),
            "high_op": "/".join(sorted(high_ops)),
            "ahead": ahead,
        },
    )
