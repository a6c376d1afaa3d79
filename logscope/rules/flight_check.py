"""The check behind the Flight Recorder rule: the collective the dumps say hung, and who it waited for.

Its evidence is the dumps' entries themselves, one per rank (the file and the entry's position in it, beside the
log lines of the other findings), plus, for a member that left no dump, the last line of that rank's logs.
"""

from __future__ import annotations

from typing import Any

from logscope.align.flight import FlightReport, Hang, numel, op_name
from logscope.ingest.flight_recorder import FlightEntry
from logscope.rules.api import API_OPTYPE, Context, Hit, Rule, check

# Evidence rows of a dump are not lines of a log: their source ids lie below every real one.
FIRST_DUMP_SID = -1_000_000


def entry_row(report: FlightReport, rank: int, e: FlightEntry) -> dict[str, Any]:
    """An event row for one dump entry: the shape the engine reads evidence and the collective from."""
    dump = report.dump_of(rank)
    path = dump.path if dump else "?"
    sizes = numel(e.input_sizes)
    text = (
        f"Flight Recorder entry {e.index} (record_id {e.record_id}): {e.op} SeqNum {e.seq} in process group "
        f"{e.pg} ({e.pg_desc}), input {e.input_sizes} {'/'.join(e.input_dtypes)}, state {e.state}"
    )
    return {
        "sid": FIRST_DUMP_SID - report.dumps.index(dump) if dump else FIRST_DUMP_SID,
        "source": path,
        "line": e.index + 1,  # 1-based position in the dump's entry list
        "rank": rank,
        "attempt": None,
        "kind": "flight_recorder_entry",
        "level": "error",
        "phase": "fail",
        "text": text,
        "op": API_OPTYPE.get(op_name(e), op_name(e).upper()),
        "seq": e.seq,
        "numel_in": sizes,
        "numel_out": numel(e.output_sizes),
        "timeout_ms": e.timeout_ms,
        "pg": e.pg,
        "ts": None,
        "ts_text": None,
        "tee_lrank": None,
        "node": None,
        "_f": {"dtype": e.input_dtypes[0] if e.input_dtypes else None},
    }


def _without_dump_text(report: FlightReport, hang: Hang) -> str:
    """What the logs and the peers' dumps say about the members that left no dump."""
    parts = []
    for rank in hang.without_dump:
        view = report.log_view.get(rank, {})
        how = []
        if view.get("status") in (None, "absent", "hidden"):
            how.append("no log lines of its own either")
        else:
            if view.get("ended"):
                how.append("its log reached its end-of-training line")
            if view.get("exit_code") is not None:
                how.append(f"exit {view['exit_code']}" + (f" ({view['signal']})" if view.get("signal") else ""))
            if view.get("log_seq") is not None:
                how.append(f"its log's last SeqNum {view['log_seq']}")
        joined = report.joined_up_to.get(rank)
        if joined is not None:
            how.append(f"its peers completed SeqNum {joined} with it")
        parts.append(f"rank {rank}: " + ", ".join(how or ["nothing more is known"]))
    return "; ".join(parts)


@check("flight_recorder_hang")
def flight_recorder_hang(rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]) -> Hit | None:
    report = ctx.aligned.flight
    if report is None or not report.hangs:
        return None
    hang = report.hangs[0]
    rows = [entry_row(report, rank, e) for rank, e in hang.entries.items()]
    # A member without a dump: its last log line is the evidence of how it left.
    for rank in hang.without_dump:
        last = ctx.states[rank].last_event if rank in ctx.states else None
        if last is not None:
            rows.append(last)
    states = ", ".join(f"rank {r}: {s}" for r, s in hang.states.items())
    values = {
        "fr_op": hang.op,
        "fr_seq": hang.seq,
        "fr_pg": _pg_text(hang.pg, hang.pg_desc),
        "fr_states": states or "no dumped rank issued it",
        "fr_reason": hang.reason,
        "fr_dumps": len(report.dumps),
        "fr_details": f" Ranks without a dump — {_without_dump_text(report, hang)}." if hang.without_dump else "",
    }
    # Sure when the dumps name the culprit outright: a rank whose buffer ends before the collective, the group's
    # only member, or the one member without a dump when every other member issued it. Less sure by elimination
    # among several ranks without a dump; least when the dumps name nobody.
    alone = hang.culprits == hang.members or (len(hang.without_dump) == 1 and hang.culprits == hang.without_dump)
    factor = 1.0 if hang.culprits and (hang.never_issued or alone) else 0.85 if hang.culprits else 0.6
    return Hit(
        rows,
        set(hang.entries) | set(hang.never_issued),
        culprits=hang.culprits,
        values=values,
        confidence_factor=factor,
    )


@check("flight_recorder_mismatch")
def flight_recorder_mismatch(
    rule: Rule, ctx: Context, events: list[dict[str, Any]], params: dict[str, Any]
) -> Hit | None:
    """The first SeqNum at which the dumps show ranks issuing different collectives (op, sizes or dtypes)."""
    report = ctx.aligned.flight
    if report is None or not report.mismatches:
        return None
    first = min(report.mismatches, key=lambda m: (m.pg != "0", m.seq))
    same = [m for m in report.mismatches if (m.pg, m.seq) == (first.pg, first.seq)]
    rows = [entry_row(report, rank, e) for rank, e in first.entries.items()]
    rows.sort(key=lambda r: r["rank"] not in first.culprits)
    return Hit(
        rows,
        set(first.entries),
        culprits=first.culprits,
        values={
            "fr_seq": first.seq,
            "fr_pg": _pg_text(first.pg, next(iter(first.entries.values())).pg_desc),
            "fr_differences": "; ".join(
                f"{m.what}: " + ", ".join(f"rank {r} {v}" for r, v in sorted(m.per_rank.items())) for m in same
            ),
        },
        confidence_factor=1.0 if first.culprits else 0.7,
    )


def _pg_text(pg: str, desc: str) -> str:
    return f"{pg} ({desc})" if desc else pg
