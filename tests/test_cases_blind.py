"""logscope's verdict on real excerpts from public threads (fixtures/cases/<case>/).

Each case holds `console.log` (the excerpt exactly as the thread shows it) and `source.yaml` (where it comes
from, and the category / culprits an experienced engineer reads from the thread, written before logscope was
run on it). A case logscope gets wrong carries `known_wrong: "<why>"` and is a strict xfail, so a fix turns
it into an XPASS failure that asks for the key to be removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from logscope.analysis import analyze
from logscope.errors import InputError
from logscope.report import renderer

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "fixtures" / "cases"
REAL_PUBLIC = ROOT / "fixtures" / "real" / "public"
SCHEMA = json.loads((ROOT / "docs" / "schema" / "diagnosis-v1.json").read_text())
CATEGORIES = set(SCHEMA["$defs"]["category"]["enum"])
REQUIRED_KEYS = {
    "source_url",
    "repo",
    "title",
    "expected_category",
    "expected_culprits",
    "why",
    "notes",
}

CASE_DIRS = sorted(p.parent for p in CASES.glob("*/source.yaml"))


def load_source(case: Path) -> dict[str, Any]:
    source: dict[str, Any] = yaml.safe_load((case / "source.yaml").read_text(encoding="utf-8"))
    return source


def case_param(case: Path) -> Any:
    known_wrong = load_source(case).get("known_wrong")
    marks = [pytest.mark.xfail(strict=True, reason=known_wrong)] if known_wrong else []
    return pytest.param(case, id=case.name, marks=marks)


def test_corpus_is_present() -> None:
    assert len(CASE_DIRS) >= 20


@pytest.mark.parametrize("case", CASE_DIRS, ids=[c.name for c in CASE_DIRS])
def test_source_yaml_is_complete(case: Path) -> None:
    source = load_source(case)
    assert source.keys() >= REQUIRED_KEYS
    assert source["source_url"].startswith("https://")  # GitHub threads, forums, Q&A sites
    assert source["expected_category"] in CATEGORIES
    culprits = source["expected_culprits"]
    assert culprits is None or (isinstance(culprits, list) and all(isinstance(r, int) for r in culprits))
    # The thread's text: console.log, or files named as the thread shows them ("rank0_stack.log").
    texts = [p.read_text(encoding="utf-8") for p in sorted(case.iterdir()) if p.is_file() and p.name != "source.yaml"]
    assert texts and all(t.strip() for t in texts)


def test_sources_are_fresh() -> None:
    """Every case comes from its own thread, none from the threads already in fixtures/real/public."""
    urls = [load_source(case)["source_url"] for case in CASE_DIRS]
    assert len(urls) == len(set(urls))
    known = {yaml.safe_load(p.read_text())["source_url"] for p in REAL_PUBLIC.glob("*/label.yaml")}
    assert not known & set(urls)


NOT_A_LOG = {"verdict": {"category": "<exit 2: nothing that looks like a log>", "culprit_ranks": []}}


@pytest.fixture(scope="module")
def diagnoses() -> dict[str, dict[str, Any]]:
    """One analysis per case, rendered by the JSON reporter exactly as `--format json` prints it (an input that
    logscope refuses with exit 2 is marked as such: its verdict cannot match any category)."""
    render = renderer("json")
    out: dict[str, dict[str, Any]] = {}
    for case in CASE_DIRS:
        try:
            out[case.name] = json.loads(render(analyze(case)))
        except InputError:
            out[case.name] = NOT_A_LOG
    return out


@pytest.mark.parametrize("case", CASE_DIRS, ids=[c.name for c in CASE_DIRS])
def test_diagnosis_matches_schema(case: Path, diagnoses: dict[str, dict[str, Any]]) -> None:
    if diagnoses[case.name] is NOT_A_LOG:
        pytest.skip("logscope refuses this input (exit 2): no JSON to validate")
    jsonschema.validate(diagnoses[case.name], SCHEMA)


@pytest.mark.parametrize("case", [case_param(c) for c in CASE_DIRS])
def test_verdict_is_the_experts(case: Path, diagnoses: dict[str, dict[str, Any]]) -> None:
    source = load_source(case)
    verdict = diagnoses[case.name]["verdict"]
    assert verdict["category"] == source["expected_category"]
    if isinstance(source["expected_culprits"], list):
        assert sorted(verdict["culprit_ranks"]) == sorted(source["expected_culprits"])
