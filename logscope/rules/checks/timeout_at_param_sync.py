"""The check `timeout_at_param_sync`, behind LS306 (rules/LS306_timeout_at_param_sync.yaml): a rank's first collective
after the framework's parameter-sync line timed out, and a rank of the world never printed that line (it never
reached the sync), or printed it and neither timed out nor failed (it was late to the sync's collective): the others
waited for it there. Where the framework prints no such line (DDP, FSDP), the timeout's traceback shows the sync."""

from __future__ import annotations

from typing import Any

from logscope.align.state import PROGRESS_KINDS
from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.collectives import call_name, last_calls
from logscope.rules.checks.past_the_sync import SYNC_APIS
from logscope.rules.checks.rows import frame_function, traceback_frames
from logscope.rules.checks.stack_dumps import SYNC_FUNCTIONS
from logscope.vocab import Event, Phase


@check("timeout_at_param_sync")
def timeout_at_param_sync(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Timeouts on ranks whose last line before them is their sync line (nothing of training in between), and the
    ranks of the world with no sync line: those never reached the sync. Where every rank printed it, the ranks that
    neither timed out nor failed of their own were not yet in the sync's collective (a slow checkpoint load or
    environment reset between the line and the call)."""
    synced = {e["rank"]: e for e in ctx.by_kind.get("sync_start", []) if e["rank"] is not None}
    world = ctx.job.get("world_size")
    if not isinstance(world, int) or world < 2:
        return None
    if not synced:
        return _timed_out_in_the_constructor(ctx, events, world)
    waiting = [e for e in events if e["rank"] in synced and _timed_out_in_the_sync(ctx, e, synced[e["rank"]])]
    if not waiting:
        return None
    waiting_ranks = {rank for e in waiting if (rank := e["rank"]) is not None}  # all of them: each is in `synced`
    absent = sorted(set(range(world)) - set(synced))
    late = []
    if not absent and _in_a_broadcast(ctx, waiting):
        # Those that neither timed out nor failed of their own (the launcher stopping them at teardown is no failure).
        late = sorted(
            r
            for r in set(synced) - waiting_ranks
            if r in range(world) and not (r in ctx.states and ctx.states[r].failed_by_itself)
        )
    if not absent and not late:
        return None
    first = synced[min(synced)]
    said = (
        f"rank(s) {', '.join(map(str, absent))} never printed that line: they did not reach the parameter sync"
        if absent
        else f"rank(s) {', '.join(map(str, late))} printed it but neither timed out nor failed: they were not yet in "
        "the sync's collective"
    )
    values = {
        "sync_line": f'after its line "{first["text"].strip()}"',
        "waiting": sorted(waiting_ranks),
        "absent": absent or late,
        "late": said,
    }
    return Hit([*waiting, first], waiting_ranks, culprits=absent or late, values=values)


def _timed_out_in_the_constructor(ctx: Context, events: list[Event], world: int) -> Hit | None:
    """DDP, FSDP and DeepSpeed sync the parameters in their constructor, with no line of their own: timeouts whose
    traceback runs through that sync (`_sync_module_states`, `_verify_param_shape_across_processes`) waited there
    for the ranks of the world that neither timed out nor failed: those had not reached it."""
    frames = {id(e): f for e in events if e["rank"] is not None and (f := _sync_frame(ctx, e)) is not None}
    waiting = [e for e in events if id(e) in frames]
    if not waiting:
        return None
    waiting_ranks = {rank for e in waiting if (rank := e["rank"]) is not None}
    late = sorted(
        r
        for r in range(world)
        if r not in waiting_ranks
        and r in ctx.states
        and ctx.states[r].status == "visible"
        and not ctx.states[r].failed_by_itself
    )
    if not late:
        return None
    said = f"rank(s) {', '.join(map(str, late))} neither timed out nor failed: they had not reached the sync"
    values = {
        "sync_line": f"in {frame_function(frames[id(waiting[0])])}, in the model wrapper's constructor",
        "waiting": sorted(waiting_ranks),
        "absent": late,
        "late": said,
    }
    return Hit(waiting, waiting_ranks, culprits=late, values=values)


def _sync_frame(ctx: Context, timeout: Event) -> Event | None:
    """The frame of the timeout's traceback in a framework's initial parameter sync."""
    return next((f for f in traceback_frames(ctx, timeout) if frame_function(f) in SYNC_FUNCTIONS), None)


def _in_a_broadcast(ctx: Context, waiting: list[Event]) -> bool:
    """The ranks timed out in the sync's own broadcast, as their timeout (NCCL's OpType) or traceback (the
    torch.distributed call) says: a rank that printed the sync line and hangs later, before any training line of its
    own (RL libraries print those on rank 0 only), leaves its peers in a gradient all_reduce instead."""
    calls = last_calls(ctx, ctx.by_kind.get("c10d_call", []))
    ops = []
    for e in waiting:
        op = str(e["_f"].get("op") or "").lower()
        call = calls.get(e["rank"]) if e["rank"] is not None else None
        ops.append(op if op else (call_name(call) or "") if call is not None else "")
    return any(ops) and all(op in SYNC_APIS for op in ops if op)


def _timed_out_in_the_sync(ctx: Context, timeout: Event, sync: Event) -> bool:
    """No training line of the rank's own came between its sync line and the timeout (rl_games prints "Started to
    train" before its sync, so the lines before the sync line say nothing)."""
    rank = timeout["rank"]
    state = ctx.states.get(rank) if rank is not None else None
    if rank is None or state is None:
        return False
    after = ctx.order(sync)
    return not any(
        (r["phase"] == Phase.TRAIN or r["kind"] in PROGRESS_KINDS)
        and r["level"] != "benign"
        and _between(ctx, r, sync, after, timeout)
        for r in ctx.by_rank.get(rank, [])
    )


def _between(ctx: Context, row: Event, sync: Event, after: tuple[float, int, int], timeout: Event) -> bool:
    """The row came after the sync line and before the timeout: by place in one file, else by clock."""
    if row["sid"] == sync["sid"]:
        return row["line"] > sync["line"] and (row["sid"] != timeout["sid"] or row["line"] < timeout["line"])
    return ctx.order(row) > after
