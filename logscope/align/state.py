"""The per-rank state model: what each rank did, as far as the logs show, in the terms the reasoning needs.

Align builds one `RankState` per global rank; rules and the verdict read them (never the other way round). The
facts here are the ones cause-versus-consequence reasoning is written against: how far a rank got (phases, last
progress, last collective), whether and how it ended (exit code, signal, clean end), when its first failure line
was printed, and whether its whole output is here or only an excerpt.

Clocks: a line's time is only known when its prefix prints one. `clock()` turns what is printed into seconds
within a year (c10/glog stamps print no year), so lines of different ranks compare when both carry a stamp.
"""

from __future__ import annotations

import calendar
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TypedDict

from logscope.align.job import exit_status_seen, launcher_stopped
from logscope.events.catalogue import catalogue, kinds
from logscope.values import int_or_none
from logscope.vocab import PHASE_ORDER, Event, Phase, RankRow

# The state model's kind families, from the tags in signatures.yaml (catalogue.TAGS says what each means).
PROGRESS_KINDS = catalogue().tagged("progress")
END_KINDS = catalogue().tagged("end")
# A launcher's lines about a worker name its rank but are not the worker's own output: those tagged so, and every
# line whose signature reads the rank it is about (`names_rank`).
AGENT_KINDS = catalogue().tagged("launcher_report") | {s.kind for s in catalogue().signatures if s.names_rank}
COLLECTIVE_KINDS = catalogue().tagged("seqnum")
_DAY = 86400.0
# Kinds that prose, READMEs and config files can produce too ("Step 1: install", "5 parameters", "torch==2.13").
WEAK_KINDS = catalogue().tagged("weak")
# Errors a program can catch and go on from: an exception's traceback, a line its logger printed at ERROR level.
HANDLEABLE_KINDS = kinds("python_exception", "traceback_start", "logged_error", "error_said")
# A training loop's own progress lines, when nothing else is recognised, make a log from this many on.
MIN_PROGRESS_LINES = 3
# A training loop's own counters or metrics, when nothing else is recognised, make a log from this many lines on.
MIN_LOG_LINES = 2


class Stamp(TypedDict):
    """What `clock` reads of a line: an Event is one, and so is a stamp read from elsewhere (torchrun's table)."""

    ts: float | None
    ts_text: str | None


# Clocks print whole seconds: two lines this close started together, or either may have come first.
SAME_MOMENT_S = 1.0


def clock(row: Stamp) -> float | None:
    """Seconds since the start of the printed year (month*32+day days), or None when the line has no stamp."""
    if row.get("ts") is not None:
        t = time.gmtime(row["ts"])  # printed local time, read as UTC by normalise: the printed clock again
        return ((t.tm_mon * 32 + t.tm_mday) * _DAY) + t.tm_hour * 3600 + t.tm_min * 60 + t.tm_sec
    text = row.get("ts_text")
    if not text or " " not in text:
        return None
    mmdd, _, hms = str(text).partition(" ")
    if not (mmdd.isdigit() and 3 <= len(mmdd) <= 4 and len(hms) >= 8):
        return None
    try:
        h, m, s = (int(x) for x in hms[:8].split(":"))
    except ValueError:
        return None
    return ((int(mmdd[:-2]) * 32 + int(mmdd[-2:])) * _DAY) + h * 3600 + m * 60 + s


@dataclass(slots=True)
class Collective:
    """The furthest collective a rank is known to have reached in one process group."""

    pg: str
    seq: int | None = None
    op: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    enqueued: int | None = None
    completed: int | None = None


@dataclass(slots=True)
class RankState:
    rank: int
    status: str = "hidden"  # visible | hidden | silent (vocabulary of the rank table)
    complete: bool = False  # its whole output is here (own file, tee'd console stream), not an excerpt of it
    attempt: int = 0
    phases: set[str] = field(default_factory=set)  # phases its own lines reached (fail excluded)
    furthest: int = -1  # PHASE_ORDER of the furthest of them
    last_event: Event | None = None  # its last own line of the furthest phase
    last_progress: Event | None = None
    last_iteration: int | None = None
    progress_count: int = 0  # its own progress lines (iterations, steps, progress bars)
    first_error: Event | None = None  # its earliest own error-level line (by clock, else by order), not handled
    handled: set[tuple[int, int]] = field(default_factory=set)  # (sid, line) of errors it went on from
    first_error_clock: float | None = None
    first_clock: float | None = None
    last_clock: float | None = None
    exit_code: int | None = None
    stopped_by: str | None = None  # who sent its SIGTERM: "launcher" (teardown) or "outside" (align/align.py)
    exit_clock: float | None = None  # when torchrun saw it exit (ChildFailedError time, error.json)
    ended: bool = False  # printed a line that its training loop finished
    collectives: dict[str, Collective] = field(default_factory=dict)  # by process group
    kinds: set[str] = field(default_factory=set)  # every kind of its own lines

    @property
    def failed(self) -> bool:
        return self.first_error is not None or self.exit_code not in (None, 0)

    @property
    def failed_by_itself(self) -> bool:
        """It exited with a failure of its own: an error line, or an exit code other than a clean one and the
        launcher's teardown."""
        return self.first_error is not None or not (
            self.exit_code in (None, 0) or torn_down(self.exit_code, self.stopped_by)
        )

    @property
    def reached_train(self) -> bool:
        return self.furthest >= PHASE_ORDER[Phase.TRAIN]

    def last_seq(self, pg: str = "0") -> int | None:
        c = self.collectives.get(pg)
        if c is None:
            return None
        known = [s for s in (c.seq, c.enqueued) if s is not None]
        return max(known) if known else None


def build_states(
    rows: list[Event], rank_rows: list[RankRow], complete_ranks: set[int], handled: set[tuple[int, int]]
) -> dict[int, RankState]:
    """One RankState per rank of the rank table, from the aligned rows (in rank, attempt, source order); `handled`:
    the (sid, line) of errors their rank went on from (`went_on_from`)."""
    states = {
        r["rank"]: RankState(
            rank=r["rank"],
            status=r["status"],
            complete=r["rank"] in complete_ranks,
            attempt=r["attempt"] or 0,
            exit_code=r["exit_code"],
            stopped_by=r["stopped_by"],
            last_iteration=r["last_iteration"],
        )
        for r in rank_rows
    }
    for row in rows:
        rank = row["rank"]
        state = states.get(rank) if rank is not None else None
        if state is None or (row["attempt"] is not None and row["attempt"] < state.attempt):
            continue
        kind = row["kind"]
        when = clock(row)
        if kind in AGENT_KINDS:
            if kind == "child_failure":
                stamp = row["_f"].get("time")
                state.exit_clock = clock({"ts_text": None, "ts": _iso_epoch(stamp)}) if stamp else state.exit_clock
            continue
        state.kinds.add(kind)
        if when is not None:
            state.first_clock = when if state.first_clock is None else min(state.first_clock, when)
            state.last_clock = when if state.last_clock is None else max(state.last_clock, when)
        if row["level"] == "benign":
            continue
        phase = row["phase"]
        if phase is not None and phase != Phase.FAIL and phase in PHASE_ORDER:
            state.phases.add(phase)
            order = PHASE_ORDER[phase]
            if order >= state.furthest:
                state.furthest, state.last_event = order, row
        if kind in PROGRESS_KINDS:
            state.last_progress = row
            state.progress_count += 1
        if _is_end(row) and not _after(row, state.first_error):
            # An end line after the rank's own error is its teardown (an exit hook's "closed"), not its loop's end.
            state.ended = True
        if row["level"] == "error" and (row["sid"], row["line"]) in handled:
            state.handled.add((row["sid"], row["line"]))
        elif row["level"] == "error":
            first = state.first_error_clock
            header = state.first_error is not None and state.first_error["kind"] == "traceback_start"
            if (
                state.first_error is None
                or (when is not None and first is not None and when < first)
                # A traceback's header says less than the line that ends it: the exception is the error.
                or (header and kind != "traceback_start" and (when is None or first is None or when <= first + 1))
            ):
                state.first_error, state.first_error_clock = row, when
        if kind == "error_file" and state.exit_clock is None:
            stamp = int_or_none(row["_f"].get("timestamp"))
            if stamp is not None:
                state.exit_clock = clock({"ts": float(stamp), "ts_text": None})
        if kind in COLLECTIVE_KINDS:
            _note_collective(state, row)
    return states


def went_on_from(rows: list[Event]) -> set[tuple[int, int]]:
    """The (sid, line) of errors their rank's process went on from: an exception (or ERROR line) followed,
    in the same file and attempt, by the same rank's progress lines, with no launcher's report of a worker's exit
    between. A process that died of it prints nothing after; one that caught it trains on. Not in Ray's
    driver console, whose worker lines are not in their order."""
    streams: dict[tuple[int, int], list[Event]] = defaultdict(list)
    for row in rows:
        # Ray's driver console prints its workers' lines in batches, out of their order ("[repeated 8x across
        # cluster]"): there a line below an exception may have been printed before it.
        if row["rank"] is not None and row.get("actor_pid") is None:
            streams[(row["rank"], row["sid"])].append(row)
    handled: set[tuple[int, int]] = set()
    for stream in streams.values():
        went_on: int | None = None  # the attempt of the progress line seen below, walking up the file
        for row in sorted(stream, key=lambda r: r["line"], reverse=True):
            kind = row["kind"]
            if kind in PROGRESS_KINDS and kind != "progress_bar":
                # Training moved on. Not a progress bar, which tqdm redraws once more when it is closed, nor an end
                # line, which a `finally:` prints after the traceback too ("Environment closed").
                went_on = row["attempt"] or 0
            elif kind in AGENT_KINDS:
                went_on = None  # a worker's exit (a restart) between: the later lines are another process's
            elif went_on == (row["attempt"] or 0) and (
                (kind in HANDLEABLE_KINDS and row["level"] == "error") or kind == "traceback_frame"
            ):  # the error, and the frames of its traceback
                handled.add((row["sid"], row["line"]))
    return handled


def _after(row: Event, earlier: Event | None) -> bool:
    """Whether `row` was printed after `earlier`: by their clocks, else by their order in one file."""
    if earlier is None:
        return False
    when, then = clock(row), clock(earlier)
    if when is not None and then is not None:
        return when > then
    return row["sid"] == earlier["sid"] and row["line"] > earlier["line"]


def _note_collective(state: RankState, row: Event) -> None:
    pg = str(row["pg"] or "0")
    c = state.collectives.setdefault(pg, Collective(pg=pg))
    seq = row["seq"]
    if seq is not None and 0 <= seq < 1 << 40 and (c.seq is None or seq >= c.seq):
        c.seq, c.op = seq, row["op"] or c.op
        c.numel_in = row["numel_in"] if row["numel_in"] is not None else c.numel_in
        c.numel_out = row["numel_out"] if row["numel_out"] is not None else c.numel_out
    f = row["_f"]
    for name in ("enqueued", "completed"):
        value = int_or_none(f.get(name))
        if value is not None and 0 <= value < 1 << 40:
            current = getattr(c, name)
            setattr(c, name, value if current is None else max(current, value))


def torn_down(exit_code: int | None, stopped_by: str | None) -> bool:
    """An exit by the SIGTERM the launcher sent at teardown (not one sent from outside the job), or by the SIGKILL it
    sent a worker that did not stop on that SIGTERM ("Unable to shutdown process N via 15, forcefully exiting via
    9")."""
    return (exit_code == TEARDOWN_EXIT and stopped_by != "outside") or (
        exit_code == FORCED_EXIT and stopped_by == "launcher"
    )


def launcher_teardown(e: Event) -> bool:
    """A launcher's report of a worker that it stopped itself (SIGTERM at teardown), not of one that failed."""
    return torn_down(e.get("exitcode"), e["_f"].get("stopped_by"))


def _iso_epoch(stamp: Any) -> float | None:
    """ChildFailedError's `time : 2024-05-01_10:11:12` as printed, read as UTC (like normalise's stamps)."""
    text = str(stamp).strip().replace("_", " ").replace("T", " ")
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%d %H:%M:%S")))
    except (ValueError, OverflowError):
        return None


# Lines of these phases are the start of a run: a log that holds them is the whole log, not an excerpt.
EARLY_PHASES = frozenset({Phase.LAUNCH, Phase.INIT, Phase.SYNC})
# The exit code of a worker that died of SIGTERM: torchrun's teardown of the workers still running after a failure,
# unless the worker's agent never sent it (align `outside_signals`: then it was stopped from outside, a failure).
TEARDOWN_EXIT = -15
FORCED_EXIT = -9  # SIGKILL: what torchrun sends a worker that did not stop on its SIGTERM
# A peer that printed this many progress lines (or its end) took every rank of the job through its collectives.
PROGRESS_PROOF = 2


@dataclass(slots=True)
class Completion:
    """Whether the logs prove that the run finished, and where each rank's log stops when they do not."""

    proven: bool
    strength: float  # how strong the proof is (0 when not proven); the healthy verdict's confidence starts here
    how: str  # one sentence: what proves it, or what is missing
    evidence: list[Event]
    participating: set[int]  # ranks silent after some point whose peers' progress shows they took part
    stopped: dict[int, Event]  # rank -> its last own line, for ranks not shown to have finished


def _is_end(row: Event) -> bool:
    """A line that says its process's training finished: an end line, NCCL's communicator destroyed, torchrun's
    clean finish, or a progress line at its last step ("Learning iteration 5/6", a progress bar at 96/96)."""
    kind = row["kind"]
    return (
        kind in END_KINDS
        or kind == "worker_group_finished"
        or (kind == "nccl_comm_init" and row["_f"].get("state") == "Destroy COMPLETE")
        or (kind in PROGRESS_KINDS and _at_last_step(row))
    )


def _at_last_step(row: Event) -> bool:
    f = row["_f"]
    total = int_or_none(f.get("total"))
    done = int_or_none(f.get("iteration") if f.get("iteration") is not None else f.get("step"))
    if total is None or done is None or total <= 1:
        return False
    # rsl_rl counts iterations from 0 ("Learning iteration 5/6" is the last); progress bars count to the total.
    return done >= total - 1 if row["kind"] == "iteration" else done >= total


def participating(states: dict[int, RankState]) -> set[int]:
    """Ranks whose own lines stop early, while a peer's later progress shows that they took part.

    In rsl_rl, rl_games and skrl only rank 0 prints after the parameter sync: each iteration it prints needed every
    rank's gradients (or the broadcast before it), so a rank whose last line is the sync line was there. Only a rank
    whose peers stopped too can be stalled.
    """
    # Progress printed before a failure still shows the peers took part up to then.
    movers = [s for s in states.values() if s.status == "visible" and (s.ended or s.progress_count >= PROGRESS_PROOF)]
    if not movers:
        return set()
    furthest = max(s.furthest for s in movers)
    # A rank that finished its training loop needed every peer to the end: a peer that logs progress too, only less
    # often (every 7th step, say), took part past its last line as well.
    someone_ended = any(s.ended for s in movers)
    return {
        s.rank
        for s in states.values()
        if s.status != "hidden"
        and not s.failed_by_itself
        and not s.ended
        and ((s.furthest < furthest and s not in movers) or (someone_ended and s.reached_train))
    }


def completion(states: dict[int, RankState], job: dict[str, Any], rows: list[Event]) -> Completion:
    """Positive evidence that the run completed: a clean exit, every rank's end, or one rank's end with its peers
    shown to take part. Without it a run with no error is not healthy: its logs stop somewhere."""
    joined = participating(states)
    visible = [s for s in states.values() if s.status == "visible"]
    ends = [r for r in rows if _is_end(r)]
    stopped = {
        s.rank: s.last_event for s in visible if not s.ended and s.rank not in joined and s.last_event is not None
    }
    if job.get("exit_code") == 0:
        # Every rank's end line proves as much as the launcher's word (first-sight rounds: 120 of 126 right), but
        # the summary must not claim an exit status the logs do not show: a hang at exit ends the same way.
        how = (
            "the job exited with status 0"
            if exit_status_seen(rows)
            else "every rank printed the end of its training (no exit status in these logs)"
        )
        return Completion(True, 0.95, how, ends[:4], joined, {})
    if launcher_stopped({r["kind"] for r in rows}):
        # torchrun was stopped from outside before its workers finished: ranks' end lines end their own loops only.
        return Completion(False, 0.0, "the launcher was stopped before its workers finished", [], joined, stopped)
    enders = [s for s in visible if s.ended]
    failed = [s for s in visible if s.failed]
    if enders and not failed and all(s.ended or s.rank in joined for s in visible):
        how = (
            "every rank printed the end of its training"
            if len(enders) == len(visible)
            else f"rank(s) {', '.join(str(s.rank) for s in enders)} finished training and their progress shows "
            f"rank(s) {', '.join(str(r) for r in sorted(joined))} took part"
        )
        return Completion(True, 0.9 if len(enders) == len(visible) else 0.8, how, ends[:4], joined, {})
    final_ends = _not_followed_by_failure(ends, rows)
    if final_ends and not failed and not visible:
        return Completion(True, 0.75, "the log ends with the run's own end line", final_ends[:4], joined, {})
    # An end line no rank prefix claims (Lightning's rank-zero "`Trainer.fit` stopped"), printed in the ranks' own
    # console after every rank's last line: the run got there.
    closing = [e for e in final_ends if e["rank"] is None and _after_every_rank(e, visible)]
    if closing and not failed:
        how = "the console ends with the run's own end line, after every rank's last line"
        return Completion(True, 0.75, how, closing[:4], joined, {})
    steady = _steady_excerpt(states, rows)
    if steady:
        how = (
            f"an excerpt that shows steady progress ({len(steady)} progress lines) and no error; "
            "the run's end is not in it"
        )
        return Completion(True, 0.45, how, steady[-2:], joined, {})
    return Completion(False, 0.0, "no line shows that the run finished", [], joined, stopped)


def _after_every_rank(end: Event, visible: list[RankState]) -> bool:
    return bool(visible) and all(
        s.last_event is not None and s.last_event["sid"] == end["sid"] and s.last_event["line"] < end["line"]
        for s in visible
    )


def _not_followed_by_failure(ends: list[Event], rows: list[Event]) -> list[Event]:
    """The end lines after which their file reports no failure: a loading bar at 100 % followed by the launcher
    SIGTERMing workers and "failed (exitcode: -9)" is no end of the run."""
    exits = catalogue().tagged("exit", "teardown")
    last_failure: dict[int, int] = {}
    for row in rows:
        if row["level"] == "error" or row["kind"] in exits:
            last_failure[row["sid"]] = max(last_failure.get(row["sid"], -1), row["line"])
    return [e for e in ends if e["line"] > last_failure.get(e["sid"], -1)]


def _steady_excerpt(states: dict[int, RankState], rows: list[Event]) -> list[Event]:
    """The progress lines of a pasted excerpt that shows training moving on and nothing going wrong, else [].

    Only for excerpts: a rank's own whole log (a per-rank file, a tee'd stream) that stops mid-training stopped, and
    so did a log that holds the run's start (launch, init or sync lines): that is the whole log, not a cut of it.
    """
    # (A benign line's phase is only where it stands: it shows no start of the run.)
    if any(
        r["level"] == "error" or (r["phase"] in EARLY_PHASES and r["level"] != "benign") or r["node"] is not None
        for r in rows
    ):
        return []
    progress = [r for r in rows if r["kind"] in PROGRESS_KINDS]
    if len(progress) < MIN_PROGRESS_LINES:
        return []
    last: dict[int, Event] = {}
    for row in rows:
        newer = row["sid"] not in last or row["line"] >= last[row["sid"]]["line"]
        if row["level"] != "benign" and row["kind"] not in AGENT_KINDS and newer:
            last[row["sid"]] = row
    return progress if all(r["phase"] == Phase.TRAIN for r in last.values()) else []


def looks_like_a_log(rows: list[Event]) -> bool:
    """Whether the recognised lines make a training or launcher log (else the input is not one: exit 2)."""
    weak = 0
    for row in rows:
        if row["kind"] not in WEAK_KINDS:
            return True
        weak += row["kind"] in ("progress", "benchmark_row", "training_metrics")
    return weak >= MIN_LOG_LINES
