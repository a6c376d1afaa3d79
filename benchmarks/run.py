"""Time `logscope analyze --format json` against `grep -E -c` with the same signature patterns, same files.

    python benchmarks/run.py                                  # the standard cases, 3 runs each
    python benchmarks/run.py --cases 8x16MB --repeat 5 --json out.json

For every case: generate it if missing (benchmarks/generate.py), read it once to warm the page cache, then
run grep and logscope alternately `--repeat` times. Reported: the median wall time, MiB/s, the peak RSS of the
child (the larger of `ru_maxrss` from `os.wait4` and the sampled peak of the RSS summed over its process tree,
the maximum over the runs) and the ratio logscope / grep. grep's patterns
are `logscope.events.catalogue.grep_patterns()`, the prefilters of the signature catalogue, so the reference
grows with the catalogue. After the table: the linearity check (one shape, several sizes) and the flat-memory
check.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CASES = (*generate.STANDARD_CASES, "8x512MB")  # 8x128MB, 8x512MB, 8x1GB: the linearity sizes
MIB = float(1 << 20)
GIB = float(1 << 30)
TARGET_RATIO = 1.5
TARGET_RSS = 1 << 30
TARGET_MANY_RANKS_S = 10.0
TARGET_LINEAR = 1.25  # largest / smallest marginal cost, and 8 GB / 1 GB peak RSS


@dataclass
class Run:
    seconds: float
    peak_rss: int  # bytes: the larger of the child's ru_maxrss and the sampled peak of its process tree's sum
    returncode: int
    user_s: float  # of the child and the processes it waited for (logscope reads large inputs in two processes)
    sys_s: float
    tree_rss: int = 0  # bytes: the peak of the RSS summed over the child and its descendants, sampled


@dataclass
class ToolResult:
    runs: list[Run] = field(default_factory=list)
    error: str | None = None

    @property
    def median_s(self) -> float | None:
        ok = [r.seconds for r in self.runs]
        return statistics.median(ok) if ok else None

    @property
    def peak_rss(self) -> int | None:
        return max((r.peak_rss for r in self.runs), default=None)


@dataclass
class CaseResult:
    case: str
    bytes: int
    files: int
    archive_bytes: int | None
    load_before: float
    grep: ToolResult
    logscope: ToolResult
    grep_matches: int | None = None
    verdict: dict[str, Any] | None = None
    expected_culprit: int | None = None

    @property
    def ratio(self) -> float | None:
        ls, gr = self.logscope.median_s, self.grep.median_s
        return ls / gr if ls is not None and gr else None


def run_child(
    argv: list[str],
    env: dict[str, str],
    stdout: int | Any = subprocess.DEVNULL,
    timeout_s: float = 1800.0,
    cwd: Path | None = None,
) -> tuple[Run, bytes]:
    """Run one child; wall time around spawn+exit, rusage of exactly this child from `os.wait4`.

    ru_maxrss is the largest single process, not the sum over a parent and the helper it runs at the same time,
    so the RSS of the whole process tree is also sampled and summed."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=stdout, stderr=err, env=env, cwd=cwd)
        killer = threading.Timer(timeout_s, proc.kill)
        killer.start()
        sampler = TreeRss(proc.pid)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        sampler.stop()
        killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; stops Popen from waiting again
        err.seek(0)
        stderr = err.read()
    if elapsed > timeout_s:
        stderr += f"\n(killed after {timeout_s:.0f} s)".encode()
    rss = max(usage.ru_maxrss * 1024, sampler.peak)
    return Run(elapsed, rss, proc.returncode, usage.ru_utime, usage.ru_stime, sampler.peak), stderr


class TreeRss(threading.Thread):
    """The peak of the RSS summed over a process and its descendants, read from /proc every 50 ms (Linux)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self.done.wait(0.05):
            total = 0
            for pid in self.tree(self.pid):
                with contextlib.suppress(OSError, IndexError, ValueError):  # the process is gone meanwhile
                    total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
            self.peak = max(self.peak, total)

    @staticmethod
    def tree(pid: int) -> list[int]:
        found, todo = [], [pid]
        while todo:
            current = todo.pop()
            found.append(current)
            try:
                for task in Path(f"/proc/{current}/task").iterdir():
                    todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                pass
        return found

    def stop(self) -> None:
        self.done.set()
        self.join()


def grep_once(target: Path, archive: bool, patterns: Path) -> tuple[Run, int]:
    """`LC_ALL=C grep -E -c -f patterns` over the case; a .tar.gz is streamed through `gzip -dc` first."""
    env = {**os.environ, "LC_ALL": "C"}
    grep = ["grep", "-E", "-c", "-f", str(patterns)]
    if not archive:
        argv = [*grep, "-r", str(target)] if target.is_dir() else [*grep, str(target)]
        with tempfile.TemporaryFile() as out:
            run, stderr = run_child(argv, env, stdout=out)
            out.seek(0)
            counts = out.read().decode()
        if run.returncode not in (0, 1):  # 1 = no line matched
            raise RuntimeError(f"grep failed (exit {run.returncode}): {stderr.decode(errors='replace').strip()}")
        return run, sum(int(line.rsplit(":", 1)[-1]) for line in counts.split())
    # Pipeline: time from the first spawn until both have exited; peak RSS is the larger of the two.
    started = time.perf_counter()
    unzip = subprocess.Popen(["gzip", "-dc", str(target)], stdout=subprocess.PIPE, env=env)
    counter = subprocess.Popen(grep, stdin=unzip.stdout, stdout=subprocess.PIPE, env=env)
    assert unzip.stdout is not None
    unzip.stdout.close()
    out_bytes, _ = counter.stdout.read(), None  # type: ignore[union-attr]
    _, st_grep, ru_grep = os.wait4(counter.pid, 0)
    _, st_zip, ru_zip = os.wait4(unzip.pid, 0)
    elapsed = time.perf_counter() - started
    counter.returncode = os.waitstatus_to_exitcode(st_grep)
    unzip.returncode = os.waitstatus_to_exitcode(st_zip)
    if counter.returncode not in (0, 1) or unzip.returncode != 0:
        raise RuntimeError(f"gzip | grep failed (exit {unzip.returncode} / {counter.returncode})")
    run = Run(
        elapsed,
        max(ru_grep.ru_maxrss, ru_zip.ru_maxrss) * 1024,
        counter.returncode,
        ru_grep.ru_utime + ru_zip.ru_utime,
        ru_grep.ru_stime + ru_zip.ru_stime,
    )
    return run, int(out_bytes.decode().strip() or 0)


def logscope_argv(python: str, engine: str, target: Path, output: Path) -> list[str]:
    if engine == "cli":
        return [python, "-m", "logscope", "analyze", str(target), "--format", "json", "-o", str(output)]
    return [python, str(Path(__file__).resolve()), "--child-analyze", str(target), str(output)]


def child_analyze(target: Path, output: Path) -> int:
    """The `api` engine: what `logscope analyze --format json -o` does, for when the CLI is not wired up."""
    from logscope.analysis import analyze
    from logscope.errors import LogscopeError
    from logscope.report.jsonout import render

    try:
        output.write_text(render(analyze(target)), encoding="utf-8")
    except LogscopeError as exc:
        print(f"logscope: {exc}", file=sys.stderr)
        return 2
    return 0


def logscope_once(
    python: str, engine: str, tree: Path, target: Path, timeout_s: float
) -> tuple[Run, dict[str, Any] | None, str | None]:
    """One `logscope analyze`; exit 0/1 with a JSON document is success (1 = a failure was diagnosed)."""
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "diagnosis.json"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        run, stderr = run_child(logscope_argv(python, engine, target, output), env, cwd=tree, timeout_s=timeout_s)
        last = (stderr.decode(errors="replace").strip().splitlines() or ["(no message)"])[-1]
        if not output.is_file() or output.stat().st_size == 0:
            return run, None, f"exit {run.returncode}, no JSON written: {last}"
        try:
            document = json.loads(output.read_text())
        except json.JSONDecodeError as exc:
            return run, None, f"exit {run.returncode}, output is not JSON ({exc}): {last}"
    verdict = document.get("verdict") if isinstance(document, dict) else None
    return run, verdict if isinstance(verdict, dict) else {}, None


def warm_cache(target: Path) -> None:
    """Read every byte once so the first timed run does not pay for the disk (all runs read from cache)."""
    paths = [p for p in target.rglob("*") if p.is_file()] if target.is_dir() else [target]
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(16 << 20):
                pass


def probe(python: str, tree: Path, argv: list[str]) -> str | None:
    """None when the command exits 0, else one line saying why not."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([python, *argv], capture_output=True, text=True, env=env, cwd=tree, timeout=120)
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    return f"`python {' '.join(argv)}` exited {proc.returncode}: {last}"


def choose_engine(python: str, tree: Path, wanted: str) -> tuple[str, str | None]:
    """The engine to time (`cli`, else `api` under `auto`) and, when neither can run, the reason."""
    cli_problem = probe(python, tree, ["-m", "logscope", "analyze", "--help"])
    if wanted == "cli" or (wanted == "auto" and cli_problem is None):
        return "cli", cli_problem
    api_problem = probe(python, tree, ["-c", "import logscope.analysis, logscope.report.jsonout"])
    if api_problem is None and cli_problem is not None:
        print(
            f"run.py: the CLI is not usable ({cli_problem}); timing logscope.analysis.analyze instead",
            file=sys.stderr,
        )
    return "api", api_problem


def write_patterns(path: Path, tree: Path) -> int:
    sys.path.insert(0, str(tree))
    from logscope.events.catalogue import grep_patterns

    patterns = grep_patterns()
    path.write_text("".join(p + "\n" for p in patterns))
    probe = subprocess.run(
        ["grep", "-E", "-c", "-f", str(path), "/dev/null"],
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C"},
    )
    if probe.returncode not in (0, 1):
        raise RuntimeError(f"grep rejects the catalogue's patterns: {probe.stderr.strip()}")
    return len(patterns)


def measure(
    case_name: str,
    args: argparse.Namespace,
    patterns: Path,
    python: str,
    engine: str,
    logscope_missing: str | None,
) -> CaseResult:
    case = generate.parse_case(case_name)
    manifest = generate.generate(case, args.seed)
    target = generate.case_dir(case) / manifest.analyze_path
    archive = manifest.layout == "targz"
    warm_cache(target)
    result = CaseResult(
        case_name,
        manifest.bytes,
        manifest.files,
        manifest.archive_bytes,
        os.getloadavg()[0],
        ToolResult(),
        ToolResult(),
        expected_culprit=manifest.culprit_rank,
    )
    result.logscope.error = logscope_missing
    grep_once(target, archive, patterns)  # untimed warm-up of grep itself
    for _ in range(args.repeat):
        run, matches = grep_once(target, archive, patterns)
        result.grep.runs.append(run)
        result.grep_matches = matches
        if result.logscope.error is None:
            run, verdict, error = logscope_once(python, engine, args.tree, target, args.timeout)
            if error is not None:
                result.logscope.error = error
            else:
                result.logscope.runs.append(run)
                result.verdict = verdict
        progress(result)
    if args.delete_after:
        shutil.rmtree(generate.case_dir(case))
    return result


def progress(result: CaseResult) -> None:
    ls = f"{result.logscope.runs[-1].seconds:.2f}s" if result.logscope.runs else "-"
    print(
        f"  {result.case}: grep {result.grep.runs[-1].seconds:.2f}s  logscope {ls}",
        file=sys.stderr,
        flush=True,
    )


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def mbps(size: int, seconds: float | None) -> float | None:
    return size / MIB / seconds if seconds else None


def ranks_text(ranks: object) -> str:
    """A rank list as printed in the table: in full when short, else its first ranks and its length."""
    if not isinstance(ranks, list) or len(ranks) <= 8:
        return str(ranks)
    return f"[{', '.join(str(r) for r in ranks[:4])}, ... ({len(ranks)} ranks)]"


def table(results: list[CaseResult]) -> str:
    head = (
        f"{'case':12} {'MiB':>8} {'files':>5} {'logscope s':>10} {'MiB/s':>7} {'peak RSS':>9} "
        f"{'grep s':>7} {'MiB/s':>7} {'ratio':>6}  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        rss = r.logscope.peak_rss
        verdict = "-"
        if r.logscope.error and not r.logscope.runs:
            verdict = "logscope not measured: " + r.logscope.error
        elif r.logscope.error:
            verdict = f"FAILED after {len(r.logscope.runs)} runs: " + r.logscope.error
        elif r.verdict is not None:
            verdict = f"{r.verdict.get('category')} culprit={ranks_text(r.verdict.get('culprit_ranks'))} "
            verdict += f"(planted {r.expected_culprit})"
        lines.append(
            f"{r.case:12} {r.bytes / MIB:8.0f} {r.files:5} {fmt(r.logscope.median_s, '10.2f')} "
            f"{fmt(mbps(r.bytes, r.logscope.median_s), '7.0f')} "
            f"{fmt(rss / MIB if rss else None, '5.0f'):>5} MiB "
            f"{fmt(r.grep.median_s, '7.2f')} {fmt(mbps(r.bytes, r.grep.median_s), '7.0f')} "
            f"{fmt(r.ratio, '6.2f')}  {verdict}"
        )
    return "\n".join(lines)


def linearity(results: list[CaseResult]) -> list[dict[str, Any]]:
    """Per rank count with >= 2 sizes of the tree shape: s/GiB, and a least-squares fit t = a + b * GiB."""
    groups: dict[tuple[bool, int], list[CaseResult]] = {}  # dense and standard trees are fitted apart
    for r in results:
        case = generate.parse_case(r.case)
        if case.layout == "tree" and r.logscope.median_s is not None:
            groups.setdefault((case.dense, case.ranks), []).append(r)
    report = []
    for (dense, ranks), members in sorted(groups.items()):
        if len(members) < 2:
            continue
        members.sort(key=lambda r: r.bytes)
        xs = [r.bytes / GIB for r in members]
        ys = [float(r.logscope.median_s or 0.0) for r in members]
        mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
        intercept = mean_y - slope * mean_x
        ss_tot = sum((y - mean_y) ** 2 for y in ys)
        ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
        report.append(
            {
                "ranks": ranks,
                "dense": dense,
                "points": [
                    {"case": r.case, "gib": x, "seconds": y, "s_per_gib": y / x}
                    for r, x, y in zip(members, xs, ys, strict=True)
                ],
                "fit_intercept_s": intercept,
                "fit_s_per_gib": slope,
                "r_squared": 1.0 - ss_res / ss_tot if ss_tot else 1.0,
            }
        )
    return report


def linearity_text(report: list[dict[str, Any]]) -> str:
    lines = []
    for group in report:
        lines.append(
            f"linearity, {group['ranks']} ranks{' (dense)' if group['dense'] else ''}: "
            f"t = {group['fit_intercept_s']:.2f} s + "
            f"{group['fit_s_per_gib']:.2f} s/GiB × size   (R² = {group['r_squared']:.4f})"
        )
        for p in group["points"]:
            lines.append(f"  {p['case']:12} {p['gib']:7.2f} GiB {p['seconds']:8.2f} s {p['s_per_gib']:7.2f} s/GiB")
    return "\n".join(lines)


def targets(results: list[CaseResult], lin: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_case = {r.case: r for r in results}
    checks: list[dict[str, Any]] = []
    for name in ("8x128MB", "8x1GB", "dense-8x128MB"):
        ratio = by_case[name].ratio if name in by_case else None
        if ratio is not None:
            checks.append(
                {
                    "target": f"analyze/grep on {name} <= {TARGET_RATIO}",
                    "value": ratio,
                    "met": ratio <= TARGET_RATIO,
                }
            )
    if "8x1GB" in by_case and by_case["8x1GB"].logscope.peak_rss:
        rss = by_case["8x1GB"].logscope.peak_rss
        checks.append({"target": "peak RSS at 8 GB <= 1 GiB", "value": rss / MIB, "met": rss <= TARGET_RSS})
    if "1024x256KB" in by_case and by_case["1024x256KB"].logscope.median_s is not None:
        seconds = by_case["1024x256KB"].logscope.median_s
        checks.append(
            {
                "target": f"1024x256KB <= {TARGET_MANY_RANKS_S:.0f} s",
                "value": seconds,
                "met": seconds <= TARGET_MANY_RANKS_S,
            }
        )
    for group in lin:
        # Marginal cost between consecutive sizes, so the fixed start-up (imports, rules) does not count as
        # non-linearity.
        points = group["points"]
        slopes = [(b["seconds"] - a["seconds"]) / (b["gib"] - a["gib"]) for a, b in itertools.pairwise(points)]
        if len(slopes) >= 2 and min(slopes) > 0:
            spread = max(slopes) / min(slopes)
            checks.append(
                {
                    "target": f"linear time ({group['ranks']} ranks{' dense' if group['dense'] else ''}): "
                    f"s/GiB step spread <= {TARGET_LINEAR}",
                    "value": spread,
                    "met": spread <= TARGET_LINEAR,
                }
            )
    small, large = by_case.get("8x128MB"), by_case.get("8x1GB")
    if small and large and small.logscope.peak_rss and large.logscope.peak_rss:
        growth = large.logscope.peak_rss / small.logscope.peak_rss
        checks.append(
            {
                "target": f"flat memory: RSS 8x1GB / 8x128MB <= {TARGET_LINEAR}",
                "value": growth,
                "met": growth <= TARGET_LINEAR,
            }
        )
    return checks


def flat_memory_text(results: list[CaseResult]) -> str:
    by_case = {r.case: r for r in results}
    rows = [(name, by_case[name]) for name in ("8x128MB", "8x512MB", "8x1GB") if name in by_case]
    if len(rows) < 2:
        return ""
    cells = "   ".join(
        f"{name} ({r.bytes / GIB:.1f} GiB): {fmt((r.logscope.peak_rss or 0) / MIB or None, '.0f')} MiB"
        for name, r in rows
    )
    return "flat memory, logscope peak RSS: " + cells


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in lscpu.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L3 cache"):
            info[key.strip()] = value.strip()
    with open("/proc/meminfo") as meminfo:
        info["MemTotal"] = meminfo.readline().split(":", 1)[1].strip()
    info["grep"] = subprocess.run(["grep", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(DEFAULT_CASES), help="case names (see generate.py)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per tool and case (median quoted)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before one analyze run is killed")
    parser.add_argument(
        "--python",
        default=str(REPO / ".venv" / "bin" / "python"),
        help="interpreter that runs `-m logscope` (default: the repo's .venv)",
    )
    parser.add_argument("--delete-after", action="store_true", help="delete each case's data once measured")
    parser.add_argument(
        "--engine",
        choices=("auto", "cli", "api"),
        default="auto",
        help="time `python -m logscope analyze` (cli) or logscope.analysis.analyze (api); auto = cli when it works",
    )
    parser.add_argument(
        "--tree",
        type=Path,
        default=REPO,
        help="folder holding the logscope package to time, e.g. a copy with a proposed patch (default: this checkout)",
    )
    parser.add_argument("--child-analyze", nargs=2, type=Path, metavar=("PATH", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_analyze:
        return child_analyze(*args.child_analyze)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    try:
        cases = [generate.parse_case(name).name for name in args.cases]
    except ValueError as exc:
        print(f"run.py: {exc}", file=sys.stderr)
        return 2
    if not Path(args.python).exists():
        print(f"run.py: no interpreter at {args.python} (create the venv or pass --python)", file=sys.stderr)
        return 2
    args.tree = args.tree.resolve()
    if not (args.tree / "logscope").is_dir():
        print(f"run.py: no logscope package under {args.tree}", file=sys.stderr)
        return 2
    load_start = os.getloadavg()
    engine, missing = choose_engine(args.python, args.tree, args.engine)
    if missing:
        print(f"run.py: logscope analyze is not usable, timing grep only: {missing}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        patterns = Path(tmp) / "patterns.txt"
        try:
            count = write_patterns(patterns, args.tree)
        except (ImportError, RuntimeError) as exc:
            print(f"run.py: cannot build grep patterns from the catalogue: {exc}", file=sys.stderr)
            return 2
        print(f"grep reference: LC_ALL=C grep -E -c -f <{count} catalogue prefilters>", file=sys.stderr)
        results = [measure(name, args, patterns, args.python, engine, missing) for name in cases]
    lin = linearity(results)
    checks = targets(results, lin)
    command = (
        "python -m logscope analyze PATH --format json -o FILE"
        if engine == "cli"
        else ("logscope.analysis.analyze(PATH) + report.jsonout, the api engine")
    )
    print(f"logscope: {command}; grep: LC_ALL=C grep -E -c -f <catalogue prefilters>; median of {args.repeat}")
    print(table(results))
    print()
    for text in (linearity_text(lin), flat_memory_text(results)):
        if text:
            print(text)
    for check in checks:
        print(f"target: {check['target']:48} {check['value']:9.2f}  {'met' if check['met'] else 'NOT MET'}")
    if args.json:
        document = {
            "machine": {**machine(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
            "repeat": args.repeat,
            "engine": engine,
            "tree": str(args.tree),
            "cases": [
                {
                    **asdict(r),
                    "median_logscope_s": r.logscope.median_s,
                    "median_grep_s": r.grep.median_s,
                    "peak_rss_logscope": r.logscope.peak_rss,
                    "ratio": r.ratio,
                }
                for r in results
            ],
            "linearity": lin,
            "targets": checks,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    failed = [r.case for r in results if r.logscope.error]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
