"""Every rule ships a positive and a negative case, found by one parametrised test (sqlfluff / Semgrep style)."""

from __future__ import annotations

import pytest

from logscope.rules.loader import load_rules
from logscope.rules.testing import run_case, run_example

RULES = load_rules()
CASES = [
    pytest.param(rule, kind, case, id=f"{rule.id}-{kind}-{str(case['path']).rsplit('/', 1)[-1]}")
    for rule in RULES
    for kind in ("positive", "negative")
    for case in rule.tests[kind]
]


@pytest.mark.parametrize(("rule", "kind", "case"), CASES)
def test_rule_case(rule, kind, case) -> None:
    result = run_case(rule, kind, case)
    assert result.ok, f"{rule.id} {kind} {case['path']}: {result.why}"


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_example_fires_its_rule(rule) -> None:
    result = run_example(rule)
    assert result.ok, f"{rule.id} example: {result.why}"


def test_only_rules_that_read_no_plain_log_show_an_example_they_do_not_run() -> None:
    shown_only = sorted(r.id for r in RULES if r.why.get("example_runs") is False)
    assert shown_only == [
        "LS219",
        "LS220",
        "LS221",
        "LS304",
        "LS307",
        "LS308",
        "LS309",
        "LS406",
        "LS704",
    ]  # dump files; every rank's SeqNum lines beside tracebacks or PG status lines; per-rank files of a torchrun
    # tree; a signal line weighed against every other rank's errors


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_every_rule_has_both_kinds_of_case(rule) -> None:
    assert rule.tests["positive"], f"{rule.id} has no positive case"
    assert rule.tests["negative"], f"{rule.id} has no negative case"


def test_healthy_runs_trigger_no_rule() -> None:
    from tests.conftest import analysed

    for path in (
        "fixtures/real/runs/01_healthy_ws2",
        "fixtures/runs/healthy_ws2",
        "fixtures/runs/healthy_ws4",
        "fixtures/runs/healthy_rl_games_ws2",
        "fixtures/runs/healthy_skrl_ws2",
    ):
        d = analysed(path).diagnosis
        assert d["findings"] == [], f"{path}: {[f['rule'] for f in d['findings']]}"
        assert d["verdict"]["category"] == "healthy"
