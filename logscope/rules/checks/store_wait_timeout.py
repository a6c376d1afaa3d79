"""The check `store_wait_timeout`, behind LS106 (rules/LS106_store_wait_timeout.yaml): once the process group had
formed, ranks timed out waiting on the c10d store ("Socket Timeout", "wait timeout after N ms"): a barrier or object
collective through the store that a peer never reached. Before the world formed the same line is a rendezvous
failure (LS601)."""

from __future__ import annotations

from typing import Any

import regex

from logscope.events.catalogue import kinds
from logscope.rules.api import COMM_FAMILY, REMOTE_KINDS, RENDEZVOUS_FAMILY, TAGGED, Context, Hit, Rule, check
from logscope.rules.checks.world import world_formed
from logscope.vocab import Event

# A rank's store wait that ran out after it joined (the store answered it), and a rank's attempt to reach a store
# that never answered it.
JOINED_AND_WAITED = frozenset({"store_clients_timeout", "store_timeout", "store_barrier_timeout"})
COULD_NOT_CONNECT = frozenset({"store_connect_timeout", "rdzv_connection_error"})
# A process's own failure (communication layer, exception, signal) that keeps it from joining, unlike a store wait.
OWN_JOIN_FAILURES = (COMM_FAMILY | TAGGED("crash")) - RENDEZVOUS_FAMILY - REMOTE_KINDS - kinds("traceback_start")
# A wait that ran out, as opposed to the store's host going away ("Failed to recv, got 0 bytes": LS604).
WAIT_RAN_OUT = regex.compile(r"Socket Timeout|wait timeout after|DistStoreError: .{0,80}[Tt]imeout")


@check("store_wait_timeout")
def store_wait_timeout(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Ranks of a formed world timed out waiting on the store for a peer."""
    waits = running_store_waits(ctx, events)
    if not waits:
        return None
    return Hit(waits[:6], {e["rank"] for e in waits if e["rank"] is not None})


def running_store_waits(ctx: Context, events: list[Event]) -> list[Event]:
    """The store wait timeouts among `events` that LS106 reads as a peer not coming (the world had formed)."""
    return (
        [e for e in events if e["kind"] == "store_timeout" and WAIT_RAN_OUT.search(e["text"])]
        if world_formed(ctx)
        else []
    )


@check("rendezvous_failed")
def rendezvous_failed(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Rendezvous or store failures, but for the store waits of a formed world (LS106's). Where some ranks joined the
    store and waited for the rest while others could not connect to it (another address or port), the ones that
    could not connect are the culprits; else the ones whose own lines show them busy elsewhere."""
    running = {id(e) for e in running_store_waits(ctx, events)}
    failures = [e for e in events if id(e) not in running]
    if not failures:
        return None
    waits = [e for e in failures if e["kind"] in JOINED_AND_WAITED]
    if len(waits) == len(failures) and _raised_joining(ctx, waits):
        return None  # the waits are the consequence: the peers they waited for failed by themselves while joining
    waited = {e["rank"] for e in waits if e["rank"] is not None}
    unreached = {e["rank"] for e in failures if e["kind"] in COULD_NOT_CONNECT and e["rank"] is not None} - waited
    culprits = sorted(unreached or _busy_elsewhere(ctx, waited)) if waited else None
    return Hit(failures, {e["rank"] for e in failures if e["rank"] is not None}, culprits=culprits or None)


def _busy_elsewhere(ctx: Context, waited: set[int]) -> set[int]:
    """Ranks whose own lines show them at something else while their peers waited in the store for the world to
    form: no error of theirs and no line past start-up (a dataset check before init_process_group). They came
    late, or not at all; a rank with no line of its own is not named."""
    # What the waiting ranks printed before they waited ("[rank 1] connecting to 127.0.0.1:29631"): a rank whose
    # last line is one of those was joining too, whatever its log lost after it.
    said_by_waiters = {_shape(e["text"]) for r in waited for e in ctx.by_rank.get(r, [])}
    busy = set()
    for rank in ctx.visible - waited:
        own = ctx.by_rank.get(rank, [])
        if not own or any(e["level"] == "error" for e in own) or ctx.reached(rank, "sync"):
            continue
        if _shape(max(own, key=ctx.order)["text"]) not in said_by_waiters:
            busy.add(rank)
    return busy


_DIGITS = regex.compile(r"\d+")


def _shape(text: str) -> str:
    """A line with its numbers (clock, rank, address) set aside."""
    return _DIGITS.sub("0", text)


def _raised_joining(ctx: Context, waits: list[Event]) -> bool:
    """Error lines of their own elsewhere (another node's console, other ranks) that are not rendezvous or store
    failures: gloo could not find its interface, an exception in setup. Those processes never checked in, and the
    ones that had joined waited for them: the waits are the consequence."""
    sids = {e["sid"] for e in waits}
    ranks = {e["rank"] for e in waits if e["rank"] is not None}
    return any(
        x["level"] == "error"
        and x["kind"] in OWN_JOIN_FAILURES
        and (x["sid"] not in sids or (x["rank"] is not None and ranks and x["rank"] not in ranks))
        for x in ctx.rows
    )
