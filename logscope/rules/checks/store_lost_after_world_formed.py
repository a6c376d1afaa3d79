"""The check `store_lost_after_world_formed`, behind LS604 (rules/LS604_store_lost_while_running.yaml): ranks that
were running lost the c10d store, because its host process (rank 0's, or node 0's agent) went away.

Before the world formed, the same line means the store never served the job (`store_lost_before_world_formed`,
LS603); after a clean exit it is only the order in which the ranks left.
"""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.world import world_formed
from logscope.vocab import Event


@check("store_lost_after_world_formed")
def store_lost_after_world_formed(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Ranks that were running lost the c10d store: its host process (rank 0's, or node 0's agent) went away."""
    if not events or not world_formed(ctx) or ctx.job.get("exit_code") == 0:
        return None  # after a clean exit it is only the order in which the ranks left
    return Hit(events[:6], {e["rank"] for e in events if e["rank"] is not None}, culprits=[])
