"""The NCCL trees captured on one H200 (fixtures/gpu/, made by fixtures/gpu/capture_nccl.py) hold the real
NCCL and ProcessGroupNCCL lines they were captured for, and logscope's verdict on each matches what was
provoked.

CI has no GPU: these tests only read the captured logs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from logscope.model import CATEGORIES  # the verdict vocabulary, one definition

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
SCENARIOS = sorted(p for p in GPU.iterdir() if (p / "scenario.yaml").is_file())

NCCL_VERSION = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO NCCL version (\d+\.\d+\.\d+)\+cuda[\d.]+$", re.M)
INIT_COMPLETE = re.compile(
    r"NCCL INFO ncclCommInitRankConfig comm 0x[0-9a-f]+ rank (\d+) nranks (\d+) cudaDev (\d+) nvmlDev \d+ "
    r"busId ([0-9a-f]+) commId 0x[0-9a-f]+ - Init COMPLETE$",
    re.M,
)
WATCHDOG_TIMEOUT = re.compile(
    r"^\[rank(\d+)\]:\[E\d{4} [\d:.]+ ProcessGroupNCCL\.cpp:\d+\] \[Rank (\d+)\] Watchdog caught collective "
    r"operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+), NumelIn=(\d+), NumelOut=(\d+), "
    r"Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds before timing out\.$",
    re.M,
)
PG_STATUS = re.compile(
    r"\[PG ID 0 PG GUID 0\(default_pg\) Rank (\d+)\]  failure detected by watchdog at work sequence id: "
    r"(\d+) PG status: last enqueued work: (\d+), last completed work: (\d+)$",
    re.M,
)
DUMP_SIGNAL = re.compile(
    r"Rank (\d+)\] Received a dump signal due to a collective timeout from .*? "
    r"Last enqueued NCCL work: (\d+), last completed NCCL work: (\d+)\."
)
DUPLICATE_GPU = re.compile(
    r"^\[[\d-]+ [\d:]+\] \S+ \[\d+\] init\.cc:\d+ NCCL WARN Duplicate GPU detected : "
    r"rank (\d+) and rank (\d+) both on CUDA device ([0-9a-f]+)$",
    re.M,
)
TRANSPORT = re.compile(r"NCCL INFO Channel \d+/\d+ : (\d+)\[\d+\] -> (\d+)\[\d+\] \[(send|receive)\] via (\S+)$", re.M)
ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):\n\[0\]:\n(?:.*\n)*?\s+rank\s+: (\d+) ")
EXITCODE = re.compile(r"^\s+rank\s+: (\d+) \(local_rank: \d+\)\n\s+exitcode\s+: (-?\d+)", re.M)


def meta(scenario: Path) -> dict[str, Any]:
    loaded = yaml.safe_load((scenario / "scenario.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def rank_dirs(scenario: Path) -> dict[int, Path]:
    """Global rank -> torchrun's per-rank folder (one node, one attempt: local rank = global rank)."""
    (run,) = [p for p in (scenario / "logs").iterdir() if p.is_dir()]
    return {int(p.name): p for p in (run / "attempt_0").iterdir()}


def rank_text(scenario: Path, rank: int, name: str) -> str:
    return (rank_dirs(scenario)[rank] / name).read_text()


def console(scenario: Path) -> str:
    return (scenario / "console.log").read_text()


def scenario(name: str) -> Path:
    path = GPU / name
    assert path in SCENARIOS, f"missing fixture tree {path}"
    return path


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_every_capture_script_scenario_was_captured() -> None:
    script = (GPU / "capture_nccl.py").read_text()
    names = set(re.findall(r'^\s+name="(\w+)",$', script, re.M))
    assert names == {p.name for p in SCENARIOS}


@pytest.mark.parametrize("path", SCENARIOS, ids=ids(SCENARIOS))
def test_scenario_yaml_describes_the_tree(path: Path) -> None:
    m = meta(path)
    assert m["id"] == path.name
    assert m["expected_category"] in CATEGORIES
    assert m["culprit_rank"] == (m["culprit_ranks"][0] if m["culprit_ranks"] else None)
    assert m["backend"] == "nccl" and "NVIDIA H200" in m["machine"]["nvidia_smi_L"]
    assert m["env_set"]["NCCL_DEBUG"] == "INFO"
    # NVLink multicast stays off in every run (device rules).
    assert m["env_set"]["NCCL_NVLS_ENABLE"] == "0"
    assert m["env_set"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == m["env_set"]["NVSHMEM_DISABLE_NVLS"] == "1"
    assert f"--nproc_per_node={m['nproc_per_node']}" in m["command"] and "--tee 3 --log_dir" in m["command"]
    assert sorted(rank_dirs(path)) == list(range(m["world_size"]))
    # Untrimmed: every file is still the size it had when captured.
    for entry in m["log_files"]:
        assert (path / entry["path"]).stat().st_size == entry["bytes"], entry["path"]


# The one tree where a rank loads another NCCL on purpose has its own test below.
# A rank whose NCCL_SOCKET_IFNAME names no interface fails before NCCL prints its version and init lines.
NO_INTERFACE = "bad_socket_ifname_rank2_ws4_hostid"
SAME_NCCL = [p for p in SCENARIOS if p.name not in ("nccl_version_differs_ws2_hostid", NO_INTERFACE)]


@pytest.mark.parametrize("path", SAME_NCCL, ids=ids(SAME_NCCL))
def test_nccl_version_line_on_every_rank(path: Path) -> None:
    m = meta(path)
    for rank in range(m["world_size"]):
        versions = NCCL_VERSION.findall(rank_text(path, rank, "stdout.log"))
        assert versions == [m["machine"]["nccl_version"]], rank


# Communicators that never complete init: two ranks on one device, two NCCL versions.
INIT_COMPLETES = [
    p for p in SCENARIOS if p.name not in ("dup_gpu_ws2", "nccl_version_differs_ws2_hostid", NO_INTERFACE)
]


@pytest.mark.parametrize("path", INIT_COMPLETES, ids=ids(INIT_COMPLETES))
def test_init_complete_with_bus_id_on_every_rank(path: Path) -> None:
    m = meta(path)
    seen = {}
    for rank in range(m["world_size"]):
        (hit,) = INIT_COMPLETE.findall(rank_text(path, rank, "stdout.log"))
        seen[int(hit[0])] = (int(hit[1]), int(hit[2]), hit[3])
    # One GPU: every rank reports nranks = world size, cudaDev 0 and the same busId.
    assert sorted(seen) == list(range(m["world_size"]))
    assert len(set(seen.values())) == 1 and next(iter(seen.values()))[:2] == (m["world_size"], 0)


def test_two_rank_runs_connect_over_net_socket() -> None:
    text = rank_text(scenario("healthy_ws2_hostid"), 0, "stdout.log")
    links = set(TRANSPORT.findall(text))
    assert {("0", "1", "send", "NET/Socket/0"), ("1", "0", "receive", "NET/Socket/0")} <= links
    assert "NCCL INFO Connected all rings" in text
    assert "nRanks 2 nNodes 2" in text  # NCCL_HOSTID per rank: two "hosts" on one GPU


@pytest.mark.parametrize("name", ["healthy_ws1", "healthy_ws2_hostid"])
def test_healthy_runs_finish_on_every_rank(name: str) -> None:
    path = scenario(name)
    m = meta(path)
    assert m["torchrun_exit_code"] == 0
    for rank, folder in rank_dirs(path).items():
        assert "Training time:" in (folder / "stdout.log").read_text(), rank
        assert not (folder / "error.json").exists()
        assert "NCCL WARN" not in (folder / "stdout.log").read_text() + (folder / "stderr.log").read_text()


def test_duplicate_gpu_is_ncclinvalidusage_on_both_ranks() -> None:
    path = scenario("dup_gpu_ws2")
    warned = set()
    for rank in (0, 1):
        stdout = rank_text(path, rank, "stdout.log")
        (hit,) = DUPLICATE_GPU.findall(stdout)
        warned.add(hit[:2])
        assert "Init COMPLETE" not in stdout and "Init START" in stdout
        error = json.loads(rank_text(path, rank, "error.json"))["message"]["message"]
        assert error.startswith("DistBackendError: NCCL error in: ")
        assert "invalid usage" in error and "ncclInvalidUsage" in error and "Duplicate GPU detected" in error
        assert "device=cuda:0" in stdout and f"local_rank={rank} " in stdout
    assert warned == {("0", "1"), ("1", "0")}  # each rank names itself first
    assert ROOT_CAUSE.search(console(path)).group(1) == "1"  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["watchdog_timeout_ws1", "stall_rank1_watchdog_ws2_hostid"])
def test_watchdog_timeout_line_has_seqnum_numel_and_the_configured_timeout(name: str) -> None:
    path = scenario(name)
    m = meta(path)
    timeout_ms = int(float(re.search(r"--pg-timeout (\S+)", m["command"]).group(1)) * 1000)  # type: ignore[union-attr]
    stderr = rank_text(path, 0, "stderr.log")
    hits = WATCHDOG_TIMEOUT.findall(stderr)
    assert hits, "no watchdog timeout line on rank 0"
    prefix_rank, rank, seq, op, numel_in, numel_out, timeout, ran_for = hits[0]
    assert prefix_rank == rank == "0" and op == "ALLREDUCE" and numel_in == numel_out
    assert int(timeout) == timeout_ms and int(ran_for) >= timeout_ms
    # SeqNum counts the broadcast (1) and the all_reduces of iterations 0 and 1 before the stuck one.
    assert seq == "4"
    assert PG_STATUS.findall(stderr)[0] == ("0", "4", "4", "3")
    assert "Process group watchdog thread terminated with exception" in stderr
    assert "terminate called after throwing an instance of 'c10::DistBackendError'" in stderr
    assert re.search(r"rank\s+: 0 \(local_rank: 0\)\n\s+exitcode\s+: -6 ", console(path))
    assert (path / "flight_recorder" / "nccl_trace_rank_0").stat().st_size > 0


def test_stalled_rank_never_enqueued_the_timed_out_collective() -> None:
    path = scenario("stall_rank1_watchdog_ws2_hostid")
    victim = DUMP_SIGNAL.findall(rank_text(path, 0, "stderr.log"))
    culprit = DUMP_SIGNAL.findall(rank_text(path, 1, "stderr.log"))
    assert victim == [("0", "4", "3")] and culprit == [("1", "3", "3")]
    assert "Observed flight recorder dump signal from another rank via TCPStore." in rank_text(path, 1, "stderr.log")
    assert WATCHDOG_TIMEOUT.findall(rank_text(path, 1, "stderr.log")) == []
    assert dict(EXITCODE.findall(console(path))) == {"0": "-6", "1": "-15"}
    fr = (path / "fr_trace.txt").read_text()
    assert "Not all ranks joining collective, sequence number: 4" in fr and "missing ranks: {1}" in fr
    assert (path / "flight_recorder" / "nccl_trace_rank_1").stat().st_size > 0


@pytest.mark.parametrize("name", ["oom_rank0_ws1", "oom_rank1_ws2_hostid"])
def test_oom_rank_records_the_cuda_out_of_memory_error(name: str) -> None:
    path = scenario(name)
    culprit = meta(path)["culprit_rank"]
    error = json.loads(rank_text(path, culprit, "error.json"))["message"]["message"]
    assert error.startswith("OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 GiB. GPU 0 has a total")
    assert "torch.OutOfMemoryError: CUDA out of memory." in rank_text(path, culprit, "stderr.log")
    assert ROOT_CAUSE.search(console(path)).group(1) == str(culprit)  # type: ignore[union-attr]


def test_oom_victim_sees_a_real_nccl_remote_error() -> None:
    path = scenario("oom_rank1_ws2_hostid")
    stdout, stderr = rank_text(path, 0, "stdout.log"), rank_text(path, 0, "stderr.log")
    assert re.search(r"NCCL WARN socketProgress: Connection closed by remote peer", stdout)
    assert re.search(
        r"\[Rank 0\] Collective WorkNCCL\(SeqNum=4, OpType=ALLREDUCE, NumelIn=\d+, NumelOut=\d+, "
        r"Timeout\(ms\)=60000\) raised the following async exception: "
        r"NCCL error: remote process exited or there was a network error",
        stderr,
    )
    assert "ncclRemoteError" in stderr
    assert dict(EXITCODE.findall(console(path))) == {"0": "-15", "1": "1"}


NCCL_ENV_ECHO = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL INFO (NCCL_[A-Z_]+) set by environment to (\S+?)\.?$", re.M)
PG_ENVIRONMENTS = re.compile(
    r"\] ProcessGroupNCCL environments: NCCL version: ([\d.]+), TORCH_NCCL_ASYNC_ERROR_HANDLING: (\d+), "
)


def nccl_env_echo(path: Path, rank: int) -> dict[str, str]:
    return dict(NCCL_ENV_ECHO.findall(rank_text(path, rank, "stdout.log")))


def test_nccl_proto_is_echoed_by_the_one_rank_that_set_it() -> None:
    path = scenario("nccl_proto_differs_ws2_hostid")
    rank0, rank1 = nccl_env_echo(path, 0), nccl_env_echo(path, 1)
    assert rank1["NCCL_PROTO"] == "LL" and "NCCL_PROTO" not in rank0
    # Rank 0 does echo the variables it has, so its silence about NCCL_PROTO means "not set".
    assert rank0["NCCL_SOCKET_IFNAME"] == rank1["NCCL_SOCKET_IFNAME"] == "lo"
    assert rank0["NCCL_HOSTID"] != rank1["NCCL_HOSTID"]


def test_differing_protocols_make_nccl_report_a_truncated_message_and_invalid_usage() -> None:
    path = scenario("nccl_proto_differs_ws2_hostid")
    stdout1, stderr1 = rank_text(path, 1, "stdout.log"), rank_text(path, 1, "stderr.log")
    assert re.search(
        r"NCCL WARN NET/Socket : peer 127\.0\.0\.1<\d+> message truncated : receiving \d+ bytes instead of 65536\. "
        r".*mismatch in collective sizes or environment settings \(e\.g\. NCCL_PROTO, NCCL_ALGO\) between ranks$",
        stdout1,
        re.M,
    )
    assert "message truncated" not in rank_text(path, 0, "stdout.log")
    assert re.search(r"WorkNCCL\(SeqNum=1, OpType=BROADCAST, .*NCCL error: invalid usage", stderr1)
    assert WATCHDOG_TIMEOUT.search(rank_text(path, 0, "stderr.log")).group(3) == "2"  # type: ignore[union-attr]
    assert ROOT_CAUSE.search(console(path)).group(1) == "1"  # type: ignore[union-attr]
    assert "Culprit rank 1; Error type: COLLECTIVE_STATE_MISMATCH" in (path / "fr_trace.txt").read_text()


def test_nccl_version_per_rank_and_ncclinvalidusage_when_they_differ() -> None:
    path = scenario("nccl_version_differs_ws2_hostid")
    versions = {rank: NCCL_VERSION.findall(rank_text(path, rank, "stdout.log")) for rank in (0, 1)}
    assert versions == {0: ["2.28.9"], 1: ["2.28.3"]}
    assert re.search(
        r"init\.cc:\d+ NCCL WARN Mismatched NCCL version detected : rank 0 version 22809 rank 1 version 22803$",
        rank_text(path, 1, "stdout.log"),
        re.M,
    )
    for rank, version in ((0, "2.28.9"), (1, "2.28.3")):
        assert (
            "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, "
            f"invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version {version}"
        ) in rank_text(path, rank, "stderr.log")
    assert dict(EXITCODE.findall(console(path))) == {"0": "1", "1": "1"}


@pytest.mark.parametrize(
    ("name", "per_rank"),
    [("healthy_ws2_hostid_cpp_info", {0: "1", 1: "1"}), ("torch_nccl_env_differs_ws2_hostid", {0: "1", 1: "0"})],
)
def test_processgroupnccl_echoes_its_settings_per_rank(name: str, per_rank: dict[int, str]) -> None:
    path = scenario(name)
    for rank, value in per_rank.items():
        ((version, handling),) = PG_ENVIRONMENTS.findall(rank_text(path, rank, "stderr.log"))
        assert (version, handling) == ("2.28.9", value)
    assert dict(EXITCODE.findall(console(path))) == {} and "Training time" in rank_text(path, 1, "stdout.log")


def verdict_case(path: Path) -> Any:
    """A tree whose scenario.yaml says `known_wrong` (why logscope's verdict differs) is a strict xfail."""
    known_wrong = meta(path).get("known_wrong")
    marks = [pytest.mark.xfail(strict=True, reason=known_wrong)] if known_wrong else []
    return pytest.param(path, id=path.name, marks=marks)


@pytest.mark.parametrize("path", [verdict_case(p) for p in SCENARIOS])
def test_logscope_verdict_matches_what_was_provoked(path: Path) -> None:
    from logscope.analysis import analyze

    m = meta(path)
    verdict = analyze(path).diagnosis["verdict"]
    assert (verdict["category"], sorted(verdict["culprit_ranks"])) == (
        m["expected_category"],
        sorted(m["culprit_ranks"]),
    ), verdict["summary"]


REPLAY = GPU / "replay_h200"
GPU_RUNS_DOC = Path(__file__).resolve().parents[1] / "docs" / "gpu-runs.md"


def replay_cases() -> dict[tuple[str, int], dict[str, Any]]:
    result = json.loads((REPLAY / "replay_sizes.json").read_text())
    (run,) = result["runs"]
    assert run["backend"] == "nccl" and run["world_size"] == 1 and result["machine"]["gpu"] == "NVIDIA H200"
    return {(case["op"], case["numel"]): case for case in run["cases"]}


def test_h200_replay_sweep_was_correct_for_every_op_and_size() -> None:
    cases = replay_cases()
    sizes = sorted({numel for _, numel in cases} - {0})
    assert sizes[0] == 1 and sizes[-1] * 4 == 2**30  # float32: 1 element to 1 GiB
    for (op, numel), case in cases.items():
        if op == "send_recv":  # needs two ranks
            assert case["outcome"] == "skipped"
            continue
        assert case["outcome"] == "ok", (op, numel)
        (rank,) = case["ranks"]
        assert rank["iters"] == 20 and rank["bytes"] == 4 * numel


def doc_table(heading: str) -> dict[str, list[str]]:
    """The rows (op -> cells) of the first markdown table after `heading` in docs/gpu-runs.md."""
    text = GPU_RUNS_DOC.read_text().split(heading, 1)[1]
    rows = re.findall(r"^\| (\w+) \| ([^\n]+) \|$", text.split("\n\n|", 1)[1].split("\n\n", 1)[0], re.M)
    return {op: [cell.strip() for cell in cells.split("|")] for op, cells in rows if op != "op"}


def test_gpu_runs_doc_tables_are_the_replay_figures() -> None:
    cases = replay_cases()
    sizes = sorted({numel for op, numel in cases if op == "all_reduce"})
    medians = doc_table("Median time per call in µs")
    algbw = doc_table("algbw (GB/s")
    assert set(medians) == set(algbw) == {op for op, _ in cases} - {"barrier", "send_recv"}
    for op, cells in medians.items():
        assert cells == [f"{cases[(op, n)]['time_us']['median']:.1f}" for n in sizes], op
        assert [float(c) for c in algbw[op]] == [float(f"{cases[(op, n)]['algbw_gbps']:.3g}") for n in sizes], op
