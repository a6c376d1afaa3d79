"""Checks that YAML cannot express, registered by name; each is still declared by a rule file in rules/."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from logscope.events.catalogue import catalogue
from logscope.rules.engine import PHASE_ORDER, Context, Hit
from logscope.rules.loader import Rule

CheckFn = Callable[[Rule, Context, list[dict[str, Any]], dict[str, Any]], Hit | None]
CHECKS: dict[str, CheckFn] = {}

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
NOT_A_CAUSE_EXC = ("DistBackendError", "DistStoreError", "DistNetworkError", "ChildFailedError", "KeyboardInterrupt")


def check(name: str) -> Callable[[CheckFn], CheckFn]:
    def register(fn: CheckFn) -> CheckFn:
        CHECKS[name] = fn
        return fn

    return register


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
            if kind == "error_file" and _message_kind(e["text"]) in COMM_KINDS:
                continue
            if rank is not None and rank in comm and kind == "error_file":
                continue
        elif kind == "fatal_python_error" and rank in comm:
            continue
        elif kind == "hydra_job_error" and (comm or any(c["kind"] != "hydra_job_error" for c in causes)):
            continue  # Hydra's wrapper line says an exception escaped; the exception itself is the evidence
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


def _describe(e: dict[str, Any]) -> str:
    f = e["_f"]
    if e["kind"] in ("child_failure", "worker_failed"):
        code = e["exitcode"]
        from logscope.align.align import signal_name

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


@check("single_rank")
def single_rank(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """The job ran one rank: world size 1 reported where more were launched or asked for, or by a distributed job."""
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
    distributed = any(
        ctx.by_kind.get(k)
        for k in ("pg_initialized", "sync_start", "pg_nccl_options", "rank_identity", "nccl_comm_init")
    )
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


@check("stall")
def stall(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """Progress stopped with no error before the end of the logs: a hang the user (or the scheduler) killed."""
    if ctx.job.get("exit_code") == 0 or any(e["level"] == "error" for e in ctx.rows):
        return None
    progress = [e for e in ctx.rows if e["phase"] in ("train", "sync") and e["level"] != "benign"]
    factor = 1.0
    if not progress:
        # Stopped before the first collective: every rank's last line is an init line and nothing follows.
        progress = [e for e in ctx.rows if e["kind"] in ("lightning_rank", "rank_identity", "pg_initialized")]
        factor = 0.8
        if len({e["rank"] for e in progress}) < 2:
            return None
    ended = {r for r, info in ctx.ranks.items() if info.get("phase") == "end"}
    if ended and ended >= ctx.visible:
        return None
    last_it = {r: info["last_iteration"] for r, info in ctx.ranks.items() if info.get("last_iteration") is not None}
    culprits: list[int] = []
    last = progress[-1]
    furthest = max((PHASE_ORDER.get(ctx.ranks[v].get("phase") or "", -1) for v in ctx.visible), default=-1)
    behind = sorted(r for r in ctx.visible if PHASE_ORDER.get(ctx.ranks[r].get("phase") or "", -1) < furthest)
    if behind and len(behind) < len(ctx.visible):
        culprits = behind
    it_text = ", ".join(f"rank {r}: {i}" for r, i in sorted(last_it.items())) or "none printed"
    return Hit(
        [last],
        set(ctx.visible),
        culprits=culprits,
        values={"last_iterations": it_text, "last_line": last["text"]},
        confidence_factor=factor * (0.9 if not ctx.hidden else 0.7),
    )


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
    last = max(earlier, key=lambda x: x["seq"])
    return bool(last["op"] != op)


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
    else:
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
        values={"seq": f.get("seq"), "per_rank": per_rank},
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
    comm = _comm_ranks(ctx)
    last: dict[int, dict[str, Any]] = {}
    for e in events:
        api = e["_f"].get("api")
        if e["rank"] is None or api not in COLLECTIVE_APIS or e["rank"] not in comm:
            continue
        if (e["attempt"] or 0) < ctx.final_attempt:
            continue
        last[e["rank"]] = e
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
    "nccl_comm_init",
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


@check("launcher_failed")
def launcher_failed(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    """torchrun's own traceback and no worker ever printed: the launch failed before the world formed."""
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
