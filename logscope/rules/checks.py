"""Checks that YAML cannot express, registered by name; each is still declared by a rule file in rules/."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import regex

from logscope.align.align import int_ranges, signal_name
from logscope.events.catalogue import catalogue
from logscope.rules.api import (
    COMM_FAMILY,
    LEAD_FAMILY,
    REMOTE_KINDS,
    RENDEZVOUS_FAMILY,
    Context,
    Hit,
    Rule,
    breaks_own_pattern,
    check,
    family_category,
)
from logscope.vocab import PHASE_ORDER, Severity, at_least

# Events that say "communication failed here": a crash on a rank that shows one of these is its consequence.
COMM_KINDS = {
    "nccl_watchdog_timeout",
    "nccl_blocking_wait_timeout",
    "nccl_pg_status",
    "nccl_comm_aborted",
    "nccl_error",
    "nccl_result",
    "nccl_async_exception",
    "nccl_heartbeat_stuck",
    "nccl_watchdog_terminated",
    "gloo_timeout",
    "gloo_peer_closed",
    "gloo_peer_reset",
    "gloo_size_mismatch",
    "gloo_connect_failed",
    "monitored_barrier_failed",
    "collective_mismatch_detail",
    "desync_report",
    "store_timeout",
    "store_clients_timeout",
    "nccl_peer_closed",
    "nccl_uniqueid_store_error",
    "nccl_ib_completion_error",
    "nccl_duplicate_gpu",
    "cuda_illegal_access",
    "gloo_connect_refused",
    "ddp_model_mismatch",
}
NOT_A_CAUSE_EXC = (
    "DistBackendError",
    "DistStoreError",
    "DistNetworkError",
    "ChildFailedError",
    "KeyboardInterrupt",
    "SignalException",
)
# Failures of a rank's own making (as opposed to what a peer's failure made it report).
OWN_FAULT_KINDS = frozenset(
    {"python_exception", "segfault", "fatal_python_error", "terminate_called", "cuda_oom", "host_oom", "error_file"}
)
# The job was stopped from outside (Ctrl-C, the scheduler's SIGTERM to torchrun): where a hang ends, not a failure.
STOPPED_FROM_OUTSIDE_EXC = ("KeyboardInterrupt", "SignalException")


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


def raised_joining_world(ctx: Context, exception: dict[str, Any]) -> dict[str, Any] | None:
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
    return next((f for f in reversed(frames) if _function(f) in JOIN_FUNCTIONS), None)


def _function(frame: dict[str, Any]) -> str:
    return str(frame["_f"].get("fn") or frame["_f"].get("api") or "")


@check("exception_joining_world")
def exception_joining_world(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """An exception out of init_process_group / the rendezvous that says it timed out or could not connect."""
    found = [(e, frame) for e in events if (frame := raised_joining_world(ctx, e)) is not None]
    if not found:
        return None
    exception, frame = found[0]
    return Hit(
        [exception, frame],
        {e["rank"] for e, _ in found if e["rank"] is not None},
        culprits=[],
        values={
            "exception": _short(str(exception["_f"].get("exc_type") or "") + ": " + str(exception["_f"].get("reason"))),
            "function": _function(frame),
        },
    )


def _message_kind(text: str) -> str | None:
    """Which signature an error message (error.json, exception text) belongs to."""
    for sig in catalogue().signatures:
        if sig.kind in ("python_exception", "traceback_start") or not sig.prefilter_re.search(text):
            continue
        if sig.pattern.search(text):
            return sig.kind
    return None


def _comm_ranks(ctx: Context) -> set[int]:
    return {e["rank"] for e in ctx.rows if e["kind"] in COMM_KINDS and e["rank"] is not None}


@check("root_cause_crash")
def root_cause_crash(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """A rank that failed by its own fault (exception, signal, segfault), not as a consequence of a peer.

    torchrun's "Root Cause (first observed failure)" is the earliest *observed* failure; a rank SIGTERMed by
    torchrun because a peer died is never the culprit, and a rank whose failure is a communication error is a
    victim of the rank it was talking to.
    """
    comm = _comm_ranks(ctx)
    if _all_ranks_aborted(ctx):
        comm |= {e["rank"] for k in ("child_failure", "worker_failed") for e in ctx.by_kind.get(k, [])}
    failed_workers = {
        e["rank"] for k in ("child_failure", "worker_failed") for e in ctx.by_kind.get(k, []) if e["exitcode"]
    }
    if len(failed_workers) == 1 and any(e["kind"] in COMM_KINDS and e["rank"] is None for e in ctx.rows):
        # Unranked communication errors and one failed worker: in a paste without rank prefixes they are that
        # worker's own lines, so its exit is their consequence.
        comm |= failed_workers
    # torchrun's own exceptions out of its rendezvous code (a traceback through elastic/rendezvous/*.py) belong to
    # the launcher, not to a rank: LS601/LS602 report them.
    rendezvous_frames = [
        (x["sid"], x["line"])
        for x in ctx.by_kind.get("launcher_frame", [])
        if "rendezvous" in str(x["_f"].get("module", ""))
    ]
    causes: list[dict[str, Any]] = []
    for e in events:
        kind, rank, f = e["kind"], e["rank"], e["_f"]
        if (
            kind == "python_exception"
            and rank is None
            and any(sid == e["sid"] and 0 < e["line"] - line <= 60 for sid, line in rendezvous_frames)
        ):
            continue
        if kind in ("child_failure", "worker_failed"):
            code = e["exitcode"]
            if code is None or code == 0 or code == -15:
                continue
            if rank in comm or (code == -6 and rank in comm):
                continue
            if code > 0 and _echoes_unranked_failure(ctx, rank, comm):
                # A plain exit status (an uncaught exception's 1) of a worker with no exception of its own, beside
                # communication or rendezvous errors that name no rank (an unprefixed paste: most likely that
                # worker's own lines): the echo of those, not a crash of its own.
                continue
            if any(
                x["kind"] in ("python_exception", "error_file", "segfault", "fatal_python_error") and x["rank"] == rank
                for x in causes
            ):
                continue
        elif kind in ("python_exception", "error_file"):
            exc = str(f.get("exc_type") or "")
            if exc.endswith(NOT_A_CAUSE_EXC):
                continue
            if kind == "python_exception" and _message_kind(str(f.get("reason") or "")) in COMM_KINDS:
                continue  # e.g. "RuntimeError: NCCL error in: ...": a communication error raised as an exception
            if raised_joining_world(ctx, e) is not None:
                continue  # the world never formed: LS606 reports it
            if kind == "error_file" and _message_kind(e["text"]) in COMM_KINDS:
                continue
            if rank is not None and rank in comm and kind == "error_file":
                continue
        elif kind == "fatal_python_error" and rank in comm:
            continue
        elif kind == "hydra_job_error" and (comm or any(c["kind"] != "hydra_job_error" for c in causes)):
            continue  # Hydra's wrapper line says an exception escaped; the exception itself is the evidence
        elif kind == "hydra_job_error" and _warned_before(ctx, e, RENDEZVOUS_FAMILY) is not None:
            continue  # ... out of a rendezvous that was waiting for its peers: the fallback reads it as such
        causes.append(e)
    if not causes:
        return None
    # One cause per rank: prefer the event that says most (exception text over an exit code).
    order = {
        "python_exception": 0,
        "error_file": 1,
        "rl_nan": 0,
        "sim_cuda_error": 0,
        "segfault": 2,
        "fatal_python_error": 3,
        "argparse_error": 0,
        "hydra_job_error": 4,
        "child_failure": 5,
        "worker_failed": 6,  # the agent's one-line "failed (exitcode: N) local_rank: K": the summary says more
    }
    best: dict[Any, dict[str, Any]] = {}
    for e in causes:
        key = e["rank"]
        if key not in best or order.get(e["kind"], 9) < order.get(best[key]["kind"], 9):
            best[key] = e
    ranked = sorted(r for r in best if r is not None)
    final = ctx.final_attempt
    recovered = bool(causes) and all((e["attempt"] or 0) < final for e in causes) and ctx.job.get("exit_code") != 1
    culprits = _first_in_cause(ctx, {r: best[r] for r in ranked}) if ranked else []
    evidence = [best[r] for r in culprits] + [e for e in causes if e["rank"] not in culprits]
    what = ", ".join(f"rank {r}: {_describe(best[r])}" for r in (culprits or ranked)) or _describe(causes[0])
    hit = Hit(
        evidence,
        set(ranked),
        culprits=culprits,
        values={
            "what": what,
            "recovered": " The elastic restart recovered: the final attempt finished." if recovered else "",
            "attempt": (best[culprits[0]]["attempt"] if culprits else None) or 0,
        },
    )
    if recovered:
        hit.severity = "warning"
    return hit


def _echoes_unranked_failure(ctx: Context, rank: int | None, comm: set[Any]) -> bool:
    if rank is not None and any(e["kind"] in ("python_exception", "error_file") for e in ctx.by_rank.get(rank, [])):
        return False
    families = COMM_FAMILY | RENDEZVOUS_FAMILY
    unranked = any(e["rank"] is None and e["level"] == "error" and e["kind"] in families for e in ctx.rows)
    return unranked or (rank is None and bool(comm))


def _describe(e: dict[str, Any]) -> str:
    f = e["_f"]
    if e["kind"] in ("child_failure", "worker_failed"):
        code = e["exitcode"]
        sig = signal_name(code)
        return (
            f"exit code {code}"
            + (f" ({sig})" if sig else "")
            + (" — SIGKILL with no traceback is usually the host OOM killer or a manual kill" if code == -9 else "")
        )
    if e["kind"] in ("python_exception", "error_file"):
        return f"{f.get('exc_type') or 'exception'}: {str(f.get('reason') or e['text'])[:160]}"
    return e["text"][:160]


def _first_in_cause(ctx: Context, best: dict[int, dict[str, Any]]) -> list[int]:
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
    if len(times) == len(best):
        first = min(times.values())
        return sorted(r for r, t in times.items() if t - first < 1.0)
    own = [r for r, e in best.items() if e["kind"] != "child_failure"]
    return sorted(own or best)


@check("peer_connection_lost")
def peer_connection_lost(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """A rank lost its connection to a peer: the peer that went away first is the culprit, not the reporter."""
    if not events:
        return None
    reporters = {e["rank"] for e in events if e["rank"] is not None}
    culprits: list[int] = []
    named = [int(e["_f"]["peer_rank"]) for e in ctx.by_kind.get("p2p_call", []) if e["_f"].get("peer_rank")]
    if named:
        culprits = sorted(set(named) - reporters) or sorted(set(named))
    elif reporters:
        peers = ctx.visible - reporters
        world = ctx.job.get("world_size")
        if peers:
            culprits = sorted(peers)
        elif world == 2 and len(reporters) == 1:
            culprits = [1 - next(iter(reporters))]
    return Hit(events, reporters, culprits=culprits, values={"reporters": sorted(reporters) or "unknown"})


# Lines that only a distributed job prints.
DISTRIBUTED_KINDS = (
    "pg_initialized",
    "sync_start",
    "pg_nccl_options",
    "rank_identity",
    "nccl_comm_init",
    "accelerate_state",
)


def _processes_all_rank0(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One identity line per process (told apart by pid and host) when several processes list themselves and every
    one of them is rank 0: they never joined one world (nccl-tests built without MPI, a launcher that set no RANK)."""
    claims: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        pid = e["_f"].get("pid")
        if e["kind"] == "rank_identity" and pid is not None:
            if _int_field(e, "rank") != 0:
                return []
            claims.setdefault((str(pid), str(e["_f"].get("host"))), e)
    return list(claims.values()) if len(claims) > 1 else []


@check("single_rank")
def single_rank(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """The job ran one rank: world size 1 reported where more were launched or asked for, or by a distributed job."""
    rank0_only = _processes_all_rank0(events)
    if rank0_only:
        return Hit(
            rank0_only[:4],
            {0},
            culprits=[],
            values={"why_one": f"{len(rank0_only)} processes each call themselves rank 0: each ran a world of its own"},
        )
    sizes = [
        (e, int(str(ctx.field(e, "world_size")))) for e in events if str(ctx.field(e, "world_size") or "").isdigit()
    ]
    if not sizes or any(ws > 1 for _, ws in sizes):
        return None
    streams = {(e["sid"], e["tee_lrank"], e["local_rank"]) for e, _ in sizes}
    requested = ctx.job.get("requested_world_size")
    evidence = [e for e, _ in sizes][:4]
    if len(streams) > 1:
        return Hit(
            evidence,
            {e["rank"] for e, _ in sizes if e["rank"] is not None},
            culprits=[],
            values={"why_one": f"{len(streams)} processes each report world_size=1: none of them joined the others"},
        )
    if requested and requested > 1:
        return Hit(
            evidence,
            {0},
            culprits=[],
            values={"why_one": f"torchrun was asked for {requested} processes but the job saw world_size=1"},
        )
    seen = [int(e["_f"]["devices"]) for e in ctx.by_kind.get("device_count", []) if e["_f"].get("devices")]
    # Lightning's "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [1,2]": the GPUs that one process was given.
    seen += [
        len([d for d in str(e["_f"]["visible_devices"]).split(",") if d.strip()])
        for e in ctx.by_kind.get("lightning_devices", [])
        if e["_f"].get("visible_devices")
    ]
    if seen and max(seen) > 1:
        devices = max(seen)
        return Hit(
            evidence + (ctx.by_kind.get("device_count") or ctx.by_kind.get("lightning_devices", []))[:2],
            {0},
            culprits=[],
            values={"why_one": f"the job sees {devices} GPUs but ran with world_size=1"},
        )
    distributed = any(ctx.by_kind.get(k) for k in DISTRIBUTED_KINDS)
    if not distributed:
        return None
    hit = Hit(
        evidence,
        {0},
        culprits=[],
        values={"why_one": "the distributed job (process group, parameter broadcast) ran with world_size=1"},
    )
    hit.severity = "warning"
    return hit


@check("generic_failure")
def generic_failure(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Failure lines that no other rule explained (fallback stage): tracebacks, fatal errors, logger ERROR lines,
    launchers' exit lines, ... Each rank's first such line is its failure; the earliest of those is the culprit.

    A run that the logs prove finished is not failed by lines like these (a caught exception that was logged).
    When nothing else failed, a communication warning (NCCL WARN) of a run that did not finish is the best lead.
    """
    proof = ctx.completion
    if proof is not None and proof.proven:
        return None
    others = any(at_least(f["severity"], Severity.ERROR) for f in ctx.findings)
    final = ctx.final_attempt

    def own(e: dict[str, Any]) -> bool:
        return (e["sid"], e["line"]) not in ctx.claimed and (e["attempt"] or 0) >= final and e["level"] != "benign"

    headers = _traceback_exceptions(ctx)
    candidates = [
        e
        for e in ctx.rows
        if e["level"] == "error"
        and own(e)
        and not _stopped_from_outside(e)
        and not (e["kind"] == "traceback_start" and _explained(ctx, headers.get((e["sid"], e["line"]))))
    ]
    # A traceback is told by the line that ends it (its exception); a header stays only where the traceback is cut off.
    ends = {(x["sid"], x["line"]) for x in candidates}
    candidates = [
        e
        for e in candidates
        if not (e["kind"] == "traceback_start" and _key(headers.get((e["sid"], e["line"]))) in ends)
    ]
    if others:  # beside a diagnosed failure, only what could be a cause of its own counts
        candidates = [e for e in candidates if e["kind"] not in REMOTE_KINDS and not _consequence_exception(e)]
    factor = 1.0
    if not candidates and not others:
        # A communication or rendezvous warning is the lead only where the log stops at it: NCCL warns at init about
        # optional transports it then does without ("Failed to open libibverbs.so"); a run that went on is no failure.
        candidates = [
            e
            for e in ctx.rows
            if e["level"] == "warning" and e["kind"] in LEAD_FAMILY and own(e) and _near_the_end(ctx, e)
        ]
        factor = 0.7
    if not candidates and not others:
        # A log that stops inside a traceback whose exception line is not in it (a paste cut short).
        candidates, factor = _cut_tracebacks(ctx), 0.6
    if not candidates:
        return None
    first: dict[Any, dict[str, Any]] = {}
    for e in sorted(candidates, key=ctx.order):
        for rank in _ranks_of(e):
            first.setdefault(rank, e)
    ranked = {r: e for r, e in first.items() if r is not None}
    if ranked:
        # Consequences of a peer's failure (remote errors, teardown) do not make a rank a culprit.
        own_fault = {r: e for r, e in ranked.items() if e["kind"] not in REMOTE_KINDS} or ranked
        earliest = min(ctx.order(e) for e in own_fault.values())
        timed = earliest[0] != float("inf")
        culprits = sorted(r for r, e in own_fault.items() if timed and ctx.order(e)[0] == earliest[0])
        if not culprits:
            culprits = _first_in_file(own_fault)
    else:
        culprits, factor = [], factor * 0.85
    cause = min((first[r] for r in culprits), key=ctx.order) if culprits else min(first.values(), key=ctx.order)
    evidence = [cause] + [e for e in sorted(candidates, key=ctx.order) if e is not cause]
    hit = Hit(
        evidence[:12],
        set(ranked),
        culprits=culprits,
        confidence_factor=factor,
        values={"what": _describe(cause), "count": len(candidates)},
    )
    hit.category = family_category(cause["kind"])
    if hit.category == "crash" and cause["kind"] == "python_exception":
        hit.category = family_category(_message_kind(str(cause["_f"].get("reason") or "")) or "", "crash")
    failing_alike = {e["rank"] for e in ctx.by_kind.get(cause["kind"], [])}
    if hit.category == "rendezvous_failure" and ctx.visible and ctx.visible <= failing_alike:
        # Every rank failed to reach the store or its peers: the fault is the endpoint, not one rank.
        hit.culprits = []
    warned = _warned_before(ctx, cause, LEAD_FAMILY)
    if hit.category in ("crash", "comm_error") and warned is not None:
        # NCCL warned about its transport, or init_process_group was still waiting for its peers, just before this
        # process failed: the warning is the first cause.
        hit.category = family_category(warned["kind"], "comm_error")
        hit.events.insert(0, warned)
        hit.values["what"] = f"{_describe(warned)}, then {hit.values['what']}"
    return hit


# A communication warning this many lines before a failure, in the same file and for the same rank, is its cause.
WARNED_WITHIN = 20


def _warned_before(ctx: Context, cause: dict[str, Any], family: frozenset[str] = COMM_FAMILY) -> dict[str, Any] | None:
    """The warning of `family` just before `cause`, in its file, for its rank (an unranked warning counts too)."""
    warnings = [
        e
        for e in ctx.rows
        if e["level"] == "warning"
        and e["kind"] in family
        and e["sid"] == cause["sid"]
        and e["rank"] in (cause["rank"], None)
        and 0 < cause["line"] - e["line"] <= WARNED_WITHIN
    ]
    return max(warnings, key=lambda e: e["line"]) if warnings else None


# A line this close to the end of its file is where that file stops.
LAST_LINES = 3


def _near_the_end(ctx: Context, e: dict[str, Any]) -> bool:
    return bool(e["line"] > ctx.aligned.stats[e["sid"]].lines - LAST_LINES)


def _key(e: dict[str, Any] | None) -> tuple[int, int] | None:
    return (e["sid"], e["line"]) if e is not None else None


def _stopped_from_outside(e: dict[str, Any] | None) -> bool:
    """Ctrl-C ("^C" echoed by the terminal, KeyboardInterrupt) or a signal from outside (torchrun's SignalException)."""
    return e is not None and (
        str(e["_f"].get("exc_type") or "").endswith(STOPPED_FROM_OUTSIDE_EXC) or "^C" in str(e["text"])
    )


def _explained(ctx: Context, exception: dict[str, Any] | None) -> bool:
    """A traceback's header goes with its exception: used elsewhere, or a stop from outside, it is no failure."""
    return exception is not None and (
        (exception["sid"], exception["line"]) in ctx.claimed or _stopped_from_outside(exception)
    )


def _cut_tracebacks(ctx: Context) -> list[dict[str, Any]]:
    """The last frame of each file whose recognised lines end in traceback frames: the process was failing when the
    log was cut, before its exception line."""
    last: dict[int, dict[str, Any]] = {}
    for e in ctx.rows:
        if e["level"] != "benign" and (e["sid"] not in last or e["line"] > last[e["sid"]]["line"]):
            last[e["sid"]] = e
    # Where the header is in the file, the header stands for its traceback (and may say it was stopped by ^C).
    # Frames under a stack dump's header are a live process's stack (py-spy, faulthandler), not a failure.
    headed = {e["sid"] for k in ("traceback_start", "stack_dump") for e in ctx.by_kind.get(k, [])}
    return [e for e in last.values() if e["kind"] == "traceback_frame" and e["sid"] not in headed]


def _traceback_exceptions(ctx: Context) -> dict[tuple[int, int], dict[str, Any]]:
    """Each traceback header -> the line that ends it: the next error line in its file, for its rank (the exception,
    whatever signature read it)."""
    out: dict[tuple[int, int], dict[str, Any]] = {}
    open_headers: dict[tuple[int, Any], list[dict[str, Any]]] = {}
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


def _ranks_of(e: dict[str, Any]) -> list[int | None]:
    """The rank a line is about; a launcher's line may name several ("srun: error: h: tasks 9-10,12: Killed")."""
    if e["rank"] is not None:
        return [e["rank"]]
    named = int_ranges(e["_f"].get("ranks"))
    return list(named) if named else [None]


def _first_in_file(first: dict[int, dict[str, Any]]) -> list[int]:
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


def _consequence_exception(e: dict[str, Any]) -> bool:
    """An exception that only says a peer or the launcher ended things (DistBackendError, ChildFailedError ...)."""
    if e["kind"] not in ("python_exception", "cpp_what", "terminate_called"):
        return False
    exc = str(e["_f"].get("exc_type") or "")
    return exc.endswith(NOT_A_CAUSE_EXC) or _message_kind(str(e["_f"].get("reason") or "")) in REMOTE_KINDS


def nothing_failed_nor_finished(ctx: Context) -> bool:
    """The fallback rules' ground: no main rule found a failure, and nothing proves that the run finished."""
    proof = ctx.completion
    return (
        proof is not None
        and not proof.proven
        and not any(at_least(f["severity"], Severity.ERROR) for f in ctx.findings)
    )


@check("stall")
def stall(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Nothing failed and nothing proves that the run finished: the logs stop somewhere (fallback stage).

    Healthy has to be proven (a clean exit, every rank's end, one rank's end with its peers shown to take part);
    a run that shows neither a failure nor its end hung, was killed from outside, or was cut off.
    """
    proof = ctx.completion
    if proof is None or not nothing_failed_nor_finished(ctx):
        return None
    stopped = dict(proof.stopped)
    evidence: list[dict[str, Any]] = []
    if not stopped:
        unranked = [
            e for e in ctx.rows if e["rank"] is None and e["level"] != "benign" and e["kind"] != "traceback_frame"
        ]
        if unranked:
            last = max(unranked, key=lambda e: (PHASE_ORDER.get(e["phase"], -1), e["sid"], e["line"]))
            where = f'"{_short(last["text"])}"'
            evidence = [last]
        elif not ctx.rows:
            # A log in a format logscope does not know: nothing in it failed that logscope can tell, nor finished.
            where = "the end of a log none of whose lines logscope recognises"
        else:
            return None
    else:
        where = "; ".join(f'rank {r} at "{_short(e["text"])}"' for r, e in sorted(stopped.items())[:8])
        evidence = [stopped[r] for r in sorted(stopped)]
    # A rank that stopped in an earlier phase than a peer that is itself stuck is the one the others wait for.
    furthest = max((s.furthest for s in ctx.states.values() if s.status == "visible"), default=-1)
    behind = sorted(r for r in stopped if ctx.states[r].furthest < furthest)
    culprits = behind if behind and len(behind) < len(stopped) else []
    dumps = stack_dumps(ctx)
    waiting = {d.rank for d in dumps if d.rank is not None and d.collective}
    elsewhere = {d.rank for d in dumps if d.rank is not None and not d.collective} - waiting
    if waiting and elsewhere:
        culprits = sorted(elsewhere)  # its peers wait in a collective it is not in
    evidence = [d.header for d in dumps][:4] + evidence
    # A process that waits in a collective its framework calls to sync the initial parameters hangs at that sync.
    at_sync = [d for d in dumps if d.collective and d.sync_function]
    # Whole per-rank streams that stop are a hang, and so is a log beside a live process's stack dump; an excerpt
    # that stops may only have been cut there.
    whole = (bool(stopped) and all(ctx.states[r].complete for r in stopped)) or bool(dumps)
    progressed = any(s.progress_count for s in ctx.states.values()) or ctx.by_kind.get("iteration")
    factor = (1.0 if whole else 0.65) * (1.0 if progressed else 0.85) * (0.8 if ctx.hidden else 1.0)
    if not ctx.rows:
        factor *= 0.7
    last_it = {r: s.last_iteration for r, s in ctx.states.items() if s.last_iteration is not None}
    hit = Hit(
        evidence[:8],
        set(stopped),
        culprits=culprits,
        confidence_factor=factor,
        values={
            "where": where,
            "last_iterations": ", ".join(f"rank {r}: {i}" for r, i in sorted(last_it.items())) or "none printed",
            "joined": sorted(proof.participating) or "none",
            "cut": "" if whole else " This is an excerpt: it may also have been cut off there.",
            "dumps": _dumps_text(dumps),
        },
    )
    if at_sync:
        hit.category = "missing_sync"
    return hit


# Where a dumped process waits for its peers: torch.distributed's collectives, the store barrier, NCCL's calls.
WAIT_FUNCTIONS = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "all_to_all",
        "all_to_all_single",
        "reduce",
        "gather",
        "scatter",
        "send",
        "recv",
        "_store_based_barrier",
        "ncclGroupEnd",
        "getNCCLComm",
        "ncclCommInitRank",
    }
)


# Functions that sync a model's initial parameters from rank 0 before training: torch DDP's constructor
# (torch/distributed/utils.py, distributed.py), FSDP's, DeepSpeed's engine, rsl_rl's PPO and skrl's Model.
SYNC_FUNCTIONS = frozenset(
    {
        "_sync_module_states",
        "_sync_params_and_buffers",
        "_verify_param_shape_across_processes",
        "_verify_model_across_ranks",
        "_sync_module_params_and_buffers",
        "_broadcast_model",
        "broadcast_parameters",
    }
)


@dataclass
class StackDump:
    """One process's stack dump: where its threads were when a debugger or py-spy looked."""

    header: dict[str, Any]
    rank: int | None
    pid: int | None
    recent_first: bool = True  # faulthandler, py-spy and gdb print the innermost frame first, pystack last
    functions: list[str] = field(default_factory=list)  # as printed

    @property
    def collective(self) -> str | None:
        return next((fn for fn in self.functions if fn in WAIT_FUNCTIONS), None)

    @property
    def sync_function(self) -> str | None:
        """The framework's initial parameter sync this process is in (DDP's constructor, DeepSpeed's engine,
        rsl_rl's and skrl's broadcast_parameters), if it is in one."""
        return next((fn for fn in self.functions if fn in SYNC_FUNCTIONS), None)

    @property
    def innermost(self) -> str | None:
        if not self.functions:
            return None
        return self.functions[0] if self.recent_first else self.functions[-1]


# Frames as the signatures read them: plain, torch.distributed's own (c10d_call), torchrun's, py-spy's and gdb's.
DUMP_FRAME_KINDS = ("traceback_frame", "c10d_call", "launcher_frame", "dump_frame")
PID_IN_TEXT = regex.compile(r"\bpid[=:] ?(\d+)")


def _pid_ranks(ctx: Context) -> dict[int, int]:
    """pid -> global rank, from the ranks' own lines that name their pid (NCCL's host:pid:tid, a job's pid=...)."""
    out: dict[int, int] = {}
    for e in ctx.rows:
        if e["rank"] is None or e["kind"] in ("stack_dump", "dump_frame"):
            continue
        pid = e["_f"].get("pid")
        if pid is None and (m := PID_IN_TEXT.search(str(e["text"]))) is not None:
            pid = m[1]
        if pid is not None and str(pid).isdigit():
            out.setdefault(int(pid), e["rank"])
    return out


def stack_dumps(ctx: Context) -> list[StackDump]:
    """The stack dumps in the input, one per process, each with the rank it belongs to where that can be told: the
    rank's own file, or the dumped pid joined with a line of the rank that names its pid."""
    headers = ctx.by_kind.get("stack_dump", [])
    if not headers:
        return []
    pid_rank = _pid_ranks(ctx)
    frames = sorted(
        (e for k in DUMP_FRAME_KINDS for e in ctx.by_kind.get(k, [])),
        key=lambda e: (e["sid"], e["line"]),
    )
    dumps: list[StackDump] = []
    current: dict[int, StackDump] = {}  # per file, the process being dumped
    for h in sorted(headers, key=lambda e: (e["sid"], e["line"])):
        f = h["_f"]
        # pystack's and gdb's thread ids are Linux thread ids: the main thread's is the process's pid.
        pid = next((int(f[k]) for k in ("pid", "pystack_thread", "lwp") if str(f.get(k) or "").isdigit()), None)
        rank = h["rank"] if h["rank"] is not None else pid_rank.get(pid) if pid is not None else None
        previous = current.get(h["sid"])
        # One process's dump names it once and then lists its threads: py-spy's "Process N:" line, then its
        # "Thread N (idle)" lines; faulthandler's, pystack's and gdb's threads follow one another. A thread header
        # starts another process only where it says another rank, or another pid that is a rank's.
        same = previous is not None and f.get("pid") is None and (rank is None or rank == previous.rank)
        if same and previous is not None:
            if previous.rank is None:
                previous.rank = rank
            continue
        dump = StackDump(h, rank, pid, recent_first=f.get("pystack_thread") is None)
        dumps.append(dump)
        current[h["sid"]] = dump
    by_sid: dict[int, list[StackDump]] = {}
    for d in dumps:
        by_sid.setdefault(d.header["sid"], []).append(d)
    for e in frames:
        owners = [d for d in by_sid.get(e["sid"], []) if d.header["line"] < e["line"]]
        if owners:
            fn = _function(e)
            owners[-1].functions.append(fn.rsplit("::", 1)[-1].rsplit(".", 1)[-1])
    return dumps


def _dumps_text(dumps: list[StackDump]) -> str:
    if not dumps:
        return ""
    parts = []
    for d in dumps[:8]:
        who = f"rank {d.rank}" if d.rank is not None else f"pid {d.pid}" if d.pid is not None else "a process"
        where = d.collective or d.innermost or "no frame shown"
        sync = f" under {d.sync_function}, the initial parameter sync" if d.collective and d.sync_function else ""
        parts.append(f"{who} waits in {where}{sync}" if d.collective else f"{who} is in {where}")
    return " Stack dumps of the live processes: " + "; ".join(parts) + "."


def _short(text: str, width: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


@check("duplicate_device")
def duplicate_device(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Two ranks on the same CUDA device or busId (the Isaac Lab mistake of not using cuda:<local_rank>)."""
    by_device: dict[tuple[str | None, str], set[int]] = {}
    rows: dict[tuple[str | None, str], list[dict[str, Any]]] = {}
    # NCCL tells hosts apart by NCCL_HOSTID when it is set (echoed at init), else by hostname.
    nccl_host = {
        e["rank"]: str(e["_f"].get("value"))
        for e in ctx.by_kind.get("nccl_env_set", [])
        if e["_f"].get("var") == "NCCL_HOSTID" and e["rank"] is not None
    }
    for e in ctx.by_kind.get("config_values", []):  # the job's own "NCCL_HOSTID=..." among its settings
        if e["rank"] is not None and e["_f"].get("NCCL_HOSTID"):
            nccl_host.setdefault(e["rank"], str(e["_f"]["NCCL_HOSTID"]))
    for e in events:
        if e["rank"] is None:
            continue
        f = e["_f"]
        if e["kind"] == "nccl_comm_init":
            if str(f.get("state", "")).startswith("Init") and f.get("bus_id"):
                key = (nccl_host.get(e["rank"], f.get("host")), f"busId {f['bus_id']}")
            else:
                continue
        else:
            device = f.get("device")
            if not device or not str(device).startswith("cuda"):
                continue
            key = (e["node"] or ctx.ranks.get(e["rank"], {}).get("host"), str(device))
        by_device.setdefault(key, set()).add(e["rank"])
        rows.setdefault(key, []).append(e)
    # NCCL hosts are what matters for busIds: a communicator spanning several NCCL hosts (nNodes > 1) may see
    # the same busId on each of them legitimately.
    multi_host = any(int(e["_f"].get("nnodes") or 1) > 1 for e in ctx.by_kind.get("nccl_comm_topology", []))
    shared = {k: v for k, v in by_device.items() if len(v) > 1 and not (multi_host and k[1].startswith("busId"))}
    if not shared:
        return None
    ranks = sorted(set().union(*shared.values()))
    text = "; ".join(f"ranks {', '.join(map(str, sorted(v)))} on {k[1]}" for k, v in shared.items())
    return Hit([e for k in shared for e in rows[k]], set(ranks), culprits=ranks, values={"shared": text})


@check("lagging_other_collective")
def lagging_other_collective(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """Timed-out collectives differ in SeqNum *and* op across ranks: the rank in the earlier one is stuck."""
    pending: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["rank"] is None or e["seq"] is None or (e["pg"] or "0") != "0":
            continue
        if e["rank"] not in pending or e["seq"] < pending[e["rank"]]["seq"]:
            pending[e["rank"]] = e
    if len(pending) < 2:
        return None
    low = min(e["seq"] for e in pending.values())
    high = max(e["seq"] for e in pending.values())
    low_ops = {e["op"] for e in pending.values() if e["seq"] == low}
    high_ops = {e["op"] for e in pending.values() if e["seq"] == high}
    if low == high or low_ops & high_ops:
        return None
    laggards = sorted(r for r, e in pending.items() if e["seq"] == low)
    ahead = sorted(r for r, e in pending.items() if e["seq"] != low)
    return Hit(
        sorted(pending.values(), key=lambda e: e["seq"]),
        set(pending),
        culprits=laggards,
        values={
            "low_seq": low,
            "high_seq": high,
            "low_op": "/".join(sorted(low_ops)),
            "high_op": "/".join(sorted(high_ops)),
            "ahead": ahead,
        },
    )


@check("detail_mismatch")
def detail_mismatch(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """ProcessGroupWrapper's fingerprint mismatch: blame the rank that broke its own collective pattern."""
    if not events:
        return None
    e = events[0]
    f = e["_f"]
    sigs: dict[int, tuple[Any, Any]] = {}
    for other in events:  # a pasted line may be cut before its "but Rank B is running" half
        g = other["_f"]
        sigs.setdefault(int(g["rank_a"]), (g.get("op"), g.get("shape")))
        if g.get("rank_b") is not None:
            sigs.setdefault(int(g["rank_b"]), (g.get("op_b"), g.get("shape_b")))
    culprits: list[int] = []
    if len(sigs) >= 3:
        common = max(set(sigs.values()), key=list(sigs.values()).count)
        culprits = sorted(r for r, s in sigs.items() if s != common)
    elif f.get("seq") is not None:  # torch 1.x fingerprints carry no SequenceNumber
        seq = int(f["seq"])
        culprits = [r for r, (op, shape) in sigs.items() if breaks_own_pattern(ctx, r, seq, op, shape)]
    factor = 1.0
    if not culprits and len(sigs) >= 2:
        # Two ranks and no history of their collectives: either may have taken the other branch.
        culprits, factor = sorted(sigs), 0.7
    elif not culprits:
        factor = 0.6
    per_rank = ", ".join(f"rank {r}: {s[0]} [{s[1] or ''}]" for r, s in sorted(sigs.items()))
    return Hit(
        events,
        set(sigs),
        culprits=sorted(culprits),
        confidence_factor=factor,
        values={"seq": f.get("seq") or "?", "per_rank": per_rank},
    )


COLLECTIVE_APIS = {
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "send",
    "recv",
    "isend",
    "irecv",
    "gather",
    "scatter",
    "broadcast_object_list",
    "all_gather_object",
    "monitored_barrier",
}


@check("different_collective_calls")
def different_collective_calls(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """Ranks failed inside different torch.distributed calls (their tracebacks' last c10d frame differs)."""
    last = _last_calls(ctx, events)
    if len(last) < 2:
        return None
    calls = {r: e["_f"]["api"] for r, e in last.items()}
    if len(set(calls.values())) < 2:
        return None
    counts: dict[str, int] = {}
    for api in calls.values():
        counts[api] = counts.get(api, 0) + 1
    top = max(counts.values())
    factor = 1.0
    if list(counts.values()).count(top) == 1 and len(calls) >= 3:
        usual = max(counts, key=lambda k: counts[k])
        culprits = sorted(r for r, api in calls.items() if api != usual)
    else:
        culprits, factor = sorted(calls), 0.7
    per_rank = ", ".join(f"rank {r}: {api}" for r, api in sorted(calls.items()))
    return Hit(
        list(last.values()), set(calls), culprits=culprits, confidence_factor=factor, values={"per_rank": per_rank}
    )


def _last_calls(ctx: Context, events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each failing rank's last torch.distributed frame (its traceback's innermost collective), final attempt."""
    comm = _comm_ranks(ctx)
    last: dict[int, dict[str, Any]] = {}
    for e in events:
        api = e["_f"].get("api")
        if e["rank"] is None or api not in COLLECTIVE_APIS or e["rank"] not in comm:
            continue
        if (e["attempt"] or 0) < ctx.final_attempt:
            continue
        last[e["rank"]] = e
    return last


# Lines only a rank that trains prints (a rank still in the sync has none).
TRAINING_KINDS = frozenset({"iteration", "progress", "progress_bar", "throughput"})
# The framework's initial parameter sync is a broadcast (rsl_rl, skrl) or broadcast_object_list (rl_games).
SYNC_APIS = {"broadcast", "broadcast_object_list"}


@check("past_the_sync")
def past_the_sync(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Some ranks wait in the parameter-sync broadcast while others are already in a later collective: those went
    past the sync without taking part in it (program order: the sync is the first collective of the run)."""
    if not ctx.by_kind.get("sync_start"):
        return None
    last = _last_calls(ctx, events)
    in_sync = {r for r, e in last.items() if e["_f"]["api"] in SYNC_APIS and not ctx.states[r].kinds & TRAINING_KINDS}
    ahead = {r for r, e in last.items() if e["_f"]["api"] not in SYNC_APIS}
    if not in_sync or not ahead:
        return None
    calls = ", ".join(f"rank {r}: {e['_f']['api']}" for r, e in sorted(last.items()))
    return Hit(
        [last[r] for r in sorted(ahead)] + [last[r] for r in sorted(in_sync)] + ctx.by_kind["sync_start"][:2],
        set(last),
        culprits=sorted(ahead),
        values={"ahead": sorted(ahead), "waiting": sorted(in_sync), "per_rank": calls},
    )


@check("left_early")
def left_early(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """A rank finished cleanly while its peers were still in a collective (they time out, or lose the connection
    to it): it ran fewer collectives than they did. Its clean exit is the evidence; it needs no error line."""
    # torchrun's failure summary lists every worker still running at teardown (failed or SIGTERMed): a visible
    # rank missing from it, with no error of its own, had already exited, with status 0.
    summarised = {e["rank"] for e in ctx.by_kind.get("child_failure", []) if (e["attempt"] or 0) >= ctx.final_attempt}
    unlisted = {
        r
        for r, s in ctx.states.items()
        if summarised and r not in summarised and s.status == "visible" and s.exit_code is None
    }
    if len(unlisted) >= len(summarised):  # a summary that lists only a few of the ranks says nothing of the rest
        unlisted = set()
    leavers = sorted(
        r
        for r, s in ctx.states.items()
        if s.status == "visible" and s.first_error is None and s.exit_code in (None, 0) and (s.ended or r in unlisted)
    )
    waiting = sorted(
        r
        for r, s in ctx.states.items()
        if s.first_error is not None and not s.ended and s.first_error["kind"] in COMM_FAMILY
    )
    own_fault = [
        s for s in ctx.states.values() if s.first_error is not None and s.first_error["kind"] in OWN_FAULT_KINDS
    ]
    if not leavers or not waiting or own_fault or len(leavers) >= len(ctx.visible):
        return None
    found = [ctx.states[r].last_event for r in leavers] + [ctx.states[r].first_error for r in waiting]
    evidence = [e for e in found if e is not None]
    return Hit(
        evidence,
        set(leavers) | set(waiting),
        culprits=leavers,
        values={"leavers": leavers, "waiting": waiting, "last_line": evidence[0]["text"] if evidence else ""},
    )


@check("duplicate_gpu")
def duplicate_gpu(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """NCCL's "Duplicate GPU detected": of the two ranks, the one not on cuda:<local_rank> is the culprit."""
    if not events:
        return None
    named: set[int] = set()
    for e in events:
        for key in ("rank_a", "rank_b"):
            if str(e["_f"].get(key, "")).isdigit():
                named.add(int(e["_f"][key]))
    misplaced = set()
    for rank in named:
        info = ctx.ranks.get(rank, {})
        local = info.get("local_rank")
        devs = {
            str(x["_f"].get("cuda_dev"))
            for x in ctx.by_kind.get("nccl_comm_init", [])
            if x["rank"] == rank and x["_f"].get("cuda_dev") is not None
        }
        if local is not None and devs and str(local) not in devs:
            misplaced.add(rank)
    culprits = sorted(misplaced or named)
    return Hit(events, named | {e["rank"] for e in events if e["rank"] is not None}, culprits=culprits)


def _all_ranks_aborted(ctx: Context) -> list[dict[str, Any]]:
    """Every failed rank died of SIGABRT with no traceback: ProcessGroupNCCL's watchdog tearing them down."""
    failures = [
        e
        for k in ("child_failure", "worker_failed")
        for e in ctx.by_kind.get(k, [])
        if e["exitcode"] not in (None, 0, -15)
    ]
    if failures and all(e["exitcode"] == -6 for e in failures):
        own = [e for e in ctx.rows if e["kind"] in ("python_exception", "error_file", "segfault", "cuda_oom")]
        if not own:
            return failures
    return []


@check("all_ranks_aborted")
def all_ranks_aborted(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    failures = _all_ranks_aborted(ctx)
    if not failures or any(e["kind"] == "nccl_watchdog_timeout" for e in ctx.rows):
        return None
    ranks = {e["rank"] for e in failures if e["rank"] is not None}
    return Hit(
        failures, ranks, culprits=[], values={"count": len(failures)}, confidence_factor=1.0 if len(ranks) >= 2 else 0.8
    )


@check("gpu_unusable_at_sync")
def gpu_unusable_at_sync(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Isaac Sim could not use a rank's GPU and the job never got past the initial parameter broadcast."""
    if not events or not ctx.by_kind.get("sync_start") or ctx.by_kind.get("iteration"):
        return None
    culprits: set[int] = set()
    for e in events:
        if e["rank"] is not None:
            culprits.add(e["rank"])
        elif str(e["_f"].get("gpu", "")).isdigit():
            culprits.add(int(e["_f"]["gpu"]))  # Kit numbers GPUs by local device, = the rank on one node
    hit = Hit(events + ctx.by_kind["sync_start"][:2], culprits, culprits=sorted(culprits))
    if ctx.job.get("nnodes") not in (None, 1):
        hit.confidence_factor = 0.7
    return hit


WORKER_KINDS = (
    "sync_start",
    "iteration",
    "config_values",
    "rank_identity",
    "pg_initialized",
    "child_failure",
    "worker_failed",
    "error_file",
    "nccl_comm_init",
    "training_time",
)


# Lines that prove the process group had formed (a collective ran or training started).
WORLD_FORMED_KINDS = (
    "pg_initialized",
    "lightning_world_formed",
    "nccl_comm_init",
    "nccl_comm_topology",
    "sync_start",
    "sync_done",
    "iteration",
    "training_time",
    "nccl_pg_status",
    "nccl_watchdog_timeout",
    "collective_fingerprint",
    "pg_store_check_failed",
)


@check("store_lost_before_world_formed")
def store_lost_before_world_formed(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """A TCPStore client lost its server before any process group formed: the store host never served the job.

    After the world formed, the same line is usually the aftermath of the store's host process exiting first.
    """
    if not events or any(ctx.by_kind.get(k) for k in WORLD_FORMED_KINDS):
        return None
    return Hit(events[:6], {e["rank"] for e in events if e["rank"] is not None}, culprits=[])


@check("store_lost_after_world_formed")
def store_lost_after_world_formed(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """Ranks that were running lost the c10d store: its host process (rank 0's, or node 0's agent) went away."""
    if not events or not any(ctx.by_kind.get(k) for k in WORLD_FORMED_KINDS) or ctx.job.get("exit_code") == 0:
        return None  # after a clean exit it is only the order in which the ranks left
    return Hit(events[:6], {e["rank"] for e in events if e["rank"] is not None}, culprits=[])


# Identity lines a process prints once, at start-up ("Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/8").
ONCE_PER_PROCESS = ("lightning_rank", "rank_identity")


@check("duplicate_rank_claims")
def duplicate_rank_claims(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Two processes announce the same global rank while other ranks of the world never appear: two launches
    were given the same node rank (or machine rank), so the world they should form never forms."""
    claims: dict[int, list[dict[str, Any]]] = {}
    world = 0
    for e in events:
        rank, size = _int_field(e, "rank"), _int_field(e, "world_size")
        if rank is None or (e["attempt"] or 0) < ctx.final_attempt:
            continue
        claims.setdefault(rank, []).append(e)
        world = max(world, size or 0)
    doubled = sorted(r for r, rows in claims.items() if len(rows) >= 2)
    never = sorted(set(range(world)) - set(claims)) if world <= 65536 else []
    if len(doubled) < 2 or not never:
        return None
    return Hit(
        [rows[1] for r, rows in sorted(claims.items()) if r in doubled][:8],
        set(doubled),
        culprits=[],
        values={"doubled": doubled, "never": never, "world": world},
    )


def _int_field(e: dict[str, Any], name: str) -> int | None:
    value = e["_f"].get(name)
    return int(value) if str(value or "").isdigit() else None


@check("launcher_failed")
def launcher_failed(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """The launcher's own traceback (torchrun's, DeepSpeed's runner) and no worker ever printed: the launch failed."""
    if not events or any(ctx.by_kind.get(k) for k in WORKER_KINDS) or ctx.visible:
        return None
    rdzv = [e for e in events if "rendezvous" in str(e["_f"].get("module", "")) or e["_f"].get("fn") == "_rendezvous"]
    hit = Hit(
        (rdzv or events)[:6],
        set(),
        culprits=[],
        values={"where": f"{events[-1]['_f'].get('module')}.py in {events[-1]['_f'].get('fn')}"},
    )
    hit.confidence_factor = 1.0 if rdzv else 0.8
    return hit


@check("seeds_not_offset")
def seeds_not_offset(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Every rank seeds its framework/environment with the same value where Isaac Lab expects seed + rank."""
    seeds: dict[int, str] = {}
    for e in events:
        if e["rank"] is not None and e["_f"].get("seed") is not None:
            seeds[e["rank"]] = str(e["_f"]["seed"])
    if len(seeds) < 2 or len(set(seeds.values())) != 1:
        return None
    hit = Hit(
        events[:4], set(seeds), culprits=[], values={"seed": next(iter(seeds.values())), "seed_ranks": sorted(seeds)}
    )
    hit.severity = "warning"
    return hit


@check("world_never_formed")
def world_never_formed(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Some ranks of a declared world start and wait at init; the others never print: the world never formed.

    Fallback stage, like the stall rule it refines: nothing failed and nothing proves the run finished. Two or more
    ranks are needed, since many jobs print start-up lines from rank 0 only.
    """
    if not nothing_failed_nor_finished(ctx):
        return None
    world = ctx.job.get("world_size")
    if not ctx.job.get("world_size_declared") or not isinstance(world, int) or world < 2:
        return None
    started = {r for r in ctx.visible if 0 <= r < world}
    missing = sorted(set(range(world)) - started)
    if len(started) < 2 or not missing:
        return None
    if any(ctx.states[r].furthest > PHASE_ORDER["init"] or ctx.states[r].progress_count for r in started):
        return None
    if any(ctx.by_kind.get(k) for k in WORLD_FORMED_KINDS) or any(e["seq"] is not None for e in ctx.rows):
        return None
    last = [e for r in sorted(started) if (e := ctx.states[r].last_event) is not None]
    return Hit(
        last[:8],
        set(started),
        culprits=missing,
        values={"started": sorted(started), "missing": missing, "world": world},
    )


# A connect that NCCL retried this often with nothing after it never went through.
MIN_CONNECT_RETRIES = 3


@check("connect_retries_unresolved")
def connect_retries_unresolved(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """NCCL keeps retrying a connect and the log ends there: nothing failed loudly, nothing after shows a connection.

    Fallback stage: only when no main rule found a failure and nothing proves the run finished.
    """
    if not nothing_failed_nor_finished(ctx):
        return None
    if len(events) < MIN_CONNECT_RETRIES:
        return None
    last = max(events, key=lambda e: (e["sid"], e["line"]))
    after = [
        e
        for e in ctx.rows
        if e["sid"] == last["sid"]
        and e["line"] > last["line"]
        and (PHASE_ORDER.get(e["phase"], -1) > PHASE_ORDER["init"] or e["seq"] is not None)
    ]
    if after:
        return None
    ranks = {e["rank"] for e in events if e["rank"] is not None}
    return Hit(
        [*events[:3], last], ranks, culprits=[], values={"reason": last["_f"].get("reason"), "retries": len(events)}
    )
