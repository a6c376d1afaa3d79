"""The checks `horovod_stalled`, behind LS105 (rules/LS105_horovod_stalled_collective.yaml), and
`horovod_broadcast_stalled`, behind LS305 (rules/LS305_horovod_broadcast_missing_ranks.yaml): Horovod's stall check
lists a collective (LS105) or the start-up broadcast (LS305) that some ranks submitted and others never did;
the ranks it waits for are the culprits: named ("missing ranks", "Stalled ranks:"), or the world's ranks that no
"ready ranks" list holds. And `horovod_crossed`, behind LS215 (rules/LS215_horovod_crossed_collectives.yaml): the
lists show ranks each lacking a tensor another submitted, so they are in different collectives."""

from __future__ import annotations

from typing import Any

import regex

from logscope.rules.api import Context, Hit, Rule, check
from logscope.values import int_list
from logscope.vocab import Event

# One rank's line under "Missing ranks:" / "Stalled ranks:": the tensors it has not submitted.
_STALLED_LIST = regex.compile(r"(?:^|:)(?P<rank>\d{1,6}): \[(?P<tensors>[^\[\]]{1,4000})\]\s*$")


@check("horovod_crossed")
def horovod_crossed(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Horovod's stall lists show ranks each missing a tensor that another rank submitted and that other rank
    missing one this rank submitted: they issued different collectives at the same point (LS215)."""
    missing = _missing_tensors(events)
    crossed = _crossed(missing)
    if not crossed:
        return None
    rows = [e for e in events if e["kind"] == "horovod_stalled_rank"]
    per_rank = "; ".join(f"rank {r}: {', '.join(sorted(t))}" for r, t in sorted(missing.items()))
    return Hit(rows[:8], set(crossed), culprits=[], values={"per_rank": per_rank})


def _missing_tensors(events: list[Event]) -> dict[int, set[str]]:
    """Each listed rank's tensors not yet submitted, from the stall inspector's per-rank lines."""
    missing: dict[int, set[str]] = {}
    for e in events:
        if e["kind"] != "horovod_stalled_rank":
            continue
        m = _STALLED_LIST.search(e["text"])
        if m is not None:
            missing.setdefault(int(m["rank"]), set()).update(t.strip() for t in m["tensors"].split(",") if t.strip())
    return missing


def _crossed(missing: dict[int, set[str]]) -> list[int]:
    """The ranks each lacking a tensor another submitted while that one lacks one they submitted; none where a rank
    lacks the framework's start-up parameter broadcast (TensorFlow's "HorovodBroadcast_<variable>"): a rank that
    skipped that sync went on to the gradients' allreduce, which crosses too, and is LS305's."""
    if any(t.startswith("HorovodBroadcast_") for tensors in missing.values() for t in tensors):
        return []
    return sorted(
        {a for a in missing for b in missing if a != b and missing[a] - missing[b] and missing[b] - missing[a]}
    )


@check("horovod_stalled")
def horovod_stalled(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The ranks a Horovod collective waits for: missing from its stall lists, in every list that names them."""
    if _crossed(_missing_tensors(events)):
        return None  # ranks in different collectives: LS215
    rows = [e for e in events if not _is_broadcast(ctx, e)]
    if not rows or len(rows) < len(events):
        # A stalled start-up broadcast (LS305) explains the rest: the ranks that passed it wait for the others in
        # their first allreduce.
        return None
    return _waiting_for(ctx, rows)


@check("horovod_broadcast_stalled")
def horovod_broadcast_stalled(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The ranks Horovod's start-up parameter broadcast waits for (LS305)."""
    if _crossed(_missing_tensors(events)):
        return None  # ranks in different broadcasts, not some ranks missing from one: LS215
    rows = [e for e in events if _is_broadcast(ctx, e)]
    return _waiting_for(ctx, rows) if rows else None


def _is_broadcast(ctx: Context, e: Event) -> bool:
    return str(ctx.field(e, "op") or "").lower() == "broadcast"


def _waiting_for(ctx: Context, rows: list[Event]) -> Hit:
    missing: set[int] | None = None
    ready_rows = [e for e in rows if ctx.field(e, "ready") is not None]
    world = ctx.job.get("world_size") if ctx.job.get("world_size_declared") else None
    if ready_rows:
        ready = [set(int_list(ctx.field(e, "ready"))) for e in ready_rows]
        # Without a stated world, the ranks up to the highest that any list names.
        size = world or max(max(r) for r in ready if r) + 1
        missing = set.intersection(*(set(range(size)) - r for r in ready))
    for e in rows:
        named = ctx.field(e, "missing")
        if named is not None:
            these = set(int_list(named))
            missing = these if missing is None else missing | these
    return Hit(
        rows[:8],
        {e["rank"] for e in rows if e["rank"] is not None},
        culprits=sorted(missing or ()),
        values={"tensor": ctx.field(rows[0], "tensor"), "waiting_for": sorted(missing or ()) or "unknown"},
    )
