"""Helpers for the replayer tests: a typer app with `replay`, and diagnoses that follow the v1 schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import typer

from logscope.replay.command import register

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "schema" / "diagnosis-v1.json").read_text(encoding="utf-8"))


def make_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """logscope (test app with only `replay`)."""

    register(app)
    return app


def per_rank(rank: int, op: str, numel: int) -> dict[str, Any]:
    return {"rank": rank, "op": op, "numel_in": numel, "numel_out": numel, "seq": None}


def diagnosis(
    collective: dict[str, Any] | None,
    *,
    world_size: int | None = 2,
    backend: str | None = "gloo",
    nccl_env: dict[str, str] | None = None,
    rule: str = "collective-mismatch",
    category: str = "collective_mismatch",
    extra_findings: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A schema-valid diagnosis whose verdict names one finding carrying `collective`."""
    finding = {
        "rule": rule,
        "category": category,
        "severity": "error",
        "confidence": 0.9,
        "title": "ranks disagree on a collective",
        "message": "rank 1 called a different collective",
        "ranks": [0, 1],
        "culprit_ranks": [1],
        "collective": collective,
        "evidence": [],
        "next_step": "W7",
    }
    document = {
        "schema": "logscope/diagnosis/v1",
        "logscope_version": "0.1.0",
        "input": "fixtures/example",
        "job": {
            "world_size": world_size,
            "nnodes": 1,
            "attempts": 1,
            "backend": backend,
            "torch_version": "2.13.0+cpu",
            "nccl_version": None,
            "framework": None,
            "nccl_env": nccl_env or {},
        },
        "ranks": [],
        "findings": [*(extra_findings or []), finding],
        "verdict": {
            "category": category,
            "culprit_ranks": [1],
            "confidence": 0.9,
            "summary": "ranks disagree",
            "rule": rule,
            "next_step": {"id": "W7", "title": "Reproduce small", "command": None},
        },
        "checklist": [],
    }
    jsonschema.validate(document, SCHEMA)
    return document


def collective(op: str, numel: int | None, ranks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "op": op,
        "seq": 8,
        "numel_in": numel,
        "numel_out": numel,
        "dtype": None,
        "timeout_ms": None,
        "pg": None,
        **({"per_rank": ranks} if ranks is not None else {}),
    }


def write_json(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path
