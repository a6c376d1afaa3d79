"""Per-rank sections: lines several ranks printed (shown once), each rank's recognised events, the rank table."""

from __future__ import annotations

from typing import Any

import polars as pl

from logscope.report.html.lanes import LEVEL_WEIGHT, LaneKey, all_lane_keys, lane_anchor, lane_name, row_key
from logscope.report.html.text import clip, ranks_label
from logscope.report.html.timeline import Timeline
from logscope.report.nodes import node_labels
from logscope.vocab import Finding

MAX_RANK_VIEWS = 48


MAX_ROWS_PER_RANK_VIEW = 200


MAX_NOTABLE_ROWS_PER_RANK_VIEW = 100  # warnings/errors kept before the tail of a rank's events


MAX_REPEATED_GROUPS = 80


MAX_RANK_TABLE_ROWS = 4096


def repeated_view(events: pl.DataFrame) -> dict[str, Any]:
    """Lines that several ranks printed verbatim, shown once: "ranks 0–7 said …"."""
    ranked = events.filter(pl.col("rank_key") >= 0)
    all_ranks = ranked["rank_key"].n_unique() if ranked.height else 0
    groups = (
        ranked.with_row_index("order")
        .group_by("text")
        .agg(
            ranks=pl.col("rank_key").unique().sort(),
            lines=pl.len(),
            level=pl.col("level").first(),
            kind=pl.col("kind").first(),
            phase=pl.col("phase").first(),
            weight=pl.col("level").replace_strict(LEVEL_WEIGHT, default=0, return_dtype=pl.Int64).max(),
            first=pl.col("phase_idx").min() * 1_000_000_000 + pl.col("order").min(),
        )
        .filter(pl.col("ranks").list.len() >= 2)
    )
    total = groups.height
    chosen = (
        groups.with_columns(n_ranks=pl.col("ranks").list.len())
        .sort(["weight", "n_ranks", "first"], descending=[True, True, False])
        .head(MAX_REPEATED_GROUPS)
        .sort("first")
    )
    rows = [
        {
            "who": ranks_label(row["ranks"]),
            "all": len(row["ranks"]) == all_ranks,
            "lines": row["lines"],
            "level": row["level"],
            "kind": clip(row["kind"], 60),
            "phase": row["phase"],
            "text": clip(row["text"]),
        }
        for row in chosen.iter_rows(named=True)
    ]
    return {"rows": rows, "elided": total - len(rows), "rank_count": all_ranks}


def rank_view_keys(
    events: pl.DataFrame, timeline: Timeline, culprits: set[int], findings: list[Finding]
) -> list[LaneKey]:
    """Which ranks get a per-rank log view: culprits, ranks with evidence, and one per timeline lane."""
    present = all_lane_keys(events)
    wanted_ranks = set(culprits)
    for finding in findings:
        wanted_ranks.update(rank for e in finding.get("evidence") or [] if (rank := e.get("rank")) is not None)
    chosen = [key for key in present if key[1] in wanted_ranks]
    chosen += [lane.key for lane in timeline.lanes if lane.key in present and lane.key not in chosen]
    return sorted(chosen[:MAX_RANK_VIEWS])


def rank_log_view(
    events: pl.DataFrame, key: LaneKey, culprits: set[int], cited: pl.DataFrame, multi_attempt: bool
) -> dict[str, Any]:
    """One rank's recognised events: lines findings cite, then warnings/errors, then the tail, in order."""
    lane = (pl.col("attempt_key") == key[0]) & (pl.col("rank_key") == key[1])
    rows = (
        events.filter(lane)
        .with_row_index("pos")
        .join(cited.filter(lane).select("source", "line", "findings"), on=["source", "line"], how="left")
    )
    must = rows.filter(pl.col("findings").is_not_null()).head(MAX_NOTABLE_ROWS_PER_RANK_VIEW)
    notable = rows.filter(pl.col("level").is_in(["warning", "error"])).head(
        MAX_NOTABLE_ROWS_PER_RANK_VIEW - must.height
    )
    picked = pl.concat([must, notable]).unique(subset="pos")
    tail = rows.tail(MAX_ROWS_PER_RANK_VIEW - picked.height)
    shown = pl.concat([picked, tail]).unique(subset="pos").sort("pos")
    out_rows = []
    previous = -1
    for row in shown.iter_rows(named=True):
        gap = int(row["pos"]) - previous - 1
        previous = int(row["pos"])
        out_rows.append(
            {
                "gap": gap,
                "file": clip(str(row["source"]).rsplit("/", 1)[-1], 60),
                "where": f"{clip(row['source'], 300)}:{row['line']}",
                "line": row["line"],
                "phase": row["phase"],
                "level": row["level"] or "info",
                "kind": clip(row["kind"], 60),
                "iteration": row["iteration"],
                "seq": row["seq"],
                "text": clip(row["text"]),
                "findings": row["findings"] or [],
            }
        )
    citing = sorted({n for r in out_rows for n in r["findings"]})
    return {
        "anchor": lane_anchor(key),
        "name": lane_name(key, multi_attempt),
        "culprit": key[1] in culprits,
        "total": rows.height,
        "rows": out_rows,
        "elided": rows.height - shown.height,
        "findings": citing,
    }


def rank_table_view(
    rank_rows: list[dict[str, Any]], anchors: dict[LaneKey, str], culprits: set[int], multi_attempt: bool
) -> dict[str, Any]:
    out = []
    shown = sorted(rank_rows, key=row_key)[:MAX_RANK_TABLE_ROWS]
    for row, node in zip(shown, node_labels(shown), strict=True):
        key = row_key(row)
        device = row.get("device") or row.get("host")
        out.append(
            {
                "rank": row.get("rank"),
                "anchor": anchors.get(key),
                "culprit": row.get("rank") in culprits,
                "attempt": row.get("attempt"),
                "node": clip(node, 100),
                "local_rank": row.get("local_rank"),
                "device": clip(str(device), 100) if device is not None else "",
                "status": row.get("status") or ("visible" if row.get("visible") else "hidden"),
                "exit_code": row.get("exit_code"),
                "signal": clip(row.get("signal"), 40),
                "phase": row.get("phase"),
                "last_iteration": row.get("last_iteration"),
                "last_seq_enqueued": row.get("last_seq_enqueued"),
                "last_seq_completed": row.get("last_seq_completed"),
                "sources": [clip(str(s), 200) for s in (row.get("sources") or [])[:6]],
                "sources_elided": max(0, len(row.get("sources") or []) - 6),
            }
        )
    return {
        "rows": out,
        "elided": max(0, len(rank_rows) - MAX_RANK_TABLE_ROWS),
        "show_attempt": multi_attempt,
    }
