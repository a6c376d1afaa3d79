"""What several checks know about failure lines: which kinds say that communication failed, which exceptions only
report a peer's or the launcher's doing, how a failure reads in a message, which warning came just before it, which
NCCL trace of a failed call its process went on from; and
two judgements over the whole run: every failed rank aborted by the watchdog, and the fallback stage's ground
(nothing failed, nothing proves the run finished)."""

from __future__ import annotations

import regex

from logscope.align.align import signal_name
from logscope.align.state import launcher_teardown
from logscope.events.catalogue import catalogue, kinds
from logscope.ingest.normalise import nccl_process
from logscope.rules.api import COMM_FAMILY, LAUNCHER_EXIT_KINDS, Context
from logscope.vocab import Event, Severity, at_least

# NCCL's trace of a failed call back up its stack ("transport/net_ib.cc:852 -> 3").
NCCL_TRACE = regex.compile(r"\.(?:cc|cu|h):\d+ -> \d")

# Events that say "communication failed here": a crash on a rank that shows one of these is its consequence.
COMM_KINDS = kinds(
    "nccl_watchdog_timeout",
    "nccl_blocking_wait_timeout",
    "nccl_pg_status",
    "nccl_comm_aborted",
    "nccl_error",
    "nccl_result",
    "nccl_heartbeat_stuck",
    "nccl_watchdog_terminated",
    "gloo_timeout",
    "gloo_peer_closed",
    "gloo_peer_reset",
    "gloo_size_mismatch",
    "gloo_connect_failed",
    "comm_library_error",
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
)
# Exceptions that only say a peer or the launcher ended things: never a rank's own cause.
NOT_A_CAUSE_EXC = (
    "DistBackendError",
    "DistStoreError",
    "DistNetworkError",
    "ChildFailedError",
    "ProcessRaisedException",  # mp.spawn's parent re-raising a child's exception, which follows it
    "WorkerGroupError",  # Ray Train's driver: "Training failed due to worker errors" (the workers' own come first)
    "ActorDiedError",  # Ray's report that another process (an actor) died: the raylet's line names which
    "GetTimeoutError",  # Ray's driver gave up waiting for a result: the worker it waited for is the story
    "KeyboardInterrupt",
    "SignalException",
)
# A communication warning this many lines before a failure, in the same file and for the same rank, is its cause.
WARNED_WITHIN = 20


def comm_ranks(ctx: Context) -> set[int]:
    """The ranks that show a communication failure of their own."""
    return {e["rank"] for e in ctx.rows if e["kind"] in COMM_KINDS and e["rank"] is not None}


def message_kind(text: str) -> str | None:
    """Which signature an error message (error.json, exception text) belongs to."""
    for sig in catalogue().signatures:
        # `may_pass` first: it needs no compiled prefilter, and compiling every one costs a small run ~50 ms.
        if sig.kind in ("python_exception", "traceback_start") or not sig.may_pass(text):
            continue
        if not sig.prefilter_re.search(text):
            continue
        if sig.pattern.search(text):
            return sig.kind
    return None


def describe(e: Event) -> str:
    """A failure as a message says it: the exit code and its signal, the exception and its reason, or the line."""
    f = e["_f"]
    if e["kind"] in ("child_failure", "worker_failed"):
        code = e["exitcode"]
        sig = signal_name(code)
        return (
            f"exit code {code}"
            + (f" ({sig})" if sig else "")
            + (" — SIGKILL with no traceback is usually the host OOM killer or a manual kill" if code == -9 else "")
            + (" that torchrun did not send: stopped from outside (kill, the scheduler)" if _from_outside(e) else "")
        )
    if e["kind"] in ("python_exception", "error_file"):
        return f"{f.get('exc_type') or 'exception'}: {str(f.get('reason') or e['text'])[:160]}"
    return e["text"][:160]


def _from_outside(e: Event) -> bool:
    return e["_f"].get("stopped_by") == "outside"


def warned_before(ctx: Context, cause: Event, family: frozenset[str] = COMM_FAMILY) -> Event | None:
    """The warning of `family` just before `cause`, in its file, for its rank (an unranked warning counts too, and an
    unranked cause is taken for the rank of the warning above it)."""
    warnings = [
        e
        for e in ctx.rows
        if e["level"] == "warning"
        and e["kind"] in family
        and e["sid"] == cause["sid"]
        and (e["rank"] in (cause["rank"], None) or cause["rank"] is None)
        and 0 < cause["line"] - e["line"] <= WARNED_WITHIN
    ]
    return max(warnings, key=lambda e: e["line"]) if warnings else None


# What a gloo process's own SIGABRT leaves on record: its enforce's C++ exception and the terminate it ends in.
GLOO_ABORT_KINDS = kinds("gloo_terminate", "gloo_size_mismatch", "terminate_called")


def aborted_failures(ctx: Context) -> list[Event]:
    """The launcher's failure lines where every failed rank died of SIGABRT with no traceback (ProcessGroupNCCL's
    watchdog tearing them down); empty otherwise."""
    if ctx.job.get("backend") == "gloo" and not any(ctx.by_kind.get(k) for k in GLOO_ABORT_KINDS):
        # gloo has no watchdog that aborts a process: a SIGABRT there is its enforce's terminate (on record as
        # "terminate called"), else the rank's own (or a signal sent to it).
        return []
    failures = [
        e
        for k in ("child_failure", "worker_failed")
        for e in ctx.by_kind.get(k, [])
        if e["exitcode"] not in (None, 0) and not launcher_teardown(e)
    ]
    if failures and all(e["exitcode"] == -6 for e in failures):
        own = [e for e in ctx.rows if e["kind"] in ("python_exception", "error_file", "segfault", "cuda_oom")]
        if not own:
            return failures
    return []


def failure_found(ctx: Context) -> bool:
    """Whether a main rule found a failure (what the fallback stage sees)."""
    return any(at_least(f["severity"], Severity.ERROR) for f in ctx.findings)


def nothing_failed_nor_finished(ctx: Context) -> bool:
    """The fallback rules' ground: no main rule found a failure, and nothing proves that the run finished."""
    proof = ctx.completion
    return proof is not None and not proof.proven and not failure_found(ctx)


def only_failed_worker(ctx: Context) -> list[int]:
    """The one rank a launcher reports as failed by itself (not SIGTERMed by it), when there is exactly one."""
    failed = {
        e["rank"]
        for kind in LAUNCHER_EXIT_KINDS
        for e in ctx.by_kind.get(kind, [])
        if e["rank"] is not None and e["exitcode"] not in (None, 0) and not launcher_teardown(e)
    }
    return sorted(failed) if len(failed) == 1 else []


def nccl_went_on(ctx: Context, e: Event) -> bool:
    """NCCL traces a failed call ("include/net.h:19 -> 2") also when it handles it: a process whose next lines go on
    with its setup (NCCL INFO lines of the same process that are not part of the trace) did not fail there."""
    process = nccl_process(e["text"])
    if process is None:
        return False
    after = [text for line, text in ctx.aligned.contexts.get((e["sid"], e["line"]), []) if line > e["line"]]
    own = [text for text in after if nccl_process(text) == process and "NCCL INFO" in text]
    return bool(own) and not any(NCCL_TRACE.search(text) or "NCCL WARN" in text for text in own)


def first_own_error(ctx: Context, rank: int) -> Event | None:
    """The rank's first error line, but for NCCL's traces of a failed call that its process went on from and for
    the notice that another rank signalled a Flight Recorder dump (it says the other rank failed)."""
    first = ctx.states[rank].first_error if rank in ctx.states else None
    if first is None or not _not_its_own(ctx, first):
        return first
    errors = [e for e in ctx.by_rank.get(rank, []) if e["level"] == "error" and not _not_its_own(ctx, e)]
    return min(errors, key=ctx.order) if errors else None


def _not_its_own(ctx: Context, e: Event) -> bool:
    if e["kind"] == "nccl_error_return":
        return nccl_went_on(ctx, e)
    told_by = str(e["_f"].get("from") or "")
    return e["kind"] == "nccl_dump_signal" and (bool(e["_f"].get("observed")) or told_by.startswith("rank"))
