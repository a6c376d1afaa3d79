"""Read and extract a large input on two cores: its sources split in two, the second half in a child process.

Every quota, cap and evidence window is per source, so two extractors over two halves find the events that one
finds over all, and merged in the right order (the halves' rows in source order, then the capped kinds' latest
lines, which `Extractor.run` puts last) they give the same table. One corner can differ: when the very last line
charged to a capped kind in a source fails its pattern, which earlier line counts as that kind's latest depends on
where batches end, and a half's batches end at the split.

The child is a fresh interpreter (fork is unsafe once polars' threads exist): it discovers the input again, since
openers do not pickle, checks that it found the same sources, and sends its half back as JSON lines over a pipe
(events are JSON values already: that is what the `fields` column holds). If it fails in any way, its half is read
here instead.
"""

from __future__ import annotations

import gc
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

import logscope
from logscope.events.catalogue import catalogue
from logscope.events.extract import Extraction, Extractor
from logscope.ingest.read import Block, Reader, SourceStats
from logscope.ingest.sources import Inventory, Source, discover

# Below this the second interpreter (about 0.6 s to start and import polars) would cost more than it saves.
PARALLEL_MIN_BYTES = 128 << 20

Progress = Callable[[int], None] | None


@dataclass
class Extracted:
    """Ingest and extraction of one input: what align needs."""

    extraction: Extraction
    sources: list[Source]
    stats: list[SourceStats]
    notes: list[str]  # what ingest skipped, cut or could not read, in source order


@dataclass
class _Part:
    """One half: its extraction without the capped kinds' latest lines, which come after both halves."""

    extraction: Extraction
    latest: list[dict[str, Any]]
    stats: list[SourceStats]
    notes: list[str]  # the reader's notes on this half

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.extraction.rows,
            "contexts": [[sid, line, window] for (sid, line), window in self.extraction.contexts.items()],
            "extraction_notes": self.extraction.notes,
            "latest": self.latest,
            "stats": [asdict(st) for st in self.stats],
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _Part:
        contexts = {(sid, line): [(n, text) for n, text in window] for sid, line, window in data["contexts"]}
        return cls(
            Extraction(data["rows"], contexts, data["extraction_notes"]),
            data["latest"],
            [SourceStats(**st) for st in data["stats"]],
            data["notes"],
        )


def extract(inventory: Inventory, path: Path, follow_symlinks: bool, progress: Progress) -> Extracted:
    """Read every source of `inventory` (discovered from `path`) and extract its events."""
    split = _split_point(inventory)
    if split is None:
        reader = Reader(inventory)
        extraction, latest = _extract(reader, 0, progress)
        extraction.rows.extend(latest)
        return Extracted(extraction, reader.sources, reader.stats, reader.notes)
    child = _Child(path, follow_symlinks, inventory, split)
    try:
        head = _read_part(_slice(inventory, 0, split), 0, child.forwarding(progress))
        tail = child.result(progress) or _read_part(_slice(inventory, split, None), split, progress)
    finally:
        child.stop()
    extraction = Extraction(
        head.extraction.rows + tail.extraction.rows + head.latest + tail.latest,
        head.extraction.contexts | tail.extraction.contexts,
        head.extraction.notes + tail.extraction.notes,
    )
    return Extracted(
        extraction,
        [src for src, _ in inventory.sources],
        head.stats + tail.stats,
        inventory.notes + head.notes + tail.notes,
    )


def _split_point(inventory: Inventory) -> int | None:
    """Where the second half starts, or None when the input is read here alone: small, one source, one core, or
    archive members (an archive's decompression limit is shared by its members, so one reader must count them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or len(inventory.sources) < 2 or inventory.tar_archives:
        return None
    if any(src.archive is not None or src.size is None for src, _ in inventory.sources):
        return None
    sizes = [src.size or 0 for src, _ in inventory.sources]
    total = sum(sizes)
    if total < PARALLEL_MIN_BYTES:
        return None
    done = 0
    for i, size in enumerate(sizes):
        if done + size / 2 >= total / 2:
            return min(max(i, 1), len(sizes) - 1)
        done += size
    return len(sizes) - 1


def _slice(inventory: Inventory, start: int, stop: int | None) -> Inventory:
    return Inventory(inventory.root, inventory.sources[start:stop], [], [])


def _counted(blocks: Iterator[Block], first_sid: int, progress: Progress) -> Iterator[Block]:
    for block in blocks:
        if progress is not None:
            progress(len(block.data))
        yield replace(block, sid=block.sid + first_sid) if first_sid else block


def _extract(reader: Reader, first_sid: int, progress: Progress) -> tuple[Extraction, list[dict[str, Any]]]:
    """The extraction and the capped kinds' latest events (see `Extractor.finish`); fills in each source's line
    count, which the extractor keeps."""
    extractor = Extractor(catalogue())
    extractor.feed(_counted(reader.blocks(), first_sid, progress))
    for sid, stats in enumerate(reader.stats, first_sid):
        stats.lines = extractor.lines[sid]
    return extractor.finish()


def _read_part(inventory: Inventory, first_sid: int, progress: Progress) -> _Part:
    reader = Reader(inventory)
    extraction, latest = _extract(reader, first_sid, progress)
    return _Part(extraction, latest, reader.stats, reader.notes)


class _Child:
    """The second half, read by `python -c 'from logscope.events.parallel import child_main; child_main()'`."""

    def __init__(self, path: Path, follow_symlinks: bool, inventory: Inventory, split: int) -> None:
        package_root = str(Path(logscope.__file__).resolve().parents[1])  # the same logscope, wherever it lives
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self.messages: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.final: tuple[str, Any] | None = None  # ("done", _Part) or ("failed", why)
        self.proc: subprocess.Popen[bytes] | None = None
        request = {"path": str(path), "follow_symlinks": follow_symlinks, "split": split}
        request["expected"] = [src.path for src, _ in inventory.sources]
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from logscope.events.parallel import child_main; child_main()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
            )
            assert self.proc.stdin is not None and self.proc.stdout is not None
            with self.proc.stdin:
                self.proc.stdin.write(json.dumps(request).encode())
        except OSError as exc:  # no interpreter to start, or it died at once: the half is read here
            self.final = ("failed", str(exc))
            return
        threading.Thread(target=self._listen, args=(self.proc.stdout,), daemon=True).start()

    def _listen(self, stream: IO[bytes]) -> None:
        try:
            for line in stream:
                message = json.loads(line)
                if "progress" in message:
                    self.messages.put(("progress", message["progress"]))
                    continue
                if "done" in message:
                    self.messages.put(("done", _Part.from_json(message["done"])))
                else:
                    self.messages.put(("failed", str(message.get("failed"))))
                return
            self.messages.put(("failed", "the child exited without its half"))
        except Exception as exc:  # it wrote something else: its half is read here
            self.messages.put(("failed", f"{type(exc).__name__}: {exc}"))

    def forwarding(self, progress: Progress) -> Progress:
        """A progress callback for the first half that also passes on the child's progress, without waiting."""
        if progress is None:
            return None

        def report(n: int) -> None:
            progress(n)
            while self.final is None:
                try:
                    message = self.messages.get_nowait()
                except queue.Empty:
                    return
                self._take(message, progress)

        return report

    def _take(self, message: tuple[str, Any], progress: Progress) -> None:
        if message[0] != "progress":
            self.final = message
        elif progress is not None:
            progress(message[1])

    def result(self, progress: Progress) -> _Part | None:
        """The child's half once it is done (passing on its progress meanwhile); None if it failed."""
        while self.final is None:
            self._take(self.messages.get(), progress)
        kind, payload = self.final
        if self.proc is None or self.proc.wait() != 0:
            return None
        return payload if kind == "done" else None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def child_main() -> None:
    """The child's side: read the request from stdin, send progress and then the half (or why not) to stdout."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the message stream
    gc.disable()  # as in analysis: many long-lived dicts, no cycles

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message).encode() + b"\n")  # ASCII escapes: a message is exactly one line
        out.flush()

    request = json.loads(sys.stdin.buffer.read())
    inventory = discover(Path(request["path"]), follow_symlinks=request["follow_symlinks"])
    if [src.path for src, _ in inventory.sources] != request["expected"]:
        send({"failed": "the input changed between the two discoveries"})
        return
    split = request["split"]
    part = _read_part(_slice(inventory, split, None), split, lambda n: send({"progress": n}))
    send({"done": part.to_json()})
