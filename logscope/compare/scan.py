"""`logscope scan DIR`: analyse a folder of many runs (CI history): which failures recur, where, since when.

Which entries are runs: every immediate subfolder or archive of DIR. A subfolder that holds only folders and
archives, none of them part of a torchrun log tree (`attempt_N` folders, or a rendezvous folder holding them),
is a group of runs (`nightly/2026-12-01/run_a`), and its entries are runs in turn. Loose files at the top of
DIR (an index, a previous scan's table) are not runs. The same rules apply to a folder in object storage
(logscope.compare.fleet), whose listing is walked through the `TreeNode` interface that `Path` already has.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import polars as pl
import regex
from rich.table import Table
from rich.text import Text

from logscope.analysis import analyze
from logscope.errors import InputError, LogscopeError, OutputError
from logscope.model import Analysis
from logscope.vocab import SEVERITY_ORDER, Finding

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar", ".gz")
ATTEMPT_DIR = regex.compile(r"attempt_\d+")
MAX_GROUP_DEPTH = 8
WORKER_DIED = "the worker process analysing this run died (out of memory?)"

# One row per run. List columns hold ranks, nodes, GPUs and rule ids; CSV output joins them with ";".
RUN_SCHEMA: dict[str, pl.DataType] = {
    "run": pl.String(),  # the run's path relative to DIR
    "path": pl.String(),  # the run's path as given (DIR joined with `run`)
    "mtime": pl.Datetime("us", "UTC"),  # newest file modification time in the run
    "verdict": pl.String(),  # verdict category; null when the run could not be analysed
    "culprit_ranks": pl.List(pl.Int64()),
    "confidence": pl.Float64(),
    "world_size": pl.Int64(),
    "nnodes": pl.Int64(),
    "failing_ranks": pl.List(pl.Int64()),  # the culprits, else the ranks that exited non-zero or by a signal
    "failing_nodes": pl.List(pl.String()),  # hosts of the failing ranks (else torchrun's per-node folder)
    "bus_ids": pl.List(pl.String()),  # PCI busIds of the failing ranks' GPUs ("host:busId" with a host)
    "rules": pl.List(pl.String()),  # ids of the rules that fired, in finding order
    "worst_severity": pl.String(),
    "findings": pl.Int64(),
    "summary": pl.String(),
    "next_step": pl.String(),  # workflow step id (W1..W10)
    "error": pl.String(),  # why the run could not be analysed; null when it was
}
LIST_COLUMNS = [name for name, dtype in RUN_SCHEMA.items() if isinstance(dtype, pl.List)]


class TreeNode(Protocol):
    """A folder or file that discovery walks: a local `Path`, or an entry of an object-store listing."""

    @property
    def name(self) -> str: ...

    def is_dir(self) -> bool: ...

    def is_file(self) -> bool: ...

    def is_symlink(self) -> bool: ...

    def iterdir(self: NodeT) -> Iterator[NodeT]: ...


NodeT = TypeVar("NodeT", bound=TreeNode)


class ScanEntry(Protocol):
    """One run to analyse: a `RunEntry` here, or a run in object storage (`fleet.RemoteRun`)."""

    @property
    def name(self) -> str: ...

    def blank_row(self) -> dict[str, Any]: ...


EntryT = TypeVar("EntryT", bound=ScanEntry)


@dataclass(frozen=True)
class RunEntry:
    name: str  # relative to the scanned folder, with "/" separators
    path: Path

    def blank_row(self) -> dict[str, Any]:
        return blank_row(self.name, str(self.path), newest_mtime(self.path))


def is_archive(path: TreeNode) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def discover_runs(root: Path) -> list[RunEntry]:
    if not root.is_dir():
        raise InputError(f"{root}: not a folder (scan takes a folder of runs)")
    return [RunEntry(name, path) for name, path in find_runs(root)]


def find_runs(root: NodeT) -> list[tuple[str, NodeT]]:
    """The runs under `root`, each with its name relative to it ("/" separators)."""
    runs: list[tuple[str, NodeT]] = []
    _collect(root, "", runs, depth=0)
    return runs


def _children(folder: NodeT) -> list[NodeT]:
    try:
        return sorted((child for child in folder.iterdir() if not child.name.startswith(".")), key=_name)
    except OSError as exc:
        raise InputError(f"{folder}: cannot list the folder: {exc.strerror or exc}") from None


def _name(node: TreeNode) -> str:
    return node.name


def _collect(folder: NodeT, prefix: str, runs: list[tuple[str, NodeT]], depth: int) -> None:
    for child in _children(folder):
        if child.is_symlink():
            continue  # a link may point back up the tree; runs are real folders and files
        if child.is_dir():
            if depth < MAX_GROUP_DEPTH and _is_group(child):
                _collect(child, f"{prefix}{child.name}/", runs, depth + 1)
            else:
                runs.append((prefix + child.name, child))
        elif child.is_file() and is_archive(child):
            runs.append((prefix + child.name, child))


def _is_torchrun_dir(folder: TreeNode) -> bool:
    """An `attempt_N` folder, or torchrun's per-run folder (`<run_id>_<random>`) that holds them."""
    if ATTEMPT_DIR.fullmatch(folder.name):
        return True
    return any(child.is_dir() and ATTEMPT_DIR.fullmatch(child.name) for child in _children(folder))


def _is_group(folder: TreeNode) -> bool:
    children = _children(folder)
    if not children:
        return False  # an empty folder is a run with nothing in it: recorded as unreadable
    for child in children:
        if child.is_file() and not is_archive(child):
            return False
        if child.is_dir() and _is_torchrun_dir(child):
            return False
    return True


def newest_mtime(path: Path) -> datetime | None:
    try:
        if path.is_file():
            stamp = path.stat().st_mtime
        else:
            stamps = [p.stat().st_mtime for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
            if not stamps:
                return None
            stamp = max(stamps)
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, tz=UTC)


def blank_row(name: str, path: str, mtime: datetime | None) -> dict[str, Any]:
    """A run's row before (or without) its analysis."""
    row: dict[str, Any] = dict.fromkeys(RUN_SCHEMA)
    row.update(run=name, path=path, mtime=mtime)
    for column in LIST_COLUMNS:
        row[column] = []
    return row


def analyse_run(entry: RunEntry, rules_dirs: list[Path]) -> dict[str, Any]:
    """One table row for one run (runs in a worker process, so it returns plain data, not the Analysis)."""
    return analysed_row(entry.blank_row(), entry.path, rules_dirs)


def analysed_row(row: dict[str, Any], path: Path, rules_dirs: list[Path]) -> dict[str, Any]:
    """`row` completed with the analysis of the run at `path` (or with why it could not be analysed)."""
    try:
        analysis = analyze(path, rules_dirs=rules_dirs)
    except LogscopeError as exc:
        row["error"] = str(exc)
        return row
    except Exception as exc:  # one run that breaks the analyser must not stop a scan of hundreds
        row["error"] = f"internal error: {type(exc).__name__}: {exc}"
        return row
    row.update(run_facts(analysis))
    return row


def run_facts(analysis: Analysis) -> dict[str, Any]:
    diagnosis = analysis.diagnosis
    verdict: dict[str, Any] = diagnosis["verdict"]
    job: dict[str, Any] = diagnosis["job"]
    findings: list[Finding] = diagnosis["findings"]
    ranks: list[dict[str, Any]] = diagnosis["ranks"]
    culprits = [int(rank) for rank in verdict["culprit_ranks"]]
    failing = culprits or sorted(
        {
            int(rank["rank"])
            for rank in ranks
            if rank["rank"] is not None and (rank["exit_code"] not in (None, 0) or rank["signal"])
        }
    )
    # the host when the logs name it; else torchrun's per-node run folder
    nodes = {
        rank["rank"]: rank.get("host") or rank["node"]
        for rank in ranks
        if rank["rank"] is not None and (rank.get("host") or rank["node"])
    }
    severities = [finding["severity"] for finding in findings]
    return {
        "verdict": verdict["category"],
        "culprit_ranks": culprits,
        "confidence": float(verdict["confidence"]),
        "world_size": job["world_size"],
        "nnodes": job["nnodes"],
        "failing_ranks": failing,
        "failing_nodes": sorted({nodes[rank] for rank in failing if rank in nodes}),
        "bus_ids": bus_ids(analysis, failing),
        "rules": list(dict.fromkeys(finding["rule"] for finding in findings)),
        "worst_severity": max(severities, key=SEVERITY_ORDER.__getitem__) if severities else None,
        "findings": len(findings),
        "summary": verdict["summary"],
        "next_step": verdict["next_step"]["id"],
    }


def bus_ids(analysis: Analysis, failing: Iterable[int]) -> list[str]:
    """The GPUs (PCI busId) that the failing ranks ran on, from the ranks table and from any event naming a
    busId for one of them (NCCL init lines, "Duplicate GPU detected"). As `host:busId` when the rank's host is
    known: the same busId on two hosts is two GPUs."""
    wanted = set(failing)
    if not wanted:
        return []
    hosts = {rank["rank"]: rank.get("host") for rank in analysis.diagnosis["ranks"] if rank["rank"] is not None}
    found: set[str] = set()

    def add(rank: int, bus_id: object) -> None:
        if bus_id:
            host = hosts.get(rank)
            found.add(f"{host}:{bus_id}" if host else str(bus_id))

    for rank in analysis.diagnosis["ranks"]:
        if rank["rank"] in wanted:
            add(rank["rank"], rank.get("bus_id"))
    events = analysis.events.filter(pl.col("fields").str.contains('"bus_id"', literal=True))
    for event_rank, raw in events.select("rank", "fields").iter_rows():
        fields = json.loads(raw)
        named = {event_rank, *(fields.get(key) for key in ("rank_a", "rank_b"))}
        for rank in wanted & {int(value) for value in named if value is not None}:
            add(rank, fields["bus_id"])
    return sorted(found)


def scan_runs(
    runs: Sequence[EntryT],
    rules_dirs: list[Path],
    on_done: Callable[[dict[str, Any]], None],
    worker: Callable[[EntryT, list[Path]], dict[str, Any]],
    max_workers: int | None = None,
) -> pl.DataFrame:
    """Analyse every run in a bounded pool of processes; a worker that dies costs its run, not the scan.

    When a worker dies, the pool is lost with every run it had not finished. Those runs are tried again one at
    a time, where the run whose worker dies is known for certain; then the scan goes back to the full pool.
    """
    workers = max_workers or min(2, os.cpu_count() or 1)
    # spawn: the parent holds threads (the progress bar's refresher); forking a threaded process can deadlock
    context = multiprocessing.get_context("spawn")
    rows: list[dict[str, Any]] = []
    pending = list(runs)
    round_workers = workers
    while pending:
        lost: list[EntryT] = []
        with ProcessPoolExecutor(max_workers=round_workers, mp_context=context) as pool:
            futures = [(pool.submit(worker, entry, rules_dirs), entry) for entry in pending]
            for future, entry in futures:
                try:
                    row = future.result()
                except BrokenProcessPool:
                    lost.append(entry)
                    continue
                rows.append(row)
                on_done(row)
        if lost and round_workers == 1:
            # one worker runs the runs in order: the first one lost is the one whose worker died
            row = lost.pop(0).blank_row()
            row["error"] = WORKER_DIED
            rows.append(row)
            on_done(row)
            round_workers = workers
        elif lost:
            round_workers = 1
        pending = lost
    return runs_table(runs, rows)


def runs_table(runs: Sequence[ScanEntry], rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The rows in the order of discovery, whichever order the workers finished them in."""
    order = {entry.name: index for index, entry in enumerate(runs)}
    rows.sort(key=lambda row: order[row["run"]])
    return pl.DataFrame(rows, schema=RUN_SCHEMA, orient="row") if rows else pl.DataFrame(schema=RUN_SCHEMA)


def check_table_path(out: Path) -> Path:
    """The folder the table goes to; raises before a long scan when the table could not be written."""
    if out.suffix.lower() not in (".parquet", ".csv"):
        raise OutputError(f"{out}: the table must be .parquet or .csv")
    directory = out.parent if str(out.parent) else Path(".")
    if not directory.is_dir():
        raise OutputError(f"cannot write {out}: folder {directory} does not exist")
    return directory


def write_table(table: pl.DataFrame, out: Path) -> None:
    directory = check_table_path(out)
    suffix = out.suffix.lower()
    if suffix == ".csv":
        table = table.with_columns(
            pl.col(column).list.eval(pl.element().cast(pl.String)).list.join(";") for column in LIST_COLUMNS
        )
    # a temporary file and a rename, so that a reader never sees half a table
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise OutputError(f"cannot write {out}: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        if suffix == ".csv":
            table.write_csv(tmp)
        else:
            table.write_parquet(tmp)
        os.replace(tmp, out)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write {out}: {exc.strerror or exc}") from None
        raise


@dataclass
class FailureClass:
    """One verdict category across the scanned runs."""

    category: str
    runs: int
    first_seen: datetime | None
    last_seen: datetime | None
    nodes: Counter[str]
    gpus: Counter[str]
    rules: Counter[str]


def failure_classes(table: pl.DataFrame) -> list[FailureClass]:
    """The failure categories that occurred, most frequent first (healthy and unreadable runs left out)."""
    failed = table.filter(pl.col("verdict").is_not_null() & (pl.col("verdict") != "healthy"))
    classes: list[FailureClass] = []
    for (category,), group in failed.group_by("verdict"):
        stamps = [stamp for stamp in group["mtime"].to_list() if stamp is not None]
        classes.append(
            FailureClass(
                category=str(category),
                runs=group.height,
                first_seen=min(stamps) if stamps else None,
                last_seen=max(stamps) if stamps else None,
                nodes=Counter(node for nodes in group["failing_nodes"].to_list() for node in nodes),
                gpus=Counter(gpu for gpus in group["bus_ids"].to_list() for gpu in gpus),
                rules=Counter(rule for rules in group["rules"].to_list() for rule in rules),
            )
        )
    classes.sort(key=lambda item: (-item.runs, item.category))
    return classes


def _top(counter: Counter[str], limit: int = 4) -> str:
    if not counter:
        return "-"
    shown = ", ".join(f"{name} ×{count}" for name, count in counter.most_common(limit))
    rest = len(counter) - limit
    return shown + (f" (+{rest} more)" if rest > 0 else "")


def _day(stamp: datetime | None) -> str:
    return stamp.strftime("%Y-%m-%d %H:%M") if stamp else "-"


def summary_renderables(table: pl.DataFrame) -> list[Any]:
    """What the terminal shows after a scan: counts, recurring failure classes, runs that failed to parse."""
    analysed = table.filter(pl.col("error").is_null())
    healthy = analysed.filter(pl.col("verdict") == "healthy").height
    unreadable = table.filter(pl.col("error").is_not_null())
    head = Text(
        f"{table.height} runs: {healthy} healthy, {analysed.height - healthy} failing, "
        f"{unreadable.height} could not be analysed",
        style="bold",
    )
    parts: list[Any] = [head]
    classes = failure_classes(table)
    if classes:
        grid = Table(title="Failure classes (most frequent first)", title_justify="left")
        for column in ("verdict", "runs", "first seen", "last seen", "nodes", "GPUs (busId)", "rules"):
            grid.add_column(column, overflow="fold")
        for item in classes:
            grid.add_row(
                Text(item.category, style="bold red" if item.runs > 1 else "red"),
                str(item.runs) + (" (recurring)" if item.runs > 1 else ""),
                _day(item.first_seen),
                _day(item.last_seen),
                Text(_top(item.nodes)),  # host names come from the logs: text, never rich markup
                Text(_top(item.gpus)),
                Text(_top(item.rules, limit=3)),
            )
        parts.append(grid)
    if unreadable.height:
        errors = Table(title="Runs that could not be analysed", title_justify="left")
        errors.add_column("run", overflow="fold")
        errors.add_column("error", overflow="fold")
        for run, error in unreadable.select("run", "error").head(20).iter_rows():
            errors.add_row(Text(str(run)), Text(str(error)))
        if unreadable.height > 20:
            errors.add_row("…", f"{unreadable.height - 20} more in the table")
        parts.append(errors)
    return parts
