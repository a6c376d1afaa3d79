"""Reading event rows, shared by several checks: a frame's function, a traceback's frames, a field as a number, a
line for a message."""

from __future__ import annotations

from typing import Any

from logscope.events.catalogue import kinds
from logscope.rules.api import Context
from logscope.vocab import Event

# A traceback's frame lines, by whichever signature read them: plain, torch.distributed's own, torchrun's.
TRACEBACK_FRAME_KINDS = kinds("traceback_frame", "c10d_call", "launcher_frame")
# How far back from its exception a traceback's frames are looked for.
TRACEBACK_SPAN = 80


def frame_function(frame: Event) -> str:
    """The function a traceback or stack-dump frame is in, whichever signature read it (`fn`, or c10d's `api`)."""
    return str(frame["_f"].get("fn") or frame["_f"].get("api") or "")


def traceback_frames(ctx: Context, exception: Event) -> list[Event]:
    """The frames of the traceback that `exception` ends, outermost first: the frame lines of its file between its
    traceback's header and it (at most TRACEBACK_SPAN lines back)."""
    sid, line = exception["sid"], exception["line"]
    start = max(
        (h["line"] for h in ctx.by_kind.get("traceback_start", []) if h["sid"] == sid and h["line"] < line),
        default=line - TRACEBACK_SPAN,
    )
    return sorted(
        (
            f
            for kind in TRACEBACK_FRAME_KINDS
            for f in ctx.by_kind.get(kind, [])
            if f["sid"] == sid and max(start, line - TRACEBACK_SPAN) < f["line"] < line
        ),
        key=lambda f: f["line"],
    )


def int_field(e: Event, name: str) -> int | None:
    """A field of the event's own fields as a non-negative integer; None where it is absent or not a number."""
    value: Any = e["_f"].get(name)
    return int(value) if str(value or "").isdigit() else None


def short(text: str, width: int = 120) -> str:
    """A log line for a message: whitespace collapsed, cut to `width` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"
