"""The replayer's parts that need no torch: bandwidth formulas, environment checks, torchrun argv, the sweep
protocol's order, folding per-rank records, and reading a replay result back."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from replay_helpers import collective, diagnosis, write_json

from logscope.errors import InputError, LogscopeError
from logscope.replay.launch import ProbeRun, Rendezvous, checked_env, torchrun_argv
from logscope.replay.result import fold_run, interconnect_class, load_replay, machine_name
from logscope.replay.sweep import parse_variables, recommendation, run_sweep
from logscope.replay.worker import bandwidths, fill_values


@pytest.mark.parametrize(
    ("op", "factor"),
    [
        ("all_reduce", 2 * 3 / 4),
        ("all_gather", 3 / 4),
        ("reduce_scatter_base", 3 / 4),
        ("all_to_all", 3 / 4),
        ("broadcast", 1.0),
        ("reduce", 1.0),
        ("send_recv", 1.0),
    ],
)
def test_bus_bandwidth_uses_the_nccl_tests_factor(op: str, factor: float) -> None:
    algbw, busbw = bandwidths(op, bytes_moved=4_000_000_000, seconds=2.0, world_size=4)
    assert algbw == pytest.approx(2.0)  # bytes / 1e9 / seconds
    assert busbw == pytest.approx(2.0 * factor)


def test_barrier_has_no_bandwidth() -> None:
    assert bandwidths("barrier", 0, 0.001, 4) == (None, None)


def test_logged_environment_keeps_settings_and_refuses_files_plugins_devices_and_odd_values() -> None:
    env = {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_ALGO": "allreduce:tree;broadcast:ring",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
        "NCCL_DEBUG_FILE": "/tmp/nccl.%h.%p",
        "NCCL_NET_PLUGIN": "aws-ofi",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_IB_HCA": "mlx5_0",
        "NCCL_PROTO": "$(rm -rf ~)",
        "LD_PRELOAD": "/tmp/evil.so",
    }
    accepted, notes = checked_env(env, "job environment")
    assert accepted == {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_ALGO": "allreduce:tree;broadcast:ring",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    }
    refused = {note.split(": ")[1].split()[0] for note in notes}
    assert refused == {
        "NCCL_DEBUG_FILE",
        "NCCL_NET_PLUGIN",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_HCA",
        "NCCL_PROTO",
        "LD_PRELOAD",
    }


def test_single_node_rendezvous_defaults_to_loopback_and_a_free_port() -> None:
    rdzv = Rendezvous().resolved()
    assert rdzv.master_addr == "127.0.0.1"
    assert rdzv.master_port is not None
    # the port was free a moment ago: binding it again works
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", rdzv.master_port))


def test_multi_node_static_rendezvous_needs_address_and_port() -> None:
    with pytest.raises(LogscopeError, match="--master-addr and --master-port"):
        Rendezvous(nnodes=2).resolved()


def test_torchrun_argv_static_and_rendezvous_forms(tmp_path: Path) -> None:
    static = torchrun_argv(
        2,
        Rendezvous(master_addr="127.0.0.1", master_port=29555),
        tmp_path / "p",
        tmp_path / "r",
        tmp_path,
        True,
    )
    assert static[1:3] == ["-m", "torch.distributed.run"]
    joined = " ".join(static)
    assert "--nproc-per-node 2" in joined and "--master-port 29555" in joined and "--tee 3" in joined
    assert "--max-restarts 0" in joined and static[-5].endswith("worker.py")
    rdzv = Rendezvous(nnodes=2, rdzv_backend="c10d", rdzv_endpoint="head:29400", rdzv_id="job7").resolved()
    argv = torchrun_argv(4, rdzv, tmp_path / "p", tmp_path / "r", tmp_path, False)
    joined = " ".join(argv)
    assert "--rdzv-backend c10d --rdzv-endpoint head:29400 --rdzv-id job7" in joined
    assert "--master-addr" not in joined and "--redirects 3" in joined


def _fake_run(outcomes: dict[str, list[str]], calls: list[tuple[str, dict[str, str]]]) -> Any:
    """A probe whose outcome per label comes from `outcomes` (consumed in order)."""

    def run(label: str, extra: dict[str, str]) -> dict[str, Any]:
        calls.append((label, extra))
        key = "baseline" if label.startswith("baseline") else label
        outcome = outcomes[key].pop(0)
        return {"label": label, "outcome": outcome, "wall_s": 1.0, "cases": []}

    return run


def test_sweep_runs_baseline_then_each_variable_alone_and_confirms_a_fix() -> None:
    calls: list[tuple[str, dict[str, str]]] = []
    outcomes = {
        "baseline": ["hang", "hang"],
        "NCCL_P2P_DISABLE=1": ["hang"],
        "NCCL_SHM_DISABLE=1": ["ok"],
        "NCCL_ALGO=Ring": ["error"],
    }
    variables = [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_ALGO", "Ring")]
    rows, runs = run_sweep(_fake_run(outcomes, calls), variables, baseline_env={})
    assert [label for label, _ in calls] == [
        "baseline",
        "NCCL_P2P_DISABLE=1",
        "NCCL_SHM_DISABLE=1",
        "baseline again, without NCCL_SHM_DISABLE=1",
        "NCCL_ALGO=Ring",
    ]
    assert [extra for _, extra in calls] == [
        {},
        {"NCCL_P2P_DISABLE": "1"},
        {"NCCL_SHM_DISABLE": "1"},
        {},
        {"NCCL_ALGO": "Ring"},
    ]
    assert [(r["variable"], r["outcome"], r["confirmed"]) for r in rows] == [
        ("baseline", "hang", None),
        ("NCCL_P2P_DISABLE=1", "hang", None),
        ("NCCL_SHM_DISABLE=1", "ok", True),
        ("NCCL_ALGO=Ring", "error", None),
    ]
    assert len(runs) == 5
    advice = recommendation(rows, "gpu-node-3, 2× NVIDIA L40S, PCIe (PHB)")
    assert "gpu-node-3, 2× NVIDIA L40S, PCIe (PHB)" in advice and "NCCL_SHM_DISABLE=1" in advice
    assert "V5" in advice and "W9" in advice


def test_sweep_reports_an_intermittent_failure_when_the_confirmation_passes() -> None:
    calls: list[tuple[str, dict[str, str]]] = []
    outcomes = {"baseline": ["hang", "ok"], "NCCL_P2P_DISABLE=1": ["ok"]}
    rows, _ = run_sweep(_fake_run(outcomes, calls), [("NCCL_P2P_DISABLE", "1")], baseline_env={})
    assert rows[1]["confirmed"] is False
    assert "intermittent" in recommendation(rows, "host")


def test_sweep_skips_a_variable_the_baseline_already_sets_and_confirms_nothing_when_baseline_passes() -> None:
    calls: list[tuple[str, dict[str, str]]] = []
    outcomes = {"baseline": ["ok"], "NCCL_SHM_DISABLE=1": ["ok"]}
    variables = [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")]
    rows, _ = run_sweep(_fake_run(outcomes, calls), variables, baseline_env={"NCCL_P2P_DISABLE": "1"})
    assert [label for label, _ in calls] == ["baseline", "NCCL_SHM_DISABLE=1"]
    assert rows[1]["note"] == "already set in the baseline environment"
    assert "passes without any workaround" in recommendation(rows, "host")


def test_sweep_variables_parse_and_reject_garbage() -> None:
    assert parse_variables("NCCL_P2P_DISABLE=1, NCCL_ALGO=Ring") == [
        ("NCCL_P2P_DISABLE", "1"),
        ("NCCL_ALGO", "Ring"),
    ]
    with pytest.raises(LogscopeError, match="not NAME=VALUE"):
        parse_variables("NCCL_P2P_DISABLE")


def _probe(records: list[dict[str, Any]], rank_errors: dict[int, str], timed_out: bool = False) -> ProbeRun:
    return ProbeRun(
        argv=[],
        pid=0,
        exit_code=1,
        timed_out=timed_out,
        wall_s=1.0,
        console="",
        records=records,
        rank_errors=rank_errors,
    )


def test_fold_fills_ranks_that_died_without_a_report_and_marks_later_cases_not_run() -> None:
    cases = [
        {
            "op": "all_reduce",
            "numel": 8,
            "dtype": "float32",
            "per_rank": {"1": {"op": "all_reduce", "numel": 9}},
        },
        {"op": "barrier", "numel": 0, "dtype": "float32"},
    ]
    records = [
        {
            "rank": 1,
            "case": 0,
            "world_size": 2,
            "op": "all_reduce",
            "numel": 9,
            "status": "error",
            "error": "reset",
        },
    ]
    folded = fold_run(_probe(records, {0: "what(): 9 vs 8 [exit code -6 (SIGABRT)]"}), cases, [0, 1], 60)
    first, second = folded
    assert first["outcome"] == "error"
    assert [(r["rank"], r["status"], r["numel"]) for r in first["ranks"]] == [
        (0, "error", 8),
        (1, "error", 9),
    ]
    assert first["ranks"][0]["error"].startswith("what(): 9 vs 8")
    assert [r["status"] for r in second["ranks"]] == ["not_run", "not_run"]


def test_fold_reports_a_killed_probe_as_a_hang() -> None:
    cases = [{"op": "all_reduce", "numel": 8, "dtype": "float32"}]
    folded = fold_run(_probe([], {}, timed_out=True), cases, [0, 1], 12)
    assert folded[0]["outcome"] == "hang"
    assert "outlived its 12 s limit" in folded[0]["ranks"][0]["error"]


def test_fold_times_a_passing_case_by_its_slowest_rank() -> None:
    cases = [{"op": "all_reduce", "numel": 250, "dtype": "float32"}]
    base = {"case": 0, "world_size": 2, "status": "ok", "bytes": 1000}
    records = [
        {**base, "rank": 0, "time_us": {"median": 10.0, "min": 8.0}},
        {**base, "rank": 1, "time_us": {"median": 20.0, "min": 9.0}},
    ]
    (case,) = fold_run(_probe(records, {}), cases, [0, 1], 60)
    assert case["outcome"] == "ok"
    assert case["time_us"] == {"median": 20.0, "min": 8.0}
    assert case["algbw_gbps"] == pytest.approx(1000 / 1e9 / 20e-6)
    assert case["busbw_gbps"] == pytest.approx(case["algbw_gbps"] * 2 * 1 / 2)


def test_load_replay_reads_a_result_and_refuses_anything_else(tmp_path: Path) -> None:
    good = tmp_path / "replay.json"
    good.write_text(json.dumps({"schema": "logscope/replay/v1", "runs": []}), encoding="utf-8")
    assert load_replay(good)["runs"] == []
    diag = tmp_path / "diag.json"
    diag.write_text(json.dumps({"schema": "logscope/diagnosis/v1"}), encoding="utf-8")
    with pytest.raises(InputError, match="not a logscope replay result"):
        load_replay(diag)
    broken = tmp_path / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(InputError, match="not JSON"):
        load_replay(broken)
    with pytest.raises(InputError, match="cannot read"):
        load_replay(tmp_path / "missing.json")


TESTS = Path(__file__).resolve().parent
REPO = TESTS.parents[1]
DATA = TESTS / "data"


def test_interconnect_from_a_real_pcie_topology_ignores_nothing_but_self() -> None:
    # NVIDIA/nccl#667: GPU pairs over PXB, PIX and SYS (no NVLink): all three are named, nearest first
    topo = (DATA / "topo_pcie_nccl_issue_667.txt").read_text(encoding="utf-8")
    assert interconnect_class(topo) == "PCIe (PIX, PXB, SYS)"


def test_interconnect_from_a_real_nvlink_topology_leaves_nic_columns_out() -> None:
    # NVIDIA/nccl#1505: DGX A100, NV12 between GPUs, PXB/SYS only towards the NICs
    topo = (DATA / "topo_nvlink_nccl_issue_1505.txt").read_text(encoding="utf-8")
    assert interconnect_class(topo) == "NVLink (NV12)"


def test_machine_name_says_cpu_only_without_gpus() -> None:
    assert machine_name({"hostname": "vm", "gpu": None}) == "vm, CPU only"
    named = machine_name({"hostname": "dgx1", "gpu": "NVIDIA A100", "gpu_count": 8, "interconnect": "NVLink (NV12)"})
    assert named == "dgx1, 8× NVIDIA A100, NVLink (NV12)"


@pytest.mark.parametrize(("dtype", "world"), [("bfloat16", 4), ("bfloat16", 300), ("int8", 200), ("float16", 64)])
def testfill_values_keep_every_partial_sum_exact(dtype: str, world: int) -> None:
    summand, tag = fill_values(dtype, world)
    limit = {"bfloat16": 256, "int8": 127, "float16": 2048}[dtype]
    assert sum(summand(r) for r in range(world)) <= limit
    assert all(summand(r) >= 0 for r in range(world))
    tags = [tag(i) for i in range(min(world, limit - 1))]
    assert len(set(tags)) == len(tags) and min(tags) >= 1 and max(tags) <= limit


def test_without_torch_the_replay_refuses_in_one_line(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", diagnosis(collective("ALLREDUCE", 8076)))
    # an import blocker: `import torch` fails and find_spec reports it absent, as on a machine without torch
    code = (
        "import sys; sys.modules['torch'] = None; "
        f"sys.path.insert(0, {str(TESTS)!r}); from replay_helpers import make_app; "
        f"make_app()(['replay', {str(path)!r}], prog_name='logscope')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "logscope: torch is not installed: pip install 'torch-logscope[replay]'"
    ]


def test_a_dry_run_needs_no_torch(tmp_path: Path) -> None:
    path = write_json(tmp_path / "d.json", diagnosis(collective("ALLREDUCE", 8076)))
    code = (
        "import sys; sys.modules['torch'] = None; "
        f"sys.path.insert(0, {str(TESTS)!r}); from replay_helpers import make_app; "
        f"make_app()(['replay', {str(path)!r}, '--world-sizes', '2', '--dry-run'], prog_name='logscope')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if "torch.distributed.run" in line]
    assert len(commands) == 1 and "--nproc-per-node 2" in commands[0]
    assert "torch is not installed here" in proc.stdout
