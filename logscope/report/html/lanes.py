"""Lanes: which (attempt, rank) a row of the event table belongs to, in aligned-progress order."""

from __future__ import annotations

from typing import Any

import polars as pl

from logscope.events.table import PHASES

LaneKey = tuple[int, int]  # (attempt, rank) with -1 for unknown; rank -1 is the launcher's own lines


PHASE_INDEX = {phase: i for i, phase in enumerate(PHASES)}


LEVEL_WEIGHT = {"error": 3, "warning": 2, "info": 1, "benign": 0}


def ordered_events(events: pl.DataFrame) -> pl.DataFrame:
    """Events in aligned-progress order per lane (phase, then clock where known, then file position), with the
    iteration and SeqNum carried forward so every line has a progress position."""
    lane = [pl.col("attempt_key"), pl.col("rank_key")]
    return (
        events.with_columns(
            rank_key=pl.col("rank").fill_null(-1),
            phase_idx=pl.col("phase").replace_strict(PHASE_INDEX, default=None, return_dtype=pl.Int64),
        )
        # a launcher line about a rank (ChildFailedError, "failed (exitcode: 1)") carries no attempt: it
        # belongs to that rank's latest attempt
        .with_columns(attempt_key=pl.col("attempt").fill_null(pl.col("attempt").max().over("rank_key")).fill_null(-1))
        .filter(pl.col("phase_idx").is_not_null())
        .sort(["attempt_key", "rank_key", "phase_idx", "ts", "source", "line"], nulls_last=True)
        .with_columns(
            k_iter=pl.col("iteration").forward_fill().over(lane).fill_null(-1),
            k_seq=pl.col("seq").forward_fill().over(lane).fill_null(-1),
        )
    )


def with_attempts(rank_rows: list[dict[str, Any]], events: pl.DataFrame) -> list[dict[str, Any]]:
    """Rank rows whose attempt is unknown get the attempt their rank's events resolved to (a rank with no
    events: the job's last attempt), so a rank's row and its events land in the same lane."""
    latest = {
        int(r): int(a) for r, a in events.group_by("rank_key").agg(pl.col("attempt_key").max()).iter_rows() if a >= 0
    }
    last_attempt = max(latest.values(), default=None)
    return [
        {**row, "attempt": latest.get(row["rank"], last_attempt)}
        if row.get("attempt") is None and row.get("rank") is not None
        else row
        for row in rank_rows
    ]


def all_lane_keys(events: pl.DataFrame) -> list[LaneKey]:
    keys = events.select("attempt_key", "rank_key").unique().sort("attempt_key", "rank_key")
    return [(int(a), int(r)) for a, r in keys.iter_rows()]


def lane_anchor(key: LaneKey) -> str:
    attempt, rank = key
    who = "launcher" if rank < 0 else str(rank)
    return f"rank-{who}" if attempt < 0 else f"rank-{who}-a{attempt}"


def lane_name(key: LaneKey, multi_attempt: bool) -> str:
    attempt, rank = key
    name = "launcher" if rank < 0 else f"rank {rank}"
    if multi_attempt and attempt >= 0:
        name += f" · attempt {attempt}"
    return name


def row_key(row: dict[str, Any]) -> LaneKey:
    attempt = row.get("attempt")
    rank = row.get("rank")
    return (-1 if attempt is None else int(attempt), -1 if rank is None else int(rank))
