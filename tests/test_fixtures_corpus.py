"""The fixture corpus itself is sound (independent of logscope's parser).

Generated trees: fixtures/runs/<scenario>/ (make_fixtures.py); real logs: fixtures/real/{public,runs}/<case>/.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from logscope.model import CATEGORIES  # the verdict vocabulary, one definition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUNS = FIXTURES / "runs"
REAL = FIXTURES / "real"
SHARED_REAL = Path("/work/shared/real-logs")

REQUIRED_KEYS = {
    "id",
    "generated_by",
    "torch_version",
    "command",
    "torchrun_exit_code",
    "world_size",
    "nnodes",
    "nproc_per_node",
    "culprit_rank",
    "provoked",
    "expected_category",
    "expected_diagnosis",
    "consoles",
    "log_files",
}
# <log_dir>[/node<N>]/<run_id>_<rand>/attempt_<n>/<local_rank>/<file>, torchrun's DefaultLogsSpecs layout
TREE_FILE = re.compile(r"^(?:node\d+/)?[\w.-]+_[a-z0-9_]{8}/attempt_\d+/\d+/(?:stdout\.log|stderr\.log|error\.json)$")

SCENARIO_DIRS = sorted(p for p in RUNS.iterdir() if p.is_dir()) if RUNS.exists() else []
REAL_CASES = sorted(p for kind in ("public", "runs") for p in (REAL / kind).iterdir() if p.is_dir())
REAL_RUNS = sorted(p for p in (REAL / "runs").iterdir() if p.is_dir())
TORCHRUN_TREES = [d / "logs" for d in SCENARIO_DIRS + REAL_RUNS if (d / "logs").is_dir()]


def ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.name}" for p in paths]


def load_meta(scenario: Path) -> dict[str, object]:
    meta = yaml.safe_load((scenario / "scenario.yaml").read_text())
    assert isinstance(meta, dict)
    return meta


def make_fixtures_module() -> ModuleType:
    path = FIXTURES / "generate" / "make_fixtures.py"
    spec = importlib.util.spec_from_file_location("make_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_every_scenario_is_generated() -> None:
    names = {sc.name for sc in make_fixtures_module().SCENARIOS}
    assert names == {d.name for d in SCENARIO_DIRS}


def test_generator_vocabulary_matches() -> None:
    module = make_fixtures_module()
    assert {sc.category for sc in module.SCENARIOS} <= set(CATEGORIES)


@pytest.mark.parametrize("scenario", SCENARIO_DIRS, ids=ids(SCENARIO_DIRS))
def test_scenario_yaml(scenario: Path) -> None:
    meta = load_meta(scenario)
    assert meta.keys() >= REQUIRED_KEYS, REQUIRED_KEYS - meta.keys()
    assert meta["id"] == scenario.name
    assert meta["expected_category"] in CATEGORIES
    world_size = meta["world_size"]
    assert isinstance(world_size, int) and world_size >= 1
    assert meta["world_size"] == meta["nnodes"] * meta["nproc_per_node"]  # type: ignore[operator]
    culprit = meta["culprit_rank"]
    assert culprit is None or (isinstance(culprit, int) and 0 <= culprit < world_size)
    codes = meta["torchrun_exit_code"]
    codes = codes if isinstance(codes, list) else [codes]
    if meta["expected_category"] == "healthy":
        assert culprit is None and codes == [0]


@pytest.mark.parametrize("scenario", SCENARIO_DIRS, ids=ids(SCENARIO_DIRS))
def test_scenario_consoles_and_listed_files(scenario: Path) -> None:
    meta = load_meta(scenario)
    consoles = meta["consoles"]
    assert isinstance(consoles, list) and consoles
    for name in consoles:
        assert (scenario / name).stat().st_size > 0
    # the yaml lists every log file with its size: the logs are as torchrun left them
    listed = {entry["path"]: entry["bytes"] for entry in meta["log_files"]}  # type: ignore[attr-defined]
    on_disk = (
        {str(p.relative_to(scenario)): p.stat().st_size for p in (scenario / "logs").rglob("*") if p.is_file()}
        if (scenario / "logs").exists()
        else {}
    )
    assert listed == on_disk


@pytest.mark.parametrize("scenario", SCENARIO_DIRS, ids=ids(SCENARIO_DIRS))
def test_failed_runs_have_a_failure_summary(scenario: Path) -> None:
    meta = load_meta(scenario)
    codes = meta["torchrun_exit_code"]
    codes = codes if isinstance(codes, list) else [codes]
    text = "".join((scenario / name).read_text(errors="replace") for name in meta["consoles"])  # type: ignore[attr-defined]
    if all(code == 0 for code in codes):
        assert "ChildFailedError" not in text
    else:
        assert "Traceback (most recent call last)" in text


@pytest.mark.parametrize("logs", TORCHRUN_TREES, ids=ids([t.parent for t in TORCHRUN_TREES]))
def test_torchrun_tree_layout(logs: Path) -> None:
    files = [p.relative_to(logs).as_posix() for p in logs.rglob("*") if p.is_file()]
    assert files
    bad = [f for f in files if not TREE_FILE.match(f)]
    assert not bad, bad
    rank_dirs = {p.parent for p in logs.rglob("*") if p.is_file()}
    for rank_dir in rank_dirs:
        assert (rank_dir / "stdout.log").is_file() and (rank_dir / "stderr.log").is_file(), rank_dir
    meta_file = logs.parent / "scenario.yaml"
    nproc = yaml.safe_load(meta_file.read_text())["nproc_per_node"]
    for attempt in {d.parent for d in rank_dirs}:
        assert sorted(int(d.name) for d in attempt.iterdir()) == list(range(nproc)), attempt


@pytest.mark.parametrize("logs", TORCHRUN_TREES, ids=ids([t.parent for t in TORCHRUN_TREES]))
def test_error_json_is_torchelastic_format(logs: Path) -> None:
    for error_file in logs.rglob("error.json"):
        doc = json.loads(error_file.read_text())
        assert "py_callstack" in doc["message"]["extraInfo"], error_file


@pytest.mark.parametrize("case", REAL_CASES, ids=ids(REAL_CASES))
def test_real_case_has_source(case: Path) -> None:
    assert (case / "console.log").is_file()
    if (case / "label.yaml").is_file():
        label = yaml.safe_load((case / "label.yaml").read_text())
        assert str(label["source_url"]).startswith("https://")
    else:
        assert yaml.safe_load((case / "scenario.yaml").read_text())["generated_by"]


def test_real_readme_lists_every_case() -> None:
    readme = (REAL / "README.md").read_text()
    for case in REAL_CASES:
        assert f"| {case.name} |" in readme, case.name


@pytest.mark.skipif(not SHARED_REAL.is_dir(), reason="shared real-logs folder not present")
@pytest.mark.parametrize("kind", ["public", "runs"])
def test_real_cases_identical_to_shared(kind: str) -> None:
    shared = {p.relative_to(SHARED_REAL / kind): p for p in (SHARED_REAL / kind).rglob("*") if p.is_file()}
    copied = {p.relative_to(REAL / kind): p for p in (REAL / kind).rglob("*") if p.is_file()}
    assert shared.keys() == copied.keys()
    for rel, src in shared.items():
        assert src.read_bytes() == copied[rel].read_bytes(), rel


def test_corpus_stays_small() -> None:
    total = sum(p.stat().st_size for base in (RUNS, REAL) for p in base.rglob("*") if p.is_file())
    assert total < 2_500_000, total
