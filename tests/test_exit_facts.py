"""Facts align derives about how ranks ended and whose lines are whose, on real runs: who sent a SIGTERM a worker
died of (torchrun's teardown or someone outside the job), errors a rank went on from, and rank tags of scripts' own
loggers."""

from __future__ import annotations

from pathlib import Path

import pytest

from logscope.analysis import analyze

REPO = Path(__file__).resolve().parent.parent


def stopped_by(run: str) -> dict[int, str | None]:
    ranks = analyze(REPO / run).diagnosis["ranks"]
    return {r["rank"]: r["stopped_by"] for r in ranks if r["exit_code"] == -15}


@pytest.mark.parametrize(
    ("run", "want"),
    [
        # node1's agent reports rank 3's SIGTERM as its first failure, and sent SIGTERM only to rank 2
        ("fixtures/blind_runs/r13c_2node_sigterm_rank3", {2: "launcher", 3: "outside"}),
        # torchrun SIGTERMed ranks 0 and 1 after rank 2 died of a SIGTERM it never sent
        ("fixtures/blind_runs/r13d_rlgames_rank2_sigterm_outside_ws3", {0: "launcher", 1: "launcher", 2: "outside"}),
        # a peer died of a gloo abort (-6): every SIGTERM is torchrun's teardown
        ("fixtures/blind_runs/r13c_torchrun_dtype_mismatch_rank3", {0: "launcher", 1: "launcher", 3: "launcher"}),
    ],
)
def test_who_sent_the_sigterm(run: str, want: dict[int, str]) -> None:
    assert stopped_by(run) == want


def phases(run: str) -> dict[int, str | None]:
    return {r["rank"]: r["phase"] for r in analyze(REPO / run).diagnosis["ranks"]}


@pytest.mark.parametrize(
    ("run", "want"),
    [
        # every rank's DataLoader caught a decode error and printed its traceback; each rank's steps go on below it
        (
            "fixtures/blind_runs/r23c_2agents_tee_cpp_info_healthy_handled_decode_retry_ws4",
            dict.fromkeys(range(4), "end"),
        ),
        # each rank's KeyboardInterrupt is followed only by tqdm's last redraw of its bar and skrl's "Environment
        # closed" (a `finally:`): no step went on, so the ranks stopped there
        ("fixtures/blind_runs/r22d_skrl_dr_param_wait_all_sigint_ws4", dict.fromkeys(range(4), "fail")),
        # Ray's driver console prints a worker's lines out of order: a step line below rank 1's KeyError says nothing
        ("fixtures/blind_runs/r11f_ray_train_worker_exception", {0: "train", 1: "fail"}),
    ],
)
def test_an_error_a_rank_went_on_from_is_no_failure(run: str, want: dict[int, str]) -> None:
    assert phases(run) == want


@pytest.mark.parametrize(
    ("run", "rank", "needle"),
    [
        # "[10:09:59][rank3/4][INFO] ...": a tag with the world size, behind the logger's clock
        ("fixtures/blind_runs/r13c_spawn_early_return_rank3", 3, "leaving training loop"),
        # {"ts": ..., "rank": 2, ...}: a JSON-lines logger's rank field
        ("fixtures/blind_runs/r13c_torchrun_dtype_mismatch_rank3", 2, '"rank": 2'),
        # a py-spy dump saved as "rank0_stack.log": the file's own name names its rank
        ("fixtures/cases/r18a_fairseq_4816_32gpu_rank0_dataloader_queue_hang_pyspy", 0, "get (queue.py:170)"),
        # node1's torchrun console ("failed (exitcode: -11) local_rank: 1") beside node1's log tree: global rank 3
        ("fixtures/blind_runs/r18c_2agents_maxrestarts1_segv_rank3_restart_fails_ws4", 3, "exitcode: -11"),
    ],
)
def test_script_rank_tags(run: str, rank: int, needle: str) -> None:
    events = analyze(REPO / run).events
    ranks = {row["rank"] for row in events.to_dicts() if needle in row["text"]}
    assert ranks == {rank}
