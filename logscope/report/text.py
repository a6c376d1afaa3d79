"""The terminal summary: verdict, culprit, next step, then one line per rank."""

from __future__ import annotations

import textwrap
import unicodedata
from collections.abc import Sequence

from logscope.model import Analysis
from logscope.report import flight
from logscope.report.github import printable
from logscope.report.nodes import node_labels
from logscope.verdict.calibration import calibration_sentence

# Plain text, laid out here: a report is read in a terminal, a CI log or a file, and a terminal library cost a
# small run ~40 ms of its ~0.45 s (import and layout) for two tables and some wrapping.
_COLUMN_GAP = "  "
_MIN_LAST_COLUMN = 12  # a table's last column (free text) is cut to fit the width, never below this


def render(analysis: Analysis, width: int = 110) -> str:
    d = analysis.diagnosis
    v = d["verdict"]
    out = _Text(width)
    culprit = ", ".join(map(str, v["culprit_ranks"])) or "—"
    out.say(
        f"{v['category']}  culprit rank(s): {culprit}  confidence {v['confidence']:.2f} ({calibration_sentence(v)})"
    )
    out.say(_text(v["summary"]))
    step = v["next_step"]
    out.say(f"\nNext step {step['id']} — {_text(step['title'])}")
    if step.get("detail"):
        out.say(f"  {_text(step['detail'])}")
    if step.get("command"):
        out.say(f"  $ {_text(step['command'])}", wrap=False)  # whole, to paste
    job = d["job"]
    out.say(
        f"\njob: world size {job['world_size'] or '?'}, {job['nnodes'] or '?'} node(s), {job['attempts']} attempt(s), "
        f"backend {job['backend'] or '?'}, framework {job['framework'] or '?'}"
        + (f", torch {job['torch_version']}" if job["torch_version"] else "")
        + (f", NCCL {job['nccl_version']}" if job["nccl_version"] else "")
    )
    if d["ranks"]:
        shown = d["ranks"][:64]
        nodes = node_labels(shown)
        rows = [
            (
                str(r["rank"]),
                _text(node),
                str(r["local_rank"] if r["local_rank"] is not None else ""),
                str(r["status"]),
                "" if r["exit_code"] is None else str(r["exit_code"]) + (f" {r['signal']}" if r["signal"] else ""),
                str(r["phase"] or ""),
                "" if r["last_iteration"] is None else str(r["last_iteration"]),
                f"{'' if r['last_seq_enqueued'] is None else r['last_seq_enqueued']}/"
                f"{'' if r['last_seq_completed'] is None else r['last_seq_completed']}",
                _text(str(r.get("last_event") or "")),
            )
            for r, node in zip(shown, nodes, strict=True)
        ]
        headers = ("rank", "node", "local", "status", "exit", "phase", "iter", "seq enq/done", "last event")
        out.table(headers, rows)
        if len(d["ranks"]) > len(shown):
            out.say(f"… {len(d['ranks']) - len(shown)} more ranks (see --format json or html)")
    if d.get("flight_recorder"):
        _flight_recorder(out, d["flight_recorder"])
    if d["findings"]:
        out.say("\nfindings")
        for f in d["findings"]:
            out.say(
                f"  {f['severity']:<8} {f['rule']} {_text(f['title'])} (ranks {', '.join(map(str, f['ranks'])) or '?'})"
            )
            if f["evidence"]:
                ev = f["evidence"][0]
                out.say(f"           {_text(ev['path'])}:{ev['line']}: {_text(clip(ev['text'], 150))}")
    out.say("\nchecklist  " + "  ".join(f"{c['id']} {c['status']}" for c in d["checklist"]))
    for note in d.get("notes", [])[:10]:
        out.say(f"note: {_text(note)}")
    return out.text()


def _flight_recorder(out: _Text, fr: dict[str, object]) -> None:
    """The Flight Recorder dumps: the collective that hung, then each rank's last entries beside its logs."""
    out.say(f"\nFlight Recorder  {len(fr.get('dumps') or [])} dump(s)")  # type: ignore[arg-type]
    hung = flight.hang_text(fr)
    if hung:
        out.say(f"  {_text(hung)}")
    headers = ("rank", "dump", f"last {flight.TEXT_ENTRIES} (SeqNum op state)", "pg enq/start/done", "logs")
    rows = [
        tuple(_text(row[k]) for k in ("rank", "dump", "collectives", "pg", "logs"))
        for row in flight.rank_rows(fr, flight.TEXT_ENTRIES)[:64]
    ]
    out.table(headers, rows)


class _Text:
    """Lines of at most `width` columns: prose wraps at spaces (a continued line keeps its indent; a word longer
    than the width, such as a path, is left whole), and a table's last column is cut to fit."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[str] = []

    def say(self, text: str, wrap: bool = True) -> None:
        if not wrap:
            self.lines.extend(text.split("\n"))
            return
        for line in text.split("\n"):
            indent = line[: len(line) - len(line.lstrip(" "))]
            wrapped = textwrap.wrap(
                line,
                self.width,
                subsequent_indent=indent,
                break_long_words=False,
                break_on_hyphens=False,
                replace_whitespace=False,
            )
            self.lines.extend(wrapped or [""])

    def table(self, headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
        widths = [max([_cells(h)] + [_cells(row[i]) for row in rows]) for i, h in enumerate(headers)]
        room = self.width - sum(widths[:-1]) - len(_COLUMN_GAP) * (len(widths) - 1)
        widths[-1] = min(widths[-1], max(room, _MIN_LAST_COLUMN, _cells(headers[-1])))
        for row in (headers, *rows):
            cells = [*row[:-1], clip(row[-1], widths[-1]) if _cells(row[-1]) > widths[-1] else row[-1]]
            padded = [cell + " " * (width - _cells(cell)) for cell, width in zip(cells, widths, strict=True)]
            self.lines.append(_COLUMN_GAP.join(padded).rstrip())

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def _cells(text: str) -> int:
    """Terminal columns `text` takes: a wide (CJK) character takes two."""
    if text.isascii():
        return len(text)
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def clip(text: str, limit: int) -> str:
    """At most `limit` characters; a longer text is cut at a word boundary where one is near, and ends in '…'."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space >= limit * 2 // 3 else cut).rstrip() + "…"


def _text(value: str) -> str:
    """Data for the terminal: escape sequences and control characters out (a log line must not retitle the
    terminal or plant a hyperlink)."""
    return printable(value)
