"""Flight Recorder dumps: found anywhere in the input, read without trusting them, matched across ranks, and used
beside the logs in the verdict and every report.

The dumps are real: the H200 trees in fixtures/gpu/ (NCCL, torch 2.11) and the CPU trees in
fixtures/flight_recorder/ (gloo, torch 2.13). The one generated file is the hostile pickle, made here.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from logscope.align.flight import match
from logscope.analysis import analyze
from logscope.ingest.flight_recorder import (
    DumpFile,
    RefusedDump,
    parse_dump,
    plain_unpickle,
    read_dumps,
)
from logscope.ingest.sources import discover
from logscope.report.html import render as render_html
from logscope.report.text import render as render_text

from .conftest import REPO, analysed

GPU = REPO / "fixtures" / "gpu"
CPU = REPO / "fixtures" / "flight_recorder"
STRAGGLER = GPU / "straggler_rank1_ws4_hostid"  # every rank dumped; rank 1 never issued SeqNum 4
EARLY_EXIT = GPU / "early_exit_rank2_ws4_hostid"  # rank 2 exited 0 and left no dump
STALL = GPU / "stall_rank1_watchdog_ws2_hostid"
SCHEMA = json.loads((REPO / "docs" / "schema" / "diagnosis-v1.json").read_text())
REAL_PICKLES = sorted(p for p in GPU.glob("*/flight_recorder/nccl_trace_rank_*")) + sorted(
    CPU.glob("*/flight_recorder/nccl_trace_rank_*")
)


class _RefuseGlobals(pickle.Unpickler):
    """The reference: the standard unpickler with every global refused (fine for these known-good files)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}")


class _RunsACommand:
    """What an attacker would send: unpickling it calls os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _hostile(marker: Path, protocol: int) -> bytes:
    return pickle.dumps({"version": "2.10", "entries": [_RunsACommand(marker)], "pg_config": {}}, protocol=protocol)


def _flight(path: Path) -> dict[str, Any]:
    fr = analysed(str(path.relative_to(REPO))).diagnosis["flight_recorder"]
    assert fr is not None
    return fr


# ---------------------------------------------------------------------------------------------- safe loading
@pytest.mark.parametrize("dump", REAL_PICKLES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_plain_interpreter_reads_real_dumps_as_the_standard_unpickler_does(dump: Path) -> None:
    data = dump.read_bytes()
    value, truncated = plain_unpickle(data)
    assert not truncated
    assert value == _RefuseGlobals(io.BytesIO(data)).load()


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_hostile_pickle_is_refused_naming_the_global_and_runs_nothing(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(RefusedDump, match=rf"global {os.system.__module__}\.system"):
        plain_unpickle(_hostile(marker, protocol))
    assert not marker.exists()


def test_extension_registry_opcode_is_refused() -> None:
    # EXT1 fetches a global through copyreg's registry without naming it.
    with pytest.raises(RefusedDump, match="EXT1"):
        plain_unpickle(b"\x80\x02\x82\x01.")


def test_hostile_dump_in_a_run_costs_one_note_and_the_analysis_goes_on(tmp_path: Path) -> None:
    tree = tmp_path / "run"
    shutil.copytree(STALL, tree)
    marker = tmp_path / "ran"
    (tree / "flight_recorder" / "nccl_trace_rank_1").write_bytes(_hostile(marker, 4))
    analysis = analyze(tree)
    refused = [n for n in analysis.diagnosis["notes"] if "nccl_trace_rank_1" in n]
    assert refused == [
        f"flight_recorder/nccl_trace_rank_1: Flight Recorder dump refused: it asks for the global "
        f"{os.system.__module__}.system (a dump holds only plain data; nothing was run)"
    ]
    assert not marker.exists()
    fr = analysis.diagnosis["flight_recorder"]
    assert [d["rank"] for d in fr["dumps"]] == [0] and fr["ranks_without_dump"] == [1]
    assert (analysis.diagnosis["verdict"]["category"], analysis.diagnosis["verdict"]["culprit_ranks"]) == (
        "collective_timeout",
        [1],
    )


def test_hostile_dump_through_the_command_line_is_no_traceback(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    marker = tmp_path / "ran"
    (dumps / "nccl_trace_rank_0").write_bytes(_hostile(marker, 2))
    done = subprocess.run(
        [sys.executable, "-m", "logscope", "analyze", str(STALL / "logs"), "--flight-recorder", str(dumps)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "dumps/nccl_trace_rank_0: Flight Recorder dump refused: it asks for the global" in done.stdout
    assert not marker.exists()


def test_truncated_dump_keeps_the_entries_before_the_cut_and_says_so(tmp_path: Path) -> None:
    tree = tmp_path / "run"
    shutil.copytree(STRAGGLER, tree)
    dump = tree / "flight_recorder" / "nccl_trace_rank_0"
    data = dump.read_bytes()
    dump.write_bytes(data[: len(data) - 200])
    analysis = analyze(tree)
    assert any(
        n.startswith("flight_recorder/nccl_trace_rank_0: Flight Recorder dump truncated; read the ")
        for n in analysis.diagnosis["notes"]
    )
    fr = analysis.diagnosis["flight_recorder"]
    rank0 = next(d for d in fr["dumps"] if d["rank"] == 0)
    assert rank0["truncated"] and 0 < rank0["entries"] < 4
    assert fr["hangs"][0]["seq"] == 4 and fr["hangs"][0]["culprit_ranks"] == [1]


def test_json_dumps_read_with_their_string_numbers() -> None:
    dump = parse_dump((GPU / "healthy_ws4_hostid/flight_recorder_json/nccl_trace_rank_0.json").read_bytes(), 0, "x")
    assert dump.format == "json" and len(dump.entries) == 7
    assert dump.pg_status["0"] == {"enqueued": 7, "started": -1, "completed": 3}
    assert dump.pg_ranks == {"0": [0, 1, 2, 3]}


def test_a_file_that_is_not_a_dump_is_refused_in_one_line() -> None:
    with pytest.raises(RefusedDump, match="not valid JSON"):
        parse_dump(b"{ not json", 0, "x")
    with pytest.raises(RefusedDump, match="not a Flight Recorder dump"):
        parse_dump(pickle.dumps([1, 2, 3]), 0, "x")


# ---------------------------------------------------------------------------------------------- discovery
def test_dumps_are_data_not_logs() -> None:
    inventory = discover(STALL)
    assert [d.path for d in inventory.dumps] == [
        "flight_recorder/nccl_trace_rank_0",
        "flight_recorder/nccl_trace_rank_1",
    ]
    assert not any("nccl_trace" in src.path for src, _ in inventory.sources)
    assert not any("binary data" in n for n in analysed(str(STALL.relative_to(REPO))).diagnosis["notes"])


def test_any_prefix_is_found_by_its_first_bytes(tmp_path: Path) -> None:
    tree = tmp_path / "run"
    shutil.copytree(STALL / "logs", tree / "logs")
    for rank in (0, 1):
        shutil.copy(STALL / "flight_recorder" / f"nccl_trace_rank_{rank}", tree / f"job42_fr_{rank}")
    (tree / "epoch_3").write_text("loss 0.5\n")  # ends in a digit, is no dump
    inventory = discover(tree)
    assert sorted(d.path for d in inventory.dumps) == ["job42_fr_0", "job42_fr_1"]
    fr = analyze(tree).diagnosis["flight_recorder"]
    assert fr["hangs"][0]["never_issued"] == [1]


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz"])
def test_dumps_inside_an_archive(tmp_path: Path, suffix: str) -> None:
    archive = tmp_path / f"run{suffix}"
    files = [p for p in STRAGGLER.rglob("*") if p.is_file() and "flight_recorder_json" not in p.parts]
    if suffix == ".zip":
        with zipfile.ZipFile(archive, "w") as zf:
            for p in files:
                zf.write(p, p.relative_to(STRAGGLER).as_posix())
    else:
        with tarfile.open(archive, "w:gz") as tf:
            for p in files:
                tf.add(p, p.relative_to(STRAGGLER).as_posix())
    diagnosis = analyze(archive).diagnosis
    fr = diagnosis["flight_recorder"]
    assert [d["path"] for d in fr["dumps"]] == [f"run{suffix}!flight_recorder/nccl_trace_rank_{r}" for r in range(4)]
    assert fr["hangs"][0]["culprit_ranks"] == [1]
    assert not any("binary data" in n for n in diagnosis["notes"])


def test_flight_recorder_folder_given_apart_from_the_logs(tmp_path: Path) -> None:
    shutil.copytree(EARLY_EXIT / "logs", tmp_path / "logs")
    alone = analyze(tmp_path / "logs").diagnosis
    assert alone["flight_recorder"] is None
    together = analyze(tmp_path / "logs", flight_recorder=EARLY_EXIT / "flight_recorder").diagnosis
    assert [d["rank"] for d in together["flight_recorder"]["dumps"]] == [0, 1, 3]
    assert "LS219" in {f["rule"] for f in together["findings"]}


# ---------------------------------------------------------------------------------------------- matching
def test_straggler_every_rank_dumped_the_one_that_never_issued_the_collective_is_named() -> None:
    hang = _flight(STRAGGLER)["hangs"][0]
    assert (hang["pg"], hang["pg_desc"], hang["seq"], hang["op"]) == ("0", "default_pg", 4, "nccl:all_reduce")
    assert hang["states"] == {"0": "scheduled", "2": "scheduled", "3": "scheduled"}
    assert hang["never_issued"] == [1] and hang["culprit_ranks"] == [1] and hang["without_dump"] == []
    assert (
        hang["stack"][0].startswith("all_reduce at ")
        and "main at /work/main/fixtures/gpu/nccl_job.py:283" in (hang["stack"])
    )


def test_a_rank_without_a_dump_is_evidence_read_with_its_logs() -> None:
    fr = _flight(EARLY_EXIT)
    hang = fr["hangs"][0]
    assert fr["ranks_without_dump"] == [2] and hang["without_dump"] == [2] and hang["culprit_ranks"] == [2]
    assert hang["seq"] == 7 and set(hang["states"]) == {"0", "1", "3"}
    rank2 = next(r for r in fr["ranks"] if r["rank"] == 2)
    # Its peers completed all_reduce SeqNum 6, which needs every rank; its logs say it finished and exited 0.
    assert rank2["dump"] is None and rank2["joined_up_to_seq"] == 6
    assert rank2["logs"]["exit_code"] == 0 and rank2["logs"]["ended"] is True
    finding = next(f for f in analysed(str(EARLY_EXIT.relative_to(REPO))).diagnosis["findings"] if f["rule"] == "LS219")
    assert "rank 2: its log reached its end-of-training line, exit 0" in finding["message"]
    assert "its peers completed SeqNum 6 with it" in finding["message"]


def test_gloo_straggler_killed_before_it_could_dump() -> None:
    fr = _flight(CPU / "gloo_straggler_no_dump_ws4")
    assert fr["ranks_without_dump"] == [2] and fr["hangs"][0]["culprit_ranks"] == [2]
    assert next(r for r in fr["ranks"] if r["rank"] == 2)["logs"]["signal"] == "SIGTERM"


def test_op_mismatch_names_the_rank_that_broke_its_own_pattern() -> None:
    analysis = analysed("fixtures/flight_recorder/gloo_op_mismatch_ws2")
    fr = analysis.diagnosis["flight_recorder"]
    assert fr["mismatches"] == [
        {
            "pg": "0",
            "seq": 6,
            "what": "op",
            "per_rank": {"0": "gloo:all_reduce", "1": "gloo:broadcast"},
            "culprit_ranks": [1],
        }
    ]
    verdict = analysis.diagnosis["verdict"]
    # From the logs alone: "different collective calls", culprits 0 and 1; the dumps say which one.
    assert (verdict["category"], verdict["culprit_ranks"], verdict["rule"]) == ("collective_mismatch", [1], "LS220")


def test_broadcast_state_mismatch_is_not_taken_for_an_op_mismatch() -> None:
    fr = _flight(GPU / "nccl_proto_differs_ws2_hostid")
    assert fr["mismatches"] == [] and fr["hangs"][0]["seq"] == 2 and fr["hangs"][0]["never_issued"] == [1]


def test_a_finished_run_has_no_hang() -> None:
    fr = _flight(GPU / "healthy_ws4_hostid")
    assert len(fr["dumps"]) == 4 and fr["hangs"] == [] and fr["mismatches"] == []


def test_entries_aged_out_of_a_buffer_do_not_make_a_rank_missing() -> None:
    files = sorted((STRAGGLER / "flight_recorder").iterdir())
    read = read_dumps([DumpFile(p.name, lambda p=p: p.open("rb")) for p in files])
    rank0 = read.dumps[0]
    rank0.entries = rank0.entries[2:]  # a ring buffer keeps only its last entries
    report = match(read.dumps, {}, [], 4)
    assert report is not None and report.hangs[0].never_issued == [1] and report.mismatches == []


# ---------------------------------------------------------------------------------------------- reports
def test_evidence_cites_the_dump_file_and_entry_beside_the_log_lines() -> None:
    diagnosis = analysed(str(STRAGGLER.relative_to(REPO))).diagnosis
    jsonschema.validate(diagnosis, SCHEMA)
    finding = next(f for f in diagnosis["findings"] if f["rule"] == "LS219")
    assert finding["evidence"][0]["path"] == "flight_recorder/nccl_trace_rank_0"
    assert finding["evidence"][0]["line"] == 4  # the 4th entry of rank 0's buffer
    assert finding["evidence"][0]["text"].startswith("Flight Recorder entry 3 (record_id 3): nccl:all_reduce SeqNum 4")
    assert finding["collective"]["op"] == "ALLREDUCE" and finding["collective"]["seq"] == 4
    assert diagnosis["verdict"]["rule"] == "LS219" and diagnosis["verdict"]["culprit_ranks"] == [1]


def test_text_and_html_show_the_per_rank_table_of_last_collectives() -> None:
    analysis = analysed(str(EARLY_EXIT.relative_to(REPO)))
    text = render_text(analysis, width=160)
    assert "Flight Recorder  3 dump(s)" in text
    assert (
        "hung: nccl:all_reduce SeqNum 7 of pg 0 (0: scheduled, 1: scheduled, 3: scheduled); waiting for rank(s) 2"
        in (text)
    )
    assert "no dump" in text and "(peers completed SeqNum 6 with it)" in text
    html = render_html(analysis)
    assert 'id="flight-recorder"' in html and 'data-testid="fr-ranks"' in html
    assert "7 all_reduce scheduled" in html and "Stack of the hung collective" in html


def test_runs_without_dumps_say_nothing_of_them() -> None:
    analysis = analysed("fixtures/real/runs/01_healthy_ws2")
    assert analysis.diagnosis["flight_recorder"] is None
    assert "Flight Recorder" not in render_text(analysis) and 'id="flight-recorder"' not in render_html(analysis)


def test_a_corrupt_dump_in_a_zip_is_a_note(tmp_path: Path) -> None:
    archive = tmp_path / "run.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(STALL.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(STALL).as_posix())
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo("flight_recorder/nccl_trace_rank_1")
    data = bytearray(archive.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 20
    data[start : start + 40] = bytes(b ^ 0x5A for b in data[start : start + 40])  # damage its deflate stream
    archive.write_bytes(bytes(data))
    diagnosis = analyze(archive).diagnosis
    (note,) = [n for n in diagnosis["notes"] if "nccl_trace_rank_1" in n]
    assert note.startswith("run.zip!flight_recorder/nccl_trace_rank_1: Flight Recorder dump unreadable (Error -3 ")
    assert diagnosis["flight_recorder"]["ranks_without_dump"] == [1]
