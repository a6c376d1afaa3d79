"""The check `flight_recorder_mismatch`, behind LS220 (rules/LS220_flight_recorder_mismatch.yaml): the first SeqNum
at which the Flight Recorder dumps show ranks issuing different collectives (op, sizes or dtypes)."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.flight_evidence import mismatch_place, mismatch_rows
from logscope.rules.checks.flight_skipped_sync import first_mismatch, skipped_sync
from logscope.vocab import Event


@check("flight_recorder_mismatch")
def flight_recorder_mismatch(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The first SeqNum at which the dumps show ranks issuing different collectives (op, sizes or dtypes)."""
    report = ctx.aligned.flight
    first = first_mismatch(report)
    # Nothing differs, or the culprits skipped the initial parameter broadcast (LS307's).
    if report is None or first is None or skipped_sync(report, first):
        return None
    same = [m for m in report.mismatches if (m.pg, m.seq) == (first.pg, first.seq)]
    return Hit(
        mismatch_rows(report, first),
        set(first.entries),
        culprits=first.culprits,
        values={
            **mismatch_place(first),
            "fr_differences": "; ".join(
                f"{m.what}: " + ", ".join(f"rank {r} {v}" for r, v in sorted(m.per_rank.items())) for m in same
            ),
        },
        confidence_factor=1.0 if first.culprits else 0.7,
    )
