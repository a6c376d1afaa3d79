"""Every rule ships a positive and a negative case, found by one parametrised test (sqlfluff / Semgrep style)."""

from __future__ import annotations

import pytest

from logscope.rules.loader import load_rules
from logscope.rules.testing import run_case

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
