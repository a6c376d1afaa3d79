"""Each rule's own positive and negative cases (sqlfluff/Semgrep style), run by `rules test` and by pytest."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from logscope.model import Analysis
from logscope.rules.api import Rule
from logscope.rules.loader import BUILTIN_RULES, load_rules

# Built-in rules name their cases relative to the repository root; a wheel carries them under rulepack/cases/
# (setup.py). Extra rules name theirs relative to their own file, or to the working folder.
REPO = Path(__file__).resolve().parents[2]
PACKAGED_CASES = BUILTIN_RULES / "cases"


@dataclass
class CaseResult:
    rule: str
    kind: str  # positive | negative | example
    path: str
    ok: bool
    why: str = ""


@lru_cache(maxsize=256)
def _analysis(path: Path) -> Analysis:
    from logscope.analysis import analyze

    return analyze(path)


def case_location(rule: Rule, path: str) -> Path | None:
    """Where a rule's case lies on this machine, or None."""
    builtin = rule.path.parent == BUILTIN_RULES
    places = [PACKAGED_CASES / path, REPO / path] if builtin else [rule.path.parent / path, Path.cwd() / path]
    return next((p for p in places if p.exists()), None)


def run_case(rule: Rule, kind: str, case: dict[str, object]) -> CaseResult:
    path = str(case["path"])
    where = case_location(rule, path)
    if where is None:
        return CaseResult(rule.id, kind, path, False, "fixture missing")
    findings = [f for f in _analysis(where).diagnosis["findings"] if f["rule"] == rule.id]
    if kind == "negative":
        return CaseResult(rule.id, kind, path, not findings, "rule fired on a negative case" if findings else "")
    if not findings:
        return CaseResult(rule.id, kind, path, False, "rule did not fire")
    want = case.get("culprits")
    if want is not None and sorted(findings[0]["culprit_ranks"]) != sorted(want):  # type: ignore[call-overload]
        return CaseResult(rule.id, kind, path, False, f"culprits {findings[0]['culprit_ranks']} != {want}")
    return CaseResult(rule.id, kind, path, True)


def run_example(rule: Rule) -> CaseResult:
    """The rule's documented example, analysed as a log of its own, fires the rule (Semgrep's annotated examples);
    a rule whose example cannot run alone says why (why.example_runs: false, why.example_note)."""
    from logscope.analysis import analyze
    from logscope.errors import LogscopeError

    if rule.why.get("example_runs") is False:
        note = str(rule.why.get("example_note") or "")
        return CaseResult(rule.id, "example", "why.example", bool(note), "shown, not run: " + (note or "no note"))
    with tempfile.TemporaryDirectory(prefix="logscope-example-") as folder:
        log = Path(folder) / "example.log"
        log.write_text(rule.why["example"], encoding="utf-8")
        try:
            fired = {f["rule"] for f in analyze(log).diagnosis["findings"]}
        except LogscopeError as exc:
            return CaseResult(rule.id, "example", "why.example", False, str(exc))
    if rule.id in fired:
        return CaseResult(rule.id, "example", "why.example", True)
    return CaseResult(rule.id, "example", "why.example", False, f"rule did not fire (fired: {sorted(fired)})")


def run_rule_tests(extra: list[Path] | None = None) -> list[CaseResult]:
    results = []
    for rule in load_rules(extra or []):
        for kind in ("positive", "negative"):
            for case in rule.tests.get(kind, []):
                results.append(run_case(rule, kind, case))
        results.append(run_example(rule))
    return results
