"""The check `generic_failure`, behind LS700 (rules/LS700_unexplained_failure.yaml), of the fallback stage: failure
lines that no other rule explained, each rank's first one its failure and the earliest of those the culprit; the
finding's category is the family of what it found.

Where nothing else failed, a communication or rendezvous warning at the end of a log, or a traceback cut off before
its exception, is the lead instead, with less confidence.
"""

from __future__ import annotations

from typing import Any

from logscope.align.state import launcher_teardown
from logscope.rules.api import (
    LEAD_FAMILY,
    REMOTE_KINDS,
    TORCHRUN_FAILURE_KINDS,
    Context,
    Hit,
    Rule,
    check,
    family_category,
)
from logscope.rules.checks.failures import (
    NOT_A_CAUSE_EXC,
    describe,
    failure_found,
    message_kind,
    nccl_went_on,
    warned_before,
)
from logscope.values import int_ranges
from logscope.vocab import Event

# The job was stopped from outside (Ctrl-C, the scheduler's SIGTERM to torchrun): where a hang ends, not a failure.
STOPPED_FROM_OUTSIDE_EXC = ("KeyboardInterrupt", "SignalException")
# A traceback this close below torchrun's "Received N death signal" is torchrun's own, unwinding from the stop.
STOP_SIGNAL_SPAN = 40
# A line this close to the end of its file is where that file stops.
LAST_LINES = 3
# How much less sure a lead is than a failure line: a warning where the log stops, a traceback cut short, and a
# failure that names no rank.
LEAD_WARNING_FACTOR = 0.7
CUT_TRACEBACK_FACTOR = 0.6
UNRANKED_FACTOR = 0.85


@check("generic_failure")
def generic_failure(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Failure lines that no other rule explained (fallback stage): tracebacks, fatal errors, logger ERROR lines,
    launchers' exit lines, ... Each rank's first such line is its failure; the earliest of those is the culprit.

    A run that the logs prove finished is not failed by lines like these (a caught exception that was logged).
    When nothing else failed, a communication warning (NCCL WARN) of a run that did not finish is the best lead.
    """
    proof = ctx.completion
    if proof is not None and proof.proven:
        return None
    others = failure_found(ctx)
    candidates, factor = _candidates(ctx, others)
    if not candidates:
        return None
    first = _first_per_rank(ctx, candidates)
    ranked = {r: e for r, e in first.items() if r is not None}
    if ranked:
        culprits = _earliest_own_fault(ctx, ranked)
    else:
        culprits, factor = [], factor * UNRANKED_FACTOR
    cause = min((first[r] for r in culprits), key=ctx.order) if culprits else min(first.values(), key=ctx.order)
    if cause["kind"] in TORCHRUN_FAILURE_KINDS and (said := _said_above(ctx, cause, candidates)) is not None:
        cause = said  # the worker's own words, in the console above torchrun's report of its exit, say why
    evidence = [cause] + [e for e in sorted(candidates, key=ctx.order) if e is not cause]
    hit = Hit(
        evidence[:12],
        set(ranked),
        culprits=culprits,
        confidence_factor=factor,
        values={"what": describe(cause), "count": len(candidates)},
    )
    hit.category = _category_of(cause)
    failing_alike = {e["rank"] for e in ctx.by_kind.get(cause["kind"], [])}
    if hit.category == "rendezvous_failure" and ctx.visible and ctx.visible <= failing_alike:
        # Every rank failed to reach the store or its peers: the fault is the endpoint, not one rank.
        hit.culprits = []
    warned = warned_before(ctx, cause, LEAD_FAMILY)
    if hit.category in ("crash", "comm_error") and warned is not None:
        # NCCL warned about its transport, or init_process_group was still waiting for its peers, just before this
        # process failed: the warning is the first cause.
        hit.category = family_category(warned["kind"], "comm_error")
        hit.events.insert(0, warned)
        hit.values["what"] = f"{describe(warned)}, then {hit.values['what']}"
    return hit


def _candidates(ctx: Context, others: bool) -> tuple[list[Event], float]:
    """The lines that may be the failure, and how sure a finding from them is: unexplained error lines; else, where
    no other rule found a failure either, the lead warnings at the end of a log, or tracebacks cut off."""
    candidates = _unexplained_errors(ctx, others)
    factor = 1.0
    if not candidates and not others:
        candidates, factor = _lead_warnings(ctx), LEAD_WARNING_FACTOR
    if not candidates and not others:
        # A log that stops inside a traceback whose exception line is not in it (a paste cut short).
        candidates, factor = _cut_tracebacks(ctx), CUT_TRACEBACK_FACTOR
    return candidates, factor


def _unexplained_errors(ctx: Context, others: bool) -> list[Event]:
    """Error lines that no rule used and no stop from outside explains, one per traceback."""
    headers = _traceback_exceptions(ctx)
    candidates = [
        e
        for e in ctx.rows
        if e["level"] == "error"
        and not ctx.went_on_from(e)
        and _unclaimed(ctx, e)
        and not _stopped_from_outside(e)
        and not (e["kind"] == "traceback_start" and _explained(ctx, headers.get((e["sid"], e["line"]))))
        and not (e["kind"] == "traceback_start" and _after_a_stop_signal(ctx, e))
        and not (e["kind"] == "nccl_error_return" and nccl_went_on(ctx, e))
        and not (e["kind"] in TORCHRUN_FAILURE_KINDS and launcher_teardown(e))
    ]
    # A traceback is told by the line that ends it (its exception); a header stays only where the traceback is cut off.
    ends = {(x["sid"], x["line"]) for x in candidates}
    candidates = [
        e
        for e in candidates
        if not (e["kind"] == "traceback_start" and _key(headers.get((e["sid"], e["line"]))) in ends)
    ]
    if others:  # beside a diagnosed failure, only what could be a cause of its own counts
        candidates = [
            e
            for e in candidates
            if not _a_consequence(e)
            and not (e["kind"] == "traceback_start" and _a_consequence(headers.get((e["sid"], e["line"]))))
            and not (e["kind"] in TORCHRUN_FAILURE_KINDS and _failed_as_consequence(ctx, e["rank"]))
            and not (_spawn_header(e) and _a_consequence(headers.get((e["sid"], e["line"] + 1))))
        ]
    return candidates


def _a_consequence(e: Event | None) -> bool:
    """A line that says only that a peer or the launcher ended things (a remote error, a DistBackendError ...)."""
    return e is not None and (e["kind"] in REMOTE_KINDS or _consequence_exception(e))


def _spawn_header(e: Event) -> bool:
    """mp.spawn's "-- Process N terminated with the following error:": its child's traceback follows it."""
    return e["kind"] == "process_exit" and bool(e["_f"].get("spawned"))


def _failed_as_consequence(ctx: Context, rank: int | None) -> bool:
    """The launcher's report of a rank's exit (or of an unnamed one) where that rank's own failure was a peer's
    consequence (a lost connection): the report says no more than the rank did."""
    if rank is None:
        return True
    state = ctx.states.get(rank)
    return _a_consequence(state.first_error if state is not None else None)


def _lead_warnings(ctx: Context) -> list[Event]:
    """Communication and rendezvous warnings where their log stops."""
    # A warning is the lead only where the log stops at it: NCCL warns at init about optional transports it then
    # does without ("Failed to open libibverbs.so"); a run that went on is no failure.
    return [
        e
        for e in ctx.rows
        if e["level"] == "warning" and e["kind"] in LEAD_FAMILY and _unclaimed(ctx, e) and _near_the_end(ctx, e)
    ]


def _said_above(ctx: Context, report: Event, candidates: list[Event]) -> Event | None:
    """The first failure line that names no rank, of the worker's own (not a peer's going away), above torchrun's
    report of a worker's exit in the same console: a console of several processes without rank prefixes."""
    said = [
        e
        for e in candidates
        if e["rank"] is None
        and e["sid"] == report["sid"]
        and e["line"] < report["line"]
        and e["kind"] not in REMOTE_KINDS | TORCHRUN_FAILURE_KINDS | {"traceback_start"}
    ]
    return min(said, key=lambda e: e["line"]) if said else None


def _first_per_rank(ctx: Context, candidates: list[Event]) -> dict[int | None, Event]:
    """Each rank's first candidate in time (None: the first that names no rank); a rank's own line before the
    launcher's report of its exit, which says less (the exit status) and is printed after it."""
    first: dict[int | None, Event] = {}
    for e in sorted(candidates, key=lambda x: (x["kind"] in TORCHRUN_FAILURE_KINDS, ctx.order(x))):
        for rank in _ranks_of(e):
            first.setdefault(rank, e)
    return first


def _unclaimed(ctx: Context, e: Event) -> bool:
    """A line of the final attempt that no main rule used and that is no benign line."""
    return (e["sid"], e["line"]) not in ctx.claimed and ctx.in_final_attempt(e) and e["level"] != "benign"


def _earliest_own_fault(ctx: Context, ranked: dict[int, Event]) -> list[int]:
    """The ranks whose first failure is earliest, not counting consequences of a peer's failure (remote errors,
    teardown) where any rank failed otherwise."""
    own_fault = {r: e for r, e in ranked.items() if e["kind"] not in REMOTE_KINDS} or ranked
    earliest = min(ctx.order(e) for e in own_fault.values())
    timed = earliest[0] != float("inf")
    culprits = sorted(r for r, e in own_fault.items() if timed and ctx.order(e)[0] == earliest[0])
    return culprits or _first_in_file(own_fault)


def _category_of(cause: Event) -> str:
    """The family of the failure line; for a plain exception, the family of what its message says."""
    category = family_category(cause["kind"])
    if category == "crash" and cause["kind"] == "python_exception":
        category = family_category(message_kind(str(cause["_f"].get("reason") or "")) or "", "crash")
    return category


def _near_the_end(ctx: Context, e: Event) -> bool:
    return bool(e["line"] > ctx.aligned.stats[e["sid"]].lines - LAST_LINES)


def _key(e: Event | None) -> tuple[int, int] | None:
    return (e["sid"], e["line"]) if e is not None else None


def _after_a_stop_signal(ctx: Context, e: Event) -> bool:
    """A traceback right after torchrun said it received a death signal (SIGINT, SIGTERM from outside) is torchrun
    unwinding: the job was stopped, it did not fail."""
    return any(
        x["sid"] == e["sid"] and 0 < e["line"] - x["line"] <= STOP_SIGNAL_SPAN
        for x in ctx.by_kind.get("agent_death_signal", [])
    )


def _stopped_from_outside(e: Event | None) -> bool:
    """Ctrl-C ("^C" echoed by the terminal, KeyboardInterrupt) or a signal from outside (torchrun's SignalException)."""
    return e is not None and (
        str(e["_f"].get("exc_type") or "").endswith(STOPPED_FROM_OUTSIDE_EXC) or "^C" in str(e["text"])
    )


def _explained(ctx: Context, exception: Event | None) -> bool:
    """A traceback's header goes with its exception: used elsewhere, or a stop from outside, it is no failure."""
    return exception is not None and (
        (exception["sid"], exception["line"]) in ctx.claimed or _stopped_from_outside(exception)
    )


def _cut_tracebacks(ctx: Context) -> list[Event]:
    """The last frame of each file whose recognised lines end in traceback frames: the process was failing when the
    log was cut, before its exception line."""
    last: dict[int, Event] = {}
    for e in ctx.rows:
        if e["level"] != "benign" and (e["sid"] not in last or e["line"] > last[e["sid"]]["line"]):
            last[e["sid"]] = e
    # Where the header is in the file, the header stands for its traceback (and may say it was stopped by ^C).
    # Frames under a stack dump's header are a live process's stack (py-spy, faulthandler), not a failure.
    headed = {e["sid"] for k in ("traceback_start", "stack_dump") for e in ctx.by_kind.get(k, [])}
    return [e for e in last.values() if e["kind"] == "traceback_frame" and e["sid"] not in headed]


def _traceback_exceptions(ctx: Context) -> dict[tuple[int, int], Event]:
    """Each traceback header -> the line that ends it: the next error line in its file, for its rank (the exception,
    whatever signature read it)."""
    out: dict[tuple[int, int], Event] = {}
    open_headers: dict[tuple[int, Any], list[Event]] = {}
    for e in sorted(ctx.rows, key=lambda r: (r["sid"], r["line"])):
        key = (e["sid"], e["rank"])
        if e["kind"] == "traceback_start":
            open_headers.setdefault(key, []).append(e)
        elif e["level"] == "error":
            # A header glued onto a worker's unfinished line (a progress bar) takes that worker's prefix, while
            # the rest of the traceback, the launcher's own, has none: an unranked end closes it too.
            keys = [key] if e["rank"] is not None else [k for k in open_headers if k[0] == e["sid"]]
            for k in keys:
                for header in open_headers.pop(k, []):
                    out[(header["sid"], header["line"])] = e
    return out


def _ranks_of(e: Event) -> list[int | None]:
    """The rank a line is about; a launcher's line may name several ("srun: error: h: tasks 9-10,12: Killed")."""
    if e["rank"] is not None:
        return [e["rank"]]
    named = int_ranges(e["_f"].get("ranks"))
    return list(named) if named else [None]


def _first_in_file(first: dict[int, Event]) -> list[int]:
    """Without clocks: the ranks whose failure comes first in the file that holds the most of them (a console
    interleaves ranks in time order); ranks in separate files cannot be ordered."""
    by_sid: dict[int, list[tuple[int, int]]] = {}
    for rank, e in first.items():
        by_sid.setdefault(e["sid"], []).append((e["line"], rank))
    lines = max(by_sid.values(), key=len)
    if len(by_sid) > 1 and len(lines) == 1:
        return sorted(first)
    top = min(lines)[0]
    return sorted(rank for line, rank in lines if line == top)


def _consequence_exception(e: Event) -> bool:
    """An exception that only says a peer or the launcher ended things (DistBackendError, ChildFailedError ...)."""
    if e["kind"] not in ("python_exception", "cpp_what", "terminate_called"):
        return False
    exc = str(e["_f"].get("exc_type") or "")
    return exc.endswith(NOT_A_CAUSE_EXC) or message_kind(str(e["_f"].get("reason") or "")) in REMOTE_KINDS
