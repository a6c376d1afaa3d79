"""The check `skipped_constructor_sync`, behind LS308 (rules/LS308_skipped_constructor_sync.yaml): most ranks failed
in the initial parameter sync and the others were in another collective: those skipped the sync, and what their
peers then raised (DDP's model check reading their gradients as parameter counts, a size check, a timeout) is its
consequence. Three readings of "in the sync": at the first SeqNum where the ranks of the default process group
ran different collectives, an error of the majority's has a traceback through the framework's constructor sync; the
torch.distributed call each rank failed in is, for the majority, a broadcast before any progress of theirs; or,
before any progress, the majority's first errors end tracebacks through the constructor's sync and the others' come
out of their first gradient all_reduce."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.collectives import BACKWARD, call_name, last_calls
from logscope.rules.checks.past_the_sync import SYNC_APIS
from logscope.rules.checks.rows import frame_function, traceback_frames
from logscope.rules.checks.stack_dumps import SYNC_FUNCTIONS
from logscope.vocab import Event

# The collectives a rank runs once it trains: DDP's gradient all_reduce (in backward), or the loop's own.
TRAINING_CALLS = frozenset({BACKWARD, "all_reduce"})


@check("skipped_constructor_sync")
def skipped_constructor_sync(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    return _at_one_seq(ctx, events) or _in_calls_before_training(ctx) or _through_the_sync_or_not(ctx)


def _through_the_sync_or_not(ctx: Context) -> Hit | None:
    """Without SeqNums: most failing ranks' first errors end tracebacks through the constructor's sync, and the
    others' first errors came out of another collective of theirs (their first gradient all_reduce), with no
    progress line anywhere."""
    if any(s.progress_count for s in ctx.states.values()):
        return None
    first = {r: e for r, s in ctx.states.items() if (e := s.first_error) is not None}
    failing = set(first)
    in_sync = sorted(
        r for r, e in first.items() if any(frame_function(f) in SYNC_FUNCTIONS for f in traceback_frames(ctx, e))
    )
    calls = last_calls(ctx, ctx.by_kind.get("c10d_call", []))
    # A rank past the sync runs training: its next collective is its first gradient all_reduce (a barrier or a
    # broadcast is still set-up, which a rank in the sync can meet too).
    skipped = sorted(r for r in failing - set(in_sync) if r in calls and call_name(calls[r]) in TRAINING_CALLS)
    if not skipped or len(in_sync) <= len(skipped):
        return None
    if any(e["kind"] == "ddp_model_mismatch" for e in first.values()):
        return None  # the sync ran on every rank and found the models differ (LS403)
    per_rank = ", ".join(
        [f"rank {r}: the constructor's sync" for r in in_sync] + [f"rank {r}: {call_name(calls[r])}" for r in skipped]
    )
    values = {"seq": "the failure", "per_rank": per_rank, "in_sync": in_sync, "skipped": skipped}
    evidence = [calls[r] for r in skipped] + [first[r] for r in in_sync]
    return Hit(evidence, set(in_sync) | set(skipped), culprits=skipped, values=values)


def _in_calls_before_training(ctx: Context) -> Hit | None:
    """Most ranks failed in a broadcast with no progress line of theirs before it (the initial parameter broadcast),
    the others in another call."""
    calls = last_calls(ctx, ctx.by_kind.get("c10d_call", []))  # (each one a collective call: call_name is set)
    if len(calls) < 3:
        return None
    by_call = Counter(str(call_name(e)) for e in calls.values())
    major, count = by_call.most_common(1)[0]
    if major not in SYNC_APIS or count * 2 <= len(calls) or count == len(calls):
        return None
    in_sync = sorted(r for r, e in calls.items() if call_name(e) == major)
    if any(ctx.states[r].progress_count for r in in_sync if r in ctx.states):
        return None  # a broadcast during training is no initial sync
    skipped = sorted(set(calls) - set(in_sync))
    per_rank = ", ".join(f"rank {r}: {call_name(e)}" for r, e in sorted(calls.items()))
    values = {"seq": "the failure", "per_rank": per_rank, "in_sync": in_sync, "skipped": skipped}
    return Hit([calls[r] for r in skipped] + [calls[in_sync[0]]], set(calls), culprits=skipped, values=values)


def _at_one_seq(ctx: Context, events: list[Event]) -> Hit | None:
    ops: dict[int, dict[int, str]] = defaultdict(dict)  # SeqNum -> rank -> op
    rows: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        if e["rank"] is None or e["seq"] is None or not e["op"] or (e["pg"] or "0") != "0":
            continue
        if ctx.in_final_attempt(e):
            ops[e["seq"]].setdefault(e["rank"], str(e["op"]))
            rows[e["seq"]].append(e)
    for seq in sorted(ops):
        by_op = Counter(ops[seq].values())
        if len(by_op) < 2:
            continue
        major, count = by_op.most_common(1)[0]
        if count * 2 <= len(ops[seq]):
            return None  # no majority: nothing says which side is the sync
        in_sync = [r for r, op in ops[seq].items() if op == major and _errored_in_the_sync(ctx, r)]
        if not in_sync:
            return None
        skipped = sorted(r for r, op in ops[seq].items() if op != major)
        per_rank = ", ".join(f"rank {r}: {op}" for r, op in sorted(ops[seq].items()))
        values = {"seq": f"SeqNum {seq}", "per_rank": per_rank, "in_sync": sorted(in_sync), "skipped": skipped}
        return Hit(rows[seq], set(ops[seq]), culprits=skipped, values=values)
    return None


def _errored_in_the_sync(ctx: Context, rank: int) -> bool:
    """An error line of the rank ends a traceback that runs through the framework's constructor sync."""
    return any(
        e["level"] == "error" and any(frame_function(f) in SYNC_FUNCTIONS for f in traceback_frames(ctx, e))
        for e in ctx.by_rank.get(rank, [])
    )
