"""The check `single_rank`, behind LS951 (rules/LS951_single_rank.yaml): the job ran one rank where more were
launched, asked for or given GPUs, or where a distributed job ran with world size 1."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import TAGGED, Context, Hit, Rule, check
from logscope.rules.checks.rows import int_field
from logscope.vocab import Event

# Lines that only a distributed job prints.
DISTRIBUTED_KINDS = TAGGED("distributed")


@check("single_rank")
def single_rank(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The job ran one rank: world size 1 reported where more were launched or asked for, or by a distributed job."""
    rank0_only = _processes_all_rank0(events)
    if rank0_only:
        return Hit(
            rank0_only[:4],
            {0},
            culprits=[],
            values={"why_one": f"{len(rank0_only)} processes each call themselves rank 0: each ran a world of its own"},
        )
    sizes = [
        (e, int(str(ctx.field(e, "world_size")))) for e in events if str(ctx.field(e, "world_size") or "").isdigit()
    ]
    if not sizes or any(ws > 1 for _, ws in sizes):
        return None
    streams = {(e["sid"], e["tee_lrank"], e["local_rank"]) for e, _ in sizes}
    evidence = [e for e, _ in sizes][:4]
    if len(streams) > 1:
        return Hit(
            evidence,
            {e["rank"] for e, _ in sizes if e["rank"] is not None},
            culprits=[],
            values={"why_one": f"{len(streams)} processes each report world_size=1: none of them joined the others"},
        )
    return _one_process_where_more_were_meant(ctx, evidence)


def _processes_all_rank0(events: list[Event]) -> list[Event]:
    """One identity line per process (told apart by pid and host) when several processes list themselves and every
    one of them is rank 0: they never joined one world (nccl-tests built without MPI, a launcher that set no RANK)."""
    claims: dict[tuple[str, str], Event] = {}
    for e in events:
        pid = e["_f"].get("pid")
        if e["kind"] == "rank_identity" and pid is not None:
            if int_field(e, "rank") != 0:
                return []
            claims.setdefault((str(pid), str(e["_f"].get("host"))), e)
    return list(claims.values()) if len(claims) > 1 else []


def _one_process_where_more_were_meant(ctx: Context, evidence: list[Event]) -> Hit | None:
    """One process reported world_size=1: a finding where torchrun was asked for more, the process was given more
    GPUs, or the job is a distributed one (a warning: it may have been meant to run alone)."""
    requested = ctx.job.get("requested_world_size")
    if requested and requested > 1:
        return Hit(
            evidence,
            {0},
            culprits=[],
            values={"why_one": f"torchrun was asked for {requested} processes but the job saw world_size=1"},
        )
    devices = _most_gpus_seen(ctx)
    if devices > 1:
        return Hit(
            evidence + (ctx.by_kind.get("device_count") or ctx.by_kind.get("lightning_devices", []))[:2],
            {0},
            culprits=[],
            values={"why_one": f"the job sees {devices} GPUs but ran with world_size=1"},
        )
    distributed = any(ctx.by_kind.get(k) for k in DISTRIBUTED_KINDS)
    if not distributed:
        return None
    hit = Hit(
        evidence,
        {0},
        culprits=[],
        values={"why_one": "the distributed job (process group, parameter broadcast) ran with world_size=1"},
    )
    hit.severity = "warning"
    return hit


def _most_gpus_seen(ctx: Context) -> int:
    """The most GPUs the job says a process sees (0 where it says nothing)."""
    seen = [int(e["_f"]["devices"]) for e in ctx.by_kind.get("device_count", []) if e["_f"].get("devices")]
    # Lightning's "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [1,2]": the GPUs that one process was given.
    seen += [
        len([d for d in str(e["_f"]["visible_devices"]).split(",") if d.strip()])
        for e in ctx.by_kind.get("lightning_devices", [])
        if e["_f"].get("visible_devices")
    ]
    return max(seen, default=0)
