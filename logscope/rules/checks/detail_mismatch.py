"""The check `detail_mismatch`, behind LS203 (rules/LS203_detail_fingerprint_mismatch.yaml): ProcessGroupWrapper's
collective fingerprint mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL); the rank that broke its own collective pattern,
or the odd one out, is the culprit."""

from __future__ import annotations

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
    sigs: dict[int, tuple[Any, Any]] = {}
    for other in events:  # a pasted line may be cut before its "but Rank B is running" half
        g = other["_f"]
        sigs.setdefault(int(g["rank_a"]), (g.get("op"), g.get("shape")))
        if g.get("rank_b") is not None:
            sigs.setdefault(int(g["rank_b"]), (g.get("op_b"), g.get("shape_b")))
    culprits: list[int] = []
    if len(sigs) >= 3:
        common = max(set(sigs.values()), key=list(sigs.values()).count)
        culprits = sorted(r for r, s in sigs.items() if s != common)
    elif f.get("seq") is not None:  # torch 1.x fingerprints carry no SequenceNumber
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
