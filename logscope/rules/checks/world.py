"""Whether the world (the process group) formed: an exception raised while joining it, lines that prove it formed."""

from __future__ import annotations

import regex

from logscope.rules.api import TAGGED, Context
from logscope.rules.checks.rows import frame_function
from logscope.vocab import Event

# Functions that join the world: an exception raised under one of them, saying it waited or could not connect,
# means the world never formed (a rendezvous failure), whatever the exception's class.
JOIN_FUNCTIONS = frozenset(
    {
        "init_process_group",
        "rendezvous",
        "_create_c10d_store",
        "_env_rendezvous_handler",
        "_tcp_rendezvous_handler",
        "_file_rendezvous_handler",
        "next_rendezvous",
        "_rendezvous",
    }
)
JOIN_FAILURE = regex.compile(
    r"(?i)time(?:d)?[ -]?out|connection refused|failed to connect|connect\(\)|address already in use|eaddrinuse|"
    r"name or service not known|no route to host|connection reset"
)
# How far back from its exception a traceback's frames are looked for.
TRACEBACK_SPAN = 80

# Lines that prove the process group had formed (a collective ran or training started).
WORLD_FORMED_KINDS = TAGGED("world_formed")


def world_formed(ctx: Context) -> bool:
    """Some line proves that the process group formed."""
    return any(ctx.by_kind.get(k) for k in WORLD_FORMED_KINDS)


def raised_joining_world(ctx: Context, exception: Event) -> Event | None:
    """The frame of `exception`'s traceback that joins the world, where the exception says the join waited or
    could not connect; else None."""
    if exception["kind"] != "python_exception" or not JOIN_FAILURE.search(str(exception["_f"].get("reason") or "")):
        return None
    sid, line = exception["sid"], exception["line"]
    start = max(
        (h["line"] for h in ctx.by_kind.get("traceback_start", []) if h["sid"] == sid and h["line"] < line),
        default=line - TRACEBACK_SPAN,
    )
    frames = sorted(
        (
            f
            for kind in ("traceback_frame", "c10d_call", "launcher_frame")  # a frame, by whichever signature read it
            for f in ctx.by_kind.get(kind, [])
            if f["sid"] == sid and max(start, line - TRACEBACK_SPAN) < f["line"] < line
        ),
        key=lambda f: f["line"],
    )
    return next((f for f in reversed(frames) if frame_function(f) in JOIN_FUNCTIONS), None)
