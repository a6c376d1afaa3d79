"""Reading event rows, shared by several checks: a frame's function, a traceback's frames, a field as a number, a
line for a message, and how far a rank got by the lines its peers printed."""

from __future__ import annotations

from typing import Any

import regex

from logscope.events.catalogue import kinds
from logscope.rules.api import Context
from logscope.vocab import PHASE_ORDER, Event

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


# A line's shape for comparing what two ranks printed: numbers (its rank, counts, clocks) set aside.
_NUMBERS = regex.compile(r"\d+")
# Shorter lines ("[rank 1] done") say too little to place a rank by.
MIN_SHAPE_CHARS = 24


def said_past(ctx: Context, rank: int, at: int) -> bool:
    """Whether a script line of the rank's own (no phase of its own, in a file without clocks) is one that a peer
    printed past phase `at`: the rank got as far as that peer, wherever its files put the line."""
    mine = {
        shape
        for e in ctx.by_rank.get(rank, [])
        if e["kind"] == "rank_line" and len(shape := _NUMBERS.sub("0", " ".join(e["text"].split()))) >= MIN_SHAPE_CHARS
    }
    return bool(mine) and any(
        any(m in _NUMBERS.sub("0", " ".join(e["text"].split())) for m in mine)
        for peer, rows in ctx.by_rank.items()
        if peer != rank
        for e in rows
        if PHASE_ORDER.get(e["phase"], -1) > at and e["phase"] != "fail"  # (only these lines are shaped)
    )
