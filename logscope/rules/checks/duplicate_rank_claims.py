"""The check `duplicate_rank_claims`, behind LS605 (rules/LS605_duplicate_rank_claims.yaml): two processes announce
the same global rank while other ranks of the world never appear; two launches were given the same node rank (or
machine rank), so the world they should form never forms."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.rows import int_field
from logscope.vocab import Event

# A bound on the ranks listed as never seen: the world size is a number read from a log.
MAX_WORLD = 65536


@check("duplicate_rank_claims")
def duplicate_rank_claims(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Two processes announce the same global rank while other ranks of the world never appear: two launches
    were given the same node rank (or machine rank), so the world they should form never forms."""
    claims: dict[int, list[Event]] = {}
    world = 0
    for e in events:
        rank, size = int_field(e, "rank"), int_field(e, "world_size")
        if rank is None or not ctx.in_final_attempt(e):
            continue
        claims.setdefault(rank, []).append(e)
        world = max(world, size or 0)
    doubled = sorted(r for r, rows in claims.items() if len(rows) >= 2)
    never = sorted(set(range(world)) - set(claims)) if world <= MAX_WORLD else []
    if len(doubled) < 2 or not never:
        return None
    return Hit(
        [rows[1] for r, rows in sorted(claims.items()) if r in doubled][:8],
        set(doubled),
        culprits=[],
        values={"doubled": doubled, "never": never, "world": world},
    )
