"""The aligned view of a run: events with global ranks and phases, one row per rank, and the job's facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import polars as pl

from logscope.align.flight import FlightReport
from logscope.align.state import Completion, RankState
from logscope.ingest.read import SourceStats
from logscope.ingest.sources import Source
from logscope.vocab import Event, RankRow


@dataclass
class Aligned:
    events: pl.DataFrame  # EVENT_SCHEMA, with rank, attempt and phase resolved; sorted by rank, attempt, order
    rows: list[Event]  # the same events as dicts with `_f` (events/table.py), in the same order
    ranks: pl.DataFrame  # RANK_SCHEMA: one row per global rank
    job: dict[str, Any]
    sources: list[Source]
    stats: list[SourceStats]
    contexts: dict[tuple[int, int], list[tuple[int, str]]]
    notes: list[str] = field(default_factory=list)
    states: dict[int, RankState] = field(default_factory=dict)  # per-rank state model (align/state.py)
    completion: Completion | None = None  # whether the logs prove the run finished (align/state.py)
    flight: FlightReport | None = None  # Flight Recorder dumps matched across ranks (align/flight.py)

    def rank_rows(self) -> list[RankRow]:
        return cast("list[RankRow]", self.ranks.to_dicts())


RANK_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "node": pl.String(),
    "host": pl.String(),
    "local_rank": pl.Int64(),
    "attempt": pl.Int64(),
    "status": pl.String(),  # visible | hidden | silent
    "visible": pl.Boolean(),
    "exit_code": pl.Int64(),
    "signal": pl.String(),
    "stopped_by": pl.String(),  # who sent a SIGTERM it died of: launcher | outside
    "phase": pl.String(),
    "last_iteration": pl.Int64(),
    "last_seq_enqueued": pl.Int64(),
    "last_seq_completed": pl.Int64(),
    "last_kind": pl.String(),
    "last_text": pl.String(),
    "device": pl.String(),
    "bus_id": pl.String(),
    "world_size": pl.Int64(),
    "sources": pl.List(pl.String()),
    "events": pl.Int64(),
}
