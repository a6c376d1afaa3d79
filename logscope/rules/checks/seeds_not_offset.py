"""The check `seeds_not_offset`, behind LS404 (rules/LS404_seeds_not_offset.yaml): every rank seeds its framework or
environment with the same value where Isaac Lab expects seed + rank (a warning)."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event


@check("seeds_not_offset")
def seeds_not_offset(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Every rank seeds its framework/environment with the same value where Isaac Lab expects seed + rank."""
    seeds: dict[int, str] = {}
    for e in events:
        if e["rank"] is not None and e["_f"].get("seed") is not None:
            seeds[e["rank"]] = str(e["_f"]["seed"])
    if len(seeds) < 2 or len(set(seeds.values())) != 1:
        return None
    hit = Hit(
        events[:4], set(seeds), culprits=[], values={"seed": next(iter(seeds.values())), "seed_ranks": sorted(seeds)}
    )
    hit.severity = "warning"
    return hit
