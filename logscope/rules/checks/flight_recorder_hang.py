"""The check `flight_recorder_hang`, behind LS219 (rules/LS219_flight_recorder_hang.yaml): the collective that the
Flight Recorder dumps say hung, and who it waited for.

Its evidence is the hung collective's entry in each rank's dump, plus, for a member that left no dump, the last
line of that rank's logs.
"""

from __future__ import annotations

from typing import Any

from logscope.align.flight import FlightReport, Hang
from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.flight_evidence import entry_row, pg_text
from logscope.rules.checks.stack_dumps import SYNC_FUNCTIONS
from logscope.vocab import Event


@check("flight_recorder_hang")
def flight_recorder_hang(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
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
        "fr_pg": pg_text(hang.pg, hang.pg_desc),
        "fr_states": states or "no dumped rank issued it",
        # "rank(s) 3 never issued it", or, where the dumps name nobody, the reason alone
        "fr_who": f"rank(s) {', '.join(map(str, hang.culprits))} {hang.reason}" if hang.culprits else hang.reason,
        "fr_dumps": len(report.dumps),
        "fr_details": f" Ranks without a dump — {_without_dump_text(report, hang)}." if hang.without_dump else "",
    }
    # Sure when the dumps name the culprit outright: a rank whose buffer ends before the collective, the group's
    # only member, or the one member without a dump when every other member issued it. Less sure by elimination
    # among several ranks without a dump; least when the dumps name nobody.
    alone = hang.culprits == hang.members or (len(hang.without_dump) == 1 and hang.culprits == hang.without_dump)
    factor = 1.0 if hang.culprits and (hang.never_issued or alone) else 0.85 if hang.culprits else 0.6
    hit = Hit(
        rows,
        set(hang.entries) | set(hang.never_issued),
        culprits=hang.culprits,
        values=values,
        confidence_factor=factor,
    )
    if hang.skipped:
        hit.category = "collective_mismatch"  # the ranks called different collectives: a hang is only its symptom
    elif _in_the_initial_sync(hang):
        hit.category = "missing_sync"  # the hung collective is the framework's parameter sync (DDP's constructor)
    return hit


def _in_the_initial_sync(hang: Hang) -> bool:
    """The Python stack that issued the hung collective runs through a framework's initial parameter sync."""
    return any(f.name in SYNC_FUNCTIONS for e in hang.entries.values() for f in e.frames)


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
