"""The check `timeout_at_param_sync`, behind LS306 (rules/LS306_timeout_at_param_sync.yaml): a rank's first collective
after the framework's parameter-sync line timed out, and a rank of the world never printed that line: it never
reached the sync, and the others waited for it there."""

from __future__ import annotations

from typing import Any

from logscope.align.state import PROGRESS_KINDS
from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event, Phase


@check("timeout_at_param_sync")
def timeout_at_param_sync(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Timeouts on ranks whose last line before them is their sync line (nothing of training in between), and the
    ranks of the world with no sync line: those never reached the sync."""
    synced = {e["rank"]: e for e in ctx.by_kind.get("sync_start", []) if e["rank"] is not None}
    world = ctx.job.get("world_size")
    if not synced or not isinstance(world, int) or world < 2:
        return None
    waiting = [e for e in events if e["rank"] in synced and _timed_out_in_the_sync(ctx, e, synced[e["rank"]])]
    absent = sorted(set(range(world)) - set(synced))
    if not waiting or not absent:
        return None
    first = synced[min(synced)]
    waiting_ranks = {rank for e in waiting if (rank := e["rank"]) is not None}  # all of them: each is in `synced`
    return Hit(
        [*waiting, first],
        waiting_ranks,
        culprits=absent,
        values={"sync_line": first["text"], "waiting": sorted(waiting_ranks), "absent": absent},
    )


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
