"""The terminal summary: verdict, culprit, next step, then one line per rank."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from logscope.model import Analysis
from logscope.report import flight
from logscope.report.github import printable
from logscope.report.nodes import node_labels
from logscope.verdict.calibration import calibration_sentence

_COLOUR = {"healthy": "green", "single_rank": "yellow", "stall": "yellow"}
_STATUS = {"pass": "[green]pass[/]", "fail": "[red]fail[/]", "unknown": "[dim]unknown[/]"}


def render(analysis: Analysis, width: int = 110, color: bool = False) -> str:
    d = analysis.diagnosis
    v = d["verdict"]
    buf = io.StringIO()
    console = Console(
        file=buf, width=width, force_terminal=color, color_system="standard" if color else None, highlight=False
    )
    colour = _COLOUR.get(v["category"], "red")
    culprit = ", ".join(map(str, v["culprit_ranks"])) or "—"
    console.print(
        f"[bold {colour}]{v['category']}[/]  culprit rank(s): [bold]{culprit}[/]  confidence {v['confidence']:.2f}"
        f" ({calibration_sentence(v)})"
    )
    console.print(_text(v["summary"]))
    step = v["next_step"]
    console.print(f"\n[bold]Next step {step['id']}[/] — {_text(step['title'])}")
    if step.get("detail"):
        console.print(f"  {_text(step['detail'])}")
    if step.get("command"):
        console.print(f"  $ {_text(step['command'])}")
    job = d["job"]
    console.print(
        f"\njob: world size {job['world_size'] or '?'}, {job['nnodes'] or '?'} node(s), {job['attempts']} attempt(s), "
        f"backend {job['backend'] or '?'}, framework {job['framework'] or '?'}"
        + (f", torch {job['torch_version']}" if job["torch_version"] else "")
        + (f", NCCL {job['nccl_version']}" if job["nccl_version"] else "")
    )
    if d["ranks"]:
        table = Table(box=None, pad_edge=False, show_edge=False)
        for col in ("rank", "node", "local", "status", "exit", "phase", "iter", "seq enq/done", "last event"):
            table.add_column(col)
        shown = d["ranks"][:64]
        nodes = node_labels(shown)
        for r, node in zip(shown, nodes, strict=True):
            table.add_row(
                str(r["rank"]),
                _text(node),
                str(r["local_rank"] if r["local_rank"] is not None else ""),
                r["status"],
                "" if r["exit_code"] is None else str(r["exit_code"]) + (f" {r['signal']}" if r["signal"] else ""),
                str(r["phase"] or ""),
                "" if r["last_iteration"] is None else str(r["last_iteration"]),
                f"{'' if r['last_seq_enqueued'] is None else r['last_seq_enqueued']}/"
                f"{'' if r['last_seq_completed'] is None else r['last_seq_completed']}",
                _text(str(r.get("last_event") or "")),
            )
        console.print(table)
        if len(d["ranks"]) > len(shown):
            console.print(f"… {len(d['ranks']) - len(shown)} more ranks (see --format json or html)")
    if d.get("flight_recorder"):
        _flight_recorder(console, d["flight_recorder"])
    if d["findings"]:
        console.print("\n[bold]findings[/]")
        for f in d["findings"]:
            console.print(
                f"  [{'red' if f['severity'] in ('error', 'critical') else 'yellow'}]{f['severity']:<8}[/] "
                f"{f['rule']} {_text(f['title'])} (ranks {', '.join(map(str, f['ranks'])) or '?'})"
            )
            if f["evidence"]:
                ev = f["evidence"][0]
                console.print(f"           {_text(ev['path'])}:{ev['line']}: {_text(clip(ev['text'], 150))}")
    console.print("\n[bold]checklist[/]  " + "  ".join(f"{c['id']} {_STATUS[c['status']]}" for c in d["checklist"]))
    for note in d.get("notes", [])[:10]:
        console.print(f"[dim]note: {_text(note)}[/]")
    return buf.getvalue()


def _flight_recorder(console: Console, fr: dict[str, object]) -> None:
    """The Flight Recorder dumps: the collective that hung, then each rank's last entries beside its logs."""
    console.print(f"\n[bold]Flight Recorder[/]  {len(fr.get('dumps') or [])} dump(s)")  # type: ignore[arg-type]
    hung = flight.hang_text(fr)
    if hung:
        console.print(f"  {_text(hung)}")
    table = Table(box=None, pad_edge=False, show_edge=False)
    for col in ("rank", "dump", f"last {flight.TEXT_ENTRIES} (SeqNum op state)", "pg enq/start/done", "logs"):
        table.add_column(col)
    for row in flight.rank_rows(fr, flight.TEXT_ENTRIES)[:64]:
        table.add_row(*(_text(row[k]) for k in ("rank", "dump", "collectives", "pg", "logs")))
    console.print(table)


def clip(text: str, limit: int) -> str:
    """At most `limit` characters; a longer text is cut at a word boundary where one is near, and ends in '…'."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space >= limit * 2 // 3 else cut).rstrip() + "…"


def _text(value: str) -> str:
    """Data for the terminal: escape sequences and control characters out (a log line must not retitle the
    terminal or plant a hyperlink), rich markup escaped."""
    return escape(printable(value))
