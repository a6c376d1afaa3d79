"""Find the log sources under an input: torchrun trees, consoles, single files, archives (read in place)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import stat
import tarfile
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from logscope.errors import InputError
from logscope.ingest import flight_recorder

# <run_id>_<rand>/attempt_<n>/<local_rank>/{stdout.log,stderr.log,error.json}  (torch_logs.md §1.2)
_RANK_FILE = re.compile(
    r"(?:^|/)attempt_(?P<attempt>\d+)/(?P<lrank>\d+)/(?P<name>stdout\.log|stderr\.log|error\.json)$"
)
_ATTEMPT_DIR = re.compile(r"attempt_\d+")
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err", ".stdout", ".stderr", ".console")
# Logs numbered per worker or rotated: PaddlePaddle's launcher writes log/workerlog.0, logrotate train.log.1.
_NUMBERED_LOG = re.compile(r"log\.\d{1,4}$", re.IGNORECASE)
_ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar", ".gz")
_NOT_LOGS = {"label.yaml", "scenario.yaml"}


@dataclass(frozen=True)
class Source:
    """One file (or archive member) that may hold log lines."""

    path: str  # as shown to the user: relative to the input, archive members as "a.zip!member"
    role: str  # stdout | stderr | error_json | console
    size: int | None
    node: str | None = None  # the torchrun run folder (one per agent, i.e. per node) for per-rank files
    attempt: int | None = None
    local_rank: int | None = None
    archive: str | None = None  # the archive it is a member of (its decompressed size is bounded per archive)


@dataclass
class Inventory:
    """What discovery found: readable sources (in order) and notes on what was skipped or unreadable."""

    root: Path
    sources: list[tuple[Source, Callable[[], IO[bytes]]]] = field(default_factory=list)
    tar_archives: list[tuple[Path, str]] = field(default_factory=list)  # streamed member by member when read
    notes: list[str] = field(default_factory=list)
    dumps: list[flight_recorder.DumpFile] = field(default_factory=list)  # Flight Recorder dumps: data, not logs


def classify(member: str, size: int | None, prefix: str = "") -> Source | None:
    """The Source for a path inside the input, or None when it is not a log."""
    member = member.replace("\\", "/")
    name = member.rsplit("/", 1)[-1]
    shown = prefix + member
    archive = prefix[:-1] if prefix else None
    m = _RANK_FILE.search(member)
    if m:
        run_dir = member[: m.start()].strip("/") or "."
        role = {"stdout.log": "stdout", "stderr.log": "stderr", "error.json": "error_json"}[m["name"]]
        return Source(shown, role, size, prefix + run_dir, int(m["attempt"]), int(m["lrank"]), archive)
    if name in _NOT_LOGS or name.startswith(".") or flight_recorder.DEFAULT_NAME.fullmatch(name):
        return None
    lower = name.lower()
    if lower.endswith(_LOG_SUFFIXES) or "." not in name or _NUMBERED_LOG.search(name):
        return Source(shown, "console", size, archive=archive)
    return None


def _is_archive(path: str) -> bool:
    return path.lower().endswith(_ARCHIVE_SUFFIXES)


def _file_opener(path: str | Path) -> Callable[[], IO[bytes]]:
    def open_file() -> IO[bytes]:
        return open(path, "rb")

    return open_file


def _gzip_opener(path: Path) -> Callable[[], IO[bytes]]:
    def open_file() -> IO[bytes]:
        return cast(IO[bytes], gzip.open(path, "rb"))  # a GzipFile reads like any binary file

    return open_file


class _ZipMembers:
    """Opens the members of one zip through one ZipFile: opening the archive again per member would read its
    whole directory each time (quadratic). Closed once the last member is open (which keeps the file open)."""

    def __init__(self, archive: Path, count: int) -> None:
        self.archive = archive
        self.left = count
        self.zf: zipfile.ZipFile | None = None

    def opener(self, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
        def open_member() -> IO[bytes]:
            if self.zf is None:
                self.zf = zipfile.ZipFile(self.archive)
            try:
                return self.zf.open(info)
            finally:
                self.left -= 1
                if self.left == 0:
                    self.zf.close()
                    self.zf = None

        return open_member


def _add_archive(inv: Inventory, path: Path, shown: str) -> None:
    lower = path.name.lower()
    prefix = shown + "!"
    try:
        if lower.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                files = [info for info in zf.infolist() if not info.is_dir()]
                dumps = {
                    info.filename
                    for info in files
                    if flight_recorder.is_dump(info.filename, flight_recorder.zip_opener(path, info.filename))
                }
                inv.dumps += [
                    flight_recorder.DumpFile(prefix + name, flight_recorder.zip_opener(path, name))
                    for name in sorted(dumps)
                ]
                found = [
                    (src, info)
                    for info in files
                    if info.filename not in dumps
                    if (src := classify(info.filename, info.file_size, prefix)) is not None
                ]
            members = _ZipMembers(path, len(found))
            inv.sources.extend((src, members.opener(info)) for src, info in found)
        elif lower.endswith((".tar.gz", ".tgz", ".tar")):
            inv.tar_archives.append((path, prefix))
        elif lower.endswith(".gz"):
            inner = path.name[:-3]
            src = classify(inner, None, prefix) or Source(prefix + inner, "console", None, archive=shown)
            inv.sources.append((src, _gzip_opener(path)))
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        inv.notes.append(f"{shown}: not a readable archive ({exc})")


def iter_tar(
    archive: Path, prefix: str, notes: list[str], dumps: list[flight_recorder.DumpFile]
) -> Iterator[tuple[Source, IO[bytes]]]:
    """Tar members in archive order, streamed (a .tar.gz cannot be read out of order cheaply). Flight Recorder
    dumps met on the way go to `dumps` (read now: the stream does not come back)."""
    try:
        with tarfile.open(archive, mode="r|*") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                src = classify(member.name, member.size, prefix)
                candidate = flight_recorder.is_candidate(member.name)
                if src is None and not candidate:
                    continue
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                if candidate:
                    head = cast(io.BufferedReader, handle).peek(flight_recorder.SNIFF_BYTES)  # peeking reads nothing
                    if flight_recorder.is_dump_head(member.name, head):
                        data = handle.read(flight_recorder.MAX_DUMP_BYTES + 1)
                        dumps.append(flight_recorder.DumpFile(prefix + member.name, flight_recorder.bytes_opener(data)))
                        continue
                if src is not None:
                    yield src, handle
    except (tarfile.TarError, OSError, EOFError, zipfile.BadZipFile) as exc:
        notes.append(f"{prefix.rstrip('!')}: archive truncated or corrupt ({exc}); read what came before")


def discover(path: Path, follow_symlinks: bool = False) -> Inventory:
    """Walk `path` (a folder, a file or an archive) without modifying anything."""
    if not os.path.lexists(path):
        raise InputError(f"no such file or folder: {path}")
    inv = Inventory(root=path)
    if path.is_file():
        shown = path.name
        if _is_archive(shown):
            _add_archive(inv, path, shown)
        else:
            src = classify(str(path).replace(os.sep, "/"), path.stat().st_size) or Source(
                shown, "console", path.stat().st_size
            )
            if src.role == "console":
                src = Source(shown, "console", src.size)
            inv.sources.append((src, _file_opener(path)))
        return inv
    if not path.is_dir():
        raise InputError(f"not a file or folder: {path}")
    seen_dirs: set[tuple[int, int]] = set()

    def unreadable_dir(exc: OSError) -> None:
        where = Path(exc.filename).relative_to(path).as_posix() if exc.filename else "?"
        inv.notes.append(f"{where}: cannot list folder ({exc.strerror}), skipped")

    for dirpath, dirnames, filenames in walk(str(path), follow_symlinks, unreadable_dir):
        # Plain strings and one lstat per file: a tree of 100 000 files must not spend minutes in pathlib.
        rel_here = os.path.relpath(dirpath, path).replace(os.sep, "/")
        prefix = "" if rel_here == "." else rel_here + "/"
        try:
            st = os.stat(dirpath)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:  # a symlink loop when following links
            inv.notes.append(f"{rel_here}: symlink loop, not followed again")
            dirnames[:] = []
            continue
        seen_dirs.add(key)
        dirnames.sort()
        for d in list(dirnames):
            if not follow_symlinks and os.path.islink(os.path.join(dirpath, d)):
                inv.notes.append(f"{prefix}{d}: symlinked folder not followed (use --follow-symlinks)")
                dirnames.remove(d)
            elif d.lower().endswith((*_LOG_SUFFIXES, *_ARCHIVE_SUFFIXES, ".json")):
                inv.notes.append(f"{prefix}{d}: a folder named like a log, looked inside it")
        if _ATTEMPT_DIR.fullmatch(os.path.basename(dirpath)) and not any(d.isdigit() for d in dirnames):
            inv.notes.append(f"{rel_here}: no rank folders in this attempt")
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = prefix + name
            try:
                st_file = os.lstat(full)
            except OSError as exc:
                inv.notes.append(f"{rel}: cannot stat ({exc.strerror})")
                continue
            if stat.S_ISLNK(st_file.st_mode):
                if not follow_symlinks:
                    inv.notes.append(f"{rel}: symlink not followed (use --follow-symlinks)")
                    continue
                try:
                    st_file = os.stat(full)
                except OSError as exc:
                    inv.notes.append(f"{rel}: broken link or unreadable ({exc.strerror})")
                    continue
            if not stat.S_ISREG(st_file.st_mode):
                # Never opened: reading a FIFO or a device would block or never end.
                inv.notes.append(f"{rel}: not a regular file ({_file_type(st_file.st_mode)}), skipped")
                continue
            if _is_archive(name):
                _add_archive(inv, Path(full), rel)
                continue
            if flight_recorder.is_dump(name, _file_opener(full)):
                inv.dumps.append(flight_recorder.DumpFile(rel, _file_opener(full)))
                continue
            found = classify(rel, st_file.st_size)
            if found is not None:
                inv.sources.append((found, _file_opener(full)))
    _drop_copied_nodes(inv, path)
    return inv


def walk(
    top: str, follow_symlinks: bool, onerror: Callable[[OSError], None]
) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk, top-down, without recursion: os.walk recurses in Python 3.11, so a tree a thousand folders
    deep would raise RecursionError. The caller may prune `dirnames` in place, as with os.walk; symlinked
    folders are listed in `dirnames` but entered only when `follow_symlinks`."""
    stack = [top]
    while stack:
        dirpath = stack.pop()
        try:
            with os.scandir(dirpath) as scan:
                entries = list(scan)
        except OSError as exc:
            onerror(exc)
            continue
        dirnames: list[str] = []
        filenames: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirnames if is_dir else filenames).append(entry.name)
        yield dirpath, dirnames, filenames
        subdirs = [os.path.join(dirpath, d) for d in dirnames]
        stack.extend(reversed([d for d in subdirs if follow_symlinks or not os.path.islink(d)]))


def _file_type(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    for test, name in kinds:
        if test(mode):
            return name
    return "special file"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            sha.update(chunk)
    return sha.hexdigest()


def _drop_copied_nodes(inv: Inventory, root: Path) -> None:
    """A run folder whose per-rank files are byte-identical to another's is a copy: its ranks count twice."""
    by_node: dict[str, list[Source]] = defaultdict(list)
    for src, _ in inv.sources:
        if src.node is not None and src.archive is None:
            by_node[src.node].append(src)
    if len(by_node) < 2:
        return
    shapes: dict[tuple[tuple[object, ...], ...], list[str]] = defaultdict(list)
    for node, files in by_node.items():
        if any(f.size for f in files):
            shapes[tuple(sorted((f.attempt, f.local_rank, f.role, f.size) for f in files))].append(node)
    copies: dict[str, str] = {}
    for nodes in shapes.values():
        originals: dict[tuple[str, ...], str] = {}
        for node in nodes:  # same names and sizes: only now is reading the bytes worth it
            try:
                key = tuple(_digest(root / f.path) for f in sorted(by_node[node], key=lambda f: f.path))
            except OSError:
                continue
            if key in originals:
                copies[node] = originals[key]
            else:
                originals[key] = node
    if not copies:
        return
    inv.sources = [(src, opener) for src, opener in inv.sources if src.node not in copies]
    for node, original in sorted(copies.items()):
        inv.notes.append(f"{node}: duplicate rank folder, the same files as {original}; skipped")
