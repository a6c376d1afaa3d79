"""Runs per second of `logscope scan` on one machine, with and without Ray, from disk and from S3 (issue 20).

    python benchmarks/fleet.py                          # 1000 runs, every mode once
    python benchmarks/fleet.py --runs 2000 --repeat 2 --json out.json

The runs are real fixture runs (fixtures/real/runs, fixtures/real/public) copied: nine in ten as `.tar.gz`
archives, one in ten as a folder, in ten `day-NN/` groups — the shape of a CI history kept in a bucket. The S3
API is moto's server, started here on 127.0.0.1 in a process of its own (it shares the machine's cores with the
scan, as a real store would not). Each mode is `python -m logscope scan TARGET --out FILE` in a child process,
timed from spawn to exit, so start-up (Python, the pool's or Ray's workers) is included:

- `pool`: the local pool of processes (`--jobs 2`), the default;
- `ray-start`: `--ray`, which starts a local Ray inside the command;
- `ray-cluster`: `--ray-address auto`, joining a Ray started beforehand with `ray start --head` (how a cluster
  is used; docs/fleet.md).

Needs the fleet extra and moto[server] (`pip install -e ".[test,fleet]"`). Ray is bound to 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for root in ("runs", "public") for p in (REPO / "fixtures" / "real" / root).iterdir() if p.is_dir())
BUCKET = "fleet-bench"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}  # moto accepts any
# Ray binds to loopback, and a Ray started by the command stays a one-machine Ray
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
MODES = ("pool", "ray-start", "ray-cluster")


@dataclass
class Timing:
    source: str  # disk or s3
    mode: str
    runs: int
    seconds: list[float]

    @property
    def median_s(self) -> float:
        ordered = sorted(self.seconds)
        return ordered[len(ordered) // 2]


def build_history(root: Path, runs: int) -> None:
    archives = root.parent / "archives"
    archives.mkdir()
    for source in SOURCES:
        with tarfile.open(archives / f"{source.name}.tar.gz", "w:gz") as archive:
            archive.add(source, arcname=source.name)
    for index in range(runs):
        source = SOURCES[index % len(SOURCES)]
        day = root / f"day-{index % 10:02d}"
        day.mkdir(parents=True, exist_ok=True)
        if index % 10 == 0:
            shutil.copytree(source, day / f"run-{index:05d}")
        else:
            shutil.copy(archives / f"{source.name}.tar.gz", day / f"run-{index:05d}.tar.gz")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto(port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return server
        time.sleep(0.1)
    server.kill()
    raise SystemExit("moto_server did not start")


def upload(root: Path, endpoint: str) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(key="bench", secret="bench", endpoint_url=endpoint)
    fs.mkdir(BUCKET)
    fs.put(str(root), f"{BUCKET}/history", recursive=True)


def start_ray_head() -> subprocess.Popen[bytes]:
    """`ray start --head --block`: its processes end with it (no `ray stop`, which stops every Ray here)."""
    argv = [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1"]
    head = subprocess.Popen(
        [*argv, "--num-cpus", "2", "--include-dashboard=false"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    time.sleep(10)  # the head's services and its first workers
    if head.poll() is not None:
        raise SystemExit("ray start --head exited")
    return head


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)  # `ray start --block` and moto_server clean up on Ctrl-C
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **CREDENTIALS, **RAY_ENV, **(extra or {})}


def scan_once(target: str, options: list[str], mode: str, out: Path, env: dict[str, str]) -> float:
    argv = [sys.executable, "-m", "logscope", "scan", target, *options, "--out", str(out)]
    argv += {"pool": ["--jobs", "2"], "ray-start": ["--ray"], "ray-cluster": ["--ray-address", "auto"]}[mode]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--json", type=Path, help="write the timings here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="logscope-fleet-bench-"))
    port = free_port()
    server = start_moto(port)
    endpoint = f"http://127.0.0.1:{port}"
    timings: list[Timing] = []
    try:
        build_history(work / "history", args.runs)
        upload(work / "history", endpoint)
        # The endpoint travels as a storage option, not an environment variable: a running Ray cluster's workers
        # do not have the driver's environment (docs/fleet.md).
        targets = {
            "disk": (str(work / "history"), []),
            "s3": (f"s3://{BUCKET}/history", ["--storage-option", f"endpoint_url={endpoint}"]),
        }
        load_start = os.getloadavg()
        for mode in args.modes:
            head = start_ray_head() if mode == "ray-cluster" else None
            try:
                for source, (target, options) in targets.items():
                    timing = Timing(source, mode, args.runs, [])
                    for _ in range(args.repeat):
                        timing.seconds.append(scan_once(target, options, mode, work / "runs.parquet", _env()))
                    timings.append(timing)
                    each = ", ".join(f"{seconds:.1f}" for seconds in timing.seconds)
                    print(
                        f"{source:5} {mode:12} {args.runs} runs  {timing.median_s:6.1f} s  "
                        f"{args.runs / timing.median_s:6.1f} runs/s  (runs: {each})",
                        flush=True,
                    )
            finally:
                if head is not None:
                    stop(head)
        load_end = os.getloadavg()
    finally:
        stop(server)
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        report = {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": load_end,
            "timings": [{**asdict(t), "median_s": t.median_s, "runs_per_s": t.runs / t.median_s} for t in timings],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
