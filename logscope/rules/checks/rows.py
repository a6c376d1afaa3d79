"""Reading event rows, shared by several checks: a frame's function, a field as a number, a line for a message."""

from __future__ import annotations

from typing import Any

from logscope.vocab import Event


def frame_function(frame: Event) -> str:
    """The function a traceback or stack-dump frame is in, whichever signature read it (`fn`, or c10d's `api`)."""
    return str(frame["_f"].get("fn") or frame["_f"].get("api") or "")


def int_field(e: Event, name: str) -> int | None:
    """A field of the event's own fields as a non-negative integer; None where it is absent or not a number."""
    value: Any = e["_f"].get(name)
    return int(value) if str(value or "").isdigit() else None


def short(text: str, width: int = 120) -> str:
    """A log line for a message: whitespace collapsed, cut to `width` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"
