"""The check `garbage_object_size`, behind LS213 (rules/LS213_garbage_object_size.yaml): a rank failed to allocate
an impossible amount of memory (terabytes) inside an object collective (broadcast_object_list, all_gather_object,
...): the size it read off the wire was not a size, because its peers were in another call or sent another number
of objects. A mismatch, not an out-of-memory."""

from __future__ import annotations

from typing import Any

import regex

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.collectives import call_name
from logscope.vocab import Event

# "you tried to allocate 94596414846540 bytes" (c10d's CPU allocator), "Unable to allocate 262. TiB" (numpy).
ALLOCATION = regex.compile(r"allocate (?P<bytes>\d{13,}) bytes|allocate (?P<tib>\d+(?:\.\d*)?) ?(?P<unit>TiB|PiB|EiB)")
# No host or device of today holds this much: a size read from a collective's wire that was not one.
IMPOSSIBLE_BYTES = 2**40
# torch.distributed's object collectives: they send each object's pickled size first, then the bytes.
OBJECT_CALLS = frozenset(
    {"broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list", "recv_object_list"}
)
# How far above the allocation error the rank's traceback may name the call.
TRACEBACK_SPAN = 40


@check("garbage_object_size")
def garbage_object_size(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Out-of-memory lines asking for terabytes, raised inside an object collective of the same rank's traceback."""
    found = [(e, call) for e in events if _impossible(e["text"]) and (call := _object_call(ctx, e)) is not None]
    if not found:
        return None
    ranks = sorted({e["rank"] for e, _ in found if e["rank"] is not None})
    return Hit(
        [e for e, _ in found] + [call for _, call in found],
        set(ranks),
        culprits=ranks,
        values={"call": call_name(found[0][1])},
    )


def _impossible(text: str) -> bool:
    m = ALLOCATION.search(text)
    if m is None:
        return False
    if m["bytes"] is not None:
        return int(m["bytes"]) >= IMPOSSIBLE_BYTES
    return True  # a TiB or more


def _object_call(ctx: Context, e: Event) -> Event | None:
    """The object collective frame of the traceback the line ends, in the same file just above it."""
    frames = [
        x
        for x in ctx.by_kind.get("c10d_call", [])
        if x["sid"] == e["sid"]
        and x["rank"] == e["rank"]
        and 0 < e["line"] - x["line"] <= TRACEBACK_SPAN
        and x["_f"].get("api") in OBJECT_CALLS
    ]
    return frames[-1] if frames else None
