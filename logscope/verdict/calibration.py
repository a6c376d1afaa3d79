"""What a confidence means: how often verdicts that sure were right on logs logscope had never seen.

The bands are measured by `benchmarks/accuracy.py --calibration` on blind rounds, each case scored the first time
logscope met it (docs/accuracy.md), and shipped as data beside this module.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

MEASURED = Path(__file__).with_name("calibration.json")


@cache
def _bands() -> tuple[str, tuple[dict[str, Any], ...]]:
    data = json.loads(MEASURED.read_text(encoding="utf-8"))
    return str(data["measured_on"]), tuple(data["bands"])


def calibration_for(confidence: float) -> dict[str, Any] | None:
    """The measured band that holds `confidence`: its range, how many first-sight verdicts fell in it and how many
    of those were right; None where that band holds no measured case."""
    measured_on, bands = _bands()
    for band in bands:
        if band["low"] <= confidence < band["high"] and band["cases"]:
            return {
                "band": f"{band['low']:.2f}-{min(band['high'], 1.0):.2f}",
                "cases": band["cases"],
                "right": band["right"],
                "measured_on": measured_on,
            }
    return None


def calibration_sentence(verdict: dict[str, Any]) -> str:
    """One line for a report: whether this is a guess, and how often verdicts this sure were right."""
    measured = verdict.get("calibration")
    lead = "a guess" if verdict.get("guess") else "likely"
    if not measured:
        return lead
    return (
        f"{lead}: verdicts this sure were right {measured['right']} of {measured['cases']} times "
        f"on logs never seen before"
    )
