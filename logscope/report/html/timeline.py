"""The timeline: one lane per group of identical ranks, on an axis of aligned progress (phase, then
iteration / SeqNum), not wall clock."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from logscope.events.table import PHASES
from logscope.report.html.lanes import LEVEL_WEIGHT, LaneKey, lane_name, row_key
from logscope.report.html.text import MAX_TEXT_CHARS, clip, rank_ranges
from logscope.vocab import Finding

MAX_LANES = 48


MAX_MARKS_PER_LANE = 40


LABEL_WIDTH = 190.0


PLOT_WIDTH = 760.0


STATUS_WIDTH = 130.0


AXIS_HEIGHT = 34.0


LANE_HEIGHT = 22.0


MIN_PHASE_WIDTH = 46.0


MIN_TICK_GAP = 40.0


MIN_BAR_WIDTH = 6.0


@dataclass
class Mark:
    x: float
    kind: str  # warning | error | last | collective
    title: str


@dataclass
class Bar:
    x: float
    width: float
    phase: str
    title: str


@dataclass
class Lane:
    key: LaneKey
    ranks: list[int]
    label: str
    status: str
    culprit: bool
    y: float = 0.0
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    anchor: str | None = None
    empty_reason: str | None = None


@dataclass
class Segment:
    phase: str
    x: float
    width: float
    ticks: list[tuple[float, str, str]]  # (x, label, SVG text-anchor)


@dataclass
class Timeline:
    lanes: list[Lane]
    segments: list[Segment]
    width: float
    height: float
    collective_x: float | None
    collective_label: str  # empty when no lane marks the collective
    elided_lanes: int
    lane_count: int


def verdict_collective(verdict: dict[str, Any], findings: list[Finding]) -> dict[str, Any] | None:
    """The collective of the finding the verdict rests on (else the first finding that names one)."""
    rule = verdict.get("rule")
    preferred = [f for f in findings if rule and f.get("rule") == rule] + findings
    for finding in preferred:
        coll = finding.get("collective")
        if coll and (coll.get("seq") is not None or coll.get("op")):
            return dict(coll)
    return None


def _collective_label(coll: dict[str, Any] | None) -> str:
    if not coll:
        return ""
    parts = [str(coll["op"]) if coll.get("op") else "collective"]
    if coll.get("seq") is not None:
        parts.append(f"SeqNum {coll['seq']}")
    return clip(" ".join(parts), 80)


def build_timeline(
    events: pl.DataFrame,
    rank_rows: list[dict[str, Any]],
    culprits: set[int],
    collective: dict[str, Any] | None,
    multi_attempt: bool,
) -> Timeline:
    rank_facts = {row_key(r): r for r in rank_rows}

    # x axis: per phase, the distinct (iteration, SeqNum) positions any rank reached, in order. Ranks at the
    # same progress point line up vertically whatever their clocks say.
    keys = (
        events.select("phase_idx", "k_iter", "k_seq")
        .unique()
        .sort("phase_idx", "k_iter", "k_seq")
        .with_columns(slot=pl.int_range(pl.len()).over("phase_idx"), n_slots=pl.len().over("phase_idx"))
    )
    slot_counts = {int(p): int(n) for p, n in keys.select("phase_idx", "n_slots").unique().iter_rows()}
    segments, phase_geometry = _segments(slot_counts, keys)
    placed = events.join(keys, on=["phase_idx", "k_iter", "k_seq"], how="left")
    x_of = _x_expression(phase_geometry)
    placed = placed.with_columns(x=x_of)

    lanes = _group_lanes(events, rank_facts, culprits, multi_attempt)
    lane_count = len(lanes)
    if len(lanes) > MAX_LANES:
        keep = [lane for lane in lanes if lane.culprit][:MAX_LANES]
        keep += [lane for lane in lanes if not lane.culprit][: MAX_LANES - len(keep)]
        lanes = sorted(keep, key=lambda lane: lane.key)

    collective_x = collective_mark_x(placed, collective)
    for i, lane in enumerate(lanes):
        lane.y = AXIS_HEIGHT + i * LANE_HEIGHT
        _draw_lane(lane, placed, collective)

    return Timeline(
        lanes=lanes,
        segments=segments,
        width=LABEL_WIDTH + PLOT_WIDTH + STATUS_WIDTH,
        height=AXIS_HEIGHT + max(1, len(lanes)) * LANE_HEIGHT + 8,
        collective_x=collective_x,
        collective_label=_collective_label(collective)
        if collective_x is not None or any(m.kind == "collective" for lane in lanes for m in lane.marks)
        else "",
        elided_lanes=lane_count - len(lanes),
        lane_count=lane_count,
    )


def _segments(slot_counts: dict[int, int], keys: pl.DataFrame) -> tuple[list[Segment], dict[int, tuple[float, float]]]:
    """Phase segments left to right: a floor width each, plus a share that grows with its progress points."""
    present = sorted(slot_counts)
    if not present:
        return [], {}
    weights = {p: math.sqrt(slot_counts[p]) for p in present}
    spare = max(0.0, PLOT_WIDTH - MIN_PHASE_WIDTH * len(present))
    total = sum(weights.values())
    x = LABEL_WIDTH
    segments: list[Segment] = []
    geometry: dict[int, tuple[float, float]] = {}
    for phase_idx in present:
        width = min(PLOT_WIDTH, MIN_PHASE_WIDTH + spare * weights[phase_idx] / total)
        geometry[phase_idx] = (x, width)
        segments.append(Segment(PHASES[phase_idx], round(x, 1), round(width, 1), _ticks(keys, phase_idx, x, width)))
        x += width
    return segments, geometry


def _ticks(keys: pl.DataFrame, phase_idx: int, x0: float, width: float) -> list[tuple[float, str, str]]:
    """Axis labels at the first and last iteration (or SeqNum) of a phase, when the phase has them."""
    rows = keys.filter(pl.col("phase_idx") == phase_idx)
    n = rows.height
    for column, prefix in (("k_iter", "it "), ("k_seq", "seq ")):
        known = rows.filter(pl.col(column) >= 0)
        if known.height == 0:
            continue
        first, last = known.row(0, named=True), known.row(known.height - 1, named=True)
        if last[column] == first[column]:
            continue  # one value says nothing about progress within the phase
        x_first = x0 + (first["slot"] + 0.5) * width / n
        x_last = x0 + (last["slot"] + 0.5) * width / n
        if x_last - x_first < MIN_TICK_GAP:
            return [(round(x_last, 1), f"{prefix}{first[column]}–{last[column]}", "end")]
        return [
            (round(x_first, 1), f"{prefix}{first[column]}", "start"),
            (round(x_last, 1), f"{prefix}{last[column]}", "end"),
        ]
    return []


def _x_expression(geometry: dict[int, tuple[float, float]]) -> pl.Expr:
    x0 = pl.col("phase_idx").replace_strict({p: g[0] for p, g in geometry.items()}, return_dtype=pl.Float64)
    width = pl.col("phase_idx").replace_strict({p: g[1] for p, g in geometry.items()}, return_dtype=pl.Float64)
    return x0 + (pl.col("slot").cast(pl.Float64) + 0.5) * width / pl.col("n_slots").cast(pl.Float64)


def _group_lanes(
    events: pl.DataFrame, rank_facts: dict[LaneKey, dict[str, Any]], culprits: set[int], multi_attempt: bool
) -> list[Lane]:
    """One lane per group of identical ranks: same phases, last SeqNum, last iteration and exit status."""
    per_rank = events.group_by("attempt_key", "rank_key").agg(
        phases=pl.col("phase_idx").unique().sort(),
        last_seq=pl.col("seq").max(),
        last_iter=pl.col("iteration").max(),
    )
    signatures: dict[LaneKey, tuple[Any, ...]] = {}
    for row in per_rank.iter_rows(named=True):
        key = (int(row["attempt_key"]), int(row["rank_key"]))
        signatures[key] = (tuple(row["phases"]), row["last_seq"], row["last_iter"])

    with_events = set(signatures)
    for key in rank_facts:
        signatures.setdefault(key, ((), None, None))

    groups: dict[tuple[Any, ...], list[LaneKey]] = {}
    for key, signature in signatures.items():
        facts = rank_facts.get(key, {})
        exit_status = (facts.get("status"), facts.get("exit_code"), facts.get("signal"))
        # the launcher lane (rank -1) and each attempt stay separate lanes
        group_id = (key[0], key[1] < 0, *signature, *exit_status)
        groups.setdefault(group_id, []).append(key)

    lanes: list[Lane] = []
    for members in groups.values():
        members.sort()
        representative = members[0]
        ranks = [rank for _, rank in members if rank >= 0]
        if len(members) == 1:
            label = lane_name(representative, multi_attempt)
        else:
            label = f"ranks {rank_ranges(ranks)} identical"
            if multi_attempt and representative[0] >= 0:
                label += f" · attempt {representative[0]}"
        has_events = representative in with_events
        facts = rank_facts.get(representative, {})
        lanes.append(
            Lane(
                key=representative,
                ranks=ranks,
                label=label,
                status=_status_text(facts),
                culprit=bool(culprits & set(ranks)),
                empty_reason=None if has_events else f"no recognised lines ({facts.get('status') or 'hidden'})",
            )
        )
    lanes.sort(key=lambda lane: lane.key)
    return lanes


def _status_text(facts: dict[str, Any]) -> str:
    if not facts:
        return ""
    parts: list[str] = []
    if facts.get("signal"):
        parts.append(str(facts["signal"]))
    elif facts.get("exit_code") is not None:
        parts.append(f"exit {facts['exit_code']}")
    status = facts.get("status") or ("visible" if facts.get("visible") else "hidden")
    if status != "visible":
        parts.append(str(status))
    return clip(" · ".join(parts), 40)


def collective_mark_x(placed: pl.DataFrame, collective: dict[str, Any] | None) -> float | None:
    if not collective or collective.get("seq") is None:
        return None
    hits = placed.filter(pl.col("seq") == collective["seq"])
    if hits.height == 0:
        return None
    return round(float(hits["x"].min()), 1)  # type: ignore[arg-type]


def _draw_lane(lane: Lane, placed: pl.DataFrame, collective: dict[str, Any] | None) -> None:
    attempt, rank = lane.key
    rows = placed.filter((pl.col("attempt_key") == attempt) & (pl.col("rank_key") == rank))
    if rows.height == 0:
        return
    for phase_row in (
        rows.group_by("phase_idx").agg(x0=pl.col("x").min(), x1=pl.col("x").max(), n=pl.len()).sort("phase_idx")
    ).iter_rows(named=True):
        phase = PHASES[int(phase_row["phase_idx"])]
        x0 = float(phase_row["x0"]) - MIN_BAR_WIDTH / 2
        width = float(phase_row["x1"]) - float(phase_row["x0"]) + MIN_BAR_WIDTH
        lane.bars.append(Bar(round(x0, 1), round(width, 1), phase, f"{phase}: {phase_row['n']} lines"))

    notable = (
        rows.filter(pl.col("level").is_in(["warning", "error"]))
        .unique(subset=["x", "level"], keep="first", maintain_order=True)
        .sort(pl.col("level").replace_strict(LEVEL_WEIGHT, default=0, return_dtype=pl.Int64), descending=True)
        .head(MAX_MARKS_PER_LANE)
    )
    for row in notable.iter_rows(named=True):
        lane.marks.append(Mark(round(float(row["x"]), 1), str(row["level"]), _event_title(row)))

    if collective:
        if collective.get("seq") is not None:
            hits = rows.filter(pl.col("seq") == collective["seq"])
        else:
            hits = rows.filter(pl.col("op") == collective.get("op"))
        if hits.height:  # where this rank entered the collective
            row = hits.row(0, named=True)
            lane.marks.append(Mark(round(float(row["x"]), 1), "collective", "failing collective: " + _event_title(row)))

    last = rows.row(rows.height - 1, named=True)
    lane.marks.append(Mark(round(float(last["x"]), 1), "last", "last event: " + _event_title(last)))


def _event_title(row: dict[str, Any]) -> str:
    where = f"{row['source']}:{row['line']}"
    return clip(f"{where} [{row['phase']}/{row['kind']}] {row['text']}", MAX_TEXT_CHARS)
