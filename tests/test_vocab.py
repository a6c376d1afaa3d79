"""The vocabulary (severities, phases, categories and their order) is defined once, in logscope/vocab.py."""

from __future__ import annotations

import ast
from pathlib import Path

from logscope.vocab import Category, Phase, Severity

REPO = Path(__file__).resolve().parents[1]
# A literal naming this many members of one vocabulary lists or orders it: it must be derived from vocab.py.
# Mappings onto another format's words (SARIF levels, GitHub annotation commands) are not orders and are left.
VOCABULARIES = {
    "severity": ({s.value for s in Severity}, 4),
    "phase": ({p.value for p in Phase}, 5),
    "category": ({c.value for c in Category}, 8),
}


def _redefinitions(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            names = node.elts
        elif isinstance(node, ast.Dict) and all(
            isinstance(v, ast.Constant) and isinstance(v.value, int) for v in node.values
        ):
            names = [k for k in node.keys if k is not None]
        else:
            continue
        strings = {n.value for n in names if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        found += [
            (node.lineno, name) for name, (members, need) in VOCABULARIES.items() if len(strings & members) >= need
        ]
    return found


def test_no_module_redefines_an_order_of_the_vocabulary() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line} ({name})"
        for path in sorted((REPO / "logscope").rglob("*.py"))
        if path.name != "vocab.py"
        for line, name in _redefinitions(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_scan_finds_a_redefinition() -> None:
    assert _redefinitions('ORDER = {"info": 0, "note": 1, "warning": 2, "error": 3, "critical": 4}') == [
        (1, "severity")
    ]
    assert _redefinitions('PHASES = ("launch", "init", "sync", "train", "end", "fail")') == [(1, "phase")]
    assert (
        _redefinitions('LEVELS = {"critical": "error", "error": "error", "warning": "warning", "info": "note"}') == []
    )
