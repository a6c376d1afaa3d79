"""Reading an input in two halves (the second in a child process) gives the analysis of reading it in one."""

from __future__ import annotations

from pathlib import Path

import pytest

import logscope.events.parallel as parallel
from logscope.analysis import analyze
from logscope.model import Analysis
from logscope.report import renderer

ROOT = Path(__file__).resolve().parents[1]
TREES = [
    "fixtures/runs/skip_allreduce_rank1/logs",
    "fixtures/runs/max_restarts_recovered/logs",
    "fixtures/gpu/nccl_proto_differs_ws2_hostid",
    "fixtures/real/runs/01_healthy_ws2",
]


def outputs(analysis: Analysis) -> dict[str, str]:
    return {fmt: renderer(fmt)(analysis) for fmt in ("json", "text", "html")}


@pytest.mark.parametrize("tree", TREES)
def test_two_halves_give_the_same_analysis(tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / tree
    alone = analyze(path)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    assert parallel._split_point(parallel.discover(path)) is not None
    halves = analyze(path)
    assert halves.events.equals(alone.events)
    assert outputs(halves) == outputs(alone)


def test_a_failed_child_leaves_its_half_to_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / TREES[0]
    alone = analyze(path)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(parallel.sys, "executable", "/bin/false")
    read: list[int] = []
    halves = analyze(path, progress=read.append)
    assert outputs(halves) == outputs(alone)
    assert sum(read) > 0
