"""What rules and their checks are written against: a loaded rule, the check registry, the evaluation context, a
condition's hit, and the vocabulary both share.

The loader (loader.py) reads rule files into `Rule`s and the engine (engine.py) evaluates them; the Python checks
(the checks/ package) are registered here by name and receive the same Context. This module imports none of them,
and the checks import neither the loader nor the engine, so the rules package has no import circle.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from logscope.align.model import Aligned
from logscope.align.state import Completion, RankState, clock
from logscope.events.catalogue import catalogue
from logscope.vocab import PHASE_ORDER, Event, Finding, RankRow


@dataclass(frozen=True)
class Rule:
    """One rule file as the loader read it (rules/LSnnn_*.yaml; schema.json says what each field holds)."""

    id: str
    title: str
    category: str
    severity: str
    confidence: float
    specificity: int
    match: dict[str, Any]
    condition: dict[str, Any]
    culprit: str
    culprit_fields: tuple[str, ...]
    message: str
    why: dict[str, Any]  # what, why, example (str); example_runs (bool) and example_note where it cannot run
    next_step: dict[str, str]
    references: tuple[str, ...]
    tests: dict[str, list[dict[str, Any]]]
    path: Path
    name: str = ""
    known_problems: str = ""
    stage: str = "main"  # main | fallback (evaluated after the main stage, seeing its findings)
    compiled: dict[str, regex.Pattern[str]] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Hit:
    """What a condition found: evidence events, the ranks involved, and values for the message."""

    events: list[Event]
    ranks: set[int] = field(default_factory=set)
    culprits: list[int] | None = None  # set by conditions that know the culprit themselves
    values: dict[str, Any] = field(default_factory=dict)
    confidence_factor: float = 1.0
    severity: str | None = None
    category: str | None = None  # set by the generic fallback, whose category is the family of what it found


# Families of kinds (signatures.yaml `tags`), for the reasoning that groups failures by what they say.
TAGGED = catalogue().tagged
# torchrun's reports of a worker's failure ("failed (exitcode: 1) local_rank: 0", the ChildFailedError table's rows).
TORCHRUN_FAILURE_KINDS = TAGGED("torchrun_failure")
# A launcher's report of one rank's exit (torchrun's agent and summary, mp.spawn, composer, mpirun, Ray's raylet):
# where it says the process died, that is nothing a process goes on from.
LAUNCHER_EXIT_KINDS = TAGGED("exit_code")
COMM_FAMILY = TAGGED("comm", "timeout")
# Warnings that, where a log stops at them, are the lead: the communication library, or the rendezvous/store.
LEAD_FAMILY = TAGGED("comm", "timeout", "rendezvous")
RENDEZVOUS_FAMILY = TAGGED("rendezvous")
REMOTE_KINDS = TAGGED("remote", "teardown")
# An exception whose own message says another rank caused it: Horovod shuts every rank down after one rank's
# exception (or after a rank finished while the others still reduce).
PEER_CAUSED = regex.compile(r"Horovod has been shut down\. This was caused by an exception on one of the ranks")
CATEGORY_OF_TAG = (
    ("oom", "oom"),
    ("rendezvous", "rendezvous_failure"),
    ("timeout", "collective_timeout"),
    ("comm", "comm_error"),
)


def family_category(kind: str, default: str = "crash") -> str:
    """The category a failure line of this kind says on its own (an NCCL error: comm_error; OOM: oom)."""
    tags = set().union(*(sig.tags for sig in catalogue().of_kind(kind))) if kind else set()
    return next((category for tag, category in CATEGORY_OF_TAG if tag in tags), default)


def order_key(e: Event) -> tuple[float, int, int]:
    """When a line was printed, as far as the logs tell: its clock where it has one, then its place in its file
    (a console interleaves every rank in time order)."""
    when = clock(e)
    return (when if when is not None else float("inf"), e["sid"], e["line"])


def _by_file(rows: list[Event]) -> dict[int, list[Event]]:
    files: dict[int, list[Event]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["sid"], r["line"])):
        files[r["sid"]].append(r)
    return files


class Context:
    """The aligned run, indexed for the conditions."""

    def __init__(self, aligned: Aligned) -> None:
        self.aligned = aligned
        self.job = aligned.job
        self.rows: list[Event] = aligned.rows  # read only: conditions never change an event
        self.by_kind: dict[str, list[Event]] = defaultdict(list)
        self.by_rank: dict[int, list[Event]] = defaultdict(list)
        for row in self.rows:
            self.by_kind[row["kind"]].append(row)
            if row["rank"] is not None:
                self.by_rank[row["rank"]].append(row)
        self.ranks: dict[int, RankRow] = {r["rank"]: r for r in aligned.rank_rows()}
        self.visible = {r for r, info in self.ranks.items() if info["status"] == "visible"}
        self.hidden = {r for r, info in self.ranks.items() if info["status"] == "hidden"}
        self.final_attempt = max((r["attempt"] for r in self.rows if r["attempt"] is not None), default=0)
        self.regex_timeouts: Counter[str] = Counter()
        self.states: dict[int, RankState] = aligned.states
        self.completion: Completion | None = aligned.completion
        # Filled by the engine before the fallback stage: what the main stage found, and the events it used.
        self.findings: list[Finding] = []
        self.claimed: set[tuple[int, int]] = set()
        self.steps: dict[str, dict[str, Any]] = {}  # category -> the next step its main rules give
        self._when: dict[tuple[int, int], float] | None = None

    def in_final_attempt(self, e: Event) -> bool:
        """The line belongs to the run's last attempt (a line with no attempt belongs to every attempt)."""
        return (e["attempt"] or 0) >= self.final_attempt

    def restart_recovered(self, events: list[Event]) -> bool:
        """These failure lines all belong to elastic attempts before the last, or one of them is a launcher's report
        that a process died (a process that died did not finish the run: Ray's and other launchers' restarts leave
        no attempt folders), and the job exited 0 or its logs prove the run finished: a restart recovered from them
        (reported, as a warning, never as healthy)."""
        proof = self.completion
        if not (self.job.get("exit_code") == 0 or (proof is not None and proof.proven)):
            return False
        attempts = [e["attempt"] for e in events if e["attempt"] is not None]
        earlier = bool(attempts) and max(attempts) < self.final_attempt
        return earlier or any(e["kind"] in LAUNCHER_EXIT_KINDS and e.get("exitcode") != 0 for e in events)

    def went_on_from(self, e: Event) -> bool:
        """The rank caught this error and trained on: its own progress follows in the same file (state model)."""
        state = self.states.get(e["rank"]) if e["rank"] is not None else None
        return state is not None and (e["sid"], e["line"]) in state.handled

    def order(self, e: Event) -> tuple[float, int, int]:
        """Like `order_key`, but a line without a clock takes the clock of the line before it in its file (printed
        no earlier), or of the first one after it: in one file the order of lines is the order of printing."""
        if self._when is None:
            self._when = {}
            for sid_rows in _by_file(self.rows).values():
                known = [clock(r) for r in sid_rows]
                fill = next((c for c in known if c is not None), None)
                for r, c in zip(sid_rows, known, strict=True):
                    fill = c if c is not None else fill
                    if fill is not None:
                        self._when[(r["sid"], r["line"])] = fill
        when = self._when.get((e["sid"], e["line"]))
        return (when if when is not None else float("inf"), e["sid"], e["line"])

    def field(self, row: Event, name: str) -> Any:
        # (`row[name]`: a column named by a rule; mypy checks a TypedDict key only when it is a literal.)
        if name in row and name not in ("fields", "_f") and row[name] is not None:  # type: ignore[literal-required]
            return row[name]  # type: ignore[literal-required]
        return row["_f"].get(name)

    def reached(self, rank: int, phase: str) -> bool:
        want = PHASE_ORDER[phase]
        return any(
            PHASE_ORDER.get(r["phase"], -1) >= want and r["level"] != "benign" and r["phase"] != "fail"
            for r in self.by_rank.get(rank, [])
        )


CheckFn = Callable[[Rule, Context, list[Event], dict[str, Any]], Hit | None]
CHECKS: dict[str, CheckFn] = {}


def check(name: str) -> Callable[[CheckFn], CheckFn]:
    """Register a Python check under the name a rule file gives in `condition: {type: check, name: ...}`."""

    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = fn
        return fn

    return register


# torch.distributed's call -> the OpType that NCCL's watchdog and the Flight Recorder print for it.
API_OPTYPE = {
    "all_reduce": "ALLREDUCE",
    "broadcast": "BROADCAST",
    "broadcast_object_list": "BROADCAST",
    "all_gather": "ALLGATHER",
    "all_gather_into_tensor": "_ALLGATHER_BASE",
    "all_gather_single": "_ALLGATHER_BASE",  # torch 2.13: all_gather_into_tensor renamed, the same c10d op
    "all_gather_object": "ALLGATHER",
    "reduce_scatter": "REDUCE_SCATTER",
    "reduce_scatter_tensor": "_REDUCE_SCATTER_BASE",
    "reduce_scatter_single": "_REDUCE_SCATTER_BASE",
    "reduce": "REDUCE",
    "all_to_all": "ALLTOALL",
    "all_to_all_single": "ALLTOALL_BASE",
    "barrier": "BARRIER",
    "monitored_barrier": "BARRIER",
    "send": "SEND",
    "isend": "SEND",
    "recv": "RECV",
    "irecv": "RECV",
    "gather": "GATHER",
    "scatter": "SCATTER",
}


def breaks_own_pattern(ctx: Context, rank: int, seq: int, op: Any, shape: Any) -> bool:
    """The rank ran a different op on the same tensor shape than the last time it saw that shape."""
    earlier = [
        x
        for x in ctx.by_rank.get(rank, [])
        if x["kind"] == "collective_fingerprint"
        and x["seq"] is not None
        and x["seq"] < seq
        and x["_f"].get("shape") == shape
    ]
    if not earlier:
        return False
    last = max(earlier, key=lambda x: x["seq"] or 0)  # (every row of `earlier` has a SeqNum: `or 0` is for mypy)
    return bool(last["op"] != op)
