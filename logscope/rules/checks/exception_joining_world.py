"""The check `exception_joining_world`, behind LS606 (rules/LS606_exception_joining_world.yaml): an exception out
of init_process_group or the rendezvous that says it timed out or could not connect, so the world never formed."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.rows import frame_function, short
from logscope.rules.checks.world import raised_joining_world
from logscope.vocab import Event


@check("exception_joining_world")
def exception_joining_world(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """An exception out of init_process_group / the rendezvous that says it timed out or could not connect."""
    found = [(e, frame) for e in events if (frame := raised_joining_world(ctx, e)) is not None]
    if not found:
        return None
    exception, frame = found[0]
    return Hit(
        [exception, frame],
        {e["rank"] for e, _ in found if e["rank"] is not None},
        culprits=[],
        values={
            "exception": short(str(exception["_f"].get("exc_type") or "") + ": " + str(exception["_f"].get("reason"))),
            "function": frame_function(frame),
        },
    )
