"""What to replay: the collective a diagnosis names, in the probe's own vocabulary.

The diagnosis (docs/schema/diagnosis-v1.json) carries the op as the logs printed it: ProcessGroupNCCL OpType
names (`ALLREDUCE`, `_ALLGATHER_BASE`, ...), the c10d/gloo function names (`all_reduce`, `allgather`, ...) or
the DETAIL fingerprint names. `canonical_op` folds them all into the op names the worker runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from logscope.errors import InputError, LogscopeError

# Ops the worker runs. `*_base` are the single-tensor forms (all_gather_into_tensor, reduce_scatter_tensor,
# all_to_all_single); `send_recv` is one ring exchange (each rank sends to rank+1 and receives from rank-1).
OPS = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_base",
    "reduce_scatter",
    "reduce_scatter_base",
    "all_to_all",
    "all_to_all_base",
    "barrier",
    "send_recv",
    "send",
    "recv",
)

# The ops `--op all` expands to (`send` and `recv` alone only make sense per rank, with --as-logged).
ALL_OPS = tuple(op for op in OPS if op not in ("send", "recv"))

# Key: the logged name upper-cased with everything but letters and digits removed.
_OP_ALIASES: dict[str, str] = {
    "ALLREDUCE": "all_reduce",
    "ALLREDUCECOALESCED": "all_reduce",
    "BROADCAST": "broadcast",
    "REDUCE": "reduce",
    "ALLGATHER": "all_gather",
    "ALLGATHERCOALESCED": "all_gather",
    "ALLGATHERBASE": "all_gather_base",
    "ALLGATHERINTOTENSOR": "all_gather_base",
    "ALLGATHERINTOTENSORCOALESCED": "all_gather_base",
    "ALLGATHERSINGLE": "all_gather_base",
    "REDUCESCATTER": "reduce_scatter",
    "REDUCESCATTERBASE": "reduce_scatter_base",
    "REDUCESCATTERTENSOR": "reduce_scatter_base",
    "REDUCESCATTERTENSORCOALESCED": "reduce_scatter_base",
    "REDUCESCATTERSINGLE": "reduce_scatter_base",
    "ALLTOALL": "all_to_all",
    "ALLTOALLBASE": "all_to_all_base",
    "ALLTOALLSINGLE": "all_to_all_base",
    "BARRIER": "barrier",
    "SEND": "send",
    "RECV": "recv",
    "RECVANYSOURCE": "recv",
    "SENDRECV": "send_recv",
    "SENDRECVPAIR": "send_recv",
}

# c10 ScalarType names (FR records, DETAIL fingerprints), torch names with or without `torch.`, numpy-style
# names.
_DTYPE_ALIASES: dict[str, str] = {
    "float": "float32",
    "float32": "float32",
    "fp32": "float32",
    "double": "float64",
    "float64": "float64",
    "half": "float16",
    "float16": "float16",
    "fp16": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "int": "int32",
    "int32": "int32",
    "long": "int64",
    "int64": "int64",
    "char": "int8",
    "int8": "int8",
    "byte": "uint8",
    "uint8": "uint8",
}

DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")

DEFAULT_NUMEL = 1024


@dataclass(frozen=True)
class RankCall:
    """What one rank's own log showed it calling (used by --as-logged)."""

    op: str
    numel: int


@dataclass
class CollectiveSpec:
    """The collective to replay and the job facts around it.

    numel follows the logs' NumelIn: the per-rank input (all_gather: one rank's share; reduce_scatter and
    all_to_all: the whole input buffer that is split across ranks).
    """

    op: str
    numel: int
    dtype: str = "float32"
    world_size: int | None = None
    backend: str | None = None
    nccl_env: dict[str, str] = field(default_factory=dict)
    per_rank: dict[int, RankCall] = field(default_factory=dict)
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "numel": self.numel,
            "dtype": self.dtype,
            "world_size": self.world_size,
            "backend": self.backend,
            "nccl_env": dict(self.nccl_env),
            "per_rank": {str(rank): {"op": call.op, "numel": call.numel} for rank, call in self.per_rank.items()},
            "source": self.source,
        }


def canonical_op(name: str) -> str:
    """The worker's op name for a logged op name; LogscopeError for one the replayer cannot run."""
    # Flight Recorder's profiling names carry the backend: "nccl:all_reduce".
    bare = re.sub(r"^(?:nccl|gloo|mpi|ucc):", "", name.strip(), flags=re.IGNORECASE)
    key = re.sub(r"[^A-Z0-9]", "", bare.upper())
    op = _OP_ALIASES.get(key)
    if op is None:
        raise LogscopeError(f"cannot replay collective {name!r}: supported ops are {', '.join(OPS)}")
    return op


def canonical_dtype(name: str) -> str:
    key = name.strip().lower().removeprefix("torch.")
    dtype = _DTYPE_ALIASES.get(key)
    if dtype is None:
        raise LogscopeError(f"cannot replay dtype {name!r}: supported dtypes are {', '.join(DTYPES)}")
    return dtype


def _int_or_none(value: Any) -> int | None:
    # bool is an int subclass; a JSON true is not an element count.
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _chosen_finding(diagnosis: dict[str, Any]) -> dict[str, Any] | None:
    findings = [f for f in diagnosis.get("findings") or [] if isinstance(f, dict)]
    verdict = diagnosis.get("verdict") if isinstance(diagnosis.get("verdict"), dict) else {}
    rule = verdict.get("rule") if verdict else None
    if rule:
        for finding in findings:
            if finding.get("rule") == rule and isinstance(finding.get("collective"), dict):
                return finding
    for finding in findings:
        if isinstance(finding.get("collective"), dict):
            return finding
    return None


def _per_rank_calls(entries: Any, fallback_op: str, notes: list[str]) -> dict[int, tuple[str, int | None]]:
    """rank -> (op, element count or None when that rank's log did not show it)."""
    calls: dict[int, tuple[str, int | None]] = {}
    if not isinstance(entries, list):
        return calls
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        rank = _int_or_none(entry.get("rank"))
        if rank is None or rank < 0:
            continue
        op_name = entry.get("op")
        try:
            op = canonical_op(op_name) if isinstance(op_name, str) and op_name else fallback_op
        except LogscopeError as exc:
            notes.append(f"rank {rank}: {exc}; it replays {fallback_op}")
            op = fallback_op
        numel = _int_or_none(entry.get("numel_in"))
        if numel is None:
            numel = _int_or_none(entry.get("numel_out"))
        calls[rank] = (op, numel if numel is not None and numel >= 0 else None)
    return calls


def _job_facts(diagnosis: dict[str, Any]) -> tuple[int | None, str | None, dict[str, str]]:
    job: dict[str, Any] = diagnosis["job"] if isinstance(diagnosis.get("job"), dict) else {}
    world_size = _int_or_none(job.get("world_size"))
    backend = job.get("backend") if isinstance(job.get("backend"), str) and job.get("backend") else None
    raw_env: dict[str, Any] = job["nccl_env"] if isinstance(job.get("nccl_env"), dict) else {}
    nccl_env = {str(k): str(v) for k, v in raw_env.items() if isinstance(v, (str, int))}
    return world_size, backend.lower() if backend else None, nccl_env


def spec_from_diagnosis(diagnosis: dict[str, Any], op_override: str | None = None) -> CollectiveSpec:
    """The collective of the finding the verdict names (else the first finding that has one).

    With `op_override` (the user's --op), a diagnosis without a collective still gives a spec: that op with
    the job's world size, backend and NCCL environment.
    """
    if diagnosis.get("schema") != "logscope/diagnosis/v1":
        raise InputError("not a logscope diagnosis: its 'schema' is not 'logscope/diagnosis/v1'")
    world_size, backend, nccl_env = _job_facts(diagnosis)
    finding = _chosen_finding(diagnosis)
    if finding is None:
        if op_override is not None:
            op = canonical_op(op_override)
            return CollectiveSpec(
                op=op,
                numel=0 if op == "barrier" else DEFAULT_NUMEL,
                world_size=world_size,
                backend=backend,
                nccl_env=nccl_env,
                source="--op",
            )
        verdict = diagnosis.get("verdict") or {}
        category = verdict.get("category", "unknown") if isinstance(verdict, dict) else "unknown"
        raise LogscopeError(
            f"the diagnosis has no collective to replay (verdict: {category}); pass --op to probe one anyway"
        )
    collective: dict[str, Any] = finding["collective"]
    notes: list[str] = []
    op_name = collective.get("op")
    per_rank_raw = collective.get("per_rank")
    if not isinstance(op_name, str) or not op_name:
        # The finding may know only the per-rank calls (e.g. a mismatch): replay the first rank's op.
        first = next((e for e in per_rank_raw or [] if isinstance(e, dict) and e.get("op")), None)
        if first is None and op_override is None:
            raise LogscopeError(
                f"the diagnosis has no collective to replay: finding {finding.get('rule')!r} names no op; "
                "pass --op to probe one anyway"
            )
        op_name = op_override if first is None else str(first["op"])
    op = canonical_op(str(op_name))
    numel = _int_or_none(collective.get("numel_in"))
    if numel is None:
        numel = _int_or_none(collective.get("numel_out"))
    calls = _per_rank_calls(per_rank_raw, op, notes)
    known = [count for _, count in calls.values() if count is not None]
    if numel is None and known:
        numel = min(known)
    if numel is None:
        numel = 0 if op == "barrier" else DEFAULT_NUMEL
        if op != "barrier":
            notes.append(f"the logs give no element count; replaying {DEFAULT_NUMEL} elements")
    # A rank whose log named the op but not the size issues the collective's size.
    per_rank = {rank: RankCall(call_op, numel if count is None else count) for rank, (call_op, count) in calls.items()}
    dtype = "float32"
    dtype_name = collective.get("dtype")
    if isinstance(dtype_name, str) and dtype_name:
        try:
            dtype = canonical_dtype(dtype_name)
        except LogscopeError as exc:
            notes.append(f"{exc}; replaying float32")
    if world_size is None and per_rank:
        world_size = max(per_rank) + 1
    return CollectiveSpec(
        op=op,
        numel=numel,
        dtype=dtype,
        world_size=world_size,
        backend=backend,
        nccl_env=nccl_env,
        per_rank=per_rank,
        source=str(finding.get("rule") or ""),
        notes=notes,
    )
