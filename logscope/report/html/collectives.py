"""The collectives table: each rank's last collective; identical ranks share a row, cells off the majority are
marked."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl

from logscope.report.html.lanes import LaneKey, row_key
from logscope.report.html.text import clip, rank_ranges

MAX_COLLECTIVE_ROWS = 64


COLLECTIVE_COLUMNS = (
    ("last_seq_enqueued", "last SeqNum enqueued"),
    ("last_seq_completed", "last SeqNum completed"),
    ("op", "last op"),
    ("seq", "its SeqNum"),
    ("numel_in", "numel in"),
    ("numel_out", "numel out"),
    ("timeout_ms", "timeout ms"),
    ("pg", "process group"),
)


def collective_view(events: pl.DataFrame, rank_rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Rank × last collective facts; identical ranks share a row; cells off the majority are marked."""
    # each rank's last event that names an op (else its last one with a SeqNum): its facts stay together
    coll_events = events.filter(
        (pl.col("rank_key") >= 0) & (pl.col("op").is_not_null() | pl.col("seq").is_not_null())
    ).with_columns(named_op=pl.col("op").is_not_null())
    last_coll = (
        coll_events.with_row_index("order")
        .sort("named_op", "order")
        .group_by("attempt_key", "rank_key")
        .agg(pl.col("op", "seq", "numel_in", "numel_out", "pg").last())
    )
    timeouts = (
        events.filter((pl.col("rank_key") >= 0) & pl.col("timeout_ms").is_not_null())
        .group_by("attempt_key", "rank_key")
        .agg(pl.col("timeout_ms").last())
    )
    facts: dict[LaneKey, dict[str, Any]] = {}
    for row in last_coll.iter_rows(named=True):
        facts.setdefault((row["attempt_key"], row["rank_key"]), {}).update(row)
    for row in timeouts.iter_rows(named=True):
        facts.setdefault((row["attempt_key"], row["rank_key"]), {}).update(row)
    for rank_row in rank_rows:
        key = row_key(rank_row)
        if key[1] < 0:
            continue
        entry = facts.setdefault(key, {})
        entry["last_seq_enqueued"] = rank_row.get("last_seq_enqueued")
        entry["last_seq_completed"] = rank_row.get("last_seq_completed")

    columns = [c for c, _ in COLLECTIVE_COLUMNS if any(f.get(c) is not None for f in facts.values())]
    if not columns:
        return None
    cells_by_key = {key: tuple(_cell(f.get(c)) for c in columns) for key, f in facts.items()}

    # per column: None when the ranks that logged a value agree; else the strict-majority value (cells off it
    # are marked), or "" when there is no strict majority (every logged cell of the column is marked). A rank
    # that logged nothing ("—") is not a disagreement.
    majority: list[str | None] = []
    for i in range(len(columns)):
        counts = Counter(cells[i] for cells in cells_by_key.values() if cells[i] != MISSING)
        (top, top_count), *rest = counts.most_common() or [(MISSING, 0)]
        majority.append(None if not rest else top if top_count > rest[0][1] else "")

    groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for (attempt, rank), cells in sorted(cells_by_key.items()):
        groups.setdefault((attempt, cells), []).append(rank)
    rows = []
    for (attempt, cells), ranks in groups.items():
        rows.append(
            {
                "ranks": rank_ranges(ranks),
                "first": ranks[0],
                "count": len(ranks),
                "attempt": attempt if attempt >= 0 else None,
                "cells": [{"text": text, "odd": _off_majority(text, majority[i])} for i, text in enumerate(cells)],
                "odd": any(_off_majority(text, majority[i]) for i, text in enumerate(cells)),
            }
        )
    rows.sort(key=lambda r: (not r["odd"], r["attempt"] or 0))
    elided = max(0, len(rows) - MAX_COLLECTIVE_ROWS)
    labels = dict(COLLECTIVE_COLUMNS)
    return {
        "headers": [labels[c] for c in columns],
        "rows": sorted(rows[:MAX_COLLECTIVE_ROWS], key=lambda r: (r["attempt"] or 0, r["first"])),
        "elided": elided,
        "disagree": any(m is not None for m in majority),
        "show_attempt": len({r["attempt"] for r in rows}) > 1,
    }


MISSING = "—"


def _cell(value: Any) -> str:
    return MISSING if value is None else clip(str(value), 80)


def _off_majority(text: str, majority: str | None) -> bool:
    return majority is not None and text != MISSING and text != majority
