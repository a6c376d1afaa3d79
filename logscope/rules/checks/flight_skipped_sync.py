"""The check `flight_skipped_sync`, behind LS307 (rules/LS307_flight_skipped_sync.yaml): at the first collective of
a process group the Flight Recorder dumps show every rank but the culprits in a broadcast (the initial parameter
sync) and the culprits already in another op: they skipped the sync. LS220 leaves this mismatch to it."""

from __future__ import annotations

from typing import Any

from logscope.align.flight import FlightReport, Mismatch, op_name
from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.flight_evidence import mismatch_place, mismatch_rows
from logscope.vocab import Event

# collective_seq_id of a group's first collective (torch counts from 0 in some versions, from 1 in others).
FIRST_SEQS = (0, 1)


def skipped_sync(report: FlightReport, m: Mismatch) -> bool:
    """The mismatch is the group's first collective, the ranks that kept the pattern broadcast there and the
    culprits issued something else."""
    if m.what != "op" or not m.culprits or m.seq not in FIRST_SEQS:
        return False
    seqs = [e.seq for d in report.dumps for e in d.entries if e.pg == m.pg and e.seq is not None]
    if not seqs or min(seqs) != m.seq:  # the ring buffer lost the group's start: no telling what came first
        return False
    ops = {rank: op_name(e) for rank, e in m.entries.items()}
    kept = [op for rank, op in ops.items() if rank not in m.culprits]
    return (
        bool(kept)
        and all(op == "broadcast" for op in kept)
        and all(ops[r] != "broadcast" for r in m.culprits if r in ops)
    )


def first_mismatch(report: FlightReport | None) -> Mismatch | None:
    """The mismatch the dumps show first: the default group's before the others', the lowest SeqNum (None where
    there are no dumps or they agree)."""
    if report is None or not report.mismatches:
        return None
    return min(report.mismatches, key=lambda m: (m.pg != "0", m.seq))


@check("flight_skipped_sync")
def flight_skipped_sync(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The culprits' first collective is not the broadcast of the initial parameters that every other rank issued."""
    report = ctx.aligned.flight
    first = first_mismatch(report)
    if report is None or first is None or not skipped_sync(report, first):
        return None
    culprit_ops = ", ".join(f"rank {r}: {op_name(first.entries[r])}" for r in first.culprits if r in first.entries)
    return Hit(
        mismatch_rows(report, first),
        set(first.entries),
        culprits=first.culprits,
        values={**mismatch_place(first), "culprit_ops": culprit_ops},
    )
