"""Cross-rank comparison of the lines that name their rank (events/rank_values.py), on real lines read from the
fixtures at run time: which differences between ranks are a setting that differs, and which are the rank's own."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from logscope.events import rank_values
from logscope.events.rank_values import rank_value_differences
from logscope.ingest.sources import Source

ROOT = Path(__file__).resolve().parent.parent
BLIND = ROOT / "fixtures" / "blind_runs"


def lines_with(path: Path, needle: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if needle in line]


def differences(lines: list[str]) -> list[tuple[int, str]]:
    data = ("\n".join(lines) + "\n").encode()
    source = Source("console.log", "console", len(data))
    rows = rank_value_differences([source], {"console.log": lambda: io.BytesIO(data)})
    return [(row["grank"], row["_f"]["about"]) for row in rows]


@pytest.mark.parametrize(
    ("run", "needle", "want"),
    [
        # Two ranks, another horizon on rank 1: the rank that differs from rank 0 (LS409 reports it in a failed run).
        ("r12d_rlgames_rank1_horizon_disagree", "[r12d] rank", [(1, "pair_setting")]),
        # Two ranks whose seeds differ by the rank itself (42, 43): no disagreement.
        ("r12d_rslrl_rank0_exit0_midloop", "[r12d] rank", []),
        # Three ranks behind `srun --label`-style task numbers, a seed one rank does not share: a majority.
        ("r12c_torchrun_seed_disagree_rank1", "config: seed=", [(1, "setting")]),
        # A line pinned to a step ("[RANK 1] step 8: feature spec loaded, 33 features per record", 32 on the
        # others) is compared at that step: what a rank computed then, not a setting.
        ("r27e_accel_gather_features_33_vs_32_cols_rank1_ws3", "feature spec loaded", [(1, "step_value")]),
        # A setting whose own name is no tensor's ("shard_align=64") on a line that also prints numel=...
        ("r28c_manual_env_rank_files_zero1_shard_align_env_rank2_ws3", "zero config:", [(2, "setting")]),
        # The same line at the step before and after holds losses that differ on every rank: no difference.
        ("r27e_accel_gather_features_33_vs_32_cols_rank1_ws3", "] step 7 loss", []),
        # "[rank3] train: creating pair subgroups in order [[2, 3], [0, 1]]": the logger's name is no setting, and
        # the order a rank creates its process groups in is about a collective.
        ("r27c_console_new_group_creation_order_rank3_ws4", "creating pair subgroups", [(3, "tensor")]),
        # On a line of settings, a number outside them ("... train_batch_size 24 zero stage 1", stage 2 on the
        # others) is compared too.
        ("r26e_deepspeed_launcher_zero_stage1_vs_2_rank1_ws3", "ds config:", [(1, "setting")]),
        # torchrun's own line about each worker's exit ("failed (exitcode: -6) local_rank: 1 ..."): an exit, no
        # setting.
        ("r16c_maxrestarts_sigkill_rank0_restart_fails_ws2", "failed (exitcode", []),
        # Pinned to a step, a line is compared whatever its words ("token-keep mask"): 120 entries on rank 1.
        ("r31e_accel_broadcast_vocab_mask_120_vs_128_rank1_ws3", "vocab file loaded", [(1, "step_value")]),
        # "[rank2] train: step 2 loss 2.3024" repeats step 0's line but for its numbers: the step's count keeps it
        # a line of its own (the lines a rank repeats are read once, `_read_line`), so step 2 is compared too.
        ("r25c_tee_fsdp2_hung_telemetry_query_rank1_timeout_ws3", "train: step", [(2, "step_value")]),
    ],
)
def test_rank_value_differences(run: str, needle: str, want: list[tuple[int, str]]) -> None:
    # The console, or one file per rank where the processes were started by hand.
    lines = [line for path in sorted((BLIND / run / "node0").glob("*.log")) for line in lines_with(path, needle)]
    assert len(lines) >= 2
    assert differences(lines) == want


@pytest.mark.parametrize(
    ("run", "files", "needle", "want"),
    [
        # Ray Train's worker logs: "[rank 1] step 5: normalization stats file loaded (torch.float64); ..." where its
        # peers print torch.float32. Pinned to a step, the line's numbers are a step's value; the element type is
        # compared on its own and is a tensor's (a run that finished, exit 0, with wrong values on rank 1).
        (
            "r32e_ray_train_bcast_norm_stats_float64_vs_float32_rank1_ws3",
            "*.out",
            "normalization stats file loaded",
            [(1, "step_value"), (1, "tensor")],
        ),
        # "[rank3] trainer: local data exhausted after 5 batches, leaving the join context", 8 on the others: a
        # count of batches is the rank's share of the data (a healthy DDP join), no setting.
        ("r32h_healthy_2agents_ddp_join_uneven_shard_rank3_nccl_info_ws4", "console.log", "local data exhausted", []),
    ],
)
def test_rank_value_differences_across_files(run: str, files: str, needle: str, want: list[tuple[int, str]]) -> None:
    lines = [line for path in sorted((BLIND / run).rglob(files)) for line in lines_with(path, needle)]
    assert len(lines) >= 3
    assert differences(lines) == want


def test_settings_named_for_the_rank_are_not_compared() -> None:
    # "[rank 1] group_rank=1 world=2 restart_count=0 run_id=...": group_rank follows the rank by design.
    console = BLIND / "r11f_torchrun_c10d_restart_fails"
    lines = [line for path in sorted(console.rglob("*.log")) for line in lines_with(path, "group_rank=")]
    assert {"[rank 0]", "[rank 1]"} <= {tag for line in lines for tag in ("[rank 0]", "[rank 1]") if tag in line}
    assert differences(lines) == []


def test_settings_printed_without_an_equals_sign() -> None:
    # "... rank 2/3 pid 1371 host-local-rank 0 batch_size 12" on node1, "batch_size 16" on node0's two ranks: a
    # snake_case name and its number are a setting; the pid and the local rank around it are not.
    run = BLIND / "r14e_2node_batchsize_disagree"
    lines = [line for node in ("node0", "node1") for line in lines_with(run / node / "console.log", "batch_size")]
    assert len(lines) >= 3
    assert differences(lines) == [(2, "setting")]


@pytest.mark.parametrize(
    ("run", "needle"),
    [
        # Two agents, each with its console in its node's folder: node1's ranks print "micro batch 24", node0's 32.
        ("r30c_2agents_console_dtensor_tp_node1_micro_bs24_ws4", "micro batch"),
        # "fsdp2: hidden 96, 14986 sharded params" beside a single setting ("fsdp2: hidden"): compared only because
        # the values split the ranks by node.
        ("r31c_2agents_tee_fsdp2_node1_hidden96_ws4", "fsdp2: hidden"),
        # "tp: hidden 96 dtype torch.float64, local shard of layer 0 weight (24, 48)" on node1, torch.float32 on
        # node0: the element types split the ranks by node, a setting of the node's (its environment).
        ("r32c_2agents_tee_dtensor_tp_node1_param_dtype_float64_ws4", "tp: hidden"),
    ],
)
def test_a_setting_that_splits_the_ranks_by_the_console_folder_they_are_in(run: str, needle: str) -> None:
    data = {
        f"{node}/console.log": ("\n".join(lines_with(BLIND / run / node / "console.log", needle)) + "\n").encode()
        for node in ("node0", "node1")
    }
    sources = [Source(path, "console", len(text)) for path, text in data.items()]
    openers = {path: (lambda text=text: io.BytesIO(text)) for path, text in data.items()}
    rows = rank_value_differences(sources, openers)
    assert sorted((row["grank"], row["_f"]["about"]) for row in rows) == [(2, "setting"), (3, "setting")]
    # In one console the same lines split no node: two ranks against two is no majority.
    assert differences([line for text in data.values() for line in text.decode().splitlines()]) == []


def facets_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts `_facets` is asked to read from now on."""
    calls: list[str] = []
    read = rank_values._facets

    def counted(text: str, *args: object) -> object:
        calls.append(text)
        return read(text, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(rank_values, "_facets", counted)
    return calls


def test_a_line_repeated_with_other_numbers_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint before every collective, on four ranks: each rank's lines that
    # differ only in their SequenceNumber say the same facets, so only the first of them is read.
    run = BLIND / "r28h_healthy_ddp_bucket1mb_metrics_cpplog_detail_nccl_info_ws4" / "node0" / "logs"
    lines = [line for path in sorted(run.rglob("stderr.log")) for line in lines_with(path, "Running collective")]
    calls = facets_read(monkeypatch)
    assert differences(lines) == []
    # At most one line per rank, shape of what it sends (its OpType, TensorShape) and width of its SequenceNumber,
    # not one per collective.
    shapes = {re.sub(r"SequenceNumber=\d+", lambda m: "0" * len(m[0]), line.split("]", 2)[2]) for line in lines}
    assert len(lines) >= 2 * len(shapes)
    assert len(calls) <= len(shapes)


def test_a_line_repeated_with_other_numbers_is_not_normalised_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same fingerprints as above, as read: "[rank1]:[I1203 ...] [Rank 1] Running collective: ..." differ in
    # their timestamps and SequenceNumber only, so a rank's repeats are not even normalised (most of a line's cost).
    run = BLIND / "r28h_healthy_ddp_bucket1mb_metrics_cpplog_detail_nccl_info_ws4" / "node0" / "logs"
    lines = [line for path in sorted(run.rglob("stderr.log")) for line in lines_with(path, "Running collective")]
    normalised: list[str] = []
    normalise = rank_values.normalise

    def counted(text: str) -> object:
        normalised.append(text)
        return normalise(text)

    monkeypatch.setattr(rank_values, "normalise", counted)
    assert differences(lines) == []
    shapes = {re.sub(r"SequenceNumber=\d+", lambda m: "0" * len(m[0]), line.split("]", 2)[2]) for line in lines}
    assert len(lines) >= 2 * len(shapes)
    assert len(normalised) <= len(shapes)


def test_nccl_records_are_not_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    # NCCL_DEBUG=INFO's records name the rank ("NCCL INFO comm 0x151ccfb0 rank 3 nRanks 4 nNodes 4 ..."), but its
    # environment is LS405's and the rest is the communicator's own (pointers, timings): they are not read here.
    run = ROOT / "fixtures" / "gpu" / "skip_broadcast_rank3_ws4_hostid" / "logs"
    lines = [line for path in sorted(run.rglob("stdout.log")) for line in lines_with(path, " NCCL INFO ")]
    assert sum(" rank " in line for line in lines) >= 8
    calls = facets_read(monkeypatch)
    assert differences(lines) == []
    assert calls == []
