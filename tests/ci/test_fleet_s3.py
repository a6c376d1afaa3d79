"""`logscope scan s3://...` against a real S3 API (moto's server on loopback) and `--ray` on a local Ray: the
table equals a local scan of the same runs, over the CI history and over 1000 small runs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import typer
from test_ci_scan import REAL_PUBLIC, REAL_RUNS, History, build_history
from typer.testing import CliRunner

from logscope.compare import fleet, scan
from logscope.errors import LogscopeError

ray = pytest.importorskip("ray")
s3fs = pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

BUCKET = "fleet-logs"
KEY, SECRET = "testing", "testing"  # moto accepts any credentials
SOURCES = sorted(p for root in (REAL_RUNS, REAL_PUBLIC) for p in root.iterdir() if p.is_dir())
FLEET_RUNS = 1000
FOLDER_EVERY = 10  # one run in ten is a folder, the others .tar.gz archives (as CI artifacts are kept)
DAYS = 10


@dataclass
class S3:
    endpoint: str
    fs: Any  # s3fs.S3FileSystem

    def options(self) -> list[str]:
        """The endpoint and credentials as `--storage-option` flags (what a Ray worker is handed)."""
        pairs = {"endpoint_url": self.endpoint, "key": KEY, "secret": SECRET}
        return [arg for key, value in pairs.items() for arg in ("--storage-option", f"{key}={value}")]

    def state(self, prefix: str) -> dict[str, tuple[Any, Any]]:
        """Every object under prefix with its size and ETag: what "the input was not modified" compares."""
        self.fs.invalidate_cache()
        return {path: (info["size"], info.get("ETag")) for path, info in self.fs.find(prefix, detail=True).items()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, endpoint_url=endpoint)
    fs.mkdir(BUCKET)
    try:
        yield S3(endpoint, fs)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray on this machine's two cores; `logscope scan --ray` uses the connection the process has."""
    ray.init(
        address="local",  # a Ray of its own, even where a cluster was started on this machine before
        _node_ip_address="127.0.0.1",  # loopback only: Ray would otherwise bind to this machine's network address
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=100 * 1024 * 1024,
    )
    try:
        yield
    finally:
        ray.shutdown()


@dataclass
class Uploaded:
    history: History
    url: str
    before: datetime  # LastModified is whole seconds
    after: datetime


@pytest.fixture(scope="module")
def uploaded(s3: S3, tmp_path_factory: pytest.TempPathFactory) -> Uploaded:
    history = build_history(tmp_path_factory.mktemp("history"))
    before = datetime.now(UTC).replace(microsecond=0)
    s3.fs.put(str(history.root), f"{BUCKET}/history", recursive=True)
    after = datetime.now(UTC) + timedelta(seconds=1)
    return Uploaded(history, f"s3://{BUCKET}/history", before, after)


def _scan(app: typer.Typer, args: list[str], out: Path) -> pl.DataFrame:
    result = CliRunner().invoke(app, ["scan", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return pl.read_parquet(out)


@pytest.fixture(scope="module")
def local_table(uploaded: Uploaded, compare_app: typer.Typer, tmp_path_factory: pytest.TempPathFactory) -> pl.DataFrame:
    return _scan(compare_app, [str(uploaded.history.root)], tmp_path_factory.mktemp("local") / "runs.parquet")


@pytest.fixture(scope="module")
def s3_table(
    uploaded: Uploaded, s3: S3, compare_app: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[pl.DataFrame, Path]:
    """A scan of the bucket in the local pool of processes, configured the standard way (AWS_* variables)."""
    scratch = tmp_path_factory.mktemp("scratch")
    patch = pytest.MonkeyPatch()
    for name, value in {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "TMPDIR": str(scratch),  # the spawned workers' temporary folders go here
    }.items():
        patch.setenv(name, value)
    try:
        return _scan(compare_app, [uploaded.url], tmp_path_factory.mktemp("s3") / "runs.parquet"), scratch
    finally:
        patch.undo()


def test_an_s3_scan_gives_the_local_table(
    uploaded: Uploaded, local_table: pl.DataFrame, s3_table: tuple[pl.DataFrame, Path]
) -> None:
    remote, _ = s3_table
    assert remote["run"].to_list() == local_table["run"].to_list()
    assert remote.height >= 20
    assert remote["path"].to_list() == [f"{uploaded.url}/{run}" for run in local_table["run"].to_list()]
    assert remote.drop("path", "mtime", "error").equals(local_table.drop("path", "mtime", "error"))
    errors = dict(remote.filter(pl.col("error").is_not_null()).select("run", "error").iter_rows())
    assert sorted(errors) == ["empty-run", "truncated.zip"]
    assert all(f"{uploaded.url}/{run}" in error for run, error in errors.items())
    # when a run happened, as the store knows it: when its newest object was written
    for stamp in remote["mtime"].to_list():
        assert uploaded.before <= stamp <= uploaded.after


def test_an_s3_scan_reads_the_bucket_only_and_leaves_no_copies(
    uploaded: Uploaded, s3: S3, s3_table: tuple[pl.DataFrame, Path]
) -> None:
    _, scratch = s3_table
    objects = s3.state(f"{BUCKET}/history")
    expected = {
        f"{BUCKET}/history/{p.relative_to(uploaded.history.root).as_posix()}": p.stat().st_size
        for p in uploaded.history.root.rglob("*")
        if p.is_file()
    }
    assert {path: size for path, (size, _) in objects.items()} == expected
    assert list(scratch.iterdir()) == []


def test_ray_gives_the_same_table(
    uploaded: Uploaded,
    s3: S3,
    s3_table: tuple[pl.DataFrame, Path],
    local_table: pl.DataFrame,
    local_ray: None,
    compare_app: typer.Typer,
    tmp_path: Path,
) -> None:
    before = s3.state(f"{BUCKET}/history")
    on_ray = _scan(compare_app, [uploaded.url, "--ray", *s3.options()], tmp_path / "ray.parquet")
    assert on_ray.equals(s3_table[0])
    assert s3.state(f"{BUCKET}/history") == before
    local_on_ray = _scan(compare_app, [str(uploaded.history.root), "--ray"], tmp_path / "local.parquet")
    assert local_on_ray.equals(local_table)


def _fleet_tree(root: Path) -> dict[str, Path]:
    """FLEET_RUNS runs, real fixture runs copied: `day-NN/run-NNNN.tar.gz` (or a folder), run -> its source."""
    archives = root.parent / f"{root.name}-archives"
    archives.mkdir()
    for source in SOURCES:
        with tarfile.open(archives / f"{source.name}.tar.gz", "w:gz") as archive:
            archive.add(source, arcname=source.name)
    runs: dict[str, Path] = {}
    for index in range(FLEET_RUNS):
        source = SOURCES[index % len(SOURCES)]
        day = root / f"day-{index % DAYS:02d}"
        day.mkdir(parents=True, exist_ok=True)
        if index % FOLDER_EVERY == 0:
            name = f"run-{index:04d}"
            shutil.copytree(source, day / name)
        else:
            name = f"run-{index:04d}.tar.gz"
            shutil.copy(archives / f"{source.name}.tar.gz", day / name)
        runs[f"{day.name}/{name}"] = day / name
    return runs


FACTS = [column for column in scan.RUN_SCHEMA if column not in ("run", "path", "mtime")]


def test_a_thousand_runs_on_ray_from_s3(s3: S3, local_ray: None, compare_app: typer.Typer, tmp_path: Path) -> None:
    runs = _fleet_tree(tmp_path / "fleet")
    s3.fs.put(str(tmp_path / "fleet"), f"{BUCKET}/fleet", recursive=True)
    # the local scan of the same runs: every copy of a source in one form (folder, archive) has one row
    expected: dict[tuple[str, bool], tuple[str, dict[str, Any]]] = {}
    for name, path in runs.items():
        key = (runs_source(name), path.is_dir())
        if key not in expected:
            expected[key] = path.name, scan.analyse_run(scan.RunEntry(name, path), [])
    started = time.perf_counter()
    table = _scan(compare_app, [f"s3://{BUCKET}/fleet", "--ray", *s3.options()], tmp_path / "fleet.parquet")
    elapsed = time.perf_counter() - started
    assert table.height == FLEET_RUNS
    assert table["run"].to_list() == sorted(runs)
    for row in table.iter_rows(named=True):
        path = runs[row["run"]]
        analysed_as, want = expected[(runs_source(row["run"]), path.is_dir())]
        # node names inside an archive carry the archive's name ("run-0061.tar.gz!<run>/logs/none_…")
        want = {column: _renamed(want[column], analysed_as, path.name) for column in FACTS}
        assert {column: row[column] for column in FACTS} == want, row["run"]
    assert table.filter(pl.col("error").is_not_null()).height == 0
    print(f"\n{FLEET_RUNS} runs from S3 on Ray: {elapsed:.1f} s, {FLEET_RUNS / elapsed:.1f} runs/s")


def _renamed(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(f"{old}!", f"{new}!")
    if isinstance(value, list):
        return [_renamed(item, old, new) for item in value]
    return value


def runs_source(name: str) -> str:
    index = int(name.rsplit("run-", 1)[1][:4])
    return SOURCES[index % len(SOURCES)].name


def test_a_ray_worker_that_dies_costs_its_own_run_only(local_ray: None, tmp_path: Path) -> None:
    for name in ("a", "die", "b"):
        shutil.copytree(REAL_RUNS / "01_healthy_ws2", tmp_path / name)

    def die_on_marked_runs(entry: scan.RunEntry, rules_dirs: list[Path]) -> dict[str, Any]:
        if entry.name == "die":
            os._exit(137)  # what an out-of-memory kill looks like to Ray
        return scan.analyse_run(entry, rules_dirs)

    done: list[str] = []
    table = fleet.scan_with_ray(
        scan.discover_runs(tmp_path), [], lambda row: done.append(row["run"]), die_on_marked_runs
    )
    rows = {row["run"]: row for row in table.iter_rows(named=True)}
    assert sorted(done) == ["a", "b", "die"]
    assert rows["die"]["error"] == scan.WORKER_DIED
    assert rows["a"]["verdict"] == rows["b"]["verdict"] == "healthy"


def test_extra_rules_travel_with_the_tasks(local_ray: None, tmp_path: Path) -> None:
    """A worker on another node has no copy of --rules: the tasks carry the rule files' text."""
    rules = tmp_path / "rules"
    rules.mkdir()
    rule = REAL_RUNS.parents[2] / "rules" / "LS101_collective_timeout.yaml"  # fires on run 03
    (rules / "LS990_extra.yaml").write_text(rule.read_text().replace("LS101", "LS990"))
    shutil.copytree(REAL_RUNS / "03_skip_allreduce_rank1_stall_gloo_timeout", tmp_path / "runs" / "a")

    def rules_seen(entry: scan.RunEntry, rules_dirs: list[Path]) -> dict[str, Any]:
        row = scan.analyse_run(entry, rules_dirs)
        row["summary"] = json.dumps([(str(d), sorted(p.read_text() for p in d.iterdir())) for d in rules_dirs])
        return row

    table = fleet.scan_with_ray(scan.discover_runs(tmp_path / "runs"), [rules], lambda row: None, rules_seen)
    ((folder, texts),) = json.loads(table["summary"][0])
    assert folder != str(rules) and texts == [(rules / "LS990_extra.yaml").read_text()]
    assert "LS990" in table["rules"][0]


def test_workers_running_another_logscope_are_refused(local_ray: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "__version__", "0.0.0-driver")  # the workers import the installed one
    with pytest.raises(LogscopeError, match=r"the Ray workers run logscope \S+, this is 0\.0\.0-driver"):
        fleet.scan_with_ray([], [], lambda row: None, scan.analyse_run)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("s3://no-such-bucket/runs", "cannot list"),
        (f"s3://{BUCKET}/history/sigkill.zip", "not a folder"),
        (f"s3://{BUCKET}/nothing-here", "no runs found"),
    ],
)
def test_bad_s3_input_is_one_line_and_exit_2(
    target: str, message: str, uploaded: Uploaded, s3: S3, compare_app: typer.Typer
) -> None:
    result = CliRunner().invoke(compare_app, ["scan", target, *s3.options()])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_ray_without_an_address_starts_its_own_despite_a_dead_cluster_left_behind(tmp_path: Path) -> None:
    """`ray start --head` records its address in <ray tmp>/ray_current_cluster, and the file outlives a cluster that
    was killed. Ray's default for ray.init() would connect to it and wait forever; `--ray` starts a local Ray."""
    import subprocess
    import sys
    import tempfile

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    # Ray's unix sockets live under its temp dir, whose path must stay short (108 bytes for a socket path)
    ray_tmp = Path(tempfile.mkdtemp(prefix="lsr", dir="/tmp"))
    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{dead}")
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(ray_tmp)}
        done = subprocess.run(
            [sys.executable, "-m", "logscope", "scan", str(REAL_RUNS), "--ray", "--out", str(tmp_path / "r.csv")],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert len(pl.read_csv(tmp_path / "r.csv")) == len([p for p in REAL_RUNS.iterdir() if p.is_dir()])
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
