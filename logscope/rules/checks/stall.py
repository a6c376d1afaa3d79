"""The check `stall`, behind LS901 (rules/LS901_stall.yaml), of the fallback stage: nothing failed and nothing
proves that the run finished, so the logs stop somewhere; where each rank stopped, which rank the others wait for,
and what stack dumps of the live processes say.

Healthy has to be proven (a clean exit, every rank's end, one rank's end with its peers shown to take part); a run
that shows neither a failure nor its end hung, was killed from outside, or was cut off.
"""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.failures import nothing_failed_nor_finished
from logscope.rules.checks.rows import int_field, said_past, short
from logscope.rules.checks.stack_dumps import StackDump, dumps_text, stack_dumps
from logscope.vocab import PHASE_ORDER, Event


@check("stall")
def stall(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Nothing failed and nothing proves that the run finished: the logs stop somewhere (fallback stage)."""
    proof = ctx.completion
    if proof is None or not nothing_failed_nor_finished(ctx):
        return None
    stopped = dict(proof.stopped)
    found = _where_it_stopped(ctx, stopped)
    if found is None:
        return None
    where, evidence = found
    dumps = stack_dumps(ctx)
    culprits = _waited_for(ctx, stopped, dumps)
    evidence = [d.header for d in dumps][:4] + evidence
    # Whole per-rank streams that stop are a hang, and so is a log beside a live process's stack dump; an excerpt
    # that stops may only have been cut there.
    whole = (bool(stopped) and all(ctx.states[r].complete for r in stopped)) or bool(dumps)
    last_it = {r: s.last_iteration for r, s in ctx.states.items() if s.last_iteration is not None}
    hit = Hit(
        evidence[:8],
        set(stopped),
        culprits=culprits,
        confidence_factor=_confidence_factor(ctx, whole),
        values={
            "where": where,
            "last_iterations": ", ".join(f"rank {r}: {i}" for r, i in sorted(last_it.items())) or "none printed",
            "joined": sorted(proof.participating) or "none",
            "cut": "" if whole else " This is an excerpt: it may also have been cut off there.",
            "dumps": dumps_text(dumps),
        },
    )
    # A process that waits in a collective its framework calls to sync the initial parameters hangs at that sync.
    if any(d.collective and d.sync_function for d in dumps):
        hit.category = "missing_sync"
    return hit


def _where_it_stopped(ctx: Context, stopped: dict[int, Event]) -> tuple[str, list[Event]] | None:
    """Where the logs stop, for the message, and the lines that show it: each rank's last line, else the furthest
    unranked line; None where there is nothing to show."""
    if stopped:
        where = "; ".join(f'rank {r} at "{short(e["text"])}"' for r, e in sorted(stopped.items())[:8])
        return where, [stopped[r] for r in sorted(stopped)]
    unranked = [e for e in ctx.rows if e["rank"] is None and e["level"] != "benign" and e["kind"] != "traceback_frame"]
    # Only the launcher's banner or other look-alikes (torchrun's OMP_NUM_THREADS notice): it started and nothing
    # of the run followed.
    unranked = unranked or [e for e in ctx.rows if e["rank"] is None and e["kind"] != "traceback_frame"]
    if unranked:
        last = max(unranked, key=lambda e: (PHASE_ORDER.get(e["phase"], -1), e["sid"], e["line"]))
        return f'"{short(last["text"])}"', [last]
    # Only the ranks' own lines that no signature reads ("[rank1] train: waiting for the data service ..."): where
    # each rank's lines stop.
    own: dict[int, Event] = {}
    for e in ctx.rows:
        if e["rank"] is not None and (e["rank"] not in own or ctx.order(e) > ctx.order(own[e["rank"]])):
            own[e["rank"]] = e
    if own:
        where = "; ".join(f'rank {r} at "{short(e["text"])}"' for r, e in sorted(own.items())[:8])
        return where, [own[r] for r in sorted(own)]
    if not ctx.rows:
        # A log in a format logscope does not know: nothing in it failed that logscope can tell, nor finished.
        return "the end of a log none of whose lines logscope recognises", []
    return None


def _waited_for(ctx: Context, stopped: dict[int, Event], dumps: list[StackDump]) -> list[int]:
    """The ranks the others wait for: those stopped in an earlier phase than their stuck peers, or, where stack
    dumps show peers waiting in a collective, the ranks dumped somewhere else."""
    furthest = max((s.furthest for s in ctx.states.values() if s.status == "visible"), default=-1)
    behind = sorted(
        r for r in stopped if ctx.states[r].furthest < furthest and not said_past(ctx, r, ctx.states[r].furthest)
    ) or _steps_behind(ctx, stopped)
    culprits = behind if behind and len(behind) < len(stopped) else []
    waiting = {d.rank for d in dumps if d.rank is not None and d.collective}
    elsewhere = {d.rank for d in dumps if d.rank is not None and not d.collective} - waiting
    if waiting and elsewhere:
        culprits = sorted(elsewhere)  # its peers wait in a collective it is not in
    return culprits


# Ranks whose progress-line counts differ by more than this do not print at the same pace.
SAME_PACE = 2


def _steps_behind(ctx: Context, stopped: dict[int, Event]) -> list[int]:
    """The ranks whose last progress line is at an earlier step than every other stopped rank's: in lockstep
    training, the rank that did not finish a step is the one the others wait for in its collective."""
    steps: dict[int, int] = {}
    for rank in stopped:
        last = ctx.states[rank].last_progress
        step = int_field(last, "step") if last is not None else None
        if step is None:
            return []
        steps[rank] = step
    low = min(steps.values(), default=0)
    behind = [r for r, n in steps.items() if n == low]
    # Only ranks that print progress at the same pace compare: a rank that logs every tenth step is not behind.
    counts = [ctx.states[r].progress_count for r in stopped]
    if len(set(steps.values())) < 2 or max(counts) - min(counts) > SAME_PACE:
        return []
    return sorted(behind)


def _confidence_factor(ctx: Context, whole: bool) -> float:
    """Less sure of an excerpt (it may have been cut there), of a run that printed no progress, of a run with
    hidden ranks, and of logs none of whose lines logscope recognises."""
    progressed = any(s.progress_count for s in ctx.states.values()) or ctx.by_kind.get("iteration")
    factor = (1.0 if whole else 0.65) * (1.0 if progressed else 0.85) * (0.8 if ctx.hidden else 1.0)
    if not ctx.rows:
        factor *= 0.7
    return factor
