"""`logscope scan` with fsspec URLs, without a server: discovery over a listing, file:// URLs, the optional extra,
and bad input (one line, exit 2). Object storage and Ray themselves: test_fleet_s3.py."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import typer
from test_ci_scan import REAL_RUNS, History, build_history
from typer.testing import CliRunner

from logscope.compare import fleet, scan

fsspec = pytest.importorskip("fsspec")

FLEET_MODULES = ("ray", "fsspec", "s3fs", "moto", "botocore")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return build_history(tmp_path_factory.mktemp("history"))


@pytest.fixture
def in_memory(history: History) -> Iterator[str]:
    """The history copied into fsspec's in-memory filesystem (a listing with inferred folders, as in S3)."""
    memory = fsspec.filesystem("memory")
    root = f"/history-{uuid.uuid4().hex}"
    memory.put(str(history.root), root, recursive=True)
    yield f"memory://{root}"
    memory.rm(root, recursive=True)


def test_remote_discovery_finds_the_runs_local_discovery_finds(history: History, in_memory: str) -> None:
    local = scan.discover_runs(history.root)
    remote = fleet.discover_remote_runs(in_memory, {})
    assert [run.name for run in remote] == [entry.name for entry in local]
    by_name = {run.name: run for run in remote}
    for entry in local:
        run = by_name[entry.name]
        assert run.url == f"{in_memory}/{entry.name}"
        files = [entry.path] if entry.path.is_file() else [p for p in entry.path.rglob("*") if p.is_file()]
        # each object lands under the worker's folder as the run's own name followed by its path in the run
        expected = sorted(p.relative_to(entry.path.parent).as_posix() for p in files)
        assert sorted(relative for _, relative in run.files) == expected, entry.name


def test_remote_listing_tree_reads_folder_markers_and_ignores_siblings() -> None:
    listing = {
        "b/h": {"type": "directory"},
        "b/h/group/": {"type": "file", "size": 0},  # a console's folder marker
        "b/h/group/run.zip": {"type": "file", "LastModified": "2026-12-01T10:00:00Z"},
        "b/h/empty/": {"type": "file", "size": 0},
        "b/h-other/run.zip": {"type": "file"},  # same leading characters, another folder
    }
    tree = fleet.listing_tree("b/h", listing)
    assert sorted(tree.children) == ["empty", "group"]
    assert tree.children["empty"].is_dir() and not tree.children["empty"].children
    (name, _), (group_run, _) = scan.find_runs(tree)
    assert (name, group_run) == ("empty", "group/run.zip")
    archive = tree.children["group"].children["run.zip"]
    assert archive.is_file() and archive.mtime is not None and archive.mtime.isoformat() == "2026-12-01T10:00:00+00:00"


def test_a_remote_scan_gives_the_local_table(history: History, in_memory: str) -> None:
    # in this process: the in-memory filesystem is this process's (a spawned worker would see an empty one)
    local_runs = scan.discover_runs(history.root)
    local = scan.runs_table(local_runs, [scan.analyse_run(entry, []) for entry in local_runs])
    plan = fleet.plan_scan(in_memory, {})
    remote = scan.runs_table(plan.runs, [plan.worker(run, []) for run in plan.runs])
    assert remote["path"].to_list() == [f"{in_memory}/{run}" for run in local["run"].to_list()]
    assert remote.drop("path", "mtime", "error").equals(local.drop("path", "mtime", "error"))
    # errors name the run as given (its URL), never the worker's temporary copy
    for row_local, row_remote in zip(local.iter_rows(named=True), remote.iter_rows(named=True), strict=True):
        if row_local["error"]:
            assert row_remote["error"] == row_local["error"].replace(row_local["path"], row_remote["path"])
            assert "logscope-fleet-" not in row_remote["error"]
        else:
            assert row_remote["error"] is None
    assert remote.filter(pl.col("error").is_null()).height >= 20


def test_a_file_url_is_the_local_folder(history: History, compare_app: typer.Typer, tmp_path: Path) -> None:
    small = tmp_path / "small runs"  # a space: the URL is percent-encoded
    small.mkdir()
    for source in sorted(REAL_RUNS.iterdir())[:3]:
        shutil.copytree(source, small / source.name)
    tables = []
    for target in (str(small), small.as_uri()):
        out = tmp_path / "runs.parquet"
        result = CliRunner().invoke(compare_app, ["scan", target, "--out", str(out)])
        assert result.exit_code == 0, result.output
        tables.append(pl.read_parquet(out))
    assert tables[0].height == 3 and tables[1].equals(tables[0])


def test_the_core_install_never_imports_the_fleet_extra(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import typer\n"
        "from typer.testing import CliRunner\n"
        "from logscope.cli import app\n"
        "from logscope.compare.command import register\n"
        "scan_app = typer.Typer()\n"
        "register(scan_app)\n"
        f"result = CliRunner().invoke(scan_app, ['scan', {str(REAL_RUNS)!r}, '--out', {str(tmp_path / 'r.csv')!r}])\n"
        "assert result.exit_code == 0, result.output\n"
        f"print(sorted(m for m in {FLEET_MODULES!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "hidden", "message"),
    [
        (["s3://bucket/runs"], "fsspec", "needs the fleet extra (fsspec is not installed): pip install"),
        ([str(REAL_RUNS), "--ray"], "ray", "--ray needs the fleet extra (ray is not installed)"),
    ],
)
def test_a_missing_extra_is_one_line_and_exit_2(
    args: list[str], hidden: str, message: str, compare_app: typer.Typer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, hidden, None)  # what `import` sees when the package is not installed
    result = CliRunner().invoke(compare_app, ["scan", *args])
    assert result.exit_code == 2
    assert message in result.output and "torch-logscope[fleet]" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nosuchprotocol://bucket/runs"], "Protocol not known"),
        *([(["gs://bucket/runs"], "gcsfs")] if importlib.util.find_spec("gcsfs") is None else []),
        (["file://otherhost/runs"], "not host otherhost"),
        (["memory://nothing-here"], "no runs found"),
        (["s3://bucket/runs", "--storage-option", "endpoint_url"], "expected key=value"),
        ([str(REAL_RUNS), "--storage-option", "anon=true"], "applies to remote URLs"),
        ([str(REAL_RUNS), "--ray", "--jobs", "2"], "Ray uses the cluster's CPUs"),
    ],
)
def test_bad_fleet_input_is_one_line_and_exit_2(args: list[str], message: str, compare_app: typer.Typer) -> None:
    result = CliRunner().invoke(compare_app, ["scan", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_storage_option_values_are_json_when_they_parse() -> None:
    options = fleet.parse_storage_options(
        ["endpoint_url=http://127.0.0.1:9000", "anon=true", 'client_kwargs={"region_name": "eu"}', "a=b=c"]
    )
    assert options == {
        "endpoint_url": "http://127.0.0.1:9000",
        "anon": True,
        "client_kwargs": {"region_name": "eu"},
        "a": "b=c",
    }
