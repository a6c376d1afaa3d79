"""Reading an input in groups of sources shared with a helper process gives the analysis of reading it in one
pass, whoever reads which group, and also when the helper fails."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import logscope.events.helper as helper
import logscope.events.parallel as parallel
import logscope.events.rank_values as rank_values
from logscope.analysis import analyze
from logscope.ingest.sources import discover
from logscope.model import Analysis
from logscope.report import renderer
from logscope.vocab import Event

ROOT = Path(__file__).resolve().parents[1]
TREES = [
    "fixtures/runs/skip_allreduce_rank1/logs",
    "fixtures/runs/max_restarts_recovered/logs",
    "fixtures/gpu/nccl_proto_differs_ws2_hostid",
    "fixtures/real/runs/01_healthy_ws2",
]


def outputs(analysis: Analysis) -> dict[str, str]:
    return {fmt: renderer(fmt)(analysis) for fmt in ("json", "text", "html")}


@pytest.fixture
def one_source_per_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helper, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(helper, "GROUP_BYTES", 1)


def in_one_pass(path: Path) -> Analysis:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(helper, "PARALLEL_MIN_BYTES", 1 << 62)
        return analyze(path)


def takers(monkeypatch: pytest.MonkeyPatch, parent_waits: bool) -> dict[str, list[int]]:
    """Who took which group; with `parent_waits`, this process takes one group and then waits until the child
    has taken one, so the child's side is exercised on inputs it would otherwise be too late for."""
    taken: dict[str, list[int]] = {"parent": [], "child": []}
    take = parallel._Claims.take
    lock = threading.Lock()

    def recorded(self: parallel._Claims, for_child: bool) -> int | None:
        if parent_waits and not for_child and taken["parent"]:
            deadline = time.monotonic() + 60
            while not self.taken_by_child and time.monotonic() < deadline:
                time.sleep(0.01)
        k = take(self, for_child)
        with lock:
            if k is not None:
                taken["child" if for_child else "parent"].append(k)
        return k

    monkeypatch.setattr(parallel._Claims, "take", recorded)
    return taken


def test_groups_are_consecutive_runs_of_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = discover(ROOT / TREES[0])
    assert helper.groups(inventory) is None  # a small input is read in one pass
    monkeypatch.setattr(helper, "PARALLEL_MIN_BYTES", 0)
    sizes = [src.size or 0 for src, _ in inventory.sources]
    monkeypatch.setattr(helper, "GROUP_BYTES", max(sizes) + 1)
    groups = helper.groups(inventory)
    assert groups is not None and groups[0][0] == 0 and groups[-1][1] == len(sizes)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(groups))
    assert all(sum(sizes[a:b]) >= helper.GROUP_BYTES for a, b in groups[:-1])
    assert len(groups) < len(sizes)  # small sources share a group


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.usefixtures("one_source_per_group")
def test_groups_give_the_same_analysis(tree: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / tree
    alone = in_one_pass(path)
    groups = helper.groups(discover(path))
    assert groups is not None and len(groups) >= 2
    taken = takers(monkeypatch, parent_waits=True)
    shared = analyze(path)
    assert taken["child"], "the helper read no group"
    assert sorted(taken["parent"] + taken["child"]) == list(range(len(groups)))
    assert shared.events.equals(alone.events)
    assert outputs(shared) == outputs(alone)


@pytest.mark.usefixtures("one_source_per_group")
def test_a_helper_that_cannot_run_leaves_every_group_here(monkeypatch: pytest.MonkeyPatch) -> None:
    path = ROOT / TREES[0]
    alone = in_one_pass(path)
    monkeypatch.setattr(helper.sys, "executable", "/bin/false")
    read: list[int] = []
    shared = analyze(path, progress=read.append)
    assert outputs(shared) == outputs(alone)
    assert sum(read) > 0


FAILING_HELPER = """\
import json, sys
sys.stdin.readline()  # the request
print(json.dumps({"claim": True}), flush=True)
sys.stdin.readline()  # a group, taken and never sent back
sys.exit(3)
"""


@pytest.mark.usefixtures("one_source_per_group")
def test_a_group_the_helper_took_and_did_not_send_back_is_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = ROOT / TREES[1]
    alone = in_one_pass(path)
    fake = tmp_path / "helper"
    fake.write_text(f"#!{sys.executable}\n{FAILING_HELPER}")
    fake.chmod(0o755)
    monkeypatch.setattr(helper.sys, "executable", str(fake))  # run as `fake -c ...`: it ignores its arguments
    taken = takers(monkeypatch, parent_waits=True)
    shared = analyze(path)
    assert len(taken["child"]) == 1
    assert outputs(shared) == outputs(alone)


@pytest.mark.usefixtures("one_source_per_group")
def test_the_cross_rank_comparisons_run_while_the_helper_reads_its_last_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # A TORCH_NCCL_* setting that differs on rank 1 (real GPU run): a row made from the sources' heads, not from
    # events, so it is made while this process has no group left and the helper has.
    path = ROOT / "fixtures/gpu/torch_nccl_env_differs_ws2_hostid"
    alone = in_one_pass(path)
    assert "rank_value_differs" in alone.events["kind"].to_list()
    order: list[str] = []
    compare, result = rank_values.rank_value_differences, parallel._Child.result

    def compared(*args: Any) -> list[Event]:
        order.append("compared")
        return compare(*args)

    def waited(self: parallel._Child, progress: parallel.Progress) -> dict[int, parallel._Part]:
        order.append("helper's groups collected")
        return result(self, progress)

    monkeypatch.setattr(rank_values, "rank_value_differences", compared)
    monkeypatch.setattr(parallel._Child, "result", waited)
    shared = analyze(path)
    assert order == ["compared", "helper's groups collected"]
    assert shared.events.equals(alone.events)
    assert outputs(shared) == outputs(alone)
