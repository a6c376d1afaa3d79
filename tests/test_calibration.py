"""Every verdict says how often verdicts that sure were right on first sight (logscope/verdict/calibration.json,
measured by benchmarks/accuracy.py on blind rounds), and says plainly when it is a guess, in JSON and text."""

from __future__ import annotations

import json
from pathlib import Path

from logscope.analysis import analyze
from logscope.report.text import render
from logscope.verdict.calibration import MEASURED, calibration_for

ROOT = Path(__file__).resolve().parents[1]
CONFIDENT = ROOT / "fixtures/real/runs/03_skip_allreduce_rank1_stall_gloo_timeout"
GUESS = ROOT / "fixtures/cases/blind3_nccl_fsdp_example_hang_before_loop"


def _band(confidence: float) -> dict[str, float]:
    bands = json.loads(MEASURED.read_text())["bands"]
    return next(b for b in bands if b["low"] <= confidence < b["high"])


def test_the_shipped_bands_are_measured_and_cover_every_confidence() -> None:
    data = json.loads(MEASURED.read_text())
    assert data["measured_on"] and sum(b["cases"] for b in data["bands"]) >= 40
    assert data["bands"][0]["low"] == 0.0 and data["bands"][-1]["high"] > 1.0
    assert all(0 <= b["right"] <= b["cases"] for b in data["bands"])


def test_a_verdict_carries_its_band_and_the_text_says_how_often_that_band_was_right() -> None:
    analysis = analyze(CONFIDENT)
    verdict = analysis.diagnosis["verdict"]
    band = _band(verdict["confidence"])
    assert verdict["guess"] is False
    assert verdict["calibration"] == calibration_for(verdict["confidence"])
    assert (verdict["calibration"]["cases"], verdict["calibration"]["right"]) == (band["cases"], band["right"])
    head = " ".join(" ".join(render(analysis).splitlines()[:2]).split())  # the sentence may wrap onto line two
    assert f"right {band['right']} of {band['cases']} times" in head and "a guess" not in head


def test_a_low_confidence_verdict_is_called_a_guess() -> None:
    analysis = analyze(GUESS)
    verdict = analysis.diagnosis["verdict"]
    assert verdict["confidence"] < 0.5 and verdict["guess"] is True
    assert "(a guess" in render(analysis).splitlines()[0]


def test_the_html_report_shows_the_guess_and_the_band() -> None:
    from logscope.report import html

    page = html.render(analyze(GUESS))
    assert 'class="calibration guess" data-testid="calibration">a guess: verdicts this sure were right' in page
