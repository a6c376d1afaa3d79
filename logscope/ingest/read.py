"""Read sources in large blocks cut at line ends, never a whole file at once, and count what was read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from logscope.ingest.sources import Inventory, Source, iter_tar

BLOCK_BYTES = 8 << 20
MAX_LINE_BYTES = 4 << 20  # a longer line is cut there (a 50 MB single line must not hold the reader)
MAX_ERROR_JSON_BYTES = 4 << 20
MAX_ARCHIVE_BYTES = 64 << 30  # decompression limit per archive member: a zip bomb stops here


@dataclass
class SourceStats:
    bytes: int = 0
    lines: int = 0
    cut_lines: int = 0
    replaced_bytes: bool = False
    binary: bool = False
    error: str | None = None
    grew: bool = False


@dataclass
class Block:
    sid: int
    source: Source
    first_line: int  # 1-based number of the block's first line
    text: str
    final: bool  # the last block of its source


@dataclass
class Reader:
    inventory: Inventory
    sources: list[Source] = field(default_factory=list)
    stats: list[SourceStats] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        return self.inventory.notes

    def _opened(self) -> Iterator[tuple[Source, BinaryIO | None, str | None]]:
        for src, opener in self.inventory.sources:
            try:
                yield src, opener(), None
            except OSError as exc:
                yield src, None, exc.strerror or str(exc)
            except Exception as exc:  # corrupt archive members raise zipfile/zlib errors
                yield src, None, f"{type(exc).__name__}: {exc}"
        for archive, prefix in self.inventory.tar_archives:
            for src, handle in iter_tar(archive, prefix, self.inventory.notes):
                yield src, handle, None

    def blocks(self) -> Iterator[Block]:
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

    def _read(self, sid: int, src: Source, handle: BinaryIO, stats: SourceStats) -> Iterator[Block]:
        limit = MAX_ERROR_JSON_BYTES if src.role == "error_json" else MAX_ARCHIVE_BYTES
        pending = b""
        line_no = 1
        first = True
        while True:
            try:
                chunk = handle.read(BLOCK_BYTES)
            except (OSError, EOFError) as exc:
                stats.error = f"read stopped: {exc}"
                self.notes.append(f"{src.path}: truncated ({exc}); read what came before")
                chunk = b""
            except Exception as exc:  # zlib.error, zipfile.BadZipFile on a corrupt member
                stats.error = f"read stopped: {type(exc).__name__}: {exc}"
                self.notes.append(f"{src.path}: corrupt data ({exc}); read what came before")
                chunk = b""
            if first and chunk:
                first = False
                if _looks_binary(chunk[:4096]):
                    stats.binary = True
                    self.notes.append(f"{src.path}: binary data, skipped")
                    return
            stats.bytes += len(chunk)
            if stats.bytes > limit:
                self.notes.append(f"{src.path}: more than {limit >> 20} MiB, read stopped there")
                chunk = chunk[: max(0, len(chunk) - (stats.bytes - limit))]
                stats.bytes = limit
                stats.error = "size limit"
            data = pending + chunk
            if not chunk:
                if data:
                    yield self._block(sid, src, line_no, data, stats, final=True)
                    line_no += data.count(b"\n") + 1
                stats.lines = line_no - 1
                if src.size is not None and stats.bytes != src.size and stats.error is None:
                    stats.grew = True
                    self.notes.append(f"{src.path}: size changed while reading ({src.size} -> {stats.bytes} bytes)")
                return
            cut = data.rfind(b"\n")
            if cut < 0:
                if len(data) < MAX_LINE_BYTES:
                    pending = data
                    continue
                stats.cut_lines += 1
                cut = len(data) - 1
            body, pending = data[: cut + 1], data[cut + 1 :]
            yield self._block(sid, src, line_no, body, stats, final=False)
            line_no += body.count(b"\n") + (0 if body.endswith(b"\n") else 1)
            if stats.error == "size limit":
                stats.lines = line_no - 1
                return

    @staticmethod
    def _block(sid: int, src: Source, line_no: int, data: bytes, stats: SourceStats, final: bool) -> Block:
        text = data.decode("utf-8", errors="replace")
        if not stats.replaced_bytes and "\ufffd" in text:
            stats.replaced_bytes = True
        if text.endswith("\n"):
            text = text[:-1]
        return Block(sid, src, line_no, text, final)


def _looks_binary(head: bytes) -> bool:
    """Mostly control bytes (not tab, newline, CR, ESC) means a binary file, not a log with a stray NUL."""
    if not head:
        return False
    control = sum(1 for b in head if b < 9 or 13 < b < 27 or 27 < b < 32)
    return control > len(head) // 10
