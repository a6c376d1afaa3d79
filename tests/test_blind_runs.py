"""logscope's verdict on real runs collected for blind rounds (fixtures/blind_runs/<round>_<case>/): real torchrun,
accelerate, Lightning and RL-library jobs on CPU (gloo) and on one GPU (NCCL), each with the fault a helper who had
not read logscope's code injected, labelled in its scenario.yaml before logscope was run on it. A run logscope gets
wrong carries `known_wrong: "<why>"` and is a strict xfail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from logscope.analysis import analyze

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted(p.parent for p in (ROOT / "fixtures" / "blind_runs").glob("*/scenario.yaml"))
CATEGORIES = yaml.safe_load((ROOT / "docs" / "schema" / "diagnosis-v1.json").read_text())["$defs"]["category"]["enum"]


def _label(run: Path) -> dict[str, Any]:
    return yaml.safe_load((run / "scenario.yaml").read_text())


def _param(run: Path) -> Any:
    label = _label(run)
    marks = [pytest.mark.xfail(reason=label["known_wrong"], strict=True)] if label.get("known_wrong") else []
    return pytest.param(run, id=run.name, marks=marks)


def test_every_run_is_labelled_and_regenerable() -> None:
    assert len(RUNS) >= 10
    for run in RUNS:
        label = _label(run)
        assert label["expected_category"] in CATEGORIES, run.name
        culprits = label["expected_culprits"]
        assert culprits is None or all(isinstance(r, int) for r in culprits), run.name
        assert label.get("generated_by") and label.get("provoked"), run.name
        assert any(p.suffix == ".log" for p in run.rglob("*")), run.name


@pytest.mark.parametrize("run", [_param(r) for r in RUNS])
def test_verdict_matches_the_scenario(run: Path) -> None:
    label = _label(run)
    verdict = analyze(run).diagnosis["verdict"]
    assert verdict["category"] == label["expected_category"]
    if label["expected_culprits"] is not None:
        assert verdict["culprit_ranks"] == sorted(label["expected_culprits"])


def test_a_scripts_rank_tag_names_the_lines_rank() -> None:
    """accelerate's console has no rank prefixes; the script tags its own messages "[RANK 0] ..." after its logger's
    prefix, and those lines are rank 0's."""
    events = analyze(ROOT / "fixtures" / "blind_runs" / "r11d_accel_rank0_sleeps_past_timeout").events
    tagged = events.filter(events["text"].str.starts_with("[RANK 0] "))
    assert tagged.height >= 3
    assert tagged["rank"].to_list() == [0] * tagged.height
