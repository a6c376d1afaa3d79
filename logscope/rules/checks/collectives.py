"""The torch.distributed call each failing rank was in, for the checks that compare them across ranks."""

from __future__ import annotations

import regex

from logscope.rules.api import API_OPTYPE, Context
from logscope.rules.checks.failures import comm_ranks
from logscope.rules.checks.rows import traceback_frames
from logscope.vocab import Event

# A rank's report this long after the failure's first reports came late: not where it stood when the others failed.
LATER_S = 10.0
# The call a rank was in when its gradient collective failed: DDP's all_reduce runs in the autograd engine's hooks.
BACKWARD = "backward"


def call_name(e: Event) -> str | None:
    """The collective a frame of `c10d_call` is in: the torch.distributed function, or backward (autograd's frame)."""
    api = e["_f"].get("api")
    if api in API_OPTYPE:
        return str(api)
    return BACKWARD if e["_f"].get("grad") else None


def last_calls(ctx: Context, events: list[Event]) -> dict[int, Event]:
    """Each failing rank's last collective frame (its traceback's innermost torch.distributed call, or backward's
    where that is the innermost), final attempt."""
    comm = comm_ranks(ctx)
    last: dict[int, Event] = {}
    for e in events:
        if e["rank"] is None or call_name(e) is None or e["rank"] not in comm:
            continue
        if not ctx.in_final_attempt(e):
            continue
        last[e["rank"]] = e
    return last


# A backend's own words that a collective waited too long: HCCL's "Getting socket times out", gloo's and NCCL's
# "Timed out", a gRPC "DEADLINE_EXCEEDED".
TIMED_OUT = regex.compile(r"(?i)\btim(?:ed|es)[ -]?out\b|\btimeout\b|deadline[ _]exceeded")
# How many lines after an exception may still be its message (a backend's diagnosis printed on the next lines).
MESSAGE_LINES = 3


def timed_out_in_a_collective(ctx: Context, exception: Event) -> Event | None:
    """The torch.distributed collective frame of `exception`'s traceback, where the exception (or the lines of its
    message right after it) says the collective timed out: the rank waited, whatever the backend (HCCL, gloo,
    NCCL), so the failure is not its own."""
    if exception["kind"] != "python_exception":
        return None
    frames = [f for f in traceback_frames(ctx, exception) if call_name(f) not in (None, BACKWARD)]
    if not frames:
        return None
    after = [
        text
        for line, text in ctx.aligned.contexts.get((exception["sid"], exception["line"]), [])
        if exception["line"] < line <= exception["line"] + MESSAGE_LINES
    ]
    said = " ".join([str(exception["_f"].get("reason") or ""), *after])
    return frames[-1] if TIMED_OUT.search(said) else None


def timed_out_late(ctx: Context, timeouts: list[Event]) -> list[int] | None:
    """A collective's timer starts when the rank enqueues it: the ranks whose watchdogs fired first had entered it
    first and waited; a rank whose own timeout came well after theirs entered late (a straggler that then ran on
    into later collectives). The early ones agree on the collective, or the late one had caught up with the furthest
    of them (a broadcast's ring: the rank after the straggler waits in an earlier one). None when the clocks do not
    tell that apart."""
    reported_by = min((ctx.order(e)[0] for e in timeouts), default=float("inf"))
    if reported_by == float("inf"):
        return None
    first: dict[int, float] = {}
    first_seq: dict[int, int | None] = {}
    for e in sorted(timeouts, key=ctx.order):
        rank, when = e["rank"], ctx.order(e)[0]
        if rank is None or when == float("inf") or rank in first or (e["pg"] or "0") != "0":
            continue
        first[rank], first_seq[rank] = when, e["seq"]
    early = {r for r, when in first.items() if when <= reported_by + LATER_S}
    late = sorted(set(first) - early)
    seqs = {first_seq[r] for r in early}
    if not late or len(late) >= len(early) or None in seqs:
        return None
    caught_up = all((seq := first_seq[r]) is not None and seq >= max(s for s in seqs if s is not None) for r in late)
    return late if len(seqs) == 1 or caught_up else None
