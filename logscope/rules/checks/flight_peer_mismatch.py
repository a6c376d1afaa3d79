"""The check `flight_peer_mismatch`, behind LS221 (rules/LS221_flight_peer_mismatch.yaml): point-to-point ops
pending in the Flight Recorder dumps whose other end no peer posted; the rank every unmatched op involves sent to,
or received from, the wrong peer."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.flight_evidence import entry_row
from logscope.vocab import Event


@check("flight_peer_mismatch")
def flight_peer_mismatch(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Sends no rank receives and receives no rank sends to, with the rank they all involve."""
    report = ctx.aligned.flight
    if report is None or report.peer_mismatch is None:
        return None
    found = report.peer_mismatch
    rows = [entry_row(report, rank, e) for rank, e in found.unmatched]
    rows.sort(key=lambda r: r["rank"] not in found.culprits)
    return Hit(
        rows,
        {rank for rank, _ in found.unmatched},
        culprits=found.culprits,
        values={"unmatched": "; ".join(f"rank {rank}: {e.op}" for rank, e in found.unmatched)},
        confidence_factor=1.0 if found.culprits else 0.7,
    )
