"""The check `left_early`, behind LS210 (rules/LS210_left_early.yaml): a rank finished cleanly while its peers were
still in a collective (they time out, or lose the connection to it); it ran fewer collectives than they did. Its
clean exit is the evidence: it needs no error line."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import COMM_FAMILY, Context, Hit, Rule, check
from logscope.vocab import Event

# Failures of a rank's own making (as opposed to what a peer's failure made it report).
OWN_FAULT_KINDS = frozenset(
    {"python_exception", "segfault", "fatal_python_error", "terminate_called", "cuda_oom", "host_oom", "error_file"}
)


@check("left_early")
def left_early(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """A rank finished cleanly while its peers were still in a collective (they time out, or lose the connection
    to it): it ran fewer collectives than they did. Its clean exit is the evidence; it needs no error line."""
    unlisted = _exited_before_teardown(ctx)
    leavers = sorted(
        r
        for r, s in ctx.states.items()
        if s.status == "visible" and s.first_error is None and s.exit_code in (None, 0) and (s.ended or r in unlisted)
    )
    waiting = sorted(
        r
        for r, s in ctx.states.items()
        if s.first_error is not None and not s.ended and s.first_error["kind"] in COMM_FAMILY
    )
    own_fault = [
        s for s in ctx.states.values() if s.first_error is not None and s.first_error["kind"] in OWN_FAULT_KINDS
    ]
    if not leavers or not waiting or own_fault or len(leavers) >= len(ctx.visible):
        return None
    found = [ctx.states[r].last_event for r in leavers] + [ctx.states[r].first_error for r in waiting]
    evidence = [e for e in found if e is not None]
    return Hit(
        evidence,
        set(leavers) | set(waiting),
        culprits=leavers,
        values={"leavers": leavers, "waiting": waiting, "last_line": evidence[0]["text"] if evidence else ""},
    )


def _exited_before_teardown(ctx: Context) -> set[int]:
    """Visible ranks missing from torchrun's failure summary, which lists every worker still running at teardown
    (failed or SIGTERMed): with no error of their own, they had already exited, with status 0."""
    summarised = {e["rank"] for e in ctx.by_kind.get("child_failure", []) if (e["attempt"] or 0) >= ctx.final_attempt}
    unlisted = {
        r
        for r, s in ctx.states.items()
        if summarised and r not in summarised and s.status == "visible" and s.exit_code is None
    }
    if len(unlisted) >= len(summarised):  # a summary that lists only a few of the ranks says nothing of the rest
        return set()
    return unlisted
