"""Deriving the collective to replay from a v1 diagnosis (no torch needed)."""

from __future__ import annotations

import pytest
from replay_helpers import collective, diagnosis, per_rank

from logscope.errors import InputError, LogscopeError
from logscope.replay.spec import RankCall, canonical_dtype, canonical_op, spec_from_diagnosis


@pytest.mark.parametrize(
    ("logged", "op"),
    [
        # ProcessGroupNCCL OpType names, as the watchdog and Flight Recorder print them
        ("ALLREDUCE", "all_reduce"),
        ("BROADCAST", "broadcast"),
        ("ALLGATHER", "all_gather"),
        ("_ALLGATHER_BASE", "all_gather_base"),
        ("REDUCE_SCATTER", "reduce_scatter"),
        ("_REDUCE_SCATTER_BASE", "reduce_scatter_base"),
        ("REDUCE", "reduce"),
        ("ALLTOALL", "all_to_all"),
        ("ALLTOALL_BASE", "all_to_all_base"),
        ("BARRIER", "barrier"),
        ("SEND", "send"),
        ("RECV", "recv"),
        # c10d / gloo function names
        ("all_reduce", "all_reduce"),
        ("broadcast", "broadcast"),
        ("allgather", "all_gather"),
        ("all_gather_into_tensor", "all_gather_base"),
        ("reduce_scatter_tensor", "reduce_scatter_base"),
        ("all_to_all_single", "all_to_all_base"),
        ("nccl:all_reduce", "all_reduce"),
    ],
)
def test_logged_op_names_map_to_the_probe_ops(logged: str, op: str) -> None:
    assert canonical_op(logged) == op


def test_unknown_op_is_refused_with_the_supported_list() -> None:
    with pytest.raises(LogscopeError, match=r"cannot replay collective 'SCATTERV'.*all_reduce"):
        canonical_op("SCATTERV")


@pytest.mark.parametrize(
    ("logged", "dtype"),
    [("Float", "float32"), ("torch.bfloat16", "bfloat16"), ("Half", "float16"), ("Long", "int64")],
)
def test_logged_dtypes_map_to_torch_names(logged: str, dtype: str) -> None:
    assert canonical_dtype(logged) == dtype


def test_spec_comes_from_the_finding_the_verdict_names() -> None:
    other = {
        "rule": "other-rule",
        "category": "stall",
        "severity": "warning",
        "confidence": 0.5,
        "title": "t",
        "message": "m",
        "ranks": [0],
        "culprit_ranks": [],
        "collective": collective("BROADCAST", 64),
        "evidence": [],
        "next_step": None,
    }
    ranks = [per_rank(0, "ALLREDUCE", 8076), per_rank(1, "all_reduce", 8088)]
    doc = diagnosis(
        collective("ALLREDUCE", 8076, ranks),
        nccl_env={"NCCL_P2P_DISABLE": "1"},
        rule="size-mismatch",
        extra_findings=[other],
    )
    spec = spec_from_diagnosis(doc)
    assert (spec.op, spec.numel, spec.world_size, spec.backend) == ("all_reduce", 8076, 2, "gloo")
    assert spec.source == "size-mismatch"
    assert spec.nccl_env == {"NCCL_P2P_DISABLE": "1"}
    assert spec.per_rank == {0: RankCall("all_reduce", 8076), 1: RankCall("all_reduce", 8088)}


def test_without_a_verdict_rule_the_first_finding_with_a_collective_is_used() -> None:
    doc = diagnosis(collective("_REDUCE_SCATTER_BASE", 4096))
    doc["verdict"]["rule"] = None
    doc["findings"].insert(0, {**doc["findings"][0], "rule": "no-collective", "collective": None})
    spec = spec_from_diagnosis(doc)
    assert (spec.op, spec.numel) == ("reduce_scatter_base", 4096)


def test_a_diagnosis_without_a_collective_is_refused() -> None:
    doc = diagnosis(None, rule="healthy", category="healthy")
    with pytest.raises(LogscopeError, match="the diagnosis has no collective to replay"):
        spec_from_diagnosis(doc)


def test_op_override_replays_a_diagnosis_without_a_collective() -> None:
    doc = diagnosis(None, world_size=4, rule="healthy", category="healthy")
    spec = spec_from_diagnosis(doc, op_override="BARRIER")
    assert (spec.op, spec.world_size, spec.source) == ("barrier", 4, "--op")


def test_missing_numel_falls_back_to_the_per_rank_counts_then_a_default() -> None:
    ranks = [per_rank(0, "BROADCAST", 300), per_rank(1, "BROADCAST", 200)]
    assert spec_from_diagnosis(diagnosis(collective("BROADCAST", None, ranks))).numel == 200
    spec = spec_from_diagnosis(diagnosis(collective("BROADCAST", None)))
    assert spec.numel == 1024
    assert any("no element count" in note for note in spec.notes)


def test_world_size_falls_back_to_the_highest_logged_rank() -> None:
    ranks = [per_rank(0, "ALLREDUCE", 8), per_rank(3, "ALLREDUCE", 8)]
    assert spec_from_diagnosis(diagnosis(collective("ALLREDUCE", 8, ranks), world_size=None)).world_size == 4


def test_something_that_is_not_a_diagnosis_is_refused() -> None:
    with pytest.raises(InputError, match="not a logscope diagnosis"):
        spec_from_diagnosis({"schema": "logscope/replay/v1"})


def test_a_rank_whose_log_names_only_the_op_issues_the_collectives_size() -> None:
    # the shape the rules give a wrong-collective finding: per-rank ops, no element counts
    ranks = [
        {"rank": 0, "op": "ALLREDUCE", "seq": None, "numel_in": None, "numel_out": None},
        {"rank": 1, "op": "BROADCAST", "seq": None, "numel_in": None, "numel_out": None},
    ]
    spec = spec_from_diagnosis(diagnosis(collective("ALLREDUCE", None, ranks)))
    assert spec.per_rank == {0: RankCall("all_reduce", 1024), 1: RankCall("broadcast", 1024)}
