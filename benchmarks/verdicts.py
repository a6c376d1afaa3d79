"""The verdict of every fixture run, one JSON line each: for checking that a performance change changes no diagnosis.

Every folder under fixtures/real/runs, gpu, rl, rl5, cases and blind_runs is analysed in
this process, one after another, and printed as its category, culprit ranks, confidence and the rule ids of its
findings (or the error it raised). Run it once with the tree before a change and once after, and compare:

    PYTHONPATH=/tmp/before .venv/bin/python benchmarks/verdicts.py > before.jsonl
    PYTHONPATH=$PWD .venv/bin/python benchmarks/verdicts.py > after.jsonl
    cmp before.jsonl after.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from logscope.analysis import analyze
from logscope.errors import LogscopeError
from logscope.report.jsonout import render

REPO = Path(__file__).resolve().parent.parent
FIXTURE_PARENTS = (
    "fixtures/real/runs",
    "fixtures/gpu",
    "fixtures/rl",
    "fixtures/rl5",
    "fixtures/cases",
    "fixtures/blind_runs",
)


def verdict(folder: Path) -> dict[str, Any]:
    try:
        document = json.loads(render(analyze(folder)))
    except LogscopeError as exc:  # a folder that holds no run (fixtures/rl/scripts) says so on both sides
        return {"error": f"{type(exc).__name__}: {exc}"}
    found = document["verdict"]
    return {
        "category": found["category"],
        "culprit_ranks": found["culprit_ranks"],
        "confidence": found["confidence"],
        "rules": [finding["rule"] for finding in document["findings"]],
    }


def main() -> int:
    for parent in FIXTURE_PARENTS:
        for folder in sorted(p for p in (REPO / parent).iterdir() if p.is_dir()):
            line = {"run": str(folder.relative_to(REPO)), **verdict(folder)}
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
