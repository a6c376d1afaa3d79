"""The check `store_lost_before_world_formed`, behind LS603 (rules/LS603_store_lost_before_world_formed.yaml): a
TCPStore client lost its server before any process group formed, so the store host never served the job.

After the world formed, the same line is usually the aftermath of the store's host process exiting first
(`store_lost_after_world_formed`, LS604).
"""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.world import world_formed
from logscope.vocab import Event


@check("store_lost_before_world_formed")
def store_lost_before_world_formed(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """A TCPStore client lost its server before any process group formed: the store host never served the job."""
    if not events or world_formed(ctx):
        return None
    return Hit(events[:6], {e["rank"] for e in events if e["rank"] is not None}, culprits=[])
