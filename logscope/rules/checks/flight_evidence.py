"""Flight Recorder dump entries as evidence rows, for the checks behind the Flight Recorder rules.

Their evidence is the dumps' entries themselves, one per rank (the file and the entry's position in it, beside the
log lines of the other findings).
"""

from __future__ import annotations

from typing import Any

from logscope.align.flight import FlightReport, Mismatch, numel, op_name
from logscope.ingest.flight_recorder import FlightEntry
from logscope.rules.api import API_OPTYPE
from logscope.vocab import Event

# Evidence rows of a dump are not lines of a log: their source ids lie below every real one.
FIRST_DUMP_SID = -1_000_000


def entry_row(report: FlightReport, rank: int, e: FlightEntry) -> Event:
    """An event row for one dump entry: the shape the engine reads evidence and the collective from."""
    dump = report.dump_of(rank)
    path = dump.path if dump else "?"
    sizes = numel(e.input_sizes)
    text = (
        f"Flight Recorder entry {e.index} (record_id {e.record_id}): {e.op} SeqNum {e.seq} in process group "
        f"{e.pg} ({e.pg_desc}), input {e.input_sizes} {'/'.join(e.input_dtypes)}, state {e.state}"
    )
    return {
        "sid": FIRST_DUMP_SID - report.dumps.index(dump) if dump else FIRST_DUMP_SID,
        "source": path,
        "line": e.index + 1,  # 1-based position in the dump's entry list
        "rank": rank,
        "attempt": None,
        "kind": "flight_recorder_entry",
        "level": "error",
        "phase": "fail",
        "text": text,
        "op": API_OPTYPE.get(op_name(e), op_name(e).upper()),
        "seq": e.seq,
        "numel_in": sizes,
        "numel_out": numel(e.output_sizes),
        "timeout_ms": e.timeout_ms,
        "pg": e.pg,
        "ts": None,
        "ts_text": None,
        "tee_lrank": None,
        "node": None,
        "_f": {"dtype": e.input_dtypes[0] if e.input_dtypes else None},
    }


def pg_text(pg: str, desc: str) -> str:
    """A process group for a message: its id, and its description where the dump gives one."""
    return f"{pg} ({desc})" if desc else pg


def mismatch_rows(report: FlightReport, m: Mismatch) -> list[Event]:
    """Each rank's entry at the mismatch, the culprits' first."""
    rows = [entry_row(report, rank, e) for rank, e in m.entries.items()]
    rows.sort(key=lambda r: r["rank"] not in m.culprits)
    return rows


def mismatch_place(m: Mismatch) -> dict[str, Any]:
    """Where the mismatch is, for a message: its SeqNum and its process group."""
    return {"fr_seq": m.seq, "fr_pg": pg_text(m.pg, next(iter(m.entries.values())).pg_desc)}
