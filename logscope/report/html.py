"""The HTML report: one self-contained page a teammate opens from a CI artifact, with no network.

All page markup lives in Jinja2 templates with autoescape on; this module only computes the view model (plain
data, numbers and strings). Log text is untrusted: it reaches the page only through autoescaped template
expressions, never through string concatenation, and every log-derived string is length-capped so the page
stays bounded whatever the input size.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import polars as pl
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from logscope.events.table import PHASES
from logscope.model import Analysis
from logscope.report import flight
from logscope.report.nodes import node_labels
from logscope.verdict.calibration import calibration_sentence

# Size bounds: the page shows evidence windows and samples, never whole logs.
MAX_TEXT_CHARS = 400  # one log line in tables and tooltips
MAX_EVIDENCE_TEXT_CHARS = 2000  # one log line inside a finding's evidence window
MAX_EVIDENCE_PER_FINDING = 12
MAX_CONTEXT_LINES = 15
MAX_LANES = 48
MAX_MARKS_PER_LANE = 40
MAX_RANK_VIEWS = 48
MAX_ROWS_PER_RANK_VIEW = 200
MAX_NOTABLE_ROWS_PER_RANK_VIEW = 100  # warnings/errors kept before the tail of a rank's events
MAX_REPEATED_GROUPS = 80
MAX_COLLECTIVE_ROWS = 64
MAX_RANK_TABLE_ROWS = 4096
MAX_NOTES = 200
MAX_REPLAY_ROWS = 200
MAX_REPLAY_COLUMNS = 14

PHASE_INDEX = {phase: i for i, phase in enumerate(PHASES)}
LEVEL_WEIGHT = {"error": 3, "warning": 2, "info": 1, "benign": 0}

# Timeline geometry (SVG user units; the SVG scales to the page width).
LABEL_WIDTH = 190.0
PLOT_WIDTH = 760.0
STATUS_WIDTH = 130.0
AXIS_HEIGHT = 34.0
LANE_HEIGHT = 22.0
MIN_PHASE_WIDTH = 46.0
MIN_TICK_GAP = 40.0
MIN_BAR_WIDTH = 6.0


def render(analysis: Analysis) -> str:
    """The report for one analysis, as one self-contained HTML document."""
    script = _asset("report.js")
    context = {
        "css": Markup(_asset("report.css")),
        "js": Markup(script),
        "script_hash": base64.b64encode(hashlib.sha256(script.encode()).digest()).decode(),
        **_view(analysis),
    }
    return _environment().get_template("report.html.j2").render(**context)


def rank_ranges(ranks: Iterable[int]) -> str:
    """Compact rank list: [0, 1, 2, 3, 7] -> "0–3, 7"."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = prev = None
    for rank in ordered:
        if prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            parts.append(_span(start, prev))
        start = prev = rank
    if start is not None:
        parts.append(_span(start, prev))
    return ", ".join(parts)


def _span(start: int, end: int | None) -> str:
    if end is None or end == start:
        return str(start)
    if end == start + 1:
        return f"{start}, {end}"
    return f"{start}–{end}"


def ranks_label(ranks: Sequence[int]) -> str:
    """'rank 3' / 'ranks 1–7'; 'no rank' when empty."""
    if not ranks:
        return "no rank"
    return ("rank " if len(set(ranks)) == 1 else "ranks ") + rank_ranges(ranks)


def clip(text: str | None, limit: int = MAX_TEXT_CHARS) -> str:
    """Cap one untrusted string; say how much was cut so nobody mistakes a clipped line for the whole line."""
    if text is None:
        return ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … [{len(text) - limit} more chars]"


def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("logscope.report", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _asset(name: str) -> str:
    return resources.files("logscope.report").joinpath("templates", name).read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------------------------
# View model
# ----------------------------------------------------------------------------------------------------

LaneKey = tuple[int, int]  # (attempt, rank) with -1 for unknown; rank -1 is the launcher's own lines


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


def _view(analysis: Analysis) -> dict[str, Any]:
    diagnosis = analysis.diagnosis
    rank_rows: list[dict[str, Any]] = list(diagnosis.get("ranks") or [])
    verdict: dict[str, Any] = diagnosis.get("verdict") or {}
    findings: list[dict[str, Any]] = list(diagnosis.get("findings") or [])
    culprits = set(verdict.get("culprit_ranks") or [])
    attempts = {r.get("attempt") for r in rank_rows} | set(analysis.events["attempt"].unique().to_list())
    multi_attempt = len(attempts - {None}) > 1

    source = str(diagnosis.get("input", ""))
    events = _ordered_events(analysis.events)
    rank_rows = _with_attempts(rank_rows, events)
    collective = _verdict_collective(verdict, findings)
    timeline = _timeline(events, rank_rows, culprits, collective, multi_attempt)

    view_keys = _rank_view_keys(events, timeline, culprits, findings)
    anchors = {key: _anchor(key) for key in view_keys}
    cited = _cited_lines(events, findings)
    docs = {rule: analysis.rule_docs.get(rule) for rule in {str(f["rule"]) for f in findings if f.get("rule")}}
    for lane in timeline.lanes:
        lane.anchor = anchors.get(lane.key)

    return {
        "title": f"logscope: {verdict.get('category', 'unknown')} — {clip(source, 100)}",
        "diagnosis_input": clip(source, 300),
        "logscope_version": diagnosis.get("logscope_version"),
        "verdict": _verdict_view(verdict),
        "job": _job_view(diagnosis.get("job") or {}),
        "checklist": _checklist_view(diagnosis.get("checklist") or []),
        "timeline": timeline,
        "collectives": _collective_view(events, rank_rows),
        "findings": [_finding_view(i, f, verdict, cited, anchors, docs) for i, f in enumerate(findings, 1)],
        "repeated": _repeated_view(events),
        "rank_table": _rank_table_view(rank_rows, anchors, culprits, multi_attempt),
        "rank_views": [_rank_log_view(events, key, culprits, cited, multi_attempt) for key in view_keys],
        "rank_view_rows": MAX_ROWS_PER_RANK_VIEW,
        "rank_views_elided": max(0, len(_all_lane_keys(events)) - len(view_keys)),
        "replay": _replay_view(diagnosis.get("replay")),
        "flight_recorder": flight.html_view(diagnosis.get("flight_recorder")),
        "notes": _notes_view(list(diagnosis.get("notes") or []) + list(analysis.notes)),
        "phases": PHASES,
    }


def _ordered_events(events: pl.DataFrame) -> pl.DataFrame:
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


def _with_attempts(rank_rows: list[dict[str, Any]], events: pl.DataFrame) -> list[dict[str, Any]]:
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


def _all_lane_keys(events: pl.DataFrame) -> list[LaneKey]:
    keys = events.select("attempt_key", "rank_key").unique().sort("attempt_key", "rank_key")
    return [(int(a), int(r)) for a, r in keys.iter_rows()]


def _anchor(key: LaneKey) -> str:
    attempt, rank = key
    who = "launcher" if rank < 0 else str(rank)
    return f"rank-{who}" if attempt < 0 else f"rank-{who}-a{attempt}"


def _lane_name(key: LaneKey, multi_attempt: bool) -> str:
    attempt, rank = key
    name = "launcher" if rank < 0 else f"rank {rank}"
    if multi_attempt and attempt >= 0:
        name += f" · attempt {attempt}"
    return name


def _verdict_view(verdict: dict[str, Any]) -> dict[str, Any]:
    culprits = list(verdict.get("culprit_ranks") or [])
    step = verdict.get("next_step") or {}
    return {
        "category": verdict.get("category", "unknown"),
        "category_label": str(verdict.get("category", "unknown")).replace("_", " "),
        "culprits": ranks_label(culprits) if culprits else "no culprit rank",
        "has_culprit": bool(culprits),
        "confidence_pct": round(100 * float(verdict.get("confidence") or 0.0)),
        "guess": bool(verdict.get("guess")),
        "calibration": calibration_sentence(verdict),
        "summary": clip(verdict.get("summary"), 4000),
        "rule": verdict.get("rule"),
        "step_id": step.get("id"),
        "step_title": clip(step.get("title"), 500),
        "step_command": clip(step.get("command"), 2000) if step.get("command") else None,
        "step_detail": clip(step.get("detail"), 2000) if step.get("detail") else None,
    }


def _job_view(job: dict[str, Any]) -> dict[str, Any]:
    labels = [
        ("world_size", "world size"),
        ("nnodes", "nodes"),
        ("attempts", "attempts"),
        ("backend", "backend"),
        ("framework", "framework"),
        ("launcher", "launcher"),
        ("torch_version", "torch"),
        ("nccl_version", "NCCL"),
        ("exit_code", "exit code"),
    ]
    facts = [(label, clip(str(job[key]), 200)) for key, label in labels if job.get(key) is not None]
    nccl_env = job.get("nccl_env") or {}
    env = [(clip(str(k), 100), clip(str(v), 300)) for k, v in sorted(nccl_env.items())]
    return {"facts": facts, "nccl_env": env}


def _checklist_view(checklist: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": item.get("id", "?"),
            "title": clip(item.get("title"), 300),
            "status": item.get("status", "unknown"),
            "evidence": [clip(str(e), 1000) for e in (item.get("evidence") or [])[:20]],
        }
        for item in checklist
    ]


def _verdict_collective(verdict: dict[str, Any], findings: list[dict[str, Any]]) -> dict[str, Any] | None:
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


# ----------------------------------------------------------------------------------------------------
# Timeline
# ----------------------------------------------------------------------------------------------------


def _timeline(
    events: pl.DataFrame,
    rank_rows: list[dict[str, Any]],
    culprits: set[int],
    collective: dict[str, Any] | None,
    multi_attempt: bool,
) -> Timeline:
    rank_facts = {_row_key(r): r for r in rank_rows}

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

    collective_x = _collective_x(placed, collective)
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


def _row_key(row: dict[str, Any]) -> LaneKey:
    attempt = row.get("attempt")
    rank = row.get("rank")
    return (-1 if attempt is None else int(attempt), -1 if rank is None else int(rank))


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
            label = _lane_name(representative, multi_attempt)
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


def _collective_x(placed: pl.DataFrame, collective: dict[str, Any] | None) -> float | None:
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


# ----------------------------------------------------------------------------------------------------
# Collective table
# ----------------------------------------------------------------------------------------------------

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


def _collective_view(events: pl.DataFrame, rank_rows: list[dict[str, Any]]) -> dict[str, Any] | None:
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
        key = _row_key(rank_row)
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


# ----------------------------------------------------------------------------------------------------
# Findings
# ----------------------------------------------------------------------------------------------------


def _finding_view(
    number: int,
    finding: dict[str, Any],
    verdict: dict[str, Any],
    cited: pl.DataFrame,
    anchors: dict[LaneKey, str],
    docs: dict[str, dict[str, Any] | None],
) -> dict[str, Any]:
    evidence = list(finding.get("evidence") or [])
    coll = finding.get("collective") or {}
    coll_facts = [
        (label, clip(str(coll[key]), 100))
        for key, label in (
            ("op", "op"),
            ("seq", "SeqNum"),
            ("numel_in", "numel in"),
            ("numel_out", "numel out"),
            ("dtype", "dtype"),
            ("timeout_ms", "timeout ms"),
            ("pg", "process group"),
        )
        if coll.get(key) is not None
    ]
    doc = docs.get(str(finding.get("rule", "")))
    is_verdict = bool(verdict.get("rule")) and finding.get("rule") == verdict.get("rule")
    # One confidence on the page: the verdict's finding shows the verdict's (the rule's, scaled by how complete
    # the logs are), as the header does; other findings show their own, named as such.
    confidence = verdict.get("confidence") if is_verdict else finding.get("confidence")
    return {
        "rule": clip(str(finding.get("rule", "")), 100),
        "category": str(finding.get("category", "")).replace("_", " "),
        "severity": finding.get("severity", "info"),
        "confidence_pct": round(100 * float(confidence or 0.0)),
        "title": clip(finding.get("title"), 300),
        "message": clip(finding.get("message"), 4000),
        "ranks": rank_ranges(finding.get("ranks") or []),
        "culprits": rank_ranges(finding.get("culprit_ranks") or []),
        "next_step": clip(finding.get("next_step"), 300) if finding.get("next_step") else None,
        "is_verdict": is_verdict,
        "collective": coll_facts,
        "doc": {k: clip(str(doc[k]), 3000) for k in ("what", "why", "example") if doc.get(k)} if doc else None,
        "anchor": f"finding-{number}",
        "evidence": [_evidence_view(e, cited, anchors) for e in evidence[:MAX_EVIDENCE_PER_FINDING]],
        "evidence_elided": max(0, len(evidence) - MAX_EVIDENCE_PER_FINDING),
    }


def _cited_lines(events: pl.DataFrame, findings: list[dict[str, Any]]) -> pl.DataFrame:
    """The event rows some finding cites as evidence: (source, line, lane, findings citing it)."""
    pairs = [
        (str(e.get("path")), int(e["line"]), number)
        for number, finding in enumerate(findings, 1)
        for e in (finding.get("evidence") or [])[:MAX_EVIDENCE_PER_FINDING]
        if e.get("line") is not None
    ]
    schema = {"source": pl.String(), "line": pl.Int64(), "finding": pl.Int64()}
    wanted = pl.DataFrame(pairs, schema=schema, orient="row")
    return (
        events.select("source", "line", "attempt_key", "rank_key")
        .join(wanted, on=["source", "line"], how="inner")
        .group_by("source", "line", "attempt_key", "rank_key")
        .agg(findings=pl.col("finding").unique().sort())
    )


def _evidence_view(evidence: dict[str, Any], cited: pl.DataFrame, anchors: dict[LaneKey, str]) -> dict[str, Any]:
    line = evidence.get("line")
    context = list(evidence.get("context") or [])
    if not context:
        context = [{"line": line, "text": evidence.get("text", "")}]
    # keep the window centred on the evidence line when the context is longer than we show
    hit_index = next((i for i, c in enumerate(context) if c.get("line") == line), 0)
    start = max(0, min(hit_index - MAX_CONTEXT_LINES // 2, len(context) - MAX_CONTEXT_LINES))
    window = context[start : start + MAX_CONTEXT_LINES]
    rank = evidence.get("rank")
    return {
        "rank": rank,
        "path": clip(str(evidence.get("path", "")), 300),
        "line": line,
        "anchor": _evidence_anchor(evidence, cited, anchors),
        "context": [
            {
                "line": c.get("line"),
                "text": clip(str(c.get("text", "")), MAX_EVIDENCE_TEXT_CHARS),
                "hit": c.get("line") == line,
            }
            for c in window
        ],
        "context_elided": len(context) - len(window),
    }


def _evidence_anchor(evidence: dict[str, Any], cited: pl.DataFrame, anchors: dict[LaneKey, str]) -> str | None:
    """The per-rank view an evidence line belongs to: by its (file, line) in the event table, else by rank."""
    hit = cited.filter((pl.col("source") == evidence.get("path")) & (pl.col("line") == evidence.get("line")))
    if hit.height:
        key = (int(hit["attempt_key"][0]), int(hit["rank_key"][0]))
        if key in anchors:
            return anchors[key]
    rank = evidence.get("rank")
    if rank is None:
        return None
    candidates = sorted(key for key in anchors if key[1] == rank)
    return anchors[candidates[-1]] if candidates else None


# ----------------------------------------------------------------------------------------------------
# Repeated lines, per-rank views, tables
# ----------------------------------------------------------------------------------------------------


def _repeated_view(events: pl.DataFrame) -> dict[str, Any]:
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


def _rank_view_keys(
    events: pl.DataFrame, timeline: Timeline, culprits: set[int], findings: list[dict[str, Any]]
) -> list[LaneKey]:
    """Which ranks get a per-rank log view: culprits, ranks with evidence, and one per timeline lane."""
    present = _all_lane_keys(events)
    wanted_ranks = set(culprits)
    for finding in findings:
        wanted_ranks.update(e.get("rank") for e in finding.get("evidence") or [] if e.get("rank") is not None)
    chosen = [key for key in present if key[1] in wanted_ranks]
    chosen += [lane.key for lane in timeline.lanes if lane.key in present and lane.key not in chosen]
    return sorted(chosen[:MAX_RANK_VIEWS])


def _rank_log_view(
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
        "anchor": _anchor(key),
        "name": _lane_name(key, multi_attempt),
        "culprit": key[1] in culprits,
        "total": rows.height,
        "rows": out_rows,
        "elided": rows.height - shown.height,
        "findings": citing,
    }


def _rank_table_view(
    rank_rows: list[dict[str, Any]], anchors: dict[LaneKey, str], culprits: set[int], multi_attempt: bool
) -> dict[str, Any]:
    out = []
    shown = sorted(rank_rows, key=_row_key)[:MAX_RANK_TABLE_ROWS]
    for row, node in zip(shown, node_labels(shown), strict=True):
        key = _row_key(row)
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


def _replay_view(replay: Any) -> dict[str, Any] | None:
    """The `logscope replay` result, whatever its shape: scalars as facts, lists of records as tables."""
    if not replay:
        return None
    if not isinstance(replay, dict):
        return {"facts": [("result", clip(json.dumps(replay, default=str), 2000))], "tables": []}
    facts: list[tuple[str, str]] = []
    tables: list[dict[str, Any]] = []
    for key, value in replay.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            columns: list[str] = []
            for record in value:
                columns += [c for c in record if c not in columns]
            columns = columns[:MAX_REPLAY_COLUMNS]
            rows = [[_replay_cell(record.get(c)) for c in columns] for record in value[:MAX_REPLAY_ROWS]]
            tables.append(
                {
                    "name": clip(str(key), 100),
                    "headers": [clip(c, 60) for c in columns],
                    "rows": rows,
                    "elided": max(0, len(value) - MAX_REPLAY_ROWS),
                }
            )
        else:
            facts.append((clip(str(key), 100), _replay_cell(value)))
    return {"facts": facts, "tables": tables}


def _replay_cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (dict, list)):
        return clip(json.dumps(value, default=str, ensure_ascii=False), 600)
    if isinstance(value, float):
        return f"{value:.4g}"
    return clip(str(value), 600)


def _notes_view(notes: list[Any]) -> dict[str, Any]:
    unique = list(dict.fromkeys(str(n) for n in notes))
    return {"lines": [clip(n, 1000) for n in unique[:MAX_NOTES]], "elided": max(0, len(unique) - MAX_NOTES)}
