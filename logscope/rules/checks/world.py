"""Whether the world (the process group) formed: an exception raised while joining it, lines that prove it formed."""

from __future__ import annotations

import regex

from logscope.rules.api import TAGGED, Context
from logscope.rules.checks.rows import frame_function, traceback_frames
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
        "init_distributed",  # DeepSpeed's deepspeed.init_distributed
    }
)
# Joins named too generally to go by the function alone: the function in a file whose path has the word
# (JAX's jax.distributed.initialize, jax/_src/distributed.py, whose coordination barrier waits for every process).
JOIN_IN_FILE = {"initialize": "distributed"}
JOIN_FAILURE = regex.compile(
    r"(?i)time(?:d)?[ -]?out|connection refused|failed to connect|connect\(\)|address already in use|eaddrinuse|"
    r"name or service not known|no route to host|connection reset"
)

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
    frames = traceback_frames(ctx, exception)
    return next((f for f in reversed(frames) if _joins(f)), None)


def _joins(frame: Event) -> bool:
    function = frame_function(frame)
    word = JOIN_IN_FILE.get(function)
    return function in JOIN_FUNCTIONS or (word is not None and word in str(frame["_f"].get("file") or ""))
