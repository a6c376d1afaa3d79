"""The check `detail_mismatch`, behind LS203 (rules/LS203_detail_fingerprint_mismatch.yaml): ProcessGroupWrapper's
collective fingerprint mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL); the rank the reports show to be the odd one out
(from the order in which the check compares ranks), the odd one out of the fingerprints, or the rank that broke its own
collective pattern is the culprit."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from logscope.rules.api import Context, Hit, Rule, breaks_own_pattern, check
from logscope.vocab import Event


@check("detail_mismatch")
def detail_mismatch(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """ProcessGroupWrapper's fingerprint mismatch: blame the rank that broke its own collective pattern."""
    if not events:
        return None
    e = events[0]
    f = e["_f"]
    own: dict[int, tuple[Any, Any]] = {}  # what a rank reports of itself
    told: dict[int, tuple[Any, Any]] = {}  # what a peer's report says of it: can be garbage ("SequenceNumber=0")
    named_by: dict[int, set[int]] = defaultdict(set)
    for other in events:  # a pasted line may be cut before its "but Rank B is running" half
        g = other["_f"]
        rank_a = int(g["rank_a"])
        own.setdefault(rank_a, (g.get("op"), g.get("shape")))
        if g.get("rank_b") is not None:
            told.setdefault(int(g["rank_b"]), (g.get("op_b"), g.get("shape_b")))
            named_by[int(g["rank_b"])].add(rank_a)
    sigs = told | own
    # ProcessGroupWrapper's check compares the rank's fingerprint with every rank's in rank order and reports the
    # first that differs: the ranks below the one named (but the reporter) agree with the reporter, so a rank named
    # above another agreeing rank is the odd one out; so is the rank that every other reporter (two or more) names.
    odd = {b for b, by in named_by.items() if any(set(range(b)) - {a} for a in by)}
    odd |= {r for r, by in named_by.items() if len(own.keys() - {r}) >= 2 and by >= own.keys() - {r}}
    culprits = sorted(odd) if len(odd) == 1 else []
    if not culprits and len(sigs) >= 3:
        common = max(set(sigs.values()), key=list(sigs.values()).count)
        culprits = sorted(r for r, s in sigs.items() if s != common)
    elif not culprits and f.get("seq") is not None:  # torch 1.x fingerprints carry no SequenceNumber
        seq = int(f["seq"])
        culprits = [r for r, (op, shape) in sigs.items() if breaks_own_pattern(ctx, r, seq, op, shape)]
    factor = 1.0
    if not culprits and len(sigs) >= 2:
        # Two ranks and no history of their collectives: either may have taken the other branch.
        culprits, factor = sorted(sigs), 0.7
    elif not culprits:
        factor = 0.6
    per_rank = ", ".join(f"rank {r}: {s[0]} [{s[1] or ''}]" for r, s in sorted(sigs.items()))
    return Hit(
        events,
        set(sigs),
        culprits=sorted(culprits),
        confidence_factor=factor,
        values={"seq": f.get("seq") or "?", "per_rank": per_rank},
    )
