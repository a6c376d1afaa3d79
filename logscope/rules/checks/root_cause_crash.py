"""The check `root_cause_crash`, behind LS701 (rules/LS701_crash.yaml): a rank that failed by its own fault
(exception, signal, segfault), not as a consequence of a peer, and which such rank failed first.

torchrun's "Root Cause (first observed failure)" is the earliest *observed* failure; a rank SIGTERMed by torchrun
because a peer died is never the culprit, and a rank whose failure is a communication error is a victim of the rank
it was talking to.
"""

from __future__ import annotations

from typing import Any

import regex

from logscope.align.state import launcher_teardown
from logscope.events.catalogue import catalogue, kinds
from logscope.rules.api import (
    COMM_FAMILY,
    PEER_CAUSED,
    RENDEZVOUS_FAMILY,
    TORCHRUN_FAILURE_KINDS,
    Context,
    Hit,
    Rule,
    check,
)
from logscope.rules.checks.collectives import timed_out_in_a_collective
from logscope.rules.checks.failures import (
    COMM_KINDS,
    NOT_A_CAUSE_EXC,
    aborted_failures,
    comm_ranks,
    describe,
    message_kind,
    only_failed_worker,
    warned_before,
)
from logscope.rules.checks.world import raised_joining_world
from logscope.values import int_ranges
from logscope.vocab import Event

# A rank's own failure lines that say more than its exit code does.
SAYS_MORE_THAN_EXIT = ("python_exception", "error_file", "segfault", "fatal_python_error")
# One cause per rank: the event that says most (exception text over an exit code); lower is preferred.
CAUSE_PREFERENCE = {
    "python_exception": 0,
    "error_file": 1,
    "rl_nan": 0,
    "sim_cuda_error": 0,
    "cuda_device_assert": 0,
    "segfault": 2,
    "fatal_python_error": 3,
    "argparse_error": 0,
    "hydra_job_error": 4,
    "child_failure": 5,
    "worker_failed": 6,  # the agent's one-line "failed (exitcode: N) local_rank: K": the summary says more
}
# Another launcher's report of a rank's exit, with nothing of the rank's own: mpirun's, composer's, Ray's raylet's.
BARE_EXIT_KINDS = kinds("exit_report", "process_exit")
# An exception that names the ranks that failed (torch.distributed.checkpoint's, raised on every rank alike).
NAMES_FAILED_RANKS = regex.compile(
    r"CheckpointException ranks: ?dict_keys\(\[(?P<ranks>\d{1,5}(?:, ?\d{1,5}){0,1000})\]\)"
)
# How a launcher stops the processes left after one failed.
TEARDOWN_SIGNALS = frozenset({"Killed", "Terminated", "SIGTERM", "SIGKILL"})
# The watchdog's own lines (a timeout, "taking the entire process down") this close above an abort caused it.
WATCHDOG_ABORT_SPAN = 40
TEARDOWN_OR_TIMEOUT = catalogue().tagged("teardown", "timeout")
# An unranked exception this many lines below a frame of torchrun's rendezvous code is that traceback's end.
LAUNCHER_TRACEBACK_SPAN = 60


@check("root_cause_crash")
def root_cause_crash(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """A rank that failed by its own fault (exception, signal, segfault), not as a consequence of a peer."""
    causes = _own_failures(ctx, events)
    if not causes:
        return None
    best = _one_per_rank(causes)
    ranked = sorted(r for r in best if r is not None)
    recovered = ctx.restart_recovered(causes)
    culprits = _first_in_cause({r: best[r] for r in ranked}) if ranked else []
    if (named := _named_in_the_exception([best[r] for r in culprits])) is not None:
        culprits = named
    if not ranked and (named := only_failed_worker(ctx)):
        # An own failure that names no rank (a pasted traceback) is the one rank its launcher reports failed.
        culprits, best = named, {named[0]: best[None]}
    elif not ranked and (aborted := _launcher_named_aborted(ctx)):
        # An own failure that names no rank, and the launcher named the ranks it saw abort (PaddlePaddle's "the
        # trainer process with rank=[0, 2] was aborted"): those ranks.
        culprits, best = aborted, dict.fromkeys(aborted, best[None])
    elif not ranked and (everyone := _every_rank_alike(ctx, causes)):
        culprits, best = everyone, dict.fromkeys(everyone, best[None])
    evidence = [best[r] for r in culprits] + [e for e in causes if e["rank"] not in culprits]
    what = ", ".join(f"rank {r}: {describe(best[r])}" for r in (culprits or ranked)) or describe(causes[0])
    hit = Hit(
        evidence,
        set(ranked),
        culprits=culprits,
        values={
            "what": what,
            "recovered": " A restart recovered: the run finished." if recovered else "",
            "attempt": (best[culprits[0]]["attempt"] if culprits else None) or 0,
        },
    )
    return hit


def _own_failures(ctx: Context, events: list[Event]) -> list[Event]:
    """The failure lines, in order, that are a rank's own doing; a worker's exit counts only where no earlier line
    of that rank says more."""
    victims = _victim_ranks(ctx)
    launcher_frames = _launcher_rendezvous_frames(ctx)
    causes: list[Event] = []
    for e in events:
        kind = e["kind"]
        if kind == "python_exception" and _ends_launcher_traceback(e, launcher_frames):
            continue
        if kind in TORCHRUN_FAILURE_KINDS:
            own = _worker_exit_is_own(ctx, e, victims, causes)
        elif kind == "exit_report":
            own = _bare_exit(ctx, e, victims)
        elif kind == "process_exit":
            own = _process_death_is_own(ctx, e, victims)
        elif kind in ("python_exception", "error_file"):
            own = _exception_is_own(ctx, e, victims)
        elif kind == "fatal_python_error":
            own = e["rank"] not in victims and not _watchdog_took_it_down(ctx, e)
        elif kind == "hydra_job_error":
            own = _hydra_error_is_own(ctx, e, victims, causes)
        else:
            own = True
        if own:
            causes.append(e)
    return causes


def _bare_exit(ctx: Context, e: Event, victims: set[int | None]) -> bool:
    """Another launcher's report that a rank exited non-zero (mpirun's "first process to do so", composer's "Rank 2
    crashed with exit code -6") is that rank's own failure where nothing of its own says why: a rank with an error
    line of its own (a store it could not reach, an exception) failed of what that line says."""
    rank = e["rank"]
    # The report's words say the exit failed (a signal, a non-zero status, "aborted") even where no code is given.
    if rank is None or rank in victims or e["exitcode"] == 0:
        return False
    return not any(x["level"] == "error" and x["kind"] not in BARE_EXIT_KINDS for x in ctx.by_rank.get(rank, []))


def _process_death_is_own(ctx: Context, e: Event, victims: set[int | None]) -> bool:
    """A launcher's report that a process died (Ray's raylet, mp.spawn, srun) is the rank's own failure as a bare
    exit is, unless the launcher killed it after another process failed, its exit code (or its abort) is an
    unranked exception's (that says why; another signal or a vanished process says nothing), or torchrun reports
    the ranks itself (srun's task numbers are then torchrun agents, one per node, not ranks)."""
    if not _bare_exit(ctx, e, victims) or _launcher_killed(ctx, e):
        return False
    # An uncaught C++ exception (gloo's enforce check) ends in std::terminate, which aborts: a SIGABRT says as much
    # as an exit code there.
    aborted = str(e["_f"].get("signal") or "") in ("SIGABRT", "6")
    if (e.get("exitcode") not in (None, 0) or aborted) and _echoes_unranked_failure(ctx, e["rank"], victims):
        return False
    return not any(ctx.by_kind.get(k) for k in TORCHRUN_FAILURE_KINDS)


def _every_rank_alike(ctx: Context, causes: list[Event]) -> list[int]:
    """The same exception, naming no rank, once for every rank of a declared world (a script that fails the same way
    in each process): every rank failed by itself."""
    world = ctx.job.get("world_size") if ctx.job.get("world_size_declared") else None
    said = [
        (str(e["_f"].get("exc_type")), str(e["_f"].get("reason")))
        for e in causes
        if e["kind"] == "python_exception" and e["rank"] is None
    ]
    if not isinstance(world, int) or world < 2 or len(said) != world or len(set(said)) != 1:
        return []
    return list(range(world))


def _launcher_named_aborted(ctx: Context) -> list[int]:
    """The ranks a launcher's report names as aborted, several on one line."""
    return sorted({r for e in ctx.by_kind.get("exit_report", []) for r in int_ranges(e["_f"].get("ranks"))})


def _named_in_the_exception(causes: list[Event]) -> list[int] | None:
    """The ranks every one of `causes` names as the ones that failed: torch.distributed.checkpoint gathers each
    rank's error and raises the same CheckpointException on every rank ("CheckpointException ranks:dict_keys([2,
    3])"); the ranks it names failed, the others only report it."""
    named = [NAMES_FAILED_RANKS.search(str(e["_f"].get("reason") or "")) for e in causes]
    sets = {tuple(sorted(int(r) for r in m["ranks"].split(","))) for m in named if m is not None}
    return list(next(iter(sets))) if causes and all(named) and len(sets) == 1 else None


def _launcher_killed(ctx: Context, e: Event) -> bool:
    """A signal death ("tasks 0,2,6: Killed") beside another process's failure with an exit code of its own: the
    launcher (srun, mpirun) killed the rest of the job after that one failed."""
    if str(e["_f"].get("signal") or "") not in TEARDOWN_SIGNALS:
        return False
    return any(x is not e and x.get("exitcode") not in (None, 0) for x in ctx.by_kind.get("process_exit", []))


def _watchdog_took_it_down(ctx: Context, e: Event) -> bool:
    """ "Fatal Python error: Aborted" right after its process's watchdog timed out or said it is "taking the entire
    process down": the abort is the watchdog's, the timeout is the failure (LS101 reports it)."""
    return any(
        x["sid"] == e["sid"]
        and (x["rank"] == e["rank"] or None in (x["rank"], e["rank"]))
        and 0 < e["line"] - x["line"] <= WATCHDOG_ABORT_SPAN
        for kind in TEARDOWN_OR_TIMEOUT
        for x in ctx.by_kind.get(kind, [])
    )


def _victim_ranks(ctx: Context) -> set[int | None]:
    """Ranks whose failure is the consequence of a communication failure: their own, the watchdog's abort of every
    rank, or unranked communication errors beside a single failed worker."""
    victims: set[int | None] = set(comm_ranks(ctx))
    if aborted_failures(ctx):
        victims |= {e["rank"] for k in TORCHRUN_FAILURE_KINDS for e in ctx.by_kind.get(k, [])}
    failed_workers = {e["rank"] for k in TORCHRUN_FAILURE_KINDS for e in ctx.by_kind.get(k, []) if e["exitcode"]}
    if len(failed_workers) == 1 and any(e["kind"] in COMM_KINDS and e["rank"] is None for e in ctx.rows):
        # Unranked communication errors and one failed worker: in a paste without rank prefixes they are that
        # worker's own lines, so its exit is their consequence.
        victims |= failed_workers
    return victims


def _launcher_rendezvous_frames(ctx: Context) -> list[tuple[int, int]]:
    """Where torchrun's traceback runs through its rendezvous code (elastic/rendezvous/*.py): (file, line)."""
    return [
        (x["sid"], x["line"])
        for x in ctx.by_kind.get("launcher_frame", [])
        if "rendezvous" in str(x["_f"].get("module", ""))
    ]


def _ends_launcher_traceback(e: Event, launcher_frames: list[tuple[int, int]]) -> bool:
    """An unranked exception out of torchrun's rendezvous code belongs to the launcher, not to a rank: LS601/LS602
    report it."""
    return e["rank"] is None and any(
        sid == e["sid"] and 0 < e["line"] - line <= LAUNCHER_TRACEBACK_SPAN for sid, line in launcher_frames
    )


def _worker_exit_is_own(ctx: Context, e: Event, victims: set[int | None], causes: list[Event]) -> bool:
    """A worker's failed exit is its own failure, unless it was stopped (SIGTERM), is a victim's, echoes unranked
    errors, or that rank already has a line that says more."""
    code, rank = e["exitcode"], e["rank"]
    if code is None or code == 0 or launcher_teardown(e):
        return False
    if rank in victims and not _before_its_comm_failures(ctx, e):
        return False
    if code > 0 and _echoes_unranked_failure(ctx, rank, victims):
        # A plain exit status (an uncaught exception's 1) of a worker with no exception of its own, beside
        # communication or rendezvous errors that name no rank (an unprefixed paste: most likely that
        # worker's own lines): the echo of those, not a crash of its own.
        return False
    return not any(x["kind"] in SAYS_MORE_THAN_EXIT and x["rank"] == rank for x in causes)


def _before_its_comm_failures(ctx: Context, e: Event) -> bool:
    """A worker's exit in an elastic attempt before every communication failure of its rank: what a restarted
    attempt's connection failed of did not end the attempt before it (a SIGKILL there is the first cause)."""
    rank, attempt = e["rank"], e["attempt"]
    if rank is None or attempt is None:
        return False
    attempts = [x["attempt"] for x in ctx.by_rank.get(rank, []) if x["kind"] in COMM_KINDS]
    return bool(attempts) and all(a is not None and a > attempt for a in attempts)


def _exception_is_own(ctx: Context, e: Event, victims: set[int | None]) -> bool:
    """An exception (or torchrun's error.json) is the rank's own, unless it only reports a peer's doing, was caught
    (the rank trained on), is a communication error raised as an exception, or says the world never formed."""
    kind, rank, f = e["kind"], e["rank"], e["_f"]
    if str(f.get("exc_type") or "").endswith(NOT_A_CAUSE_EXC) or PEER_CAUSED.search(e["text"]):
        return False
    if ctx.went_on_from(e):
        return False  # caught: the rank's own progress follows it
    if kind == "python_exception" and message_kind(str(f.get("reason") or "")) in COMM_KINDS:
        return False  # e.g. "RuntimeError: NCCL error in: ...": a communication error raised as an exception
    if raised_joining_world(ctx, e) is not None:
        return False  # the world never formed: LS606 reports it
    if timed_out_in_a_collective(ctx, e) is not None:
        return False  # it waited in a collective that timed out: LS107 (or LS101) reports it
    if kind == "error_file" and message_kind(e["text"]) in COMM_KINDS:
        return False
    return not (rank is not None and rank in victims and kind == "error_file")


def _hydra_error_is_own(ctx: Context, e: Event, victims: set[int | None], causes: list[Event]) -> bool:
    """Hydra's wrapper line says an exception escaped: the exception itself is the evidence where there is one, and
    a rendezvous that was waiting for its peers just before is the fallback's to read."""
    if victims or any(c["kind"] != "hydra_job_error" for c in causes):
        return False
    return warned_before(ctx, e, RENDEZVOUS_FAMILY) is None


def _echoes_unranked_failure(ctx: Context, rank: int | None, victims: set[int | None]) -> bool:
    """A rank with no exception of its own beside error lines of the communication or rendezvous family that name
    no rank (or, for an unranked exit, beside any victim)."""
    if rank is not None and any(e["kind"] in ("python_exception", "error_file") for e in ctx.by_rank.get(rank, [])):
        return False
    families = COMM_FAMILY | RENDEZVOUS_FAMILY
    unranked = any(e["rank"] is None and e["level"] == "error" and e["kind"] in families for e in ctx.rows)
    return unranked or (rank is None and bool(victims))


def _one_per_rank(causes: list[Event]) -> dict[int | None, Event]:
    """Each rank's (and the unranked lines') cause: the first of its lines that says most."""
    best: dict[int | None, Event] = {}
    for e in causes:
        key = e["rank"]
        if key not in best or CAUSE_PREFERENCE.get(e["kind"], 9) < CAUSE_PREFERENCE.get(best[key]["kind"], 9):
            best[key] = e
    return best


def _first_in_cause(best: dict[int, Event]) -> list[int]:
    """Among ranks that failed by their own fault, the first in time; ties stay together."""
    if len(best) == 1:
        return list(best)
    times: dict[int, float] = {}
    for rank, e in best.items():
        ts = e["_f"].get("timestamp") if e["kind"] == "error_file" else None
        if ts is not None and str(ts).isdigit():
            times[rank] = float(ts)
        elif e["ts"] is not None:
            times[rank] = e["ts"]
    tied = list(best)
    if len(times) == len(best):
        first = min(times.values())
        tied = [r for r, t in times.items() if t - first < 1.0]
    # Among ranks that failed together, one known only by its exit status most likely went down with the one whose
    # own exception says why.
    said = [r for r in tied if best[r]["kind"] not in TORCHRUN_FAILURE_KINDS]
    return sorted(said or tied)
