"""The check `collective_said_timeout`, behind LS107 (rules/LS107_collective_said_timeout.yaml): an exception
raised out of a torch.distributed collective whose message says the collective timed out, in any backend's words
(HCCL's "Getting socket times out", a gRPC deadline): the rank waited for a peer that did not come."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.collectives import call_name, timed_out_in_a_collective
from logscope.rules.checks.rows import short
from logscope.vocab import Event


@check("collective_said_timeout")
def collective_said_timeout(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    found = [(e, frame) for e in events if (frame := timed_out_in_a_collective(ctx, e)) is not None]
    if not found:
        return None
    exception, frame = found[0]
    waiting = {e["rank"] for e, _ in found if e["rank"] is not None}
    values = {
        "call": call_name(frame),
        "exception": short(f"{exception['_f'].get('exc_type')}: {exception['_f'].get('reason')}"),
        "waiting": sorted(waiting) or "unknown",
    }
    return Hit([exception, frame], waiting, culprits=[], values=values)
