"""Each rule's own positive and negative cases (sqlfluff/Semgrep style), run by `rules test` and by pytest."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from logscope.model import Analysis
from logscope.rules.loader import Rule, load_rules

REPO = Path(__file__).resolve().parents[2]  # rule cases name fixtures relative to the repository root


@dataclass
class CaseResult:
    rule: str
    kind: str  # positive | negative
    path: str
    ok: bool
    why: str = ""


@lru_cache(maxsize=256)
def _analysis(path: str) -> Analysis:
    from logscope.analysis import analyze

    return analyze(REPO / path)


def run_case(rule: Rule, kind: str, case: dict[str, object]) -> CaseResult:
    path = str(case["path"])
    if not (REPO / path).exists():
        return CaseResult(rule.id, kind, path, False, "fixture missing")
    findings = [f for f in _analysis(path).diagnosis["findings"] if f["rule"] == rule.id]
    if kind == "negative":
        return CaseResult(rule.id, kind, path, not findings, "rule fired on a negative case" if findings else "")
    if not findings:
        return CaseResult(rule.id, kind, path, False, "rule did not fire")
    want = case.get("culprits")
    if want is not None and sorted(findings[0]["culprit_ranks"]) != sorted(want):  # type: ignore[call-overload]
        return CaseResult(rule.id, kind, path, False, f"culprits {findings[0]['culprit_ranks']} != {want}")
    return CaseResult(rule.id, kind, path, True)


def run_rule_tests(extra: list[Path] | None = None) -> list[CaseResult]:
    results = []
    for rule in load_rules(extra or []):
        for kind in ("positive", "negative"):
            for case in rule.tests.get(kind, []):
                results.append(run_case(rule, kind, case))
    return results
