"""The Flight Recorder part of the reports: the hung collective and a per-rank table of the last collectives.

Both views read the diagnosis' `flight_recorder` object (align/flight.py `to_json`), never the dumps: every string
in it came from an untrusted file, so the text view escapes it like log text and the HTML view hands it to the
autoescaped template only.
"""

from __future__ import annotations

from typing import Any

TEXT_ENTRIES = 3  # per rank in the terminal; the HTML table shows every entry the JSON carries
MAX_STACK = 12


def short_op(op: str) -> str:
    return op.split(":", 1)[-1]


def entry_text(e: dict[str, Any]) -> str:
    return f"{e['seq']} {short_op(str(e['op']))} {e['state']}"


def logs_text(logs: dict[str, Any] | None) -> str:
    """How a rank's logs say it ended, in a few words."""
    if not logs or logs.get("status") in (None, "absent"):
        return "no logs"
    parts = [] if logs["status"] == "visible" else [str(logs["status"])]
    if logs.get("exit_code") is not None:
        parts.append(f"exit {logs['exit_code']}" + (f" {logs['signal']}" if logs.get("signal") else ""))
    if logs.get("ended"):
        parts.append("printed its end-of-training line")
    if logs.get("log_seq_enqueued") is not None or logs.get("log_seq_completed") is not None:
        enq, done = logs.get("log_seq_enqueued"), logs.get("log_seq_completed")
        parts.append(f"log SeqNum {'' if enq is None else enq}/{'' if done is None else done}")
    return ", ".join(parts) or "visible"


def rank_rows(fr: dict[str, Any], entries: int | None = None) -> list[dict[str, str]]:
    """One row per rank: its dump, its last entries of the hung group, its pg_status, what its logs say (the
    terminal shows the dump's file name and its last `entries` entries)."""
    rows = []
    for r in fr.get("ranks", []):
        last = r.get("last_entries") or []
        status = r.get("pg_status") or {}
        if r.get("dump"):
            dump = str(r["dump"]) if entries is None else str(r["dump"]).rsplit("/", 1)[-1].rsplit("!", 1)[-1]
            shown = last if entries is None else last[-entries:]
            collectives = "; ".join(entry_text(e) for e in shown) or "(no entries)"
            pg = f"{_num(status.get('enqueued'))}/{_num(status.get('started'))}/{_num(status.get('completed'))}"
        else:
            dump = "no dump"
            joined = r.get("joined_up_to_seq")
            collectives = f"(peers completed SeqNum {joined} with it)" if joined is not None else ""
            pg = ""
        rows.append(
            {
                "rank": str(r["rank"]),
                "dump": dump,
                "collectives": collectives,
                "pg": pg,
                "logs": logs_text(r.get("logs")),
            }
        )
    return rows


def _num(value: Any) -> str:
    return "" if value is None else str(value)


def hang_text(fr: dict[str, Any]) -> str | None:
    hangs = fr.get("hangs") or []
    if not hangs:
        return None
    h = hangs[0]
    culprits = ", ".join(map(str, h["culprit_ranks"])) or "unknown"
    states = ", ".join(f"{r}: {s}" for r, s in h["states"].items())
    return f"hung: {h['op']} SeqNum {h['seq']} of pg {h['pg']} ({states}); waiting for rank(s) {culprits}"


def html_view(fr: dict[str, Any] | None) -> dict[str, Any] | None:
    """The HTML section's view model, or None when the run left no dumps."""
    if not fr:
        return None
    hangs = fr.get("hangs") or []
    h = hangs[0] if hangs else None
    return {
        "dumps": len(fr.get("dumps") or []),
        "without_dump": ", ".join(map(str, fr.get("ranks_without_dump") or [])),
        "hang": hang_text(fr),
        "reason": h["reason"] if h else None,
        "stack": (h.get("stack") or [])[:MAX_STACK] if h else [],
        "mismatches": [
            f"SeqNum {m['seq']} of pg {m['pg']}: {m['what']} differs ("
            + ", ".join(f"rank {r}: {v}" for r, v in m["per_rank"].items())
            + ")"
            for m in (fr.get("mismatches") or [])[:10]
        ],
        "headers": ["rank", "dump", "last collectives (SeqNum op state)", "pg_status enq/started/done", "logs"],
        "rows": [[row["rank"], row["dump"], row["collectives"], row["pg"], row["logs"]] for row in rank_rows(fr)],
        "truncated": [d["path"] for d in fr.get("dumps") or [] if d.get("truncated")],
    }
