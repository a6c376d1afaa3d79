"""Parsed events and their fields on real logs: every watchdog wording, NCCL lines, torchrun, frameworks."""

from __future__ import annotations

import json

import polars as pl
import pytest

from logscope.events.catalogue import Signature, catalogue, grep_patterns
from logscope.ingest.normalise import normalise
from tests.conftest import analysed


def _events(path: str, kind: str) -> list[dict]:
    ev = analysed(path).events
    rows = ev.filter(pl.col("kind") == kind).to_dicts()
    for r in rows:
        r["f"] = json.loads(r["fields"])
    return rows


@pytest.mark.parametrize(
    ("path", "rank", "seq", "op", "numel", "timeout"),
    [
        # torch ~1.x wording without Numel, after a tqdm bar on the same line
        ("fixtures/real/public/02_ddp_seqnum_divergence_rank7", 7, 64088, "ALLREDUCE", None, 1800000),
        # 2.5+ "[PG ID 0 PG GUID 0(default_pg) Rank N]" era
        ("fixtures/real/public/05_basicsr_allreduce_pgguid", 0, 808, "ALLREDUCE", 9801523, 600000),
        # subgroup all_gather with [rankN]: prefix (global) and [PG 1 Rank 0]
        ("fixtures/real/public/18_subgroup_allgather_childfailed_srun", 0, 2, "_ALLGATHER_BASE", 1, 600000),
        # oldest wording inside what(): and "NCCL communicator was aborted"
        ("fixtures/real/public/38_yolov9_oldfmt_no_seqnum_comm_aborted", 7, None, "ALLREDUCE", None, 1800000),
    ],
)
def test_watchdog_timeout_fields(
    path: str, rank: int, seq: int | None, op: str, numel: int | None, timeout: int
) -> None:
    rows = [r for r in _events(path, "nccl_watchdog_timeout") if r["rank"] == rank]
    assert rows, f"no watchdog event for rank {rank}"
    r = rows[0] if seq is None else next(x for x in rows if x["seq"] == seq)
    assert (r["op"], r["numel_in"], r["timeout_ms"]) == (op, numel, timeout)


def test_pg_status_last_enqueued_completed() -> None:
    rows = _events("fixtures/real/public/05_basicsr_allreduce_pgguid", "nccl_pg_status")
    assert rows
    f = rows[0]["f"]
    assert (rows[0]["seq"], f["enqueued"], f["completed"]) == (808, "811", "807") or f["completed"] == "807"


def test_dump_signal_carries_where_each_rank_queue_stood() -> None:
    # Real 2-GPU run: rank 1 stalled, rank 0 timed out on SeqNum 4; rank 1 never enqueued it.
    path = "fixtures/gpu/stall_rank1_watchdog_ws2_hostid/logs"
    rows = {r["rank"]: r["f"] for r in _events(path, "nccl_dump_signal") if "enqueued" in r["f"]}
    assert {rank: (f["enqueued"], f["completed"]) for rank, f in rows.items()} == {0: ("4", "3"), 1: ("3", "3")}
    ranks = {r["rank"]: r for r in analysed(path).diagnosis["ranks"]}
    assert (ranks[1]["last_seq_enqueued"], ranks[1]["last_seq_completed"]) == (3, 3)


def test_childfailed_table_is_assembled_with_root_cause() -> None:
    rows = _events("fixtures/real/runs/03_skip_allreduce_rank1_stall_gloo_timeout", "child_failure")
    by_rank = {r["rank"]: r for r in rows}
    assert by_rank[0]["exitcode"] == 1 and by_rank[0]["f"]["root_cause"] is True
    assert by_rank[1]["exitcode"] == -15 and by_rank[1]["f"]["root_cause"] is False


def test_error_json_both_formats_and_worker_failed() -> None:
    rows = _events("fixtures/real/runs/10_python_exception_rank1_record", "error_file")
    assert {r["rank"] for r in rows} == {0, 1}
    assert any(r["f"].get("exc_type") == "RuntimeError" and "NaN observation" in r["f"]["reason"] for r in rows)
    failed = _events("fixtures/real/runs/17_max_restarts_1_recovered", "worker_failed")
    assert failed and failed[0]["exitcode"] == 1 and failed[0]["rank"] == 1


def test_nccl_duplicate_gpu_in_interleaved_tracebacks() -> None:
    rows = _events("fixtures/real/public/13_megatron_duplicate_gpu_interleaved", "nccl_duplicate_gpu")
    assert rows and (rows[0]["f"]["rank_a"], rows[0]["f"]["rank_b"], rows[0]["f"]["bus_id"]) == ("3", "2", "e2000")
    errors = _events("fixtures/real/public/13_megatron_duplicate_gpu_interleaved", "nccl_error")
    assert errors and errors[0]["f"]["errstr"] == "invalid usage" and errors[0]["f"]["nccl_version"] == "2.17.1"


def test_gloo_signatures() -> None:
    assert (
        _events("fixtures/real/runs/03_skip_allreduce_rank1_stall_gloo_timeout", "gloo_timeout")[0]["timeout_ms"]
        == 20000
    )
    mismatch = _events("fixtures/real/runs/08_allreduce_size_mismatch_rank1", "gloo_size_mismatch")[0]
    assert (mismatch["rank"], mismatch["f"]["received"], mismatch["f"]["expected"]) == (0, "8088", "8076")
    assert _events("fixtures/real/public/22_gloo_isend_connection_closed_by_peer", "gloo_peer_closed")


def test_detail_fingerprints_and_mismatch() -> None:
    fps = _events("fixtures/real/runs/21_debug_detail_collective_mismatch", "collective_fingerprint")
    assert {(r["rank"], r["seq"], r["op"]) for r in fps} >= {(0, 8, "ALLREDUCE"), (1, 8, "BROADCAST")}
    mm = _events("fixtures/real/runs/21_debug_detail_collective_mismatch", "collective_mismatch_detail")
    assert mm and mm[0]["seq"] == 8


def test_rendezvous_and_store_errors() -> None:
    assert _events("fixtures/real/runs/15_rdzv_join_timeout_nnodes2_single_node", "rdzv_timeout")
    conn = _events("fixtures/real/public/20_torchrun_c10d_rdzv_connection_timeout", "store_connect_timeout")
    assert conn and (conn[0]["f"]["store_host"], conn[0]["f"]["store_port"]) == ("192.0.0.1", "1234")


def test_framework_lines_on_every_rank() -> None:
    for path, framework in (
        ("fixtures/runs/healthy_ws4", "rsl_rl"),
        ("fixtures/runs/healthy_rl_games_ws2", "rl_games"),
        ("fixtures/runs/healthy_skrl_ws2", "skrl"),
    ):
        d = analysed(path).diagnosis
        assert d["job"]["framework"] == framework, path
        syncs = _events(path, "sync_start")
        assert {r["rank"] for r in syncs} == set(range(d["job"]["world_size"])), path
        assert _events(path, "training_time"), path


def test_benign_lookalikes_are_benign() -> None:
    sigs = catalogue().signatures
    line = "[W411 23:36:06.965860675 Utils.hpp:137] Warning: Environment variable NCCL_ASYNC_ERROR_HANDLING is deprecated; use TORCH_NCCL_ASYNC_ERROR_HANDLING instead (function operator())"
    text = normalise(line).text
    first = next(s for s in sigs if s.prefilter_re.search(line) and s.pattern.search(text))
    assert first.level == "benign"


def test_normalise_strips_stacked_prefixes() -> None:
    line = normalise(
        "(RayWorkerWrapper pid=270291, ip=10.175.94.190) [default3]:[rank3]:[E219 08:58:32.606667496 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank 3] x"
    )
    assert (line.actor_pid, line.tee_local_rank, line.grank, line.level) == (
        270291,
        3,
        3,
        "error",
    )
    assert line.text == "[PG ID 2 PG GUID 3 Rank 3] x"
    glog = normalise(
        "E0709 17:05:39.816000 56204 site-packages/torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6)"
    )
    assert glog.text.startswith("failed (exitcode") and glog.ts is None  # no year: never a wall-clock stamp
    kit = normalise("2025-10-20T16:03:30Z [8,907ms] [Warning] [carb] hello")
    assert kit.text == "hello" and kit.ts is not None
    ansi = normalise("\x1b[1m Learning iteration 3/8 \x1b[0m")
    assert ansi.text.strip() == "Learning iteration 3/8"
    # "%(asctime)s %(name)s %(levelname)s: " (maskrcnn-benchmark, facebookresearch/maskrcnn-benchmark#208)
    named = normalise("2018-11-24 07:42:22,458 maskrcnn_benchmark.trainer INFO: **Start training**")
    assert (named.text, named.level, named.prefixes) == ("**Start training**", "info", ("logging",))


def test_log_records_counts_records_behind_a_fan_out_label() -> None:
    from logscope.ingest.normalise import log_records

    # pdsh / a CI runner's own label in front of NCCL's record prefix (huggingface/transformers#10282)
    labelled = "stdout: multi-gpu-ci-runner:18062:18062 [1] NCCL INFO Using network Socket"
    assert log_records([labelled, "milk", "eggs, a dozen"]) == 1
    assert log_records(["stdout: milk", "note: eggs, a dozen"]) == 0


def test_grep_patterns_come_from_the_catalogue() -> None:
    pats = grep_patterns()
    assert len(pats) == len(catalogue().signatures) and all(isinstance(p, str) and p for p in pats)


@pytest.mark.parametrize("sig", catalogue().signatures, ids=lambda s: s.kind)
def test_every_signature_compiles_in_both_engines(sig: Signature) -> None:
    # Patterns compile on first use: a broken one must fail here, not on the first input that reaches it.
    assert sig.pattern.pattern == sig.pattern_text
    assert sig.prefilter_re.pattern == sig.prefilter
    pl.DataFrame({"t": ["x"]}).select(pl.col("t").str.contains(sig.prefilter))  # polars' Rust regex, as the scan


@pytest.mark.parametrize("sig", catalogue().signatures, ids=lambda s: s.kind)
def test_no_prefilter_has_a_word_boundary(sig: Signature) -> None:
    # Rust's fast engines cannot take a Unicode word boundary on non-ASCII text: one `\b` in the union sends every
    # line with a non-ASCII character (a tqdm bar's blocks) to the slow engine, a hundred times slower.
    assert "\\b" not in sig.prefilter and "\\B" not in sig.prefilter


def test_normalise_strips_the_asctime_levelname_name_logger_format() -> None:
    # transformers' and accelerate's examples log with "%(asctime)s - %(levelname)s - %(name)s - %(message)s"
    # (a real line of fixtures/blind_runs/r11d_accel_rank0_sleeps_past_timeout/node0/console.log)
    line = normalise("2026-12-05 06:12:13,332 - INFO - __main__ - [RANK 0] epoch 0 step 5 loss 0.6595 (n=32)")
    assert (line.text, line.level, line.ts_text) == (
        "[RANK 0] epoch 0 step 5 loss 0.6595 (n=32)",
        "info",
        "2026-12-05 06:12:13",
    )


def test_normalise_reads_a_date_stamp_before_a_scripts_rank_tag() -> None:
    # "%(asctime)s [rank%(rank)d] %(levelname)s %(name)s: ..." (fixtures/blind_runs/
    # r30e_spawn_rank0_full_ckpt_slow_share_timeout_ws4/node0/console.log): the clock is read whatever follows it.
    line = normalise("2026-12-06 08:11:02,110 [rank0] INFO trainer: checkpoint write: 160 MiB written")
    assert (line.text, line.ts_text) == (
        "[rank0] INFO trainer: checkpoint write: 160 MiB written",
        "2026-12-06 08:11:02",
    )


def test_normalise_reads_mpirun_timestamp_output_before_its_rank_tag() -> None:
    # `mpirun --timestamp-output` puts ctime() before its tag (fixtures/cases/r22a_paddle4235_..., console.log:1).
    line = normalise(
        "Wed Sep 20 23:55:19 2017[1,68]<stderr>:terminate called after throwing an instance of 'std::system_error'"
    )
    assert (line.text, line.grank, line.ts_text) == (
        "terminate called after throwing an instance of 'std::system_error'",
        68,
        "2017-09-20 23:55:19",
    )


def test_a_script_rank_word_opening_a_logged_message_names_the_rank() -> None:
    # "2026-12-05 21:22:54 INFO rank4: step 2 ..." (mp.spawn, no tee prefix): every rank's lines are its own
    # (fixtures/blind_runs/r22c_spawn_info_metrics_lock_reentry_rank4_ws5).
    events = analysed("fixtures/blind_runs/r22c_spawn_info_metrics_lock_reentry_rank4_ws5").events
    rows = [r for r in events.to_dicts() if r["kind"] == "config_values" and "process group ready" in r["text"]]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3, 4]


def test_a_setting_ends_where_a_glued_rank_tag_starts() -> None:
    # Two ranks' prints glued on one line by interleaved stdout (fixtures/blind_runs/r15e_healthy_accel):
    # "[rank 2] seed=1234[rank 1] seed=1234" is rank 2's seed 1234, not "1234[rank".
    events = analysed("fixtures/blind_runs/r15e_healthy_accel").events
    rows = [r for r in events.to_dicts() if r["kind"] == "config_values" and "seed=" in r["text"]]
    assert rows
    assert {json.loads(r["fields"])["seed"] for r in rows} == {"1234"}
