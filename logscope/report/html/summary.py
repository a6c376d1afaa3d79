"""The cards at the top and bottom of the page: verdict, job, validation checklist, replay, notes."""

from __future__ import annotations

import json
from typing import Any

from logscope.report.html.text import clip, ranks_label
from logscope.verdict.calibration import calibration_sentence

MAX_NOTES = 200


MAX_REPLAY_ROWS = 200


MAX_REPLAY_COLUMNS = 14


def verdict_view(verdict: dict[str, Any]) -> dict[str, Any]:
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


def job_view(job: dict[str, Any]) -> dict[str, Any]:
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


def checklist_view(checklist: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "id": item.get("id", "?"),
            "title": clip(item.get("title"), 300),
            "status": item.get("status", "unknown"),
            "evidence": [clip(str(e), 1000) for e in (item.get("evidence") or [])[:20]],
        }
        for item in checklist
    ]


def replay_view(replay: Any) -> dict[str, Any] | None:
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


def notes_view(notes: list[Any]) -> dict[str, Any]:
    unique = list(dict.fromkeys(str(n) for n in notes))
    return {"lines": [clip(n, 1000) for n in unique[:MAX_NOTES]], "elided": max(0, len(unique) - MAX_NOTES)}
