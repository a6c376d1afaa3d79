"""`logscope scan` past one machine: runs in object storage (fsspec URLs) and analyses fanned out as Ray tasks.

fsspec, s3fs and ray come with the optional `fleet` extra. They are imported here, inside the functions that
need them, so that the core install and a local scan never load them.

A remote folder is listed once (`find`: one paginated listing in an object store, not a request per folder),
and the listing is walked with the local scan's rules (`scan.find_runs`). Each run is analysed by the worker
that picks it up: its objects are copied into a private temporary folder, analysed there and deleted; the
store is only read.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

import polars as pl
import regex

from logscope import __version__
from logscope.compare import scan
from logscope.errors import InputError, LogscopeError

FLEET_HINT = "pip install 'torch-logscope[fleet]'"
URL = regex.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
WAIT_S = 0.2  # how often the driver collects finished Ray tasks
TASK_RETRIES = 1  # a task whose worker dies is tried once more (a lost node); twice is the run's own fault


def is_url(target: str) -> bool:
    return URL.match(target) is not None


def local_path(url: str) -> Path | None:
    """The folder a `file://` URL names (this machine's disk: no fsspec needed), else None."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file":
        return None
    if parts.netloc not in ("", "localhost"):
        raise InputError(f"{url}: a file:// URL names this machine's disk (file:///path), not host {parts.netloc}")
    return Path(unquote(parts.path))


def parse_storage_options(items: Sequence[str]) -> dict[str, Any]:
    """`key=value` pairs for the fsspec filesystem; a value is read as JSON when it is JSON (true, 3, {...})."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--storage-option {item!r}: expected key=value")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        options[key.strip()] = value
    return options


def _require(module: str, purpose: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LogscopeError(f"{purpose} needs the fleet extra ({module} is not installed): {FLEET_HINT}") from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _filesystem(url: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    fsspec = _require("fsspec", f"scanning {url}")
    try:
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
    except Exception as exc:  # an unknown protocol, a missing back-end (gcsfs), an option the back-end rejects
        raise InputError(f"{url}: {_one_line(exc)}") from None
    return fs, str(path).rstrip("/")


def _stamp(info: dict[str, Any]) -> datetime | None:
    """An object's modification time, under whichever key its back-end uses (s3: LastModified, gcs: updated)."""
    for key in ("LastModified", "last_modified", "mtime", "updated", "modified", "created"):
        value = info.get(key)
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value, tz=UTC)
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


@dataclass(eq=False)
class StoreNode:
    """One entry of a remote listing, shaped like a `Path` for `scan.find_runs`."""

    name: str
    path: str  # the store's path (bucket/key), without the protocol
    folder: bool
    mtime: datetime | None = None
    children: dict[str, StoreNode] = field(default_factory=dict)

    def is_dir(self) -> bool:
        return self.folder

    def is_file(self) -> bool:
        return not self.folder

    def is_symlink(self) -> bool:
        return False  # object stores have no links

    def iterdir(self) -> Iterator[StoreNode]:
        return iter(self.children.values())

    def files(self) -> Iterator[StoreNode]:
        if not self.folder:
            yield self
        for child in self.children.values():
            yield from child.files()

    def __str__(self) -> str:
        return self.path


def listing_tree(root: str, listing: dict[str, dict[str, Any]]) -> StoreNode:
    """The folder tree under `root` from a flat `find(detail=True)` listing (folders inferred from the keys)."""
    tree = StoreNode(name=root.rsplit("/", 1)[-1], path=root, folder=True)
    for path, info in sorted(listing.items()):
        if not path.startswith(root + "/"):
            continue  # the root itself, or a sibling key that merely starts with the same characters
        parts = [part for part in path[len(root) + 1 :].split("/") if part]
        # a key ending in "/" is a console's folder marker; "directory" entries are folders the back-end inferred
        leaf_is_folder = info.get("type") == "directory" or path.endswith("/")
        node = tree
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            child = node.children.get(part)
            if child is None:
                child = StoreNode(name=part, path=f"{node.path}/{part}", folder=not last or leaf_is_folder)
                node.children[part] = child
            if last and not child.folder:
                child.mtime = _stamp(info)
            node = child
    return tree


@dataclass(frozen=True)
class RemoteRun:
    """A run in object storage: its objects, and where each goes under the worker's temporary folder."""

    name: str  # relative to the scanned URL, like RunEntry.name
    url: str  # protocol://bucket/key of the run
    local_name: str  # the run's own file or folder name, kept so that archives keep their suffix
    files: tuple[tuple[str, str], ...]  # (store path, path relative to the temporary folder)
    mtime: datetime | None  # newest object in the run

    def blank_row(self) -> dict[str, Any]:
        return scan.blank_row(self.name, self.url, self.mtime)


def discover_remote_runs(url: str, storage_options: dict[str, Any]) -> list[RemoteRun]:
    fs, root = _filesystem(url, storage_options)
    try:
        listing: dict[str, dict[str, Any]] = fs.find(root, withdirs=True, detail=True)
    except Exception as exc:  # each back-end raises its own errors (botocore, aiohttp, gcsfs): one line
        raise InputError(f"{url}: cannot list: {_one_line(exc)}") from None
    if listing.get(root, {}).get("type") == "file":
        raise InputError(f"{url}: not a folder (scan takes a folder of runs)")
    protocol = url.split("://", 1)[0]
    runs: list[RemoteRun] = []
    for name, node in scan.find_runs(listing_tree(root, listing)):
        parent = node.path[: -len(node.name)]
        objects = list(node.files())
        stamps = [obj.mtime for obj in objects if obj.mtime is not None]
        runs.append(
            RemoteRun(
                name=name,
                url=f"{protocol}://{node.path}",
                local_name=node.name,
                files=tuple((obj.path, obj.path[len(parent) :]) for obj in objects),
                mtime=max(stamps) if stamps else None,
            )
        )
    return runs


def analyse_remote_run(run: RemoteRun, rules_dirs: list[Path], storage_options: dict[str, Any]) -> dict[str, Any]:
    """One table row for a run in object storage: copied into a private temporary folder, analysed, deleted."""
    row = run.blank_row()
    with tempfile.TemporaryDirectory(prefix="logscope-fleet-") as tmp:
        local = Path(tmp)
        if not run.files:
            (local / run.local_name).mkdir()  # a folder marker with nothing under it: an empty run, as locally
        try:
            fs, _ = _filesystem(run.url, storage_options)
            targets = [local / relative for _, relative in run.files]
            for target in targets:
                target.parent.mkdir(parents=True, exist_ok=True)
            if targets:
                fs.get([source for source, _ in run.files], [str(target) for target in targets])
        except Exception as exc:  # a network or permission error costs this run, not the scan
            row["error"] = f"cannot fetch the run: {_one_line(exc)}"
            return row
        row = scan.analysed_row(row, local / run.local_name, rules_dirs)
    if row["error"]:
        # the run's URL, not the temporary copy that no longer exists
        row["error"] = row["error"].replace(str(local / run.local_name), run.url)
    return row


@dataclass(frozen=True)
class ScanPlan:
    """What `logscope scan TARGET` analyses and with which function (a picklable one: it runs in workers)."""

    runs: Sequence[scan.ScanEntry]
    worker: Callable[[Any, list[Path]], dict[str, Any]]


def plan_scan(target: str, storage_options: dict[str, Any]) -> ScanPlan:
    """The runs of a local folder, a file:// URL or a remote URL, and the worker that analyses one of them."""
    path = local_path(target) if is_url(target) else Path(target)
    if path is not None:
        if storage_options:
            raise InputError("--storage-option applies to remote URLs (s3://, gs://...), not to a local folder")
        return ScanPlan(scan.discover_runs(path), scan.analyse_run)
    return ScanPlan(
        discover_remote_runs(target, storage_options),
        _RemoteWorker(storage_options),
    )


@dataclass(frozen=True)
class _RemoteWorker:
    """`analyse_remote_run` with the storage options bound (a class, not a lambda: workers unpickle it)."""

    storage_options: dict[str, Any]

    def __call__(self, run: RemoteRun, rules_dirs: list[Path]) -> dict[str, Any]:
        return analyse_remote_run(run, rules_dirs, self.storage_options)


# Ray


def pack_rules(rules_dirs: Sequence[Path]) -> list[list[tuple[str, str]]]:
    """The extra rule folders as (file name, text) lists: a Ray worker may run on a node that lacks them."""
    from logscope.rules.loader import rule_files

    return [[(path.name, path.read_text(encoding="utf-8")) for path in rule_files([folder])] for folder in rules_dirs]


def _unpack_rules(packed: list[list[tuple[str, str]]], into: Path) -> list[Path]:
    folders: list[Path] = []
    for index, files in enumerate(packed):
        folder = into / f"rules-{index}"
        folder.mkdir()
        for name, text in files:
            (folder / name).write_text(text, encoding="utf-8")
        folders.append(folder)
    return folders


def ray_task(entry: Any, packed_rules: list[list[tuple[str, str]]], worker: Callable[..., dict[str, Any]]) -> Any:
    """What one Ray task runs: the same worker as the local pool, in the (long-lived) Ray worker process."""
    if not packed_rules:
        return worker(entry, [])
    with tempfile.TemporaryDirectory(prefix="logscope-rules-") as tmp:
        return worker(entry, _unpack_rules(packed_rules, Path(tmp)))


def worker_version() -> str:
    return __version__


def scan_with_ray(
    runs: Sequence[scan.EntryT],
    rules_dirs: list[Path],
    on_done: Callable[[dict[str, Any]], None],
    worker: Callable[[scan.EntryT, list[Path]], dict[str, Any]],
    address: str | None = None,
) -> pl.DataFrame:
    """Analyse every run as one Ray task; Ray schedules them over the cluster's CPUs (no scheduler here).

    Uses the Ray connection the process already has, else `ray.init(address)`: None means RAY_ADDRESS when it is
    set, else a new local Ray; "auto" joins the cluster this machine is part of, "ray://head:10001" goes through
    Ray Client. Ray's own default for None would also try the cluster last started here (/tmp/ray/
    ray_current_cluster), and a dead one left that file behind: ray.init then waits for it forever.
    """
    ray = _require("ray", "--ray")
    started = not ray.is_initialized()
    if started:
        target = address or os.environ.get("RAY_ADDRESS") or "local"
        try:
            ray.init(address=target, log_to_driver=False, logging_level=logging.ERROR, include_dashboard=False)
        except Exception as exc:  # ConnectionError, a bad address, a cluster of another Ray version
            where = f" at {address}" if address else ""
            raise LogscopeError(f"cannot start or reach Ray{where}: {_one_line(exc)}") from None
    try:
        _check_workers(ray)
        task = ray.remote(max_retries=TASK_RETRIES)(ray_task)
        packed = ray.put(pack_rules(rules_dirs))
        entries = {task.remote(entry, packed, worker): entry for entry in runs}
        rows: list[dict[str, Any]] = []
        pending = list(entries)
        while pending:
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_S)
            for ref in ready:
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    row = entries[ref].blank_row()
                    row["error"] = _task_error(ray, exc)
                rows.append(row)
                on_done(row)
        return scan.runs_table(runs, rows)
    finally:
        if started:
            ray.shutdown()


def _check_workers(ray: ModuleType) -> None:
    """Fail once, clearly, when the workers cannot run logscope or run another version of it (other rules)."""
    try:
        version = ray.get(ray.remote(worker_version).remote())
    except ray.exceptions.RayError as exc:
        raise LogscopeError(
            f"the Ray workers cannot run logscope ({_one_line(exc)}): install {FLEET_HINT} on every node"
        ) from None
    if version != __version__:
        raise LogscopeError(f"the Ray workers run logscope {version}, this is {__version__}: install the same one")


def _task_error(ray: ModuleType, exc: BaseException) -> str:
    if isinstance(exc, (ray.exceptions.WorkerCrashedError, ray.exceptions.OutOfMemoryError)):
        return scan.WORKER_DIED
    return f"Ray task failed: {_one_line(exc)}"
