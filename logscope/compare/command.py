"""The `scan` and `diff` commands (added to the main typer app by `register`).

Exit codes: 0 when the command did its work (for `scan`, even when some runs could not be analysed: they are
rows of the table), 2 on a tool error (missing input, unwritable output, bad option), with one line on stderr.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from logscope.analysis import analyze
from logscope.errors import LogscopeError
from logscope.outputs import write_atomic

TOOL_ERROR = 2
# Width for output that is not a terminal (CI logs, files): rich would otherwise fold tables at 80 columns.
LOG_WIDTH = 160


def register(app: typer.Typer) -> None:
    app.command("scan")(scan_command)
    app.command("diff")(diff_command)


def _stdout() -> Console:
    console = Console()
    if not console.is_terminal:
        console = Console(width=LOG_WIDTH)
    return console


def _fail(command: str, error: LogscopeError) -> typer.Exit:
    typer.echo(f"logscope {command}: {error}", err=True)
    return typer.Exit(TOOL_ERROR)


def scan_command(
    folder: Annotated[
        str,
        typer.Argument(
            help="Folder of runs (each subfolder or archive is one run): a path or an fsspec URL (s3://, gs://, file://)."
        ),
    ],
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the table of runs here (.parquet or .csv).")
    ] = None,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra folder of YAML rules (repeatable).")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help="Worker processes (default: 2, or 1 on one core); not with --ray."),
    ] = None,
    ray: Annotated[
        bool, typer.Option("--ray", help="Run the analyses as Ray tasks (fleet extra; docs/fleet.md).")
    ] = False,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Ray cluster to use (auto, ray://head:10001, host:6379); implies --ray."),
    ] = None,
    storage_option: Annotated[
        list[str] | None,
        typer.Option("--storage-option", help="key=value for the URL's fsspec filesystem (repeatable)."),
    ] = None,
) -> None:
    """Analyse many runs (CI history) in parallel: which failures recur, on which nodes/GPUs, since when."""
    from logscope.compare import fleet, scan  # import polars: not on every start of the command line
    from logscope.rules.loader import load_rules

    stderr = Console(stderr=True)
    try:
        if out is not None:
            scan.check_table_path(out)
        rules_dirs = [*(rules or [])]
        load_rules(rules_dirs)  # a bad rule file is a tool error (exit 2), not an error on every run
        if jobs is not None and (ray or ray_address):
            raise LogscopeError("--jobs sizes the local pool of processes; with --ray, Ray uses the cluster's CPUs")
        plan = fleet.plan_scan(folder, fleet.parse_storage_options(storage_option or []))
        runs = plan.runs
        if not runs:
            raise LogscopeError(f"{folder}: no runs found (no subfolders or archives)")
        workers = min(jobs or 2, os.cpu_count() or 1)
        with Progress(
            TextColumn("scanning"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}", markup=False),  # run names are file names, not markup
            console=stderr,
            transient=True,
        ) as progress:
            task = progress.add_task("scan", total=len(runs), last="")

            def advance(row: dict[str, Any]) -> None:
                progress.update(task, advance=1, last=f"{row['run']}: {row['verdict'] or 'unreadable'}")

            if ray or ray_address:
                table = fleet.scan_with_ray(runs, rules_dirs, advance, plan.worker, address=ray_address)
            else:
                table = scan.scan_runs(runs, rules_dirs, advance, plan.worker, max_workers=workers)
        if out is not None:
            scan.write_table(table, out)
    except LogscopeError as exc:
        raise _fail("scan", exc) from None
    console = _stdout()
    for part in scan.summary_renderables(table):
        console.print(part)
    if out is not None:
        console.print(Text(f"table: {out} ({table.height} runs)"))


def diff_command(
    run_a: Annotated[Path, typer.Argument(help="The reference run (folder, log file or archive).")],
    run_b: Annotated[Path, typer.Argument(help="The run to compare with it.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON instead of text.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Also write the comparison as an HTML page.")] = None,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra folder of YAML rules (repeatable).")
    ] = None,
) -> None:
    """What changed between two runs: world size, versions, NCCL env, config, throughput, divergence."""
    from logscope.compare import diff  # imports polars and jinja2: not on every start of the command line

    try:
        rules_dirs = [*(rules or [])]
        comparison = diff.diff_runs(analyze(run_a, rules_dirs=rules_dirs), analyze(run_b, rules_dirs=rules_dirs))
        if html is not None:
            write_atomic(html, diff.render_html_page(comparison))
    except LogscopeError as exc:
        raise _fail("diff", exc) from None
    if as_json:
        typer.echo(json.dumps(comparison, indent=2, ensure_ascii=False))
        return
    console = _stdout()
    for part in diff.text_renderables(comparison):
        console.print(part)
