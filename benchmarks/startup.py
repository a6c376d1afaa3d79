"""How long `logscope analyze` takes on a small run, where start-up is all of the cost (issue 20, item 2).

    python benchmarks/startup.py                          # every small fixture run, 3 times each
    python benchmarks/startup.py --repeat 5 --json out.json

A small run is a labelled fixture folder (fixtures/real/runs, fixtures/gpu, fixtures/rl, fixtures/rl5 and the
public excerpts of fixtures/cases) whose logs hold at most --max-kb KiB: what a typical failing job leaves. Each
is analysed to text (`python -m logscope analyze RUN`, stdout to /dev/null) in a child process, timed from spawn
to exit; `python -c pass` and `logscope version` are timed in the same run, interleaved, so the ratio holds on a
loaded machine. The label files are hidden from logscope (each run is copied without them first).

logscope keeps what every start works out again (the parsed catalogue and rule files, the prefilters' literals) in
a cache (logscope/cache.py): the headline is a warm start, as on a developer's machine, with a cache folder of the
benchmark's own warmed first. A first run on a fresh machine (a CI runner) has none: each run is also timed with
the cache off (LOGSCOPE_CACHE_DIR empty), interleaved.

Bytecode is written and warmed before timing: an installed wheel ships compiled modules, and a checkout run with
PYTHONDONTWRITEBYTECODE=1 would otherwise time Python compiling logscope's sources at every start.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE_DIR_ENV = "LOGSCOPE_CACHE_DIR"  # logscope/cache.py: empty turns the cache off
FIXTURE_ROOTS = ("fixtures/real/runs", "fixtures/gpu", "fixtures/rl", "fixtures/rl5")
LABELS = ("source.yaml", "scenario.yaml", "label.yaml", "fr_trace.txt", "README.md")
TARGET_S = 0.4


def small_runs(max_kb: int, cases: int) -> list[Path]:
    runs = [p for root in FIXTURE_ROOTS for p in sorted((REPO / root).iterdir()) if _labelled(p)]
    runs += sorted(p.parent for p in (REPO / "fixtures" / "cases").glob("*/source.yaml"))[:: max(1, 400 // cases)]
    return [p for p in runs if _size(p) <= max_kb << 10]


def _labelled(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in ("scenario.yaml", "label.yaml"))


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name not in LABELS)


def _copy(run: Path, into: Path) -> Path:
    target = into / run.name
    shutil.copytree(run, target, ignore=shutil.ignore_patterns(*LABELS))
    return target


def _time(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-kb", type=int, default=512, help="largest run counted as small (KiB of logs)")
    parser.add_argument("--cases", type=int, default=20, help="about how many public excerpts to include")
    parser.add_argument("--json", type=Path, help="write every timing here")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    python = sys.executable
    subprocess.run([python, "-m", "compileall", "-q", str(REPO / "logscope")], check=True, env=env)
    runs = small_runs(args.max_kb, args.cases)
    with tempfile.TemporaryDirectory(prefix="logscope-startup-") as tmp:
        copies = [_copy(run, Path(tmp)) for run in runs]
        baseline = [python, "-c", "pass"]
        version = [python, "-m", "logscope", "version"]
        env[CACHE_DIR_ENV] = str(Path(tmp) / "cache")
        cold_env = env | {CACHE_DIR_ENV: ""}
        _time([python, "-m", "logscope", "analyze", str(copies[0])], env)  # warm the page cache, bytecode, cache
        per_run: dict[str, list[float]] = {run.name: [] for run in copies}
        cold_s: list[float] = []
        pass_s: list[float] = []
        version_s: list[float] = []
        load_start = os.getloadavg()[0]
        for _ in range(args.repeat):
            for run in copies:
                pass_s.append(_time(baseline, env))
                version_s.append(_time(version, env))
                per_run[run.name].append(_time([python, "-m", "logscope", "analyze", str(run)], env))
                cold_s.append(_time([python, "-m", "logscope", "analyze", str(run)], cold_env))
        load_end = os.getloadavg()[0]

    medians = {name: statistics.median(times) for name, times in per_run.items()}
    analyze_median = statistics.median(medians.values())
    pass_median = statistics.median(pass_s)
    version_median = statistics.median(version_s)
    slowest = max(medians, key=lambda name: medians[name])
    cold_median = statistics.median(cold_s)
    print(f"{len(runs)} small runs (≤ {args.max_kb} KiB of logs), {args.repeat} times each, load {load_start:.1f}")
    print(f"python -c pass      {pass_median:6.3f} s")
    print(f"logscope version    {version_median:6.3f} s  ({version_median / pass_median:.0f}x python -c pass)")
    print(
        f"logscope analyze    {analyze_median:6.3f} s  ({analyze_median / pass_median:.0f}x python -c pass), "
        f"median over runs; slowest {slowest} {medians[slowest]:.3f} s; target ≤ {TARGET_S} s: "
        + ("met" if analyze_median <= TARGET_S else "NOT met")
    )
    print(f"  with no cache     {cold_median:6.3f} s  ({cold_median / pass_median:.0f}x python -c pass), first run")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "loadavg_start": load_start,
                    "loadavg_end": load_end,
                    "repeat": args.repeat,
                    "python_pass_median_s": pass_median,
                    "version_median_s": version_median,
                    "analyze_median_s": analyze_median,
                    "analyze_ratio_to_python_pass": analyze_median / pass_median,
                    "analyze_no_cache_median_s": cold_median,
                    "target_s": TARGET_S,
                    "runs": {name: {"median_s": medians[name], "times_s": per_run[name]} for name in per_run},
                },
                indent=1,
            )
            + "\n"
        )
    return 0 if analyze_median <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
