"""`logscope scan` over a CI history built from the real fixture trees: folders, archives, a nested group, a
bare torchrun log folder, and runs that cannot be read."""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import typer
from typer.testing import CliRunner, Result

from logscope.compare import scan
from logscope.model import Analysis

REPO = Path(__file__).resolve().parents[2]
REAL_RUNS = REPO / "fixtures" / "real" / "runs"
REAL_PUBLIC = REPO / "fixtures" / "real" / "public"
GENERATED_RUNS = REPO / "fixtures" / "runs"
GPU_RUNS = [REPO / "fixtures" / "gpu" / name for name in ("stall_rank1_watchdog_ws2_hostid", "oom_rank1_ws2_hostid")]

FOLDER_RUNS = [
    *sorted(p for p in REAL_RUNS.iterdir() if p.is_dir()),
    *sorted(p for p in REAL_PUBLIC.iterdir() if p.is_dir()),
    *GPU_RUNS,
]
ZIPPED = GENERATED_RUNS / "sigkill_rank1"
TARRED = GENERATED_RUNS / "python_exception_record"
NESTED = GENERATED_RUNS / "healthy_ws2"
BARE_LOG_DIR = GENERATED_RUNS / "skip_allreduce_rank1"  # only its torchrun --log_dir tree is copied
DAY_1, DAY_2 = 1_764_000_000, 1_764_086_400  # two CI days, as file modification times
UNREADABLE = ("truncated.zip", "empty-run")


@dataclass
class History:
    root: Path
    sources: dict[str, Path]  # expected run name -> the fixture tree it holds
    stamps: dict[str, int]


def _touch_tree(root: Path, stamp: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.utime(path, (stamp, stamp))


def _zip(source: Path, target: Path) -> None:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(source.parent).as_posix())


def _tar(source: Path, target: Path) -> None:
    with tarfile.open(target, "w:gz") as archive:
        archive.add(source, arcname=source.name)


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    return build_history(tmp_path_factory.mktemp("history"))


def build_history(root: Path) -> History:
    """The CI history in `root` (also scanned from object storage by test_fleet_s3.py)."""
    sources: dict[str, Path] = {}
    stamps: dict[str, int] = {}
    for index, source in enumerate(FOLDER_RUNS):
        shutil.copytree(source, root / source.name)
        stamps[source.name] = DAY_1 if index % 2 else DAY_2
        _touch_tree(root / source.name, stamps[source.name])
        sources[source.name] = source
    _zip(ZIPPED, root / "sigkill.zip")
    sources["sigkill.zip"] = ZIPPED
    _tar(TARRED, root / "exception.tar.gz")
    sources["exception.tar.gz"] = TARRED
    nested = root / "nightly" / "2026-12-01"
    nested.mkdir(parents=True)
    shutil.copytree(NESTED, nested / NESTED.name)
    sources[f"nightly/2026-12-01/{NESTED.name}"] = NESTED
    shutil.copytree(BARE_LOG_DIR / "logs", root / "bare-log-dir")
    sources["bare-log-dir"] = BARE_LOG_DIR / "logs"
    # runs that cannot be read: a truncated zip, and a folder holding nothing that looks like a log
    data = (root / "sigkill.zip").read_bytes()
    (root / "truncated.zip").write_bytes(data[:200])
    (root / "empty-run").mkdir()
    shutil.copy(ZIPPED / "scenario.yaml", root / "empty-run" / "scenario.yaml")
    (root / "README.md").write_text("a loose file at the top of the history is not a run\n")
    return History(root, sources, stamps)


@pytest.fixture(scope="module")
def scanned(
    history: History, compare_app: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Result, pl.DataFrame]:
    out = tmp_path_factory.mktemp("out") / "runs.parquet"
    result = CliRunner().invoke(compare_app, ["scan", str(history.root), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return result, pl.read_parquet(out)


def test_discovery_finds_folders_archives_nested_groups_and_bare_log_dirs(history: History) -> None:
    names = [entry.name for entry in scan.discover_runs(history.root)]
    assert sorted(names) == sorted([*history.sources, *UNREADABLE])
    assert len(names) >= 20


def test_scan_writes_one_row_per_run_with_the_verdict_of_each(
    history: History, scanned: tuple[Result, pl.DataFrame], analysed: Callable[[Path], Analysis]
) -> None:
    _, table = scanned
    assert table.columns == list(scan.RUN_SCHEMA)
    assert sorted(table["run"].to_list()) == sorted([*history.sources, *UNREADABLE])
    rows = {row["run"]: row for row in table.iter_rows(named=True)}
    for name, source in history.sources.items():
        expected = analysed(source).diagnosis
        row = rows[name]
        assert row["error"] is None, (name, row["error"])
        assert row["verdict"] == expected["verdict"]["category"], name
        assert row["culprit_ranks"] == expected["verdict"]["culprit_ranks"], name
        assert row["confidence"] == pytest.approx(expected["verdict"]["confidence"])
        assert row["world_size"] == expected["job"]["world_size"], name
        assert row["rules"] == list(dict.fromkeys(f["rule"] for f in expected["findings"])), name
    for name in UNREADABLE:
        assert rows[name]["verdict"] is None
        assert rows[name]["error"], name


def test_scan_reads_archives_as_the_runs_they_hold(scanned: tuple[Result, pl.DataFrame]) -> None:
    _, table = scanned
    rows = {row["run"]: row for row in table.iter_rows(named=True)}
    assert rows["sigkill.zip"]["verdict"] not in (None, "healthy")
    assert rows["exception.tar.gz"]["verdict"] not in (None, "healthy")


def test_scan_records_when_each_run_happened(history: History, scanned: tuple[Result, pl.DataFrame]) -> None:
    _, table = scanned
    rows = {row["run"]: row for row in table.iter_rows(named=True)}
    for name, stamp in history.stamps.items():
        assert rows[name]["mtime"] == datetime.fromtimestamp(stamp, tz=UTC)


def test_scan_summary_names_the_failure_classes_and_when_they_were_seen(
    scanned: tuple[Result, pl.DataFrame],
) -> None:
    result, table = scanned
    failing = table.filter(pl.col("verdict").is_not_null() & (pl.col("verdict") != "healthy"))
    counts = failing.group_by("verdict").len()
    assert counts.height > 0
    for category, runs in counts.iter_rows():
        assert category in result.output
        if runs > 1:
            assert f"{runs} (recurring)" in result.output
    healthy = table.filter(pl.col("verdict") == "healthy").height
    assert f"{table.height} runs: {healthy} healthy, {failing.height} failing, 2 could not be analysed" in (
        result.output
    )
    assert "truncated.zip" in result.output and "empty-run" in result.output
    classes = scan.failure_classes(table)
    recurring = classes[0]
    first = table.filter(pl.col("verdict") == recurring.category)["mtime"].min()
    assert recurring.first_seen == first
    assert recurring.first_seen is not None and recurring.first_seen.strftime("%Y-%m-%d %H:%M") in result.output


def test_failure_classes_count_nodes_and_gpus_across_runs(analysed: Callable[[Path], Analysis]) -> None:
    duplicate_gpu = REAL_PUBLIC / "13_megatron_duplicate_gpu_interleaved"
    facts = scan.run_facts(analysed(duplicate_gpu))
    printed = re.search(r"both on CUDA device ([0-9a-f]+)", (duplicate_gpu / "console.log").read_text())
    assert printed is not None
    assert facts["bus_ids"] == [printed[1]]  # the log names no host for it
    stamp = datetime(2026, 12, 1, tzinfo=UTC)
    rows = [
        {
            **dict.fromkeys(scan.RUN_SCHEMA),
            **facts,
            "run": f"r{i}",
            "path": "p",
            "mtime": stamp,
            "error": None,
        }
        for i in range(3)
    ]
    table = pl.DataFrame(rows, schema=scan.RUN_SCHEMA, orient="row")
    (item,) = scan.failure_classes(table)
    assert item.runs == 3
    assert item.nodes == {node: 3 for node in facts["failing_nodes"]}
    assert item.gpus == {gpu: 3 for gpu in facts["bus_ids"]}


BUS_ID = re.compile(r"busId ([0-9a-f]+)")


def test_scan_names_the_gpus_of_the_failing_ranks(
    scanned: tuple[Result, pl.DataFrame], analysed: Callable[[Path], Analysis]
) -> None:
    _, table = scanned
    rows = {row["run"]: row for row in table.iter_rows(named=True)}
    for run in GPU_RUNS:
        row = rows[run.name]
        assert row["failing_ranks"], run.name
        hosts = {rank["rank"]: rank["host"] for rank in analysed(run).diagnosis["ranks"]}
        expected = set()
        for rank in row["failing_ranks"]:
            # NCCL's init lines in that rank's own log, read without logscope
            (stdout,) = run.glob(f"logs/*/attempt_0/{rank}/stdout.log")
            for bus_id in BUS_ID.findall(stdout.read_text()):
                expected.add(f"{hosts[rank]}:{bus_id}" if hosts[rank] else bus_id)
        assert expected and set(row["bus_ids"]) == expected, run.name
        assert row["failing_nodes"] == sorted({hosts[rank] for rank in row["failing_ranks"] if hosts[rank]})


def test_scan_writes_csv_with_list_columns_joined(history: History, compare_app: typer.Typer, tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    names = ["[/] not markup", *(source.name for source in FOLDER_RUNS[1:3])]  # run names are any file names
    for name, source in zip(names, FOLDER_RUNS[:3], strict=True):
        shutil.copytree(source, small / name)
    out = tmp_path / "runs.csv"
    result = CliRunner().invoke(compare_app, ["scan", str(small), "--out", str(out)])
    assert result.exit_code == 0, result.output
    table = pl.read_csv(out)
    assert table["run"].to_list() == sorted(names)
    assert table.schema["rules"] == pl.String
    parquet = tmp_path / "runs.parquet"
    assert CliRunner().invoke(compare_app, ["scan", str(small), "--out", str(parquet)]).exit_code == 0
    lists = pl.read_parquet(parquet)
    expected = [";".join(rules) for rules in lists["rules"].to_list()]
    assert table["rules"].fill_null("").to_list() == expected


def _scan_args(case: str, tmp: Path) -> list[str]:
    if case == "missing-folder":
        return [str(tmp / "missing")]
    if case == "empty-folder":
        (tmp / "nothing").mkdir()
        return [str(tmp / "nothing")]
    if case == "bad-rule-file":
        (tmp / "rules").mkdir()
        (tmp / "rules" / "LS999_broken.yaml").write_text("id: [unclosed\n")
        return [str(REAL_RUNS), "--rules", str(tmp / "rules")]
    if case == "bad-extension":
        return [str(REAL_RUNS), "--out", str(tmp / "runs.json")]
    return [str(REAL_RUNS), "--out", str(tmp / "no" / "such" / "runs.csv")]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing-folder", "not a folder"),
        ("empty-folder", "no runs found"),
        ("bad-rule-file", "LS999_broken.yaml"),
        ("bad-extension", ".parquet or .csv"),
        ("unwritable-output", "does not exist"),
    ],
)
def test_scan_tool_errors_exit_2_with_one_line(
    case: str, message: str, compare_app: typer.Typer, tmp_path: Path
) -> None:
    result = CliRunner().invoke(compare_app, ["scan", *_scan_args(case, tmp_path)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def die_on_marked_runs(entry: scan.RunEntry, rules_dirs: list[Path]) -> dict[str, Any]:
    """A worker that dies the way an out-of-memory kill looks to the pool (runs in a spawned process)."""
    if entry.name.startswith("die"):
        os._exit(137)
    return scan.analyse_run(entry, rules_dirs)


def test_a_worker_that_dies_costs_its_own_run_only(tmp_path: Path, analysed: Callable[[Path], Analysis]) -> None:
    for name in ("a", "die", "b", "c"):
        shutil.copytree(REAL_RUNS / "01_healthy_ws2", tmp_path / name)
    runs = scan.discover_runs(tmp_path)
    done: list[str] = []
    table = scan.scan_runs(runs, [], lambda row: done.append(row["run"]), max_workers=2, worker=die_on_marked_runs)
    rows = {row["run"]: row for row in table.iter_rows(named=True)}
    assert sorted(done) == ["a", "b", "c", "die"]
    assert "died" in rows["die"]["error"]
    for name in ("a", "b", "c"):
        assert rows[name]["error"] is None
        assert rows[name]["verdict"] == analysed(REAL_RUNS / "01_healthy_ws2").diagnosis["verdict"]["category"]
