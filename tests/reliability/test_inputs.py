"""Broken, hostile and huge inputs: each is analysed with a note (and lower confidence where evidence was
lost) or refused with one line on stderr and exit 2, never a traceback. Inputs: the real run, copied and
damaged."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import regex

from logscope.rules.engine import REGEX_TIMEOUT_S
from tests.reliability.conftest import (
    NODE,
    QUIET_LINE,
    RANK0,
    RANK1,
    RUN,
    Result,
    analysed,
    cli,
    has_note,
    refused,
    tree_digest,
)

Copy = Callable[..., Path]
GLOO_LINE = b"Timed out waiting 20000ms for recv operation to complete"


def same_verdict(result: Result, baseline: dict[str, Any]) -> None:
    """The damage did not change what the run is diagnosed with."""
    got, want = result.diagnosis["verdict"], baseline["verdict"]
    assert (got["category"], got["culprit_ranks"]) == (want["category"], want["culprit_ranks"])


def checked(path: Path, *args: str | Path, **kwargs: Any) -> Result:
    """Analyse, and check the input was not modified by it."""
    before = tree_digest(path)
    result = analysed(path, *args, **kwargs)
    assert tree_digest(path) == before
    return result


# ----------------------------------------------------------------------------------------- paths and folders
def test_missing_path(tmp_path: Path) -> None:
    refused(cli("analyze", tmp_path / "no-such-run"), "no such file or folder")


def test_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    refused(cli("analyze", tmp_path / "empty"), "nothing that looks like a log")


def test_folder_with_no_logs(tmp_path: Path) -> None:
    folder = tmp_path / "not-logs"
    folder.mkdir()
    shutil.copy(RUN / "scenario.yaml", folder / "scenario.yaml")
    (folder / "plot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    (folder / ".hidden.log").write_bytes((RUN / "console.log").read_bytes())
    refused(cli("analyze", folder), "nothing that looks like a log")


def test_unreadable_file_permissions(run_copy: Copy) -> None:
    if os.geteuid() == 0:
        pytest.skip(
            "running as root: chmod 000 does not stop root from reading (the FIFO and dangling-link "
            "tests cover files that cannot be read)"
        )
    run = run_copy()
    target = run / RANK1 / "stdout.log"
    target.chmod(0)
    try:
        result = analysed(run)
    finally:
        target.chmod(0o644)
    has_note(result, f"{RANK1}/stdout.log", "cannot read")


def test_fifo_named_like_a_log_is_never_opened(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    (run / RANK1 / "stdout.log").unlink()
    os.mkfifo(run / RANK1 / "stdout.log")  # opening it for reading would block forever
    result = checked(run, timeout=60)
    has_note(result, f"{RANK1}/stdout.log", "not a regular file", "FIFO")
    assert f"{RANK1}/stdout.log" not in {s["path"] for s in result.diagnosis["sources"]}
    same_verdict(result, baseline)


def test_dangling_symlink(run_copy: Copy, tmp_path: Path) -> None:
    run = run_copy()
    (run / RANK1 / "stdout.log").unlink()
    (run / RANK1 / "stdout.log").symlink_to(tmp_path / "deleted-by-the-job.log")
    has_note(checked(run, "--follow-symlinks"), f"{RANK1}/stdout.log", "broken link")
    has_note(checked(run), f"{RANK1}/stdout.log", "symlink not followed")


def test_directory_named_like_a_log(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    (run / RANK1 / "stdout.log").unlink()
    (run / RANK1 / "stdout.log").mkdir()
    (run / "console.log.gz").mkdir()
    result = checked(run)
    has_note(result, f"{RANK1}/stdout.log", "folder named like a log")
    has_note(result, "console.log.gz", "folder named like a log")
    same_verdict(result, baseline)


# --------------------------------------------------------------------------------------------- file contents
def test_binary_file(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    (run / RANK1 / "stdout.log").write_bytes(os.urandom(1 << 16))
    result = checked(run)
    has_note(result, f"{RANK1}/stdout.log", "binary data, skipped")
    assert result.diagnosis["verdict"]["confidence"] < baseline["verdict"]["confidence"]


def test_invalid_utf8(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    log = run / RANK0 / "stderr.log"
    lines = log.read_bytes().split(b"\n")
    bad = b" \xff\xfe\xc3("  # no UTF-8 decoder accepts these
    log.write_bytes(b"\n".join(line + bad if i % 3 == 0 else line for i, line in enumerate(lines)))
    result = checked(run)
    has_note(result, f"{RANK0}/stderr.log", "not UTF-8")
    same_verdict(result, baseline)
    assert result.diagnosis["verdict"]["confidence"] < baseline["verdict"]["confidence"]


def test_nul_bytes(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    log = run / RANK0 / "stderr.log"
    # What a crash leaves: a run of zero bytes where the last block of the file was never written.
    log.write_bytes(log.read_bytes() + bytes(300) + b"\n")
    result = checked(run)
    has_note(result, f"{RANK0}/stderr.log", "300 NUL byte")
    same_verdict(result, baseline)


def test_crlf_line_ends(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    for log in run.rglob("*.log"):
        log.write_bytes(log.read_bytes().replace(b"\n", b"\r\n"))
    result = checked(run)
    same_verdict(result, baseline)
    assert result.diagnosis["ranks"] == baseline["ranks"]
    assert result.diagnosis["notes"] == baseline["notes"]


def test_lone_cr_segments(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    log = run / RANK0 / "stderr.log"
    # A progress bar redraws with lone CRs: the whole file becomes one physical line of CR segments.
    log.write_bytes(log.read_bytes().replace(b"\n", b"\r"))
    result = checked(run)
    same_verdict(result, baseline)
    assert [f["rule"] for f in result.diagnosis["findings"]] == [f["rule"] for f in baseline["findings"]]


def test_50_mb_single_line(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    log = run / RANK1 / "stdout.log"
    log.write_bytes(log.read_bytes() + b"x" * (50 << 20) + b"\n")
    started = time.monotonic()
    result = checked(run)
    assert time.monotonic() - started < 120
    has_note(result, f"{RANK1}/stdout.log", "lines over")
    same_verdict(result, baseline)
    assert result.diagnosis["verdict"]["confidence"] < baseline["verdict"]["confidence"]


def test_a_rank_number_past_any_world(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    log = run / RANK0 / "stderr.log"
    # Garbled digits in the rank prefix: no world of 10^20 ranks is laid out (it used to loop over every one).
    log.write_bytes(log.read_bytes().replace(b"[rank0]:", b"[rank99999999999999999999]:"))
    result = checked(run)
    assert all(r["rank"] < 1 << 20 for r in result.diagnosis["ranks"])


def test_file_truncated_mid_line(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    log = run / RANK1 / "stdout.log"
    data = log.read_bytes()
    log.write_bytes(data[: data.rindex(b"\n", 0, len(data) - 1) + 20])  # 19 bytes into the last line
    result = checked(run)
    has_note(result, f"{RANK1}/stdout.log", "ends mid-line")
    same_verdict(result, baseline)
    assert result.diagnosis["verdict"]["confidence"] < baseline["verdict"]["confidence"]


def test_file_still_being_written(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    log = run / RANK1 / "stdout.log"
    # ~4 MB: reading it takes long enough to see it grow.
    log.write_bytes(log.read_bytes() + QUIET_LINE * 40_000)
    stop = threading.Event()

    def append() -> None:
        with log.open("ab", buffering=0) as handle:
            while not stop.is_set():
                handle.write(QUIET_LINE)
                time.sleep(0.0005)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        result = analysed(run)
    finally:
        stop.set()
        writer.join()
    has_note(result, f"{RANK1}/stdout.log", "size changed while reading")
    assert result.diagnosis["verdict"]["category"] == baseline["verdict"]["category"]


def test_error_json_not_json(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    error_json = run / RANK0 / "error.json"
    error_json.write_bytes(error_json.read_bytes()[:100])  # the writer died mid-dump
    result = checked(run)
    has_note(result, f"{RANK0}/error.json", "not JSON")
    same_verdict(result, baseline)


# -------------------------------------------------------------------------------------------------- archives
def zipped(run: Path, target: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(run.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(run).as_posix())
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return target


def test_gzip_truncated_mid_stream(tmp_path: Path) -> None:
    data = gzip.compress((RUN / "console.log").read_bytes())
    intact = tmp_path / "console.log.gz"
    intact.write_bytes(data)
    cut = tmp_path / "cut" / "console.log.gz"
    cut.parent.mkdir()
    cut.write_bytes(data[: len(data) * 2 // 3])
    whole = checked(intact)
    result = checked(cut)
    has_note(result, "console.log.gz!console.log", "truncated", "read what came before")
    assert result.diagnosis["sources"][0]["bytes"] > 0
    assert result.diagnosis["verdict"]["confidence"] < whole.diagnosis["verdict"]["confidence"]


def test_corrupt_zip_member(tmp_path: Path, run_copy: Copy) -> None:
    archive = zipped(run_copy(), tmp_path / "run.zip")
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo("console.log")
    raw = bytearray(archive.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    raw[start + 200 : start + 260] = os.urandom(60)  # damage the deflate stream, keep the zip's directory
    archive.write_bytes(bytes(raw))
    result = checked(archive)
    has_note(result, "run.zip!console.log")
    assert any(word in " ".join(result.notes) for word in ("corrupt", "cannot read", "truncated"))


def test_not_a_zip_at_all(tmp_path: Path) -> None:
    fake = tmp_path / "logs.zip"
    fake.write_bytes((RUN / "console.log").read_bytes()[:500])
    refused(cli("analyze", fake), "not a readable archive")


def test_zip_member_names_with_traversal_are_read_in_place(tmp_path: Path) -> None:
    console = (RUN / "console.log").read_bytes()
    escape_abs = Path(f"/tmp/{tmp_path.name}-logscope-escape/console.log")
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../../escaped/console.log", console)
        zf.writestr(str(escape_abs), console)
        zf.writestr("..\\..\\windows\\console.log", console)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = tree_digest(tmp_path)
    result = cli("analyze", archive, "-f", "json", cwd=cwd)
    assert result.rc in (0, 1), result.stderr
    shown = {s["path"] for s in result.diagnosis["sources"]}
    assert "evil.zip!../../escaped/console.log" in shown
    assert tree_digest(tmp_path) == before  # nothing extracted next to the archive or into the working folder
    assert not escape_abs.exists() and not escape_abs.parent.exists()
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path.parent.parent / "escaped").exists()


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_archive_bomb_stops_at_the_decompression_limit(tmp_path: Path, run_copy: Copy, kind: str) -> None:
    limit = 4 << 20
    filler = QUIET_LINE * 100_000  # ~8 MB
    bombs = {f"bomb/part{i:02}.log": filler for i in range(12)}  # ~100 MB inflated from a few hundred KB
    run = run_copy()
    if kind == "zip":
        archive = zipped(run, tmp_path / "bomb.zip", bombs)
    else:
        archive = tmp_path / "bomb.tar.gz"
        with tarfile.open(archive, "w:gz") as tf:
            tf.add(run, arcname=".")
            for name, data in bombs.items():
                member = tarfile.TarInfo(name)
                member.size = len(data)
                tf.addfile(member, io.BytesIO(data))
    assert archive.stat().st_size < 2 << 20
    started = time.monotonic()
    result = checked(archive, env={"LOGSCOPE_MAX_ARCHIVE_BYTES": str(limit)})
    assert time.monotonic() - started < 60
    has_note(result, f"{archive.name}!bomb/part00.log", "read stopped at the decompression limit")
    has_note(result, f"{archive.name}: decompression limit reached", "later members not read")
    assert sum(s["bytes"] for s in result.diagnosis["sources"]) <= limit
    if kind == "tar.gz":  # a stream: nothing after the limit is even inflated to find the next member
        assert not any("part01" in s["path"] for s in result.diagnosis["sources"])
    assert result.diagnosis["verdict"]["category"] == "collective_timeout"  # the real members come first


def test_decompression_limit_must_be_a_number(tmp_path: Path, run_copy: Copy) -> None:
    archive = zipped(run_copy(), tmp_path / "run.zip")
    refused(cli("analyze", archive, env={"LOGSCOPE_MAX_ARCHIVE_BYTES": "lots"}), "LOGSCOPE_MAX_ARCHIVE_BYTES")


# -------------------------------------------------------------------------------------------------- symlinks
def test_symlink_loop(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    (run / NODE / "attempt_0" / "again").symlink_to("..", target_is_directory=True)
    followed = checked(run, "--follow-symlinks", timeout=60)
    has_note(followed, "symlink loop")
    same_verdict(followed, baseline)
    has_note(checked(run), "symlinked folder not followed")


def test_symlinks_outside_the_tree(run_copy: Copy, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(RUN / "console.log", outside / "other-job.log")
    run = run_copy()
    (run / "linked.log").symlink_to(outside / "other-job.log")
    (run / "linked-folder").symlink_to(outside, target_is_directory=True)
    default = checked(run)
    has_note(default, "linked.log", "symlink not followed")
    has_note(default, "linked-folder", "symlinked folder not followed")
    linked = {"linked.log", "linked-folder/other-job.log"}
    assert not linked & {s["path"] for s in default.diagnosis["sources"]}
    followed = checked(run, "--follow-symlinks")
    assert linked <= {s["path"] for s in followed.diagnosis["sources"]}


# ----------------------------------------------------------------------------------------------- tree shapes
@pytest.mark.slow
def test_100_000_files(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    for d in range(100):
        folder = run / "noise" / f"d{d:03}"
        folder.mkdir(parents=True)
        for i in range(1000):
            (folder / f"f{i:04}.log").write_bytes(QUIET_LINE)
    started = time.monotonic()
    result = analysed(run, timeout=300)
    assert time.monotonic() - started < 240
    assert len(result.diagnosis["sources"]) >= 100_000
    same_verdict(result, baseline)


def test_folders_a_thousand_deep(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    chain = [str(run / "deep")]
    for _ in range(1100):  # os.walk and Path.rglob recurse in Python 3.11: past ~1000 levels they raise
        chain.append(os.path.join(chain[-1], "d"))
    for folder in chain:
        os.mkdir(folder)
    shutil.copy(RUN / "console.log", os.path.join(chain[-1], "copied-console.log"))
    try:
        result = analysed(run)
        assert any(s["path"].endswith("/d/d/copied-console.log") for s in result.diagnosis["sources"])
        same_verdict(result, baseline)
    finally:  # bottom up: shutil.rmtree (and so pytest's tmp_path cleanup) recurses too
        os.unlink(os.path.join(chain[-1], "copied-console.log"))
        for folder in reversed(chain):
            os.rmdir(folder)


def test_zip_with_20_000_members(tmp_path: Path, run_copy: Copy, baseline: dict[str, Any]) -> None:
    members = {f"noise/f{i:05}.log": QUIET_LINE for i in range(20_000)}
    archive = zipped(run_copy(), tmp_path / "many.zip", members)
    started = time.monotonic()
    result = checked(archive)
    assert time.monotonic() - started < 60  # reopening the archive per member made this quadratic
    assert len(result.diagnosis["sources"]) > 20_000
    same_verdict(result, baseline)


def test_duplicate_rank_folders(run_copy: Copy, baseline: dict[str, Any]) -> None:
    run = run_copy()
    shutil.copytree(run / NODE, run / "logs" / "copy_of_none_97seex9t")
    result = checked(run)
    has_note(result, "duplicate rank folder")
    same_verdict(result, baseline)
    assert [r["rank"] for r in result.diagnosis["ranks"]] == [r["rank"] for r in baseline["ranks"]]


def test_attempt_folder_without_rank_folders(run_copy: Copy) -> None:
    run = run_copy()
    shutil.rmtree(run / NODE / "attempt_0")
    (run / NODE / "attempt_0").mkdir()
    result = checked(run)  # the console still has every rank's lines (torchrun's tee)
    has_note(result, f"{NODE}/attempt_0", "no rank folders")
    (run / "console.log").unlink()
    refused(cli("analyze", run), "nothing that looks like a log")


# ----------------------------------------------------------------------------------------------------- rules
RULE = (Path(__file__).resolve().parents[2] / "rules" / "LS101_collective_timeout.yaml").read_text()


def user_rule(folder: Path, text: str, rule_id: str = "USR001") -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"{rule_id}_user.yaml"
    text = text.replace("id: LS101", f"id: {rule_id}")
    path.write_text(text.replace("name: collective-timeout", f"name: user-{rule_id.lower()}"))
    return folder


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda t: t.replace("match:\n  kinds:", "match:\n  kinds: [\n  kinds:"), "invalid YAML"),
        (lambda t: t.replace("severity: error", "severity: error\nseverty: error"), "unknown key 'severty'"),
        (
            lambda t: t.replace("match:\n", "match:\n  where: [{field: text, regex: '(unclosed'}]\n"),
            "regex does not compile",
        ),
    ],
    ids=["invalid-yaml", "unknown-key", "bad-regex"],
)
def test_bad_rule_file(tmp_path: Path, damage: Callable[[str], str], says: str) -> None:
    rules = user_rule(tmp_path / "rules", damage(RULE))
    lint = cli("rules", "lint", rules)
    assert lint.rc == 2
    problems = lint.stderr.strip().splitlines()
    assert len(problems) == 1 and problems[0].startswith(f"{rules / 'USR001_user.yaml'}:"), lint.stderr
    assert says in problems[0]
    refused(cli("analyze", RUN, "--rules", rules), says)


def test_pathological_user_regex_finishes_fast(tmp_path: Path, run_copy: Copy) -> None:
    # `(a+)+$` the regex module answers at once; `(a|aa)+$` backtracks exponentially there too (and both would
    # in `re`), so only the engine's timeout stops it.
    started = time.monotonic()
    assert regex.compile(r"(a+)+$").search("a" * 40 + "b", timeout=REGEX_TIMEOUT_S) is None
    with pytest.raises(TimeoutError):
        regex.compile(r"(a|aa)+$").search("a" * 40 + "b", timeout=REGEX_TIMEOUT_S)
    assert time.monotonic() - started < 2
    run = run_copy()
    log = run / RANK0 / "stderr.log"
    lines = log.read_bytes().splitlines(keepends=True)
    gloo = next(line for line in lines if GLOO_LINE in line)
    evil = gloo.replace(GLOO_LINE, GLOO_LINE + b" " + b"a" * 40 + b"b")
    # 500 such events: at 50 ms a search, 25 s of timeouts, unless the engine stops trying a rule's regex.
    log.write_bytes(evil * 500 + b"".join(lines))
    rules = tmp_path / "rules"
    for rule_id, pattern in (("USR001", "(a+)+$"), ("USR002", "(a|aa)+$")):
        rule = [
            f"  kinds: [gloo_timeout]\n  where: [{{field: text, regex: '{pattern}'}}]"
            if line.startswith("  kinds:")
            else line
            for line in RULE.splitlines()
        ]
        user_rule(rules, "\n".join(rule) + "\n", rule_id)
        assert pattern in (rules / f"{rule_id}_user.yaml").read_text()
    started = time.monotonic()
    result = analysed(run, "--rules", rules)
    assert time.monotonic() - started < 12
    # A regex that timed out is no match.
    assert not {"USR001", "USR002"} & {f["rule"] for f in result.diagnosis["findings"]}
    assert result.diagnosis["verdict"]["culprit_ranks"] == [1]


# --------------------------------------------------------------------------------------------------- outputs
def test_output_path_not_writable(tmp_path: Path) -> None:
    a_file = tmp_path / "report.json"
    a_file.write_text("{}")
    refused(cli("analyze", RUN, "-o", a_file / "nested.json"), "is a file, not a folder")
    if Path("/proc/self").is_dir():
        proc_file = "/proc/logscope-report.json"
        refused(cli("analyze", RUN, "-o", proc_file), f"cannot write {proc_file}")
    assert a_file.read_text() == "{}"


def test_output_inside_the_input_tree(run_copy: Copy) -> None:
    run = run_copy()
    before = tree_digest(run)
    refused(cli("analyze", run, "-o", run / "report.json"), "inside the input tree")
    refused(cli("analyze", run, "-o", run / NODE / "report.html"), "--allow-output-in-input")
    assert tree_digest(run) == before
    allowed = cli("analyze", run, "-o", run / "report.json", "--allow-output-in-input")
    assert allowed.rc in (0, 1), allowed.stderr
    assert (run / "report.json").read_text().lstrip().startswith("{")


def test_output_folder_gets_complete_files_only(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    result = cli("analyze", RUN, "-f", "json,html,sarif,junit", "-o", f"{out}/")
    assert result.rc in (0, 1), result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["logscope.html", "logscope.json", "logscope.sarif", "logscope.xml"]  # no temp files left
    assert json.loads((out / "logscope.json").read_text())["schema"]
