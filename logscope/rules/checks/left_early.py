"""The check `left_early`, behind LS210 (rules/LS210_left_early.yaml): a rank finished cleanly while its peers were
still in a collective (they time out, or lose the connection to it); it ran fewer collectives than they did. Its
clean exit is the evidence: it needs no error line."""

from __future__ import annotations

from typing import Any

from logscope.align.state import participating
from logscope.events.catalogue import kinds
from logscope.rules.api import COMM_FAMILY, Context, Hit, Rule, check
from logscope.vocab import Event

# A line a process prints as it exits.
EXIT_KINDS = kinds("benign_pg_not_destroyed")
# Failures of a rank's own making (as opposed to what a peer's failure made it report).
OWN_FAULT_KINDS = kinds(
    "python_exception", "segfault", "fatal_python_error", "terminate_called", "cuda_oom", "host_oom", "error_file"
)


@check("left_early")
def left_early(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """A rank finished cleanly while its peers were still in a collective (they time out, or lose the connection
    to it): it ran fewer collectives than they did. Its clean exit is the evidence; it needs no error line."""
    unlisted = _exited_before_teardown(ctx)
    # A rank that printed nothing past the sync (rsl_rl's ranks other than 0) but whose peers trained on: gone
    # before the teardown only where torchrun's stop list is in the logs and leaves it out.
    joined = participating(ctx.states) if _final(ctx, "worker_sigterm_sent") else set()
    leavers = sorted(
        r
        for r, s in ctx.states.items()
        if s.status == "visible"
        and s.first_error is None
        and s.exit_code in (None, 0)
        # Gone before the teardown, from inside its training loop (a log that stops at the sync left no loop, unless
        # a peer's progress shows it trained on past its last line), or its process reached its exit (c10d's warning
        # that the process group was not destroyed is printed there).
        and (s.ended or (r in unlisted and (s.reached_train or r in joined)) or bool(s.kinds & EXIT_KINDS))
    )
    waiting = sorted(r for r, s in ctx.states.items() if s.first_error is not None and not s.ended and _waited(ctx, r))
    waited = "were still in a collective and then failed waiting for it (timeout, or the connection to it closed)"
    if not waiting and _stalled(ctx):
        waited = "logged on no further, waiting in a collective until the job was stopped"
        # Nothing failed and the job never finished: the peers of a rank that ended its loop wait in a collective
        # it will not join until the job is stopped from outside (no timeout fired, or none was set).
        waiting = sorted(r for r, s in ctx.states.items() if s.status == "visible" and not s.ended and r not in leavers)
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
        values={
            "leavers": leavers,
            "waiting": waiting,
            "waited": waited,
            "last_line": evidence[0]["text"] if evidence else "",
        },
    )


def _stalled(ctx: Context) -> bool:
    """No visible rank logged an error of its own or exited with a failure, and the logs do not prove the run
    finished."""
    proof = ctx.completion
    return (
        ctx.job.get("exit_code") != 0
        and (proof is None or not proof.proven)
        and not any(s.failed for s in ctx.states.values() if s.status == "visible")
    )


def _final(ctx: Context, kind: str) -> list[Event]:
    return [e for e in ctx.by_kind.get(kind, []) if ctx.in_final_attempt(e)]


def _waited(ctx: Context, rank: int) -> bool:
    """The rank's own error lines say it was waiting on a peer (a timeout, a closed connection, a remote error):
    the first of them may be the header of the traceback whose exception says so."""
    return any(e["level"] == "error" and e["kind"] in COMM_FAMILY for e in _own_lines(ctx, rank))


def _own_lines(ctx: Context, rank: int) -> list[Event]:
    return [e for e in ctx.by_rank.get(rank, []) if ctx.in_final_attempt(e)]


def _exited_before_teardown(ctx: Context) -> set[int]:
    """Visible ranks missing from torchrun's failure summary, which lists the workers that had failed when torchrun
    saw the first failure; it then stops the ones still running ("Sending process N closing signal SIGTERM"). A
    rank it neither lists nor stops, with no error of its own, had already exited, with status 0."""
    summarised = {e["rank"] for e in _final(ctx, "child_failure")}
    if not summarised:
        return _not_signalled(ctx)
    nodes = {ctx.ranks[r]["node"] for r in summarised if r in ctx.ranks}
    unlisted = {
        r
        for r, s in ctx.states.items()
        if summarised
        and r not in summarised
        and s.status == "visible"
        and s.exit_code is None
        and ctx.ranks[r]["node"] in nodes  # the same agent's summary
    }
    if not _final(ctx, "worker_sigterm_sent"):  # torchrun found no worker left to stop
        return unlisted
    if len(unlisted) >= len(summarised):  # a summary that lists only a few of the ranks says nothing of the rest
        return set()
    return unlisted


def _not_signalled(ctx: Context) -> set[int]:
    """Without a failure summary (torchrun itself was stopped from outside), on one node: torchrun's teardown
    signals every worker still running, one "Sending process N closing signal" line each. Where it signalled k
    fewer processes than there are visible ranks and exactly k of them printed no error and no exit status, those
    had already exited."""
    sent = {e["_f"].get("pid") for e in _final(ctx, "worker_sigterm_sent")}
    visible = [r for r, s in ctx.states.items() if s.status == "visible"]
    if not sent or len({ctx.ranks[r]["node"] for r in visible if r in ctx.ranks}) > 1:
        return set()
    quiet = {r for r in visible if ctx.states[r].first_error is None and ctx.states[r].exit_code is None}
    return quiet if 0 < len(visible) - len(sent) == len(quiet) else set()
