"""The pipeline, one way: ingest -> events -> align -> rules -> verdict. Reporters take the Analysis it returns."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from logscope import __version__
from logscope.errors import READ_ERRORS, InputError
from logscope.events.helper import Helper
from logscope.ingest.flight_recorder import in_folder
from logscope.ingest.normalise import log_records
from logscope.ingest.sources import Inventory, Source, discover
from logscope.ingest.textshape import is_program_output
from logscope.model import SCHEMA_ID, Analysis
from logscope.vocab import Event

if TYPE_CHECKING:
    from logscope.rules.api import Rule


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The pipeline builds one dict per event (10^5 on a large run) that lives to the end, and no cycles: CPython's
    cyclic collector would only walk them again and again as they pile up (~15% of the run on 1024 ranks)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def analyze(
    path: Path,
    rules_dirs: Sequence[Path] = (),
    follow_symlinks: bool = False,
    progress: Callable[[int], None] | None = None,
    flight_recorder: Path | None = None,
) -> Analysis:
    """Analyse one run (a folder, a log file or an archive) and return its diagnosis and tables; `flight_recorder`
    is a folder of Flight Recorder dumps kept apart from the logs."""
    inventory = discover(path, follow_symlinks=follow_symlinks)
    if flight_recorder is not None:
        inventory.dumps += in_folder(flight_recorder)
    helper = Helper.start_for(inventory)
    try:
        with _no_cyclic_gc():
            return _analyze(inventory, helper, path, rules_dirs, follow_symlinks, progress)
    finally:
        if helper is not None:
            helper.stop()


def _analyze(
    inventory: Inventory,
    helper: Helper | None,
    path: Path,
    rules_dirs: Sequence[Path],
    follow_symlinks: bool,
    progress: Callable[[int], None] | None,
) -> Analysis:
    # Extraction imports polars (0.2 s): imported only now, while the helper started above imports it too.
    from logscope.events.parallel import extract
    from logscope.events.rank_values import rank_value_differences
    from logscope.events.startup import startup_differences

    openers = {src.path: opener for src, opener in inventory.sources}
    prepared: list[tuple[list[Rule], list[Event]]] = []

    def prepare(sources: list[Source]) -> None:
        """What needs no event: the rule pack, and the cross-rank comparisons (they read the sources' heads)."""
        from logscope.rules.loader import load_rules

        compared = startup_differences(sources, openers) + rank_value_differences(sources, openers)
        prepared.append((load_rules(list(rules_dirs)), compared))

    # Two processes read a large input (the helper's sources are the inventory's): this one prepares while it waits
    # for the helper's last group, where a core would be idle.
    read = extract(
        inventory, path, follow_symlinks, progress, helper, lambda: prepare([src for src, _ in inventory.sources])
    )
    extraction = read.extraction
    extraction.notes[:0] = read.notes  # what ingest skipped, cut or could not read reaches the diagnosis
    if not any(st.bytes > 0 and not st.binary for st in read.stats):  # a truncated archive still has lines
        detail = f" ({'; '.join(read.notes[:3])})" if read.notes else ""
        if not read.sources:
            raise InputError(f"nothing that looks like a log under {path}{detail}")
        raise InputError(f"no readable log lines in {path}{detail}")
    if not prepared:  # read in this process alone (archive members are found while read)
        prepare(read.sources)
    rules, compared = prepared[0]
    extraction.rows += compared
    # The later stages, imported once the events are read: the reading starts sooner (both processes are busy then).
    from logscope.align import align
    from logscope.align.flight import from_dumps, to_json
    from logscope.align.state import looks_like_a_log
    from logscope.rules.docs import rule_doc
    from logscope.rules.engine import evaluate
    from logscope.verdict.decide import decide

    aligned = align(extraction, read.sources, read.stats)
    aligned.flight = from_dumps(inventory.dumps, aligned)  # tar members were found while read
    if not looks_like_a_log(aligned.rows) and not _log_shaped(inventory):
        raise InputError(
            f"nothing that looks like a training or launcher log in {path}: no line of torchrun, torch.distributed, "
            "NCCL, gloo, a training loop or a Python traceback was recognised"
        )
    findings = evaluate(rules, aligned, str(path))
    verdict, checklist = decide(findings, aligned, str(path))
    diagnosis = {
        "schema": SCHEMA_ID,
        "logscope_version": __version__,
        "input": str(path),
        "job": {k: v for k, v in aligned.job.items() if k not in ("requested_world_size", "world_size_declared")},
        "ranks": [_rank_json(r) for r in aligned.rank_rows()],
        "findings": findings,
        "verdict": verdict,
        "checklist": checklist,
        "notes": aligned.notes,
        "sources": [
            {
                "path": s.path,
                "role": s.role,
                "node": s.node,
                "attempt": s.attempt,
                "local_rank": s.local_rank,
                "bytes": st.bytes,
                "lines": st.lines,
            }
            for s, st in zip(aligned.sources, aligned.stats, strict=True)
        ],
        "replay": None,
        "flight_recorder": to_json(aligned.flight) if aligned.flight is not None else None,
    }
    return Analysis(
        diagnosis=diagnosis,
        events=aligned.events,
        ranks=aligned.ranks,
        notes=aligned.notes,
        rule_docs={rule.id: rule_doc(rule) for rule in rules},
    )


# Read from each source's start when no line was recognised, to tell a log in an unknown format from other text.
SHAPE_BYTES = 64 * 1024
SHAPE_SOURCES = 16
MIN_RECORDS = 1


def _log_shaped(inventory: Inventory) -> bool:
    """Whether the input's text is shaped like a log (logger or launcher prefixes, traceback frames) or is a job's
    own prints (short lines naming ranks, devices or the loop next to a value), though no line of it is one
    logscope knows: such a log is analysed (nothing known failed in it); documents and other text are refused."""
    records = 0
    for _, opener in inventory.sources[:SHAPE_SOURCES]:
        try:
            with opener() as handle:
                head = handle.read(SHAPE_BYTES)
        except READ_ERRORS:
            continue
        lines = head.decode("utf-8", errors="replace").splitlines()
        records += log_records(lines)
        if records >= MIN_RECORDS or is_program_output(lines):
            return True
    return False


def _rank_json(row: Mapping[str, object]) -> dict[str, object]:
    keys = (
        "rank",
        "node",
        "host",
        "local_rank",
        "attempt",
        "visible",
        "status",
        "exit_code",
        "signal",
        "stopped_by",
        "phase",
        "last_iteration",
        "last_seq_enqueued",
        "last_seq_completed",
        "device",
        "bus_id",
        "sources",
    )
    out = {k: row.get(k) for k in keys}
    out["last_event"] = row.get("last_kind")
    return out
