"""Input discovery: trees, consoles, archives read in place, tee copies counted once, hidden vs silent ranks."""

from __future__ import annotations

import gzip
import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest

from logscope.analysis import analyze
from tests.conftest import REPO, analysed

RUN = REPO / "fixtures/real/runs/10_python_exception_rank1_record"


def _tree_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_zip_and_targz_are_read_in_place_with_the_same_verdict(tmp_path: Path) -> None:
    want = analysed(str(RUN.relative_to(REPO))).diagnosis["verdict"]
    zpath = tmp_path / "artifact.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for f in _tree_files(RUN):
            zf.write(f, f.relative_to(RUN).as_posix())
    tpath = tmp_path / "artifact.tar.gz"
    with tarfile.open(tpath, "w:gz") as tf:
        tf.add(RUN, arcname="run")
    before = sorted(p.name for p in tmp_path.iterdir())
    for archive in (zpath, tpath):
        got = analyze(archive).diagnosis["verdict"]
        assert (got["category"], got["culprit_ranks"]) == (want["category"], want["culprit_ranks"]), archive.name
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing unpacked next to them


def test_single_gz_log(tmp_path: Path) -> None:
    src = REPO / "fixtures/real/public/05_basicsr_allreduce_pgguid/console.log"
    gz = tmp_path / "console.log.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert analyze(gz).diagnosis["verdict"]["category"] == "collective_timeout"


def test_tee_copies_count_once() -> None:
    a = analysed("fixtures/real/runs/01_healthy_ws2")
    syncs = a.events.filter(a.events["kind"] == "sync_start")
    assert sorted(syncs["rank"].to_list()) == [0, 1]  # the console's [defaultN]: copies were dropped
    assert all(not s.endswith("console.log") for s in syncs["source"].to_list())


def test_console_alone_gives_ranks_from_tee_prefixes(tmp_path: Path) -> None:
    shutil.copy(
        REPO / "fixtures/real/runs/03_skip_allreduce_rank1_stall_gloo_timeout/console.log", tmp_path / "job.log"
    )
    d = analyze(tmp_path / "job.log").diagnosis
    assert d["job"]["world_size"] == 2 and d["verdict"]["culprit_ranks"] == [1]


def test_filtered_ranks_are_hidden_not_silent() -> None:
    d = analysed("fixtures/runs/local_ranks_filter_ws2").diagnosis
    status = {r["rank"]: r["status"] for r in d["ranks"]}
    assert status == {0: "visible", 1: "hidden"}  # rank 1 crashed, but none of its own lines are in the console
    d2 = analysed("fixtures/real/public/05_basicsr_allreduce_pgguid").diagnosis
    assert all(r["status"] == "visible" for r in d2["ranks"])


def test_multinode_trees_map_global_ranks() -> None:
    d = analysed("fixtures/runs/multinode_2x2").diagnosis
    assert d["job"]["world_size"] == 4 and d["job"]["nnodes"] == 2
    nodes = {r["rank"]: r["node"] for r in d["ranks"]}
    assert nodes[0] == nodes[1] and nodes[2] == nodes[3] and nodes[0] != nodes[2]


def test_attempts_are_counted_and_restart_recovery_is_a_warning() -> None:
    d = analysed("fixtures/real/runs/17_max_restarts_1_recovered").diagnosis
    assert d["job"]["attempts"] == 2 and d["job"]["exit_code"] == 0
    crash = next(f for f in d["findings"] if f["rule"] == "LS701")
    assert crash["severity"] == "warning" and "recovered" in crash["message"]


def test_blocks_cut_long_lines_and_keep_line_numbers(tmp_path: Path) -> None:
    from logscope.ingest.read import MAX_LINE_BYTES

    log = tmp_path / "big.log"
    with log.open("wb") as f:
        f.write(b"x" * (MAX_LINE_BYTES + 10) + b"\n")
        f.write(io.BytesIO((REPO / "fixtures/real/public/05_basicsr_allreduce_pgguid/console.log").read_bytes()).read())
    a = analyze(log)
    assert a.diagnosis["verdict"]["category"] == "collective_timeout"
    assert min(a.events["line"].to_list()) >= 2


# ---------------------------------------------------------------------------------------- text shape (not a log)
@pytest.mark.parametrize(
    "case",
    [
        "blind4_allreduce_hang_both_ranks_set_device0",  # "init nccl 1, 2", "past barrier for 0"
        "blind4_nccl_allreduce_shape_mismatch_rank0_hang",  # "# Rank 7 tensor before allreduce: torch.Size(...)"
        "r7_robustvlm_clip_4gpu_stuck_epoch0_step0_21",  # a Compose repr, "train for 1.99 epochs", "Epoch 0 step 0"
        "blind_launch_single_node_two_devices_ok",  # "process 0, global_rank 0, local_rank 0, device cuda:0"
    ],
)
def test_a_jobs_own_prints_are_program_output(case: str) -> None:
    from logscope.ingest.textshape import is_program_output

    lines = (REPO / "fixtures/cases" / case / "console.log").read_text().splitlines()
    assert is_program_output(lines)


@pytest.mark.parametrize(
    "doc", ["README.md", "pyproject.toml", "setup.py", "docs/accuracy.md", "docs/rules.md", "fixtures/cases/README.md"]
)
def test_documents_config_and_code_are_not_program_output(doc: str) -> None:
    from logscope.ingest.textshape import is_program_output

    assert not is_program_output((REPO / doc).read_text().splitlines())
    assert not is_program_output(["milk", "eggs, a dozen", "bread", "2 apples", "coffee beans"])


@pytest.mark.parametrize(
    ("name", "is_log"),
    [
        ("workerlog.0", True),  # PaddlePaddle's launcher: log/workerlog.<local rank>
        ("train.log.1", True),  # rotated by logrotate
        ("rank3", True),  # no suffix at all
        ("console.log", True),
        ("model.ckpt.1", False),
        ("config.yaml", False),
    ],
)
def test_which_files_are_logs(name: str, is_log: bool) -> None:
    from logscope.ingest.sources import classify

    assert (classify(f"node0/{name}", 10) is not None) == is_log


def test_paddle_worker_logs_are_read() -> None:
    """A case that keeps PaddlePaddle's own file names (workerlog.0, workerlog.1) is a log, not refused."""
    verdict = analysed("fixtures/cases/r24a_ppasr_95_paddle_launch_2gpu_workerlog1_quiet_healthy").diagnosis["verdict"]
    assert verdict["category"] == "healthy"
