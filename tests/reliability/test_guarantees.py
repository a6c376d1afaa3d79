"""What logscope promises whatever the input: the input tree is never modified, reports are written
atomically, Ctrl-C leaves nothing half-written, no unsafe YAML/eval/shell in the package, HTML escapes log
text."""

from __future__ import annotations

import contextlib
import gzip
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import regex
import yaml

from logscope import safeyaml
from logscope.errors import OutputError
from logscope.outputs import write_atomic
from tests.reliability.conftest import NODE, RANK0, RANK1, REPO, RUN, cli, tree_digest

Copy = Callable[..., Path]
GLOO_LINE = b"Timed out waiting 20000ms for recv operation to complete"


def damaged_tree(run: Path) -> Path:
    """One tree with most kinds of damage at once, to check that none of them makes logscope write into it."""
    (run / RANK1 / "stdout.log").write_bytes(os.urandom(4096))
    err = run / RANK0 / "stderr.log"
    err.write_bytes(err.read_bytes().replace(b"\n", b"\r\n") + b"\xff\xfe" + bytes(64))
    (run / RANK0 / "error.json").write_text('{"message": ')
    os.mkfifo(run / NODE / "attempt_0" / "fifo.log")
    (run / NODE / "attempt_0" / "loop").symlink_to("..", target_is_directory=True)
    (run / "gone.log").symlink_to(run / "no-such-file.log")
    data = gzip.compress((RUN / "console.log").read_bytes())
    (run / "half.log.gz").write_bytes(data[: len(data) // 2])
    with zipfile.ZipFile(run / "evil.zip", "w") as zf:
        zf.writestr("../../escaped.log", (RUN / "console.log").read_bytes())
    return run


@pytest.mark.parametrize("follow", [False, True], ids=["default", "follow-symlinks"])
def test_input_tree_is_never_modified(run_copy: Copy, tmp_path: Path, follow: bool) -> None:
    run = damaged_tree(run_copy())
    out = tmp_path / "out"
    out.mkdir()
    before = tree_digest(run)
    args: list[str | Path] = ["analyze", run, "-f", "text,json,html,sarif,github,junit", "-o", f"{out}/"]
    result = cli(*args, *(["--follow-symlinks"] if follow else []), timeout=120)
    assert result.rc in (0, 1), result.stderr
    assert tree_digest(run) == before
    assert len(list(out.iterdir())) == 6


def test_write_atomic_failure_keeps_the_old_report(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text('{"old": true}')
    with pytest.raises(UnicodeEncodeError):
        write_atomic(report, '{"new": "\ud800"}')  # fails half-way through writing the temp file
    assert report.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    with pytest.raises(OutputError, match="does not exist"):
        write_atomic(tmp_path / "missing" / "report.json", "{}")


def test_write_atomic_readers_never_see_a_partial_file(tmp_path: Path) -> None:
    report = tmp_path / "report.txt"
    versions = ["a" * (1 << 20), "b" * (1 << 20)]
    write_atomic(report, versions[0])
    seen: set[str] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            text = report.read_text()
            seen.add("ok" if text in versions else f"partial ({len(text)} chars)")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(60):
            write_atomic(report, versions[i % 2])
    finally:
        done.set()
        reader.join()
    assert seen == {"ok"}
    assert [p.name for p in tmp_path.iterdir()] == ["report.txt"]


def test_ctrl_c_exits_130_and_leaves_no_report(run_copy: Copy, tmp_path: Path) -> None:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to see when the analysis is reading its input")
    run = run_copy()
    big = run / RANK1 / "stdout.log"
    big.write_bytes(big.read_bytes() * 40_000)  # ~40 MB of real lines: tens of seconds of analysis
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "logscope", "analyze", str(run), "-o", str(out / "report.json"), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    reading = False
    while not reading and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            reading = any(
                os.readlink(f"/proc/{proc.pid}/fd/{fd}") == str(big) for fd in os.listdir(f"/proc/{proc.pid}/fd")
            )
        except OSError:
            continue
    assert reading, "the analysis never opened the big log"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr.strip() == "logscope: interrupted"
    assert list(out.iterdir()) == []  # neither the report nor a temp file


def test_ctrl_c_at_the_terminal_prints_no_traceback_from_the_helper_process(run_copy: Copy) -> None:
    """A terminal's Ctrl-C goes to the whole foreground process group: the second reader (events.helper),
    started on inputs of 128 MB and more, must not print its own KeyboardInterrupt traceback."""
    from logscope.events.helper import PARALLEL_MIN_BYTES, _cores

    if _cores() < 2 or not Path("/proc/self/task").is_dir():
        pytest.skip("the helper process starts only on two or more cores; needs /proc to find it")
    run = run_copy()
    for rank in (RANK0, RANK1):  # two sources of 65 MB: over the helper's threshold
        log = run / rank / "stdout.log"
        line = log.read_bytes()
        log.write_bytes(line * (PARALLEL_MIN_BYTES // 2 // len(line) + 1))
    proc = subprocess.Popen(
        [sys.executable, "-m", "logscope", "analyze", str(run), "--format", "json", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        start_new_session=True,  # its own process group, as a shell gives a foreground job
    )
    deadline = time.monotonic() + 60
    children = ""
    while not children and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().strip()
    assert children, "the helper process never started"
    time.sleep(1.0)  # both processes are importing or reading now
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip() == "logscope: interrupted"
    for pid in children.split():  # and the helper is gone
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


# ---------------------------------------------------------------------------------------- the package itself
UNSAFE = {
    "yaml.load(": regex.compile(r"\byaml\.(?:load|load_all|unsafe_load|full_load)\("),
    "an unsafe YAML Loader": regex.compile(r"Loader\s*=\s*yaml\.(?!SafeLoader\b|CSafeLoader\b)"),
    "eval(": regex.compile(r"(?<![\w.])eval\("),
    "exec(": regex.compile(r"(?<![\w.])exec\("),
    "shell=True": regex.compile(r"shell\s*=\s*True"),
    "os.system": regex.compile(r"\bos\.(?:system|popen)\("),
    "pickle": regex.compile(r"\bpickle\.loads?\("),
}


def test_no_unsafe_calls_in_the_package() -> None:
    sources = sorted((REPO / "logscope").rglob("*.py"))
    assert len(sources) > 20
    found = [
        f"{p.relative_to(REPO)}:{n}: {what}"
        for p in sources
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        for what, pattern in UNSAFE.items()
        if pattern.search(line.split("#", 1)[0])
    ]
    assert found == []
    # The check itself catches what it is for.
    assert UNSAFE["yaml.load("].search("data = yaml.load(text)") and UNSAFE["eval("].search("x = eval(s)")
    assert not UNSAFE["eval("].search("pl.element().eval(expr)") and not UNSAFE["eval("].search("evaluate(r)")


def test_the_yaml_loader_constructs_no_python_objects() -> None:
    # The rule and catalogue loader: plain data loads, a python/object tag is refused, never executed.
    assert safeyaml.load("id: LS101\nlimit: 3\n") == {"id": "LS101", "limit": 3}
    with pytest.raises(yaml.YAMLError):
        safeyaml.load("!!python/object/apply:os.getpid []\n")


PAYLOADS = [b'<script>alert("logscope")</script>', b'"><img src=x onerror=alert(1)>', b"javascript:alert(2)"]


def test_html_report_escapes_log_text(run_copy: Copy, tmp_path: Path) -> None:
    run = run_copy()
    log = run / RANK0 / "stderr.log"
    log.write_bytes(log.read_bytes().replace(GLOO_LINE, GLOO_LINE + b" " + b" ".join(PAYLOADS)))
    report = tmp_path / "report.html"
    result = cli("analyze", run, "-o", report)
    assert result.rc in (0, 1), result.stderr
    page = report.read_text()
    assert "&lt;script&gt;alert(" in page  # the line is shown, as text
    assert '<script>alert("logscope")' not in page
    assert "<img src=x" not in page
    assert 'href="javascript:' not in page and "href='javascript:" not in page


# Terminal control sequences a log line can carry: set the window title (OSC 0), plant a hyperlink (OSC 8),
# reset the terminal (RIS).
TERMINAL_PAYLOAD = b"\x1b]0;retitled\x07\x1b]8;;http://example.invalid/\x1b\\click\x1b]8;;\x1b\\\x1bc"


def test_text_report_prints_no_terminal_controls_from_logs(run_copy: Copy) -> None:
    run = run_copy()
    log = run / RANK0 / "stderr.log"
    # Right after "RuntimeError: ", so the evidence line shown in the text report holds it.
    log.write_bytes(log.read_bytes().replace(b"RuntimeError: [", b"RuntimeError: " + TERMINAL_PAYLOAD + b"["))
    result = cli("analyze", run, "-f", "text")
    assert result.rc in (0, 1), result.stderr
    assert "RuntimeError: " in result.stdout and "retitled" in result.stdout  # the line is shown ...
    assert not regex.search(r"[\x00-\x08\x0b-\x1f\x7f]", result.stdout)  # ... with no control character left
