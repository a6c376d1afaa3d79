"""The HTML report: one self-contained page a teammate opens from a CI artifact, with no network.

All page markup lives in Jinja2 templates with autoescape on (one include per section under
`templates/sections/`); the modules of this package only compute each section's view model (plain data, numbers
and strings). Log text is untrusted: it reaches the page only through autoescaped template expressions, never
through string concatenation, and every log-derived string is length-capped (`text.clip`) so the page stays
bounded whatever the input size.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import resources
from typing import Any

from jinja2 import Environment
from markupsafe import Markup

from logscope.events.table import PHASES
from logscope.model import Analysis
from logscope.report import flight
from logscope.report.html.collectives import collective_view
from logscope.report.html.findings import cited_lines, finding_view
from logscope.report.html.lanes import all_lane_keys, lane_anchor, ordered_events, with_attempts
from logscope.report.html.ranks import (
    MAX_ROWS_PER_RANK_VIEW,
    rank_log_view,
    rank_table_view,
    rank_view_keys,
    repeated_view,
)
from logscope.report.html.summary import checklist_view, job_view, notes_view, replay_view, verdict_view
from logscope.report.html.text import clip
from logscope.report.html.timeline import build_timeline, verdict_collective
from logscope.report.templating import html_environment
from logscope.vocab import Finding


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


def _environment() -> Environment:
    # Each section include ends its own line, as when the page was one file.
    return html_environment("logscope.report", keep_trailing_newline=True)


def _asset(name: str) -> str:
    return resources.files("logscope.report").joinpath("templates", name).read_text(encoding="utf-8")


def _view(analysis: Analysis) -> dict[str, Any]:
    diagnosis = analysis.diagnosis
    rank_rows: list[dict[str, Any]] = list(diagnosis.get("ranks") or [])
    verdict: dict[str, Any] = diagnosis.get("verdict") or {}
    findings: list[Finding] = list(diagnosis.get("findings") or [])
    culprits = set(verdict.get("culprit_ranks") or [])
    attempts = {r.get("attempt") for r in rank_rows} | set(analysis.events["attempt"].unique().to_list())
    multi_attempt = len(attempts - {None}) > 1

    source = str(diagnosis.get("input", ""))
    events = ordered_events(analysis.events)
    rank_rows = with_attempts(rank_rows, events)
    collective = verdict_collective(verdict, findings)
    timeline = build_timeline(events, rank_rows, culprits, collective, multi_attempt)

    view_keys = rank_view_keys(events, timeline, culprits, findings)
    anchors = {key: lane_anchor(key) for key in view_keys}
    cited = cited_lines(events, findings)
    docs = {rule: analysis.rule_docs.get(rule) for rule in {str(f["rule"]) for f in findings if f.get("rule")}}
    for lane in timeline.lanes:
        lane.anchor = anchors.get(lane.key)

    return {
        "title": f"logscope: {verdict.get('category', 'unknown')} — {clip(source, 100)}",
        "diagnosis_input": clip(source, 300),
        "logscope_version": diagnosis.get("logscope_version"),
        "verdict": verdict_view(verdict),
        "job": job_view(diagnosis.get("job") or {}),
        "checklist": checklist_view(diagnosis.get("checklist") or []),
        "timeline": timeline,
        "collectives": collective_view(events, rank_rows),
        "findings": [finding_view(i, f, verdict, cited, anchors, docs) for i, f in enumerate(findings, 1)],
        "repeated": repeated_view(events),
        "rank_table": rank_table_view(rank_rows, anchors, culprits, multi_attempt),
        "rank_views": [rank_log_view(events, key, culprits, cited, multi_attempt) for key in view_keys],
        "rank_view_rows": MAX_ROWS_PER_RANK_VIEW,
        "rank_views_elided": max(0, len(all_lane_keys(events)) - len(view_keys)),
        "replay": replay_view(diagnosis.get("replay")),
        "flight_recorder": flight.html_view(diagnosis.get("flight_recorder")),
        "notes": notes_view(list(diagnosis.get("notes") or []) + list(analysis.notes)),
        "phases": PHASES,
    }
