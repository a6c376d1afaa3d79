"""The check `all_ranks_aborted`, behind LS103 (rules/LS103_all_ranks_aborted.yaml): every failed rank died of
SIGABRT with no traceback (ProcessGroupNCCL's watchdog tearing them down) and no watchdog timeout says why."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.failures import aborted_failures
from logscope.vocab import Event


@check("all_ranks_aborted")
def all_ranks_aborted(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Every failed rank was aborted with no traceback, and no watchdog timeout is in the logs."""
    failures = aborted_failures(ctx)
    if not failures or any(e["kind"] == "nccl_watchdog_timeout" for e in ctx.rows):
        return None
    ranks = {e["rank"] for e in failures if e["rank"] is not None}
    return Hit(
        failures, ranks, culprits=[], values={"count": len(failures)}, confidence_factor=1.0 if len(ranks) >= 2 else 0.8
    )
