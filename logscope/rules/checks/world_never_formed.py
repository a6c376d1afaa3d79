"""The check `world_never_formed`, behind LS607 (rules/LS607_world_never_formed.yaml), of the fallback stage: some
ranks of a declared world start and wait at init while the others never print, so the world never formed; the
missing ranks are the culprits.

Like the stall rule it refines, it needs that nothing failed and nothing proves the run finished. Two or more
ranks must have started, since many jobs print start-up lines from rank 0 only.
"""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.failures import nothing_failed_nor_finished
from logscope.rules.checks.world import world_formed
from logscope.values import int_or_none
from logscope.vocab import PHASE_ORDER, Event


@check("world_never_formed")
def world_never_formed(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Some ranks of a declared world start and wait at init; the others never print: the world never formed."""
    if not nothing_failed_nor_finished(ctx):
        return None
    world = ctx.job.get("world_size")
    if not ctx.job.get("world_size_declared") or not isinstance(world, int) or world < 2:
        return None
    started = {r for r in ctx.visible if 0 <= r < world}
    missing = sorted(set(range(world)) - started)
    if len(started) < 2 or not missing:
        return None
    if any(ctx.states[r].furthest > PHASE_ORDER["init"] or ctx.states[r].progress_count for r in started):
        return None
    if world_formed(ctx) or any(e["seq"] is not None for e in ctx.rows):
        return None
    barrier = ctx.by_kind.get("store_barrier_wait", [])
    arrived = max((n for e in barrier if (n := int_or_none(e["_f"].get("worker_count"))) is not None), default=None)
    if arrived is not None and arrived > len(started):
        # More ranks reached the barrier than these logs show: which of the others are missing is not known.
        missing = []
    last = [e for r in sorted(started) if (e := ctx.states[r].last_event) is not None]
    return Hit(
        last[:8],
        set(started),
        culprits=missing,
        values={"started": sorted(started), "missing": missing, "world": world},
    )
