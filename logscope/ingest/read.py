"""Read sources in large blocks cut at line ends, never a whole file at once, and count the bytes read.

Lines are numbered and counted by the extractor, which splits every block into lines anyway (a count here is
a second pass over every byte)."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache, cached_property, partial
from typing import IO

import polars as pl

from logscope.errors import InputError
from logscope.ingest.sources import Inventory, Source, iter_tar

BLOCK_BYTES = 8 << 20
INFLATE_STEP = 1 << 16  # archive members: small read1() steps, so a truncated stream loses little
MAX_LINE_BYTES = 4 << 20  # a longer line is cut there (a 50 MB single line must not hold the reader)
MAX_ERROR_JSON_BYTES = 4 << 20
MAX_ARCHIVE_BYTES = 64 << 30  # decompression limit per archive (all members together): a zip bomb stops here
ARCHIVE_LIMIT_ENV = "LOGSCOPE_MAX_ARCHIVE_BYTES"


# glibc's mallopt(3) parameters. By default it returns each freed 8 MB block to the kernel and page-faults the next
# one in again: a fifth of the reading time. Blocks below these sizes stay in the process and are reused.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_BLOCKS_BELOW = 64 << 20
_KEEP_FREE_BYTES = 256 << 20


@cache
def _reuse_freed_blocks() -> None:
    try:
        mallopt = ctypes.CDLL(None).mallopt  # absent outside glibc (macOS, Windows): the default is kept
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _KEEP_BLOCKS_BELOW)
    mallopt(_M_TRIM_THRESHOLD, _KEEP_FREE_BYTES)


def archive_limit() -> int:
    """The decompression limit: MAX_ARCHIVE_BYTES, or a byte count from $LOGSCOPE_MAX_ARCHIVE_BYTES."""
    value = os.environ.get(ARCHIVE_LIMIT_ENV)
    if value is None:
        return MAX_ARCHIVE_BYTES
    limit = int(value) if value.strip().isdigit() else 0
    if limit <= 0:
        raise InputError(f"{ARCHIVE_LIMIT_ENV} must be a positive number of bytes, not {value!r}")
    return limit


@dataclass
class SourceStats:
    bytes: int = 0
    lines: int = 0  # filled in by the extractor
    cut_lines: int = 0
    replaced_bytes: bool = False
    binary: bool = False
    error: str | None = None
    grew: bool = False
    ends_mid_line: bool = False  # no line end after the last line: the writer stopped mid-line
    nul_bytes: int = 0  # a crash can leave zero-filled blocks at the end of a file


@dataclass
class Block:
    sid: int
    source: Source
    data: bytes  # valid UTF-8 (bytes that were not are U+FFFD), without the last line end
    final: bool  # the last block of its source
    ascii: bool = False  # known to be all ASCII (the reader checks anyway); False: not known

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")

    @cached_property
    def carriage(self) -> bool:
        """Whether the block holds a carriage return (a terminal's overwritten line): asked of it more than once."""
        return b"\r" in self.data


@dataclass
class Reader:
    inventory: Inventory
    sources: list[Source] = field(default_factory=list)
    stats: list[SourceStats] = field(default_factory=list)
    archive_limit: int = field(default_factory=archive_limit)
    archive_bytes: dict[str, int] = field(default_factory=dict)  # decompressed so far, per archive
    exhausted: set[str] = field(default_factory=set)  # archives that reached the limit: no more members read

    @property
    def notes(self) -> list[str]:
        return self.inventory.notes

    def _opened(self) -> Iterator[tuple[Source, IO[bytes] | None, str | None]]:
        for src, opener in self.inventory.sources:
            try:
                yield src, opener(), None
            except OSError as exc:
                yield src, None, exc.strerror or str(exc)
            except Exception as exc:  # corrupt archive members raise zipfile/zlib errors
                yield src, None, f"{type(exc).__name__}: {exc}"
        for archive, prefix in self.inventory.tar_archives:
            for src, handle in iter_tar(archive, prefix, self.inventory.notes, self.inventory.dumps):
                yield src, handle, None
                # Stop before the stream moves on: reaching the next member inflates the rest of this one.
                if prefix[:-1] in self.exhausted:
                    break

    def blocks(self) -> Iterator[Block]:
        _reuse_freed_blocks()
        for src, handle, error in self._opened():
            sid = len(self.sources)
            stats = SourceStats()
            self.sources.append(src)
            self.stats.append(stats)
            if handle is None:
                stats.error = error
                self.notes.append(f"{src.path}: cannot read ({error})")
                continue
            with handle:
                yield from self._read(sid, src, handle, stats)
            if src.archive is not None:
                self.archive_bytes[src.archive] = self.archive_bytes.get(src.archive, 0) + stats.bytes
            self._note_damage(src, stats)

    def _exhaust(self, archive: str) -> None:
        if archive not in self.exhausted:
            self.exhausted.add(archive)
            self.notes.append(
                f"{archive}: decompression limit reached ({self.archive_limit} bytes, "
                f"{ARCHIVE_LIMIT_ENV}); later members not read"
            )

    def _note_damage(self, src: Source, stats: SourceStats) -> None:
        """One note per kind of damage that was read through (the reader never stops for these)."""
        if stats.cut_lines:
            self.notes.append(f"{src.path}: lines over {MAX_LINE_BYTES} bytes, cut {stats.cut_lines} time(s)")
        if stats.replaced_bytes:
            self.notes.append(f"{src.path}: bytes that are not UTF-8, shown as U+FFFD")
        if stats.nul_bytes:
            self.notes.append(f"{src.path}: {stats.nul_bytes} NUL byte(s) (zero-filled after a crash?)")

    def _read(self, sid: int, src: Source, handle: IO[bytes], stats: SourceStats) -> Iterator[Block]:
        limit: int | None = None  # a plain file is bounded by the disk; what an archive inflates to is not
        if src.role == "error_json":
            limit = MAX_ERROR_JSON_BYTES
        if src.archive is not None:
            left = self.archive_limit - self.archive_bytes.get(src.archive, 0)
            limit = left if limit is None else min(limit, left)
            if left <= 0:
                stats.error = "size limit"
                self._exhaust(src.archive)
                return
        pending = b""
        first = True
        stopped = False
        read1 = getattr(handle, "read1", None) if src.archive else None
        read_step = partial(read1, INFLATE_STEP) if read1 is not None else partial(handle.read, BLOCK_BYTES)
        while True:
            chunk, failure = (b"", None) if stopped else _read_block(read_step)
            stopped = failure is not None
            if isinstance(failure, (OSError, EOFError)):
                stats.error = f"read stopped: {failure}"
                self.notes.append(f"{src.path}: truncated ({failure}); read what came before")
            elif failure is not None:  # zlib.error, zipfile.BadZipFile on a corrupt member
                stats.error = f"read stopped: {type(failure).__name__}: {failure}"
                self.notes.append(f"{src.path}: corrupt data ({failure}); read what came before")
            if first and chunk:
                first = False
                if _looks_binary(chunk[:4096]):
                    stats.binary = True
                    self.notes.append(f"{src.path}: binary data, skipped")
                    return
            stats.bytes += len(chunk)
            if limit is not None and stats.bytes > limit:
                if src.archive is not None and limit == left:
                    self.notes.append(
                        f"{src.path}: read stopped at the decompression limit of {src.archive} "
                        f"({self.archive_limit} bytes, {ARCHIVE_LIMIT_ENV})"
                    )
                    self._exhaust(src.archive)
                else:
                    self.notes.append(f"{src.path}: over the error.json limit of {limit} bytes, read stopped")
                chunk = chunk[: max(0, len(chunk) - (stats.bytes - limit))]
                stats.bytes = limit
                stats.error = "size limit"
            if not chunk:
                if pending:  # no line end inside `pending`: the last line has none either
                    if stats.error is None and src.role != "error_json":
                        stats.ends_mid_line = True
                        self.notes.append(f"{src.path}: ends mid-line (cut off while being written?)")
                    yield self._block(sid, src, pending, stats, final=True)
                if src.size is not None and stats.bytes != src.size and stats.error is None:
                    stats.grew = True
                    self.notes.append(f"{src.path}: size changed while reading ({src.size} -> {stats.bytes} bytes)")
                return
            cut = chunk.rfind(b"\n")
            if cut < 0:
                if len(pending) + len(chunk) < MAX_LINE_BYTES:
                    pending += chunk
                    continue
                stats.cut_lines += 1
                body, pending = pending + chunk, b""
            else:  # one copy: the block without its last line end, joined from the view
                body = b"".join((pending, memoryview(chunk)[:cut]))
                pending = chunk[cut + 1 :]
            yield self._block(sid, src, body, stats, final=False)
            if stats.error == "size limit":
                return

    @staticmethod
    def _block(sid: int, src: Source, body: bytes, stats: SourceStats, final: bool) -> Block:
        if 0 in body:  # one memchr; counting is a full pass that almost every block can skip
            stats.nul_bytes += body.count(0)
        ascii = body.isascii()
        if not ascii and not _is_utf8(body):  # rare: re-encoded once here, so every later stage sees valid UTF-8
            body = body.decode("utf-8", "replace").encode("utf-8")
            stats.replaced_bytes = True
        return Block(sid, src, body, final, ascii)


def _read_block(read_step: Callable[[], bytes]) -> tuple[bytes, Exception | None]:
    """About BLOCK_BYTES in steps; on a failure, what was read before it and the failure."""
    pieces: list[bytes] = []
    size = 0
    while size < BLOCK_BYTES:
        try:
            piece = read_step()
        except Exception as exc:  # a damaged stream raises zlib/zipfile/tarfile errors besides OSError
            return b"".join(pieces), exc
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
    return b"".join(pieces), None


def _is_utf8(data: bytes) -> bool:
    """Valid UTF-8, checked without decoding in Python: the text goes to polars as bytes (a Python decode and
    re-encode of a block with a few non-ASCII characters, a progress bar's blocks, costs ten times the check)."""
    if data.isascii():
        return True
    try:
        pl.Series([data], dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:
        return False
    return True


_CONTROL_BYTES = bytes(b for b in range(1, 32) if b not in (9, 10, 11, 12, 13, 27))


def _looks_binary(head: bytes) -> bool:
    """Over a tenth of the head is control bytes (not tab, newline, CR, ESC) or invalid UTF-8: binary data.
    NUL bytes do not count: a crash leaves zero-filled blocks in a text log."""
    text = head.replace(b"\0", b"")
    if not text:
        return False
    control = len(text) - len(text.translate(None, _CONTROL_BYTES))
    invalid = text.decode("utf-8", errors="replace").count("\ufffd")
    return control + invalid > len(text) // 10
