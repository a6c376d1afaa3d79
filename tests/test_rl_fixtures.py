"""logscope's verdict on the real RL-library trees (fixtures/rl, fixtures/rl5): rsl_rl, rl_games and skrl's own
training loops under real torchrun, labelled in each scenario.yaml by the script that provoked the failure. A tree
logscope gets wrong carries `known_wrong: "<why>"` and is a strict xfail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from logscope.analysis import analyze

ROOT = Path(__file__).resolve().parents[1]
TREES = sorted(p.parent for d in ("rl", "rl5") for p in (ROOT / "fixtures" / d).glob("*/scenario.yaml"))


def _label(tree: Path) -> dict[str, Any]:
    return yaml.safe_load((tree / "scenario.yaml").read_text())


def _param(tree: Path) -> Any:
    label = _label(tree)
    marks = [pytest.mark.xfail(reason=label["known_wrong"], strict=True)] if label.get("known_wrong") else []
    return pytest.param(tree, id=f"{tree.parent.name}/{tree.name}", marks=marks)


def test_every_library_and_both_rounds_are_here() -> None:
    names = [t.name for t in TREES]
    assert len(TREES) >= 24
    assert all(any(n.startswith(lib) for n in names) for lib in ("rsl_rl", "rl_games", "skrl"))


@pytest.mark.parametrize("tree", [_param(t) for t in TREES])
def test_verdict_matches_the_scenario(tree: Path) -> None:
    label = _label(tree)
    verdict = analyze(tree).diagnosis["verdict"]
    assert verdict["category"] == label["expected_category"]
    assert verdict["culprit_ranks"] == sorted(label["expected_culprits"] or [])
