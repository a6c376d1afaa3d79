"""The command line: thin wiring from arguments to the pipeline and the reporters."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import stat
import sys
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from logscope import __version__
from logscope.errors import LogscopeError, OutputError
from logscope.vocab import SEVERITY_ORDER

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Post-mortem analysis of distributed training logs (torchrun, NCCL, gloo, Isaac Lab RL).",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print logscope's version and exit"),
    ] = False,
) -> None:
    """Post-mortem analysis of distributed training logs (torchrun, NCCL, gloo, Isaac Lab RL)."""


rules_app = typer.Typer(no_args_is_help=True, help="List, show, lint and test the rules.")
app.add_typer(rules_app, name="rules")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"logscope: {message}", err=True)
    return typer.Exit(2)


@app.command()
def analyze(
    path: Annotated[
        Path, typer.Argument(help="A torchrun --log_dir, a folder of node trees, a log file or an archive")
    ],
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-f", help="Comma-separated, any of: text, json, html, sarif, github, junit"),
    ] = None,
    output: Annotated[
        list[str] | None, typer.Option("--output", "-o", help="Output file (format from extension) or folder")
    ] = None,
    rules: Annotated[list[Path] | None, typer.Option("--rules", help="Folder of extra rules (repeatable)")] = None,
    fail_on: Annotated[
        str,
        typer.Option(
            "--fail-on", help="Exit 1 when a finding is at or above this severity: info, note, warning, error, critical"
        ),
    ] = "error",
    with_replay: Annotated[Path | None, typer.Option("--with-replay", help="Replay result JSON to embed")] = None,
    flight_recorder: Annotated[
        Path | None,
        typer.Option("--flight-recorder", help="Folder of Flight Recorder dumps (nccl_trace_rank_<N>, any prefix)"),
    ] = None,
    follow_symlinks: Annotated[
        bool, typer.Option("--follow-symlinks", help="Follow symlinks inside the input")
    ] = False,
    allow_output_in_input: Annotated[
        bool, typer.Option("--allow-output-in-input", help="Allow writing outputs inside the input tree")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar")] = False,
) -> None:
    """Analyse a run's logs: one verdict, the culprit rank(s), the next debugging step."""
    from logscope.analysis import analyze as run_analysis
    from logscope.report import FORMATS, format_for_path, renderer
    from logscope.report.write import plan_outputs, write_outputs

    if fail_on not in SEVERITY_ORDER:
        raise _fail(f"--fail-on must be one of {', '.join(SEVERITY_ORDER)}")
    formats = [f.strip() for f in fmt.split(",") if f.strip()] if fmt else []
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise _fail(f"unknown format {', '.join(unknown)} (choose from {', '.join(FORMATS)})")
    try:
        plan = plan_outputs(path, formats, output or [], allow_output_in_input, format_for_path)
        analysis = _run_with_progress(
            partial(run_analysis, flight_recorder=flight_recorder),
            path,
            rules or [],
            follow_symlinks,
            quiet or bool(plan.stdout_format != "text"),
        )
        if with_replay is not None:
            from logscope.replay.command import load_replay

            analysis.diagnosis["replay"] = load_replay(with_replay)
        write_outputs(plan, analysis, renderer, quiet)
    except LogscopeError as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        typer.echo("logscope: interrupted", err=True)
        raise typer.Exit(130) from None
    threshold = SEVERITY_ORDER[fail_on]
    failing = [f for f in analysis.diagnosis["findings"] if SEVERITY_ORDER[f["severity"]] >= threshold]
    raise typer.Exit(1 if failing else 0)


def _run_with_progress(run, path: Path, rules: list[Path], follow: bool, quiet: bool):  # type: ignore[no-untyped-def]
    """A progress bar only on inputs big enough to take more than a second, and only on a terminal."""
    total = _input_bytes(path)
    if quiet or total < 64 << 20 or not sys.stderr.isatty():
        return run(path, rules, follow)
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(), transient=True
    ) as bar:
        task = bar.add_task("reading logs", total=total)
        return run(path, rules, follow, progress=lambda n: bar.advance(task, n))


def _input_bytes(path: Path) -> int:
    """Total size for the progress bar; links are not followed (a symlink loop must not hang it), and the
    walk does not recurse (os.walk does in Python 3.11: 1000 nested folders raise RecursionError)."""
    from logscope.ingest.sources import walk

    try:
        if path.is_file():
            return path.stat().st_size
        total = 0
        for root, _, files in walk(str(path), follow_symlinks=False, onerror=lambda _: None):
            for name in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(root, name))
                    total += st.st_size if stat.S_ISREG(st.st_mode) else 0
        return total
    except OSError:
        return 0


@rules_app.command("list")
def rules_list(rules: Annotated[list[Path] | None, typer.Option("--rules", help="Extra rules folder")] = None) -> None:
    """One line per rule: id, category, severity, title."""
    from logscope.rules.loader import load_rules

    try:
        for rule in load_rules(rules or []):
            typer.echo(f"{rule.id}  {rule.category:<20} {rule.severity:<8} {rule.title}")
    except LogscopeError as exc:
        raise _fail(str(exc)) from None


@rules_app.command("kinds")
def rules_kinds(tag: Annotated[str | None, typer.Option("--tag", help="Only the kinds with this tag")] = None) -> None:
    """One line per event kind a rule can match: kind, level, tags."""
    from logscope.events.catalogue import TAGS, catalogue

    if tag is not None and tag not in TAGS:
        raise _fail(f"no tag {tag!r} (tags: {', '.join(TAGS)})")
    for kind, level, tags in catalogue().kind_rows(tag):
        typer.echo(f"{kind:<34} {level:<8} {' '.join(tags)}".rstrip())


@rules_app.command("show")
def rules_show(rule_id: str, rules: Annotated[list[Path] | None, typer.Option("--rules")] = None) -> None:
    """The rule's documentation: What it detects / Why it matters / Example."""
    from logscope.rules.docs import rule_markdown
    from logscope.rules.loader import load_rules

    try:
        found = [r for r in load_rules(rules or []) if r.id == rule_id.upper() or r.name == rule_id]
    except LogscopeError as exc:
        raise _fail(str(exc)) from None
    if not found:
        raise _fail(f"no rule {rule_id} (see `logscope rules list`)")
    text = rule_markdown(found[0])
    if sys.stdout.isatty():  # rendered on a terminal; raw Markdown when piped (into docs, a file, a pager)
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(text))
    else:
        typer.echo(text)


@rules_app.command("lint")
def rules_lint(
    paths: Annotated[list[Path] | None, typer.Argument(help="Rule files or folders (default: built-in)")] = None,
) -> None:
    """Validate rule files against the schema; exit 2 with file:line on the first problem of each file."""
    from logscope.rules.loader import BUILTIN_RULES, parse_rule

    files: list[Path] = []
    for p in paths or [BUILTIN_RULES]:
        files.extend(sorted(p.glob("*.y*ml")) if p.is_dir() else [p])
    bad = 0
    for f in files:
        try:
            parse_rule(f)
        except LogscopeError as exc:
            typer.echo(str(exc), err=True)
            bad += 1
    typer.echo(f"{len(files) - bad} rule(s) ok, {bad} with errors")
    raise typer.Exit(2 if bad else 0)


@rules_app.command("test")
def rules_test(rules: Annotated[list[Path] | None, typer.Option("--rules")] = None) -> None:
    """Run every rule's positive and negative cases (the same check as the test suite)."""
    from logscope.rules.testing import run_rule_tests

    try:
        results = run_rule_tests(rules or [])
    except LogscopeError as exc:
        raise _fail(str(exc)) from None
    failed = [r for r in results if not r.ok]
    for r in results:
        typer.echo(f"{'ok  ' if r.ok else 'FAIL'} {r.rule} {r.kind:<8} {r.path}" + (f"  ({r.why})" if not r.ok else ""))
    typer.echo(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    raise typer.Exit(1 if failed else 0)


@app.command()
def version() -> None:
    """Print logscope's version."""
    typer.echo(__version__)


# Commands whose modules cost a tenth of a second to import (polars tables, torch probing): registered only when
# the command line may need them, so that `analyze` of a small run pays nothing for them.
CORE_COMMANDS = frozenset({"analyze", "version", "rules"})
# Commands that do one thing and end the process: it needs no cyclic garbage collector (see `main`).
ONE_SHOT_COMMANDS = frozenset({"analyze", "version"})


def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _register_extra(argv: list[str]) -> None:
    if _command(argv) in CORE_COMMANDS:
        return
    from logscope.compare.command import register as register_compare
    from logscope.replay.command import register as register_replay

    register_replay(app)
    register_compare(app)


def main() -> None:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _register_extra(sys.argv[1:])
    if _command(sys.argv[1:]) in ONE_SHOT_COMMANDS:
        # One analysis, then the process ends. The cyclic collector would only walk the objects that polars' import
        # and the analysis leave, all of them young while the analysis ran without it: ~15 ms once it is back on,
        # of a small run's ~0.5 s on 2 cores. Objects are still freed by their reference counts.
        gc.disable()
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("logscope: interrupted", err=True)
        sys.exit(130)
    except OutputError as exc:
        typer.echo(f"logscope: {exc}", err=True)
        sys.exit(2)
    finally:
        # The interpreter's last collection at exit would walk every object once more (~45 ms once polars is
        # imported); the process is ending, and the OS takes its memory back whole.
        gc.freeze()
