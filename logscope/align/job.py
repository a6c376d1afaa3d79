"""The job's facts, each from its own small function over the aligned rows: world size, nodes, attempts, backend,
versions, framework, NCCL environment, launcher and outcome."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from typing import Any

from logscope.ingest.sources import Source
from logscope.values import int_list, int_or_none
from logscope.vocab import Event

FieldsOf = defaultdict[str, list[dict[str, Any]]]
RankFacts = dict[int, dict[str, Any]]


def job_facts(rows: list[Event], sources: list[Source], world_votes: Iterable[int], ranks: RankFacts) -> dict[str, Any]:
    kinds = Counter(r["kind"] for r in rows)
    fields_of: FieldsOf = defaultdict(list)
    for row in rows:
        fields_of[row["kind"]].append(row["_f"])
    nodes = sorted({s.node for s in sources if s.node is not None})
    declared = declared_world_size(fields_of, world_votes)
    # without a declaration, the highest rank seen is a lower bound
    world_size = declared if declared is not None else (max(ranks) + 1 if ranks else None)
    return {
        "world_size": world_size,
        "nnodes": node_count(fields_of, nodes, sources, world_size, ranks),
        "attempts": attempt_count(rows, sources),
        "backend": backend(fields_of, kinds),
        "torch_version": first_field(fields_of, ("torch_version",), "torch_version"),
        "nccl_version": first_field(fields_of, ("nccl_version", "pg_nccl_env", "nccl_error"), "nccl_version"),
        "framework": framework(rows, kinds, fields_of),
        "exit_code": exit_code(rows, kinds, ranks),
        "launcher": "torchrun" if nodes or launched_by_torchrun(kinds) else None,
        "nccl_env": nccl_env(rows),
        "requested_world_size": requested_world_size(fields_of),
        "world_size_declared": declared is not None,
    }


def declared_world_size(fields_of: FieldsOf, world_votes: Iterable[int]) -> int | None:
    """The world size the job declares: the ranks' own identity lines, else torchrun's rendezvous block, else
    DeepSpeed's launcher's, else the largest NCCL communicator."""
    declared = [ws for ws in world_votes if ws > 0]
    if declared:
        return max(declared)
    rdzv = [int_list(f.get("value")) for f in fields_of["rdzv_field"] if f.get("key") == "global_world_sizes"]
    if rdzv and rdzv[-1]:
        return rdzv[-1][0]
    launched = [n for n in (int_or_none(f.get("world_size")) for f in fields_of["launcher_world_size"]) if n]
    if launched:
        return launched[-1]
    nranks = [n for n in (int_or_none(f.get("nranks")) for f in fields_of["nccl_comm_init"]) if n]
    return max(nranks) if nranks else None


def requested_world_size(fields_of: FieldsOf) -> int | None:
    """nproc_per_node × max_nodes of torchrun's launch config: what was asked for, whatever started."""
    launch = {str(f.get("key")): f.get("value") for f in fields_of["launch_config"]}
    nproc = int_or_none(launch.get("nproc_per_node"))
    return nproc * (int_or_none(launch.get("max_nodes")) or 1) if nproc else None


def node_count(
    fields_of: FieldsOf, nodes: list[str], sources: list[Source], world_size: int | None, ranks: RankFacts
) -> int | None:
    nnodes: int | None = len(nodes) or None
    group_ws = [int_or_none(f.get("value")) for f in fields_of["rdzv_field"] if f.get("key") == "group_world_size"]
    if group_ws and group_ws[-1]:
        nnodes = max(nnodes or 0, group_ws[-1] or 0)
    if nnodes is None and (world_size is not None or ranks):
        nnodes = 1 if sources and any(s.node for s in sources) else None
    return nnodes


def attempt_count(rows: list[Event], sources: list[Source]) -> int:
    attempts = {r["attempt"] for r in rows if r["attempt"] is not None}
    attempts |= {s.attempt for s in sources if s.attempt is not None}
    return max(len(attempts), 1 if rows else 0)


def backend(fields_of: FieldsOf, kinds: Counter[str]) -> str | None:
    """The backend the process groups report, else the one whose lines the logs hold."""
    reported = [f.get("backend") for f in fields_of["pg_initialized"] if f.get("backend")]
    if reported:
        return str(Counter(reported).most_common(1)[0][0])
    if any(k.startswith(("nccl_", "pg_nccl")) for k in kinds):
        return "nccl"
    if any(k.startswith("gloo_") for k in kinds):
        return "gloo"
    return None


def first_field(fields_of: FieldsOf, kinds: tuple[str, ...], name: str) -> str | None:
    values = [f.get(name) for kind in kinds for f in fields_of[kind] if f.get(name)]
    return str(values[0]) if values else None


def framework(rows: list[Event], kinds: Counter[str], fields_of: FieldsOf) -> str | None:
    """The RL library, from the fields of its parameter-sync and iteration lines (each prints its own)."""
    sync_fields = fields_of["sync_start"]
    if any("rl_games" in f for f in sync_fields) or kinds["rl_games_seed"]:
        return "rl_games"
    if any("fps_step" in f for f in fields_of["iteration"]):
        return "rl_games"
    if any("skrl" in f for f in sync_fields) or any("skrl" in r["text"] for r in rows if r["kind"] == "rank_identity"):
        return "skrl"
    if any("rank" in f for f in sync_fields) or any("iteration" in f for f in fields_of["iteration"]):
        return "rsl_rl"
    return None


def nccl_env(rows: list[Event]) -> dict[str, object]:
    """NCCL_* / TORCH_NCCL_* settings the ranks print: one value when the ranks agree, {rank: value} when they do
    not (e.g. a per-rank NCCL_HOSTID)."""
    per_var: dict[str, dict[str, str]] = defaultdict(dict)
    for row in rows:
        f = row["_f"]
        who = "?" if row["rank"] is None else str(row["rank"])
        if row["kind"] == "nccl_env_set" and f.get("var"):
            per_var[str(f["var"])][who] = str(f.get("value"))
        elif row["kind"] == "config_values":
            for key, value in f.items():
                if key.startswith(("NCCL_", "TORCH_NCCL_")):
                    per_var[key][who] = str(value)
    return {
        var: next(iter(vals.values())) if len(set(vals.values())) == 1 else dict(sorted(vals.items()))
        for var, vals in sorted(per_var.items())
    }


def exit_code(rows: list[Event], kinds: Counter[str], ranks: RankFacts) -> int | None:
    """1 when the launcher gave up, 0 when the run ended, None when the logs do not say."""
    ended = (
        kinds["worker_group_finished"] > 0
        or (bool(ranks) and all(info.get("ended") for info in ranks.values()))
        or _every_spawned_process_succeeded(rows)
    )
    # torchrun prints the ChildFailedError table only when it gives up; a failed worker followed by a restart whose
    # ranks all finished is a recovery, not a failed job.
    failed = bool(kinds["child_failure"]) or (
        not ended and any((r["exitcode"] or 0) != 0 for r in rows if r["kind"] == "worker_failed")
    )
    # torchrun stopped by a signal before its workers finished exits with an error, whatever ranks said of their loops.
    failed = failed or launcher_stopped(kinds)
    return 1 if failed else (0 if ended else None)


def exit_status_seen(rows: list[Event]) -> bool:
    """The launcher itself said that its workers finished (torchrun's group finished, DeepSpeed's successes): the
    job's exit status 0 is in the logs, not inferred from every rank's end line."""
    return any(r["kind"] == "worker_group_finished" for r in rows) or _every_spawned_process_succeeded(rows)


def _every_spawned_process_succeeded(rows: list[Event]) -> bool:
    """DeepSpeed's launcher said of every process it spawned that it exited successfully."""
    spawned = {r["_f"].get("pid") for r in rows if r["kind"] == "launcher_process_spawned"}
    succeeded = {r["_f"].get("pid") for r in rows if r["kind"] == "launcher_process_succeeded"}
    return bool(spawned) and spawned <= succeeded


def launcher_stopped(kinds: Collection[str]) -> bool:
    """torchrun was stopped by a signal ("Received 15 death signal, shutting down workers") before its workers
    finished."""
    return "agent_death_signal" in kinds and "worker_group_finished" not in kinds


def launched_by_torchrun(kinds: Counter[str]) -> bool:
    return any(kinds[k] for k in ("worker_failed", "benign_omp_banner", "child_failure", "rdzv_timeout"))
