"""Diagnosis accuracy on labelled cases: category, culprit, failing runs called healthy, and calibration.

    python benchmarks/accuracy.py fixtures/cases/blind4_*          # cases as folders (any number)
    python benchmarks/accuracy.py --json out.json fixtures/gpu/*   # also write every row
    python benchmarks/accuracy.py --rows-from a.json --rows-from b.json \
        --calibration logscope/verdict/calibration.json --measured-on "..."   # bands from first-sight runs

A case is a folder with a label: `source.yaml` (public excerpts: expected_category, expected_culprits) or
`scenario.yaml` (real runs: expected_category, culprit_ranks / culprit_rank / expected_culprits). The label file is
hidden from logscope: the case is copied without it before it is analysed, as a user would hand over the logs.
This is the instrument of docs/accuracy.md; it is not a test (tests/test_cases_blind.py checks every case).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

LABEL_FILES = ("source.yaml", "scenario.yaml", "label.yaml")
# What the fixture scripts write beside a run for us (PyTorch's own Flight Recorder analysis, the capture's log):
# not part of what the run left, so not handed to logscope.
NOT_THE_RUN = ("fr_trace.txt", "capture*.log", "capture*.txt", "README.md")
# The shared real logs (fixtures/real) label with the thread's words; their meaning in logscope's categories.
FAILURE_CLASS = {
    "nccl_timeout": "collective_timeout",
    "healthy": "healthy",
    "missing_sync": "missing_sync",
    "hang_no_error": "missing_sync",
    "rendezvous_timeout": "rendezvous_failure",
    "nccl_error": "comm_error",
    "child_failed": "crash",
    "silent_single_rank": "single_rank",
}
# The confidence bands of the calibration table (docs/accuracy.md).
BANDS = ((0.0, 0.4), (0.4, 0.55), (0.55, 0.7), (0.7, 0.85), (0.85, 1.01))


@dataclass
class Row:
    case: str
    expected_category: str
    expected_culprits: list[int] | None
    category: str
    culprits: list[int]
    confidence: float
    guess: bool
    rule: str | None
    exit_code: int
    category_right: bool
    culprit_right: bool | None  # None where the label names no culprit


def label_of(case: Path) -> tuple[str, list[int] | None]:
    for name in LABEL_FILES:
        path = case / name
        if path.exists():
            label: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
            break
    else:
        raise SystemExit(f"{case}: no label ({', '.join(LABEL_FILES)})")
    category = label.get("expected_category")
    cls = label.get("failure_class")
    if category is None and cls == "rank_disagreement":
        category = "config_disagreement" if label.get("collective") in (None, {}) else "collective_mismatch"
    elif category is None and cls == "gloo_error":
        category = "collective_timeout" if "timeout" in case.name else "comm_error"
    elif category is None:
        category = FAILURE_CLASS.get(str(cls))
    if category is None:
        raise SystemExit(f"{case}: label has no expected_category")
    culprits: Any = None
    for key in ("expected_culprits", "culprit_ranks", "ranks_implicated"):
        if key in label:
            culprits = label[key]
            break
    else:
        if "culprit_rank" in label:
            culprits = None if label["culprit_rank"] is None else [label["culprit_rank"]]
    if culprits is not None and not (isinstance(culprits, list) and all(isinstance(r, int) for r in culprits)):
        culprits = None
    return str(category), culprits


def analyse(case: Path) -> tuple[dict[str, Any], int]:
    """The JSON diagnosis and exit code of `logscope analyze` on a copy of the case without its label."""
    from logscope.analysis import analyze
    from logscope.errors import InputError
    from logscope.report import renderer

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / case.name
        shutil.copytree(case, copy, ignore=shutil.ignore_patterns(*LABEL_FILES, *NOT_THE_RUN))
        try:
            analysis = analyze(copy)
        except InputError as exc:
            return {"verdict": {"category": "<exit 2>", "culprit_ranks": [], "confidence": 0.0}, "error": str(exc)}, 2
        diagnosis: dict[str, Any] = json.loads(renderer("json")(analysis))
    failing = any(f["severity"] in ("error", "critical") for f in diagnosis["findings"])
    return diagnosis, 1 if failing else 0


def score(case: Path) -> Row:
    expected_category, expected_culprits = label_of(case)
    diagnosis, code = analyse(case)
    verdict = diagnosis["verdict"]
    culprits = sorted(verdict.get("culprit_ranks") or [])
    return Row(
        case=case.name,
        expected_category=expected_category,
        expected_culprits=expected_culprits,
        category=verdict["category"],
        culprits=culprits,
        confidence=float(verdict.get("confidence") or 0.0),
        guess=bool(verdict.get("guess", False)),
        rule=verdict.get("rule"),
        exit_code=code,
        category_right=verdict["category"] == expected_category,
        culprit_right=None if expected_culprits is None else culprits == sorted(expected_culprits),
    )


def summary(rows: list[Row]) -> dict[str, Any]:
    with_culprit = [r for r in rows if r.culprit_right is not None]
    failing = [r for r in rows if r.expected_category != "healthy"]
    bands = [
        {"band": f"{b['low']:.2f}–{min(b['high'], 1.0):.2f}", "cases": b["cases"], "right": b["right"]}
        for b in calibration(rows, "")["bands"]
    ]
    return {
        "cases": len(rows),
        "category_right": sum(r.category_right for r in rows),
        "culprit_cases": len(with_culprit),
        "culprit_right": sum(bool(r.culprit_right) for r in with_culprit),
        "failing_called_healthy": [r.case for r in failing if r.category == "healthy"],
        "failing_exit_0": [r.case for r in failing if r.exit_code == 0],
        "calibration": bands,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", type=Path)
    parser.add_argument(
        "--rows-from",
        type=Path,
        action="append",
        default=[],
        help="score the rows of an earlier --json run instead of analysing again (first-sight runs, for --calibration)",
    )
    parser.add_argument("--json", type=Path, help="write every row and the summary here")
    parser.add_argument(
        "--calibration",
        type=Path,
        help="write the confidence bands here (logscope/verdict/calibration.json: only from first-sight runs)",
    )
    parser.add_argument("--measured-on", default="", help="what the bands were measured on, for --calibration")
    args = parser.parse_args(argv)
    cases = sorted({c for c in args.cases if c.is_dir() and any((c / n).exists() for n in LABEL_FILES)})
    rows = [score(c) for c in cases]
    for earlier in args.rows_from:
        rows += [Row(**r) for r in json.loads(earlier.read_text())["rows"]]
    width = max((len(r.case) for r in rows), default=10)
    for r in rows:
        mark = "ok " if r.category_right and r.culprit_right is not False else "BAD"
        print(
            f"{mark} {r.case:<{width}}  expected {r.expected_category:<19} {r.expected_culprits!s:<10}"
            f" got {r.category:<19} {r.culprits!s:<10} {r.confidence:.2f}{' guess' if r.guess else ''}"
            f" {r.rule or ''} exit {r.exit_code}"
        )
    s = summary(rows)
    print(
        f"\n{s['cases']} cases: category {s['category_right']}/{s['cases']}, culprit {s['culprit_right']}/"
        f"{s['culprit_cases']}, failing runs called healthy {len(s['failing_called_healthy'])}, "
        f"failing runs with exit 0 {len(s['failing_exit_0'])}"
    )
    for band in s["calibration"]:
        if band["cases"]:
            print(f"  confidence {band['band']}: {band['right']}/{band['cases']} right")
    if args.json:
        args.json.write_text(json.dumps({"rows": [asdict(r) for r in rows], "summary": s}, indent=1))
    if args.calibration:
        args.calibration.write_text(json.dumps(calibration(rows, args.measured_on), indent=1) + "\n")
    return 0


def calibration(rows: list[Row], measured_on: str) -> dict[str, Any]:
    """The bands as logscope ships them: range, cases in it, how many of those were right (category and culprit)."""
    bands = []
    for low, high in BANDS:
        inside = [r for r in rows if low <= r.confidence < high and r.exit_code != 2]  # exit 2: no verdict
        right = sum(r.category_right and r.culprit_right is not False for r in inside)
        bands.append({"low": low, "high": high, "cases": len(inside), "right": right})
    return {"measured_on": measured_on, "bands": bands}


if __name__ == "__main__":
    sys.exit(main())
