"""Read and extract a large input on two cores: this process and a child take groups of sources from one queue.

Every quota, cap and evidence window is per source, so extracting groups of consecutive sources one by one, in any
process and in any order, finds the events that one pass over all sources finds; put back in group order (each
group's rows, then every group's capped kinds' latest lines, which `Extractor.run` puts last) they give the same
table. Groups are fixed by the input alone, not by who reads them, so the result does not depend on timing. One
corner can differ from a single pass: when the very last line charged to a capped kind in a source fails its
pattern, which earlier line counts as that kind's latest depends on where batches end, and a group ends a batch.

The queue hands out the largest groups first, so the last ones are small and both processes finish together
although the child starts later. The child (`helper.Helper`) is a fresh interpreter, started before this process
imports polars (fork is unsafe once polars' threads exist): it discovers the input again, since openers do not
pickle, checks that it found the same sources, asks for a group at a time over its stdin and sends each group's
events back as a JSON line over its stdout (events are JSON values already: that is what the `fields` column
holds). A group it took and did not send back, because it failed in any way, is read here instead.
"""

from __future__ import annotations

import gc
import json
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from logscope.events.catalogue import catalogue
from logscope.events.extract import Extraction, Extractor
from logscope.events.helper import Group, Helper
from logscope.ingest.read import Block, Reader, SourceStats
from logscope.ingest.sources import Inventory, Source, discover
from logscope.vocab import Event

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
    """One group: its extraction without the capped kinds' latest lines, which come after all groups."""

    extraction: Extraction
    latest: list[Event]
    stats: list[SourceStats]
    notes: list[str]  # the reader's notes on this group

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


def extract(
    inventory: Inventory,
    path: Path,
    follow_symlinks: bool,
    progress: Progress,
    helper: Helper | None,
    while_waiting: Callable[[], None] | None = None,
) -> Extracted:
    """Read every source of `inventory` (discovered from `path`) and extract its events, with `helper` (started
    by `Helper.start_for(inventory)`) if there is one. `while_waiting` is called once this process has no group
    left to read and the helper still has one (work that needs no events: a core would be idle otherwise)."""
    if helper is None:
        reader = Reader(inventory)
        extractor = Extractor(catalogue())
        extractor.feed(_counted(reader.blocks(), 0, progress))
        _count_lines(reader.stats, 0, extractor)
        extraction, latest = extractor.finish()
        extraction.rows.extend(latest)
        return Extracted(extraction, reader.sources, reader.stats, reader.notes)
    found = helper.groups
    claims = _Claims(inventory, found)
    child = _Child(helper, path, follow_symlinks, inventory, claims)
    extractor = Extractor(catalogue())
    parts: dict[int, _Part] = {}
    forwarding = child.forwarding(progress)
    while (k := claims.take(for_child=False)) is not None:
        parts[k] = _read_group(inventory, found[k], extractor, forwarding)
    if while_waiting is not None:
        while_waiting()
    parts |= child.result(progress)
    for k in sorted(claims.taken_by_child - parts.keys()):  # the child failed before sending these back
        parts[k] = _read_group(inventory, found[k], extractor, progress)
    ordered = [parts[k] for k in range(len(found))]
    extraction = Extraction(
        [row for part in ordered for row in part.extraction.rows] + [row for part in ordered for row in part.latest],
        {key: window for part in ordered for key, window in part.extraction.contexts.items()},
        [note for part in ordered for note in part.extraction.notes],
    )
    return Extracted(
        extraction,
        [src for src, _ in inventory.sources],
        [st for part in ordered for st in part.stats],
        inventory.notes + [note for part in ordered for note in part.notes],
    )


class _Claims:
    """The groups not taken yet, largest first; this process and the child's listener take from it."""

    def __init__(self, inventory: Inventory, groups: list[Group]) -> None:
        sizes = [sum(src.size or 0 for src, _ in inventory.sources[a:b]) for a, b in groups]
        self.groups = groups
        self._order = sorted(range(len(groups)), key=lambda k: (-sizes[k], k))
        self._next = 0
        self._lock = threading.Lock()
        self.taken_by_child: set[int] = set()

    def take(self, for_child: bool) -> int | None:
        with self._lock:
            if self._next == len(self._order):
                return None
            k = self._order[self._next]
            self._next += 1
            if for_child:
                self.taken_by_child.add(k)
            return k


def _counted(blocks: Iterator[Block], first_sid: int, progress: Progress) -> Iterator[Block]:
    for block in blocks:
        if progress is not None:
            progress(len(block.data))
        yield replace(block, sid=block.sid + first_sid) if first_sid else block


def _count_lines(stats: list[SourceStats], first_sid: int, extractor: Extractor) -> None:
    """Each source's line count, which the extractor keeps (it splits the lines anyway)."""
    for sid, st in enumerate(stats, first_sid):
        st.lines = extractor.lines[sid]


def _read_group(inventory: Inventory, group: Group, extractor: Extractor, progress: Progress) -> _Part:
    start, stop = group
    reader = Reader(Inventory(inventory.root, inventory.sources[start:stop], [], []))
    extractor.feed(_counted(reader.blocks(), start, progress))
    _count_lines(reader.stats, start, extractor)
    extraction, latest = extractor.finish()
    return _Part(extraction, latest, reader.stats, reader.notes)


class _Child:
    """The helper's side of the work, seen from here: a thread answers its claims and collects its groups."""

    def __init__(self, helper: Helper, path: Path, follow_symlinks: bool, inventory: Inventory, claims: _Claims):
        self.helper = helper
        self.claims = claims
        self.progress: queue.Queue[int | None] = queue.Queue()  # None: the child is done (or failed)
        self.parts: dict[int, _Part] = {}
        self.finished = False
        request = {
            "path": str(path),
            "follow_symlinks": follow_symlinks,
            "groups": claims.groups,
            "expected": [src.path for src, _ in inventory.sources],
        }
        try:
            helper.send({"request": request})
        except OSError:  # it died at once: every group is read here
            self.finished = True
            return
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        try:
            for message in self.helper.messages():
                if "progress" in message:
                    self.progress.put(message["progress"])
                elif "claim" in message:
                    self.helper.send({"group": self.claims.take(for_child=True)})
                elif "part" in message:
                    self.parts[message["group"]] = _Part.from_json(message["part"])
                else:  # "done" or "failed": what it sent back stands, the rest is read here
                    return
        except Exception:  # it wrote something else, or its stdin closed: what it did not send back is read here
            return
        finally:
            self.progress.put(None)

    def forwarding(self, progress: Progress) -> Progress:
        """A progress callback for this process's groups that also passes on the child's progress, without
        waiting."""
        if progress is None:
            return None

        def report(n: int) -> None:
            progress(n)
            while not self.finished:
                try:
                    self._take(self.progress.get_nowait(), progress)
                except queue.Empty:
                    return

        return report

    def _take(self, message: int | None, progress: Progress) -> None:
        if message is None:
            self.finished = True
        elif progress is not None:
            progress(message)

    def result(self, progress: Progress) -> dict[int, _Part]:
        """The groups the child sent back, once it is done (passing on its progress meanwhile)."""
        while not self.finished:
            self._take(self.progress.get(), progress)
        self.helper.wait()
        return self.parts


def child_main() -> None:
    """The child's side: read the request from stdin, then claim groups and send each one back on stdout, with
    progress, until no group is left."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a stray print must not corrupt the message stream
    gc.disable()  # as in analysis: many long-lived dicts, no cycles

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message).encode() + b"\n")  # ASCII escapes: a message is exactly one line
        out.flush()

    def answer() -> int | None:
        group: int | None = json.loads(sys.stdin.buffer.readline())["group"]
        return group

    request = json.loads(sys.stdin.buffer.readline())["request"]
    inventory = discover(Path(request["path"]), follow_symlinks=request["follow_symlinks"])
    if [src.path for src, _ in inventory.sources] != request["expected"]:
        send({"failed": "the input changed between the two discoveries"})
        return
    groups = [(int(start), int(stop)) for start, stop in request["groups"]]
    extractor = Extractor(catalogue())
    # One group at a time, none reserved ahead: a reserved group would be the last one to end.
    while True:
        send({"claim": True})
        k = answer()
        if k is None:
            break
        part = _read_group(inventory, groups[k], extractor, lambda n: send({"progress": n}))
        send({"group": k, "part": part.to_json()})
    send({"done": True})
