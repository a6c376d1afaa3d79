"""The CLI contract: exit codes, formats, one clear line on bad input, python -m logscope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

FAILING = "fixtures/real/runs/03_skip_allreduce_rank1_stall_gloo_timeout"
HEALTHY = "fixtures/real/runs/01_healthy_ws2"
ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "logscope", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_exit_codes() -> None:
    assert run("analyze", HEALTHY, "-q").returncode == 0
    failing = run("analyze", FAILING, "-q")
    assert failing.returncode == 1 and "culprit rank(s): 1" in failing.stdout
    missing = run("analyze", "no/such/dir")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().count("\n") == 0 and "no such file or folder" in missing.stderr


def test_fail_on_threshold() -> None:
    recovered = "fixtures/real/runs/17_max_restarts_1_recovered"
    assert run("analyze", recovered, "-q").returncode == 0  # a recovered restart is a warning
    assert run("analyze", recovered, "-q", "--fail-on", "warning").returncode == 1


def test_json_to_stdout_and_files(tmp_path: Path) -> None:
    out = run("analyze", FAILING, "--format", "json")
    d = json.loads(out.stdout)
    assert d["schema"] == "logscope/diagnosis/v1" and d["verdict"]["culprit_ranks"] == [1]
    target = tmp_path / "d.json"
    assert run("analyze", FAILING, "-o", str(target)).returncode == 1
    assert json.loads(target.read_text())["verdict"]["category"] == "collective_timeout"
    assert not list(tmp_path.glob(".*.tmp"))


def test_output_folder_is_created_each_file_is_named_and_readable_by_teammates(tmp_path: Path) -> None:
    out = tmp_path / "reports" / "run-1"
    r = run("analyze", FAILING, "--format", "json,html", "-o", f"{out}/")
    assert r.returncode == 1
    written = sorted(p.name for p in out.iterdir())
    assert written == ["logscope.html", "logscope.json"]
    for name in written:
        assert f"logscope: wrote {name.split('.')[1]} to {out / name}" in r.stderr
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~_umask()
    quiet = run("analyze", FAILING, "-o", str(tmp_path / "new" / "d.json"), "-q")
    assert quiet.returncode == 1 and quiet.stderr == "" and (tmp_path / "new" / "d.json").is_file()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_empty_folder_and_folder_without_logs(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run("analyze", str(empty))
    assert r.returncode == 2 and "nothing that looks like a log" in r.stderr
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    assert run("analyze", str(tmp_path / "code")).returncode == 2


def test_text_that_is_not_a_log_is_refused_and_an_unknown_log_format_is_not(tmp_path: Path) -> None:
    # Not logs: a shopping list, this project's own README and pyproject as text files.
    (tmp_path / "shopping.txt").write_text("milk\neggs, a dozen\nbread\n2 apples\ncoffee beans\n")
    (tmp_path / "readme.txt").write_text((ROOT / "README.md").read_text())
    (tmp_path / "pyproject.txt").write_text((ROOT / "pyproject.toml").read_text())
    for name in ("shopping.txt", "readme.txt", "pyproject.txt"):
        r = run("analyze", str(tmp_path / name))
        assert r.returncode == 2 and "nothing that looks like a training or launcher log" in r.stderr, name
        assert "Traceback" not in r.stderr
    # A real log in a format no signature names (HF Trainer's metric dicts, deepspeedai/DeepSpeed#4781) is read.
    r = run("analyze", "fixtures/cases/r7_deepspeed_hf_trainer_loss_progress_4781", "--format", "json")
    assert r.returncode in (0, 1) and json.loads(r.stdout)["verdict"]["category"]


def test_rules_kinds_lists_what_a_rule_may_match() -> None:
    """The loader's "unknown event kind" error points here: every kind, synthesized ones too, with its tags."""
    r = run("rules", "kinds")
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
    assert rows["child_failure"][0] == "made" and "torchrun_failure" in rows["child_failure"]
    assert rows["nccl_watchdog_timeout"][0] == "error" and "timeout" in rows["nccl_watchdog_timeout"]
    tagged = run("rules", "kinds", "--tag", "end")
    assert {line.split()[0] for line in tagged.stdout.splitlines()} == {
        kind for kind, words in rows.items() if "end" in words
    }
    assert run("rules", "kinds", "--tag", "no_such_tag").returncode == 2


@pytest.mark.parametrize("args", [["rules", "list"], ["rules", "show", "LS101"], ["rules", "lint"]])
def test_rules_commands(args: list[str]) -> None:
    r = run(*args)
    assert r.returncode == 0, r.stderr
    if args[1] == "show":
        assert "What it detects" in r.stdout and "Why it matters" in r.stdout and "Example" in r.stdout


def test_rules_lint_reports_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = (
        (REPO / "rules/LS101_collective_timeout.yaml")
        .read_text()
        .replace("severity: error", "severity: error\nbogus: 1")
    )
    bad.write_text(text)
    r = run("rules", "lint", str(bad))
    assert r.returncode == 2 and f"{bad}:" in r.stderr and "unknown key 'bogus'" in r.stderr
    assert r.stderr.split(":")[1].isdigit()


def test_user_rules_folder_adds_a_rule(tmp_path: Path) -> None:
    rule = (REPO / "rules/LS951_single_rank.yaml").read_text().replace("id: LS951", "id: USR001")
    (tmp_path / "r.yaml").write_text(rule)
    d = json.loads(
        run(
            "analyze", "fixtures/real/runs/20_silent_single_rank_nproc1", "--format", "json", "--rules", str(tmp_path)
        ).stdout
    )
    assert {"LS951", "USR001"} <= {f["rule"] for f in d["findings"]}


def test_docs_rules_md_is_generated_from_the_rules() -> None:
    from logscope.rules.docs import rules_markdown

    assert (REPO / "docs" / "rules.md").read_text() == rules_markdown(), (
        "regenerate: python -m logscope.rules.docs > docs/rules.md"
    )


def test_version_flag_and_help_list_every_choice() -> None:
    from logscope import __version__

    assert run("--version").stdout.strip() == __version__
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    helped = subprocess.run(
        [sys.executable, "-m", "logscope", "analyze", "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    words = " ".join(helped.stdout.replace("│", " ").split())
    assert "text, json, html, sarif, github, junit" in words
    assert "info, note, warning, error, critical" in words


# What `analyze` of a small run to text must not import: each costs tens of milliseconds at every start
# (benchmarks/startup.py), and none is needed for it.
NOT_FOR_A_TEXT_REPORT = (
    "pydantic",
    "jinja2",
    "torch",
    "rich",  # the text report lays itself out (report/text.py)
    "logscope.compare",
    "logscope.replay",
    "logscope.report.html",
)


def test_a_text_report_of_a_small_run_imports_only_what_it_needs() -> None:
    code = (
        "import contextlib, io, sys\n"
        f"sys.argv = ['logscope', 'analyze', {FAILING!r}]\n"
        "from logscope.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()\n"
        f"print(sorted(m for m in sys.modules if m.startswith({NOT_FOR_A_TEXT_REPORT!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("command", "collects"), [("analyze", False), ("rules", True)])
def test_a_one_shot_command_runs_without_the_cyclic_collector_and_skips_it_at_exit(
    command: str, collects: bool
) -> None:
    # The collector would walk polars' and the analysis' objects after the analysis and again at exit (~60 ms of
    # a small run). Another command (rules, scan, which may go on for long) keeps it: only its exit is spared.
    argv = ["logscope", "analyze", FAILING] if command == "analyze" else ["logscope", "rules", "list"]
    code = (
        "import contextlib, gc, io, sys\n"
        f"sys.argv = {argv!r}\n"
        "from logscope.cli import main\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: collections.append(info) if phase == 'stop' else None)\n"
        "gc.collect()\n"
        "collections.clear()\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()\n"
        "print(len(collections) > 0, gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(collects), "True"]


def test_commands_registered_on_demand_still_run_and_are_listed_in_help() -> None:
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb"}
    helped = subprocess.run([sys.executable, "-m", "logscope", "--help"], capture_output=True, text=True, env=env)
    assert {"analyze", "scan", "diff", "replay", "rules", "version"} <= set(helped.stdout.replace("│", " ").split())
    diffed = run("diff", HEALTHY, FAILING)
    assert diffed.returncode in (0, 1) and "Traceback" not in diffed.stderr and diffed.stdout.strip()


def test_rules_show_renders_on_a_terminal_and_is_markdown_when_piped() -> None:
    import pty

    piped = run("rules", "show", "LS101").stdout
    assert piped.startswith("## LS101") and "**What it detects.**" in piped
    pid, fd = pty.fork()
    if pid == 0:  # the child: logscope on a terminal
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "logscope", "rules", "show", "LS101"])
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the terminal closed: the child is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.waitpid(pid, 0)
    shown = b"".join(chunks).decode(errors="replace")
    assert "What it detects." in shown
    assert "**What it detects.**" not in shown and "## LS101" not in shown


def test_text_report_names_hosts_clips_with_an_ellipsis_and_a_healthy_run_has_nothing_to_debug() -> None:
    from logscope.report.nodes import node_labels
    from logscope.report.text import clip

    healthy = run("analyze", HEALTHY, "-q").stdout
    assert "Next step W5 — Nothing to debug" in healthy and "Prove one GPU" not in healthy
    assert "logs/none_" not in healthy  # a single node's run folder is not a node name
    two_trees = run("analyze", "fixtures/rl/rsl_rl_crash_rank1", "-q").stdout
    assert "localhost (node0)" in two_trees and "localhost (node1)" in two_trees
    ranks = [
        {"rank": 0, "node": "a/logs/x", "host": "gpu-a"},
        {"rank": 1, "node": "b/logs/y", "host": "gpu-b"},
        {"rank": 2, "node": "b/logs/y", "host": None},
    ]
    assert node_labels(ranks) == ["gpu-a", "gpu-b", "b"]
    line = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE) ran for 1800017 ms"
    assert clip(line, 200) == line
    cut = clip(line, 60)
    assert len(cut) <= 60 and cut.endswith("…") and line.startswith(cut[:-1]) and line[len(cut) - 1] == " "
    assert clip("x" * 300, 150) == "x" * 149 + "…"  # no word boundary near: cut at the limit
