"""Verdicts on every real log: the category and culprit the case's label describes, and a schema-valid contract."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from logscope.analysis import analyze
from tests.conftest import FIXTURES, REPO, analysed, benchmark_generator

SCHEMA = json.loads((REPO / "docs" / "schema" / "diagnosis-v1.json").read_text())

# The labels of the public excerpts use the thread's words; this is their meaning in logscope's vocabulary.
LABEL_CATEGORY = {
    "nccl_timeout": "collective_timeout",
    "healthy": "healthy",
    "missing_sync": "missing_sync",
    "hang_no_error": "missing_sync",
    "rendezvous_timeout": "rendezvous_failure",
    "nccl_error": "comm_error",
    "gloo_error": {"03_skip_allreduce_rank1_stall_gloo_timeout": "collective_timeout"}.get,
    "child_failed": "crash",
    "silent_single_rank": "single_rank",
}


def _expected(case: Path) -> tuple[str, list[int] | None]:
    label = yaml.safe_load(
        ((case / "label.yaml") if (case / "label.yaml").exists() else case / "scenario.yaml").read_text()
    )
    cls = label["failure_class"]
    if cls == "rank_disagreement":
        # Same SeqNum different op / a size mismatch / DETAIL: a collective mismatch; differing config: disagreement.
        category = "config_disagreement" if label.get("collective") in (None, {}) else "collective_mismatch"
    elif cls == "gloo_error":
        category = "collective_timeout" if "timeout" in case.name else "comm_error"
    else:
        category = LABEL_CATEGORY[cls]  # type: ignore[assignment]
    if "culprit_rank" in label:
        culprits = None if label["culprit_rank"] is None else [label["culprit_rank"]]
    else:
        culprits = label.get("ranks_implicated")
    return category, culprits


def _implicated(case: Path) -> bool:
    """Public labels list the ranks the thread implicates; the culprit must be among them."""
    return (case / "label.yaml").exists()


REAL = sorted([*(FIXTURES / "real" / "public").iterdir(), *(FIXTURES / "real" / "runs").iterdir()])
REAL = [p for p in REAL if p.is_dir()]
RUNS = sorted(p for p in (FIXTURES / "runs").iterdir() if (p / "scenario.yaml").exists())


@pytest.mark.parametrize("case", REAL, ids=[p.name for p in REAL])
def test_real_log_verdict(case: Path) -> None:
    d = analysed(str(case.relative_to(REPO))).diagnosis
    jsonschema.validate(d, SCHEMA)
    category, culprits = _expected(case)
    assert d["verdict"]["category"] == category, d["verdict"]["summary"]
    if _implicated(case) and culprits:
        got = d["verdict"]["culprit_ranks"]
        assert got and set(got) <= set(culprits), f"culprits {got} not among implicated {culprits}"
    else:
        _check_culprits(d, culprits)


@pytest.mark.parametrize("case", RUNS, ids=[p.name for p in RUNS])
def test_generated_run_verdict(case: Path) -> None:
    d = analysed(str(case.relative_to(REPO))).diagnosis
    jsonschema.validate(d, SCHEMA)
    scenario = yaml.safe_load((case / "scenario.yaml").read_text())
    assert d["verdict"]["category"] == scenario["expected_category"], d["verdict"]["summary"]
    culprit = scenario.get("culprit_rank")
    _check_culprits(d, None if culprit is None else [culprit])
    if scenario.get("world_size") and scenario["expected_category"] != "rendezvous_failure":
        assert d["job"]["world_size"] == scenario["world_size"]


def _check_culprits(d: dict, culprits: list[int] | None) -> None:
    got = d["verdict"]["culprit_ranks"]
    if culprits is None:
        return
    if len(got) > len(culprits):
        # Naming more ranks than the truth is only honest when the verdict says it is unsure.
        assert set(culprits) <= set(got), f"culprits {got} miss {culprits}"
        assert d["verdict"]["confidence"] < 0.75, (
            f"culprits {got} for {culprits} at confidence {d['verdict']['confidence']}"
        )
    else:
        assert sorted(got) == sorted(culprits), f"culprits {got} != {culprits}"


def test_world_size_and_ranks_of_real_runs() -> None:
    for case in (FIXTURES / "real" / "runs").iterdir():
        scenario = yaml.safe_load((case / "scenario.yaml").read_text())
        d = analysed(str(case.relative_to(REPO))).diagnosis
        if not list((case / "logs").glob("*")):
            continue  # rendezvous failed: no worker ever started
        assert d["job"]["world_size"] == scenario["world_size"], case.name
        assert sorted(r["rank"] for r in d["ranks"]) == list(range(scenario["world_size"])), case.name


def test_schema_vocabulary_is_the_models() -> None:
    from logscope.model import CATEGORIES
    from logscope.rules.loader import rule_schema

    assert SCHEMA["$defs"]["category"]["enum"] == list(CATEGORIES)
    assert rule_schema()["properties"]["category"]["enum"] == [c for c in CATEGORIES if c != "healthy"]


@pytest.mark.parametrize("seed", [0, 3])
def test_timeout_culprit_is_the_rank_that_never_enqueued_the_timed_out_seqnum(tmp_path: Path, seed: int) -> None:
    # The benchmark's tree (line shapes copied from real torch 2.6-2.10 logs): three ranks time out on SeqNum S,
    # four print nothing, and one rank's dump-signal line says "Last enqueued NCCL work: S-1". With most ranks
    # silent, silence names no one; the enqueued SeqNum does.
    _, _, failure = benchmark_generator().generate_tree(tmp_path, 8, 256 << 10, seed)
    verdict = analyze(tmp_path).diagnosis["verdict"]
    assert verdict["category"] == "collective_timeout"
    assert verdict["culprit_ranks"] == [failure.culprit]
    assert failure.culprit not in failure.detectors


def test_console_quota_is_per_rank_so_no_rank_seems_to_stop_early(tmp_path: Path) -> None:
    # The same failure through torchrun's --tee console: eight ranks interleaved in one file. The chatty kinds'
    # quota (NCCL INFO) is kept per `[default<N>]:` rank; one quota for the file let the first ranks spend it and
    # left ranks whose last kept line was the parameter sync (LS302, "nothing follows") instead of the timeout.
    console = tmp_path / "console.log"
    _, failure = benchmark_generator().generate_console(console, 8, 2 << 20, 0)
    verdict = analyze(console).diagnosis["verdict"]
    assert (verdict["category"], verdict["culprit_ranks"]) == ("collective_timeout", [failure.culprit])
