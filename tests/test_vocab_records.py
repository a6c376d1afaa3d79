"""The record TypedDicts of logscope/vocab.py (Event, Finding, Evidence, RankRow) against what the pipeline writes.

mypy checks the code that builds these dicts from literals; keys set by name at run time (`row[name] = ...`,
`dict.update`) and records read back from JSON it cannot see. So a few real runs are analysed here and every key of
every event, finding and rank row is checked against its TypedDict, and the finding's against docs/schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from logscope.analysis import analyze
from logscope.verdict.decide import INTERNAL_KEYS
from logscope.vocab import Event, Evidence, EvidenceLine, Finding, RankRow

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
SCHEMA = json.loads((REPO / "docs" / "schema" / "diagnosis-v1.json").read_text())
FINDING_SCHEMA = SCHEMA["properties"]["findings"]["items"]
EVIDENCE_SCHEMA = SCHEMA["$defs"]["evidence"]

# Real runs of several shapes: torchrun trees, a console capture, GPU runs (NCCL, busIds, OOM), Flight Recorder
# dumps (their entries are evidence rows), a healthy run.
RUNS = [
    *(p for p in sorted((FIXTURES / "real" / "runs").iterdir()) if p.is_dir()),
    *[p for p in sorted((FIXTURES / "gpu").iterdir()) if p.is_dir()][:8],
    *(p for p in sorted((FIXTURES / "flight_recorder").iterdir()) if p.is_dir()),
]


def _keys(td: Any) -> tuple[frozenset[str], frozenset[str]]:
    return frozenset(td.__required_keys__), frozenset(td.__optional_keys__)


@pytest.fixture(scope="module")
def records() -> dict[str, list[dict[str, Any]]]:
    """Every event (after align), raw finding (with its internal keys) and rank row of the runs, and the
    contract's findings of their diagnoses."""
    import logscope.rules.engine as engine

    seen: dict[str, list[dict[str, Any]]] = {"events": [], "evidence": [], "raw": [], "ranks": [], "findings": []}
    evaluate, finding = engine.evaluate, engine.finding

    def spy_evaluate(rules: Any, aligned: Any, input_path: str = "") -> Any:
        found = evaluate(rules, aligned, input_path)
        seen["events"] += aligned.rows
        seen["ranks"] += aligned.rank_rows()
        seen["raw"] += found  # the verdict adds role, caused_by and onset to these very dicts
        return found

    def spy_finding(rule: Any, ctx: Any, hit: Any, input_path: str) -> Any:
        seen["evidence"] += hit.events  # the events a finding rests on: Flight Recorder entries among them
        return finding(rule, ctx, hit, input_path)

    engine.evaluate, engine.finding = spy_evaluate, spy_finding
    try:
        for run in RUNS:
            analysis = analyze(run)
            seen["findings"] += analysis.diagnosis["findings"]
    finally:
        engine.evaluate, engine.finding = evaluate, finding
    return seen


def test_the_runs_exercise_every_record(records: dict[str, list[dict[str, Any]]]) -> None:
    assert len(RUNS) >= 15
    for name, rows in records.items():
        assert rows, f"no {name} in the runs: pick runs that have some"
    assert any(e["kind"] == "flight_recorder_entry" for e in records["evidence"])


def _check(rows: list[dict[str, Any]], td: Any, what: str) -> None:
    required, optional = _keys(td)
    for row in rows:
        extra = set(row) - required - optional
        assert not extra, f"{what} has keys {sorted(extra)} that {td.__name__} does not declare: {row}"
        missing = required - set(row)
        assert not missing, f"{what} lacks {td.__name__}'s required keys {sorted(missing)}: {row}"


def test_events_have_the_keys_event_declares(records: dict[str, list[dict[str, Any]]]) -> None:
    _check(records["events"], Event, "an event")
    _check(records["evidence"], Event, "a finding's event")
    # The optional keys are those a Flight Recorder evidence row lacks; the extractor writes them all.
    _, optional = _keys(Event)
    assert all(optional <= set(e) for e in records["events"])


def test_findings_have_the_keys_finding_declares(records: dict[str, list[dict[str, Any]]]) -> None:
    _check(records["raw"], Finding, "a finding")
    _check(records["findings"], Finding, "a diagnosis' finding")
    for f in records["raw"] + records["findings"]:
        _check(f["evidence"], Evidence, "an evidence item")
        for item in f["evidence"]:
            _check(item.get("context", []), EvidenceLine, "an evidence context line")


def test_rank_rows_have_the_keys_rank_row_declares(records: dict[str, list[dict[str, Any]]]) -> None:
    _check(records["ranks"], RankRow, "a rank row")


def test_finding_matches_the_json_schema() -> None:
    """The contract's finding is Finding less the internal keys: the schema's properties, its required keys
    among Finding's required ones."""
    required, optional = _keys(Finding)
    contract = (required | optional) - set(INTERNAL_KEYS)
    assert contract == set(FINDING_SCHEMA["properties"])
    assert set(FINDING_SCHEMA["required"]) <= required
    assert set(INTERNAL_KEYS) <= optional  # the diagnosis' findings have none of them
    ev_required, ev_optional = _keys(Evidence)
    assert ev_required | ev_optional == set(EVIDENCE_SCHEMA["properties"])
    assert set(EVIDENCE_SCHEMA["required"]) <= ev_required


def test_diagnosis_findings_have_no_internal_keys(records: dict[str, list[dict[str, Any]]]) -> None:
    for f in records["findings"]:
        assert not set(f) & set(INTERNAL_KEYS)
        assert set(FINDING_SCHEMA["required"]) <= set(f)
