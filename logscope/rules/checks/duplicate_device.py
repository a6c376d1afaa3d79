"""The check `duplicate_device`, behind LS402 (rules/LS402_same_device.yaml): two ranks on the same CUDA device or
NCCL busId of one host (the Isaac Lab mistake of not using cuda:<local_rank>)."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event

# Where a rank runs: (host, "cuda:N" or "busId X").
DeviceKey = tuple[str | None, str]


@check("duplicate_device")
def duplicate_device(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Two ranks on the same CUDA device or busId (the Isaac Lab mistake of not using cuda:<local_rank>)."""
    by_device: dict[DeviceKey, set[int]] = {}
    rows: dict[DeviceKey, list[Event]] = {}
    nccl_host = _nccl_hosts(ctx)
    for e in events:
        if e["rank"] is None:
            continue
        key = _device_of(ctx, e, nccl_host)
        if key is None:
            continue
        by_device.setdefault(key, set()).add(e["rank"])
        rows.setdefault(key, []).append(e)
    # NCCL hosts are what matters for busIds: a communicator spanning several NCCL hosts (nNodes > 1) may see
    # the same busId on each of them legitimately.
    multi_host = any(int(e["_f"].get("nnodes") or 1) > 1 for e in ctx.by_kind.get("nccl_comm_topology", []))
    shared = {k: v for k, v in by_device.items() if len(v) > 1 and not (multi_host and k[1].startswith("busId"))}
    if not shared:
        return None
    ranks = sorted(set().union(*shared.values()))
    text = "; ".join(f"ranks {', '.join(map(str, sorted(v)))} on {k[1]}" for k, v in shared.items())
    return Hit([e for k in shared for e in rows[k]], set(ranks), culprits=ranks, values={"shared": text})


def _nccl_hosts(ctx: Context) -> dict[int, str]:
    """rank -> the host NCCL tells it apart by: NCCL_HOSTID where it is set (echoed at init, or among the job's own
    settings), else the rank is absent and its hostname counts."""
    nccl_host = {
        e["rank"]: str(e["_f"].get("value"))
        for e in ctx.by_kind.get("nccl_env_set", [])
        if e["_f"].get("var") == "NCCL_HOSTID" and e["rank"] is not None
    }
    for e in ctx.by_kind.get("config_values", []):  # the job's own "NCCL_HOSTID=..." among its settings
        if e["rank"] is not None and e["_f"].get("NCCL_HOSTID"):
            nccl_host.setdefault(e["rank"], str(e["_f"]["NCCL_HOSTID"]))
    return nccl_host


def _device_of(ctx: Context, e: Event, nccl_host: dict[int, str]) -> DeviceKey | None:
    """The device a rank's line says it is on: NCCL's busId at communicator init, or a CUDA device it names."""
    f, rank = e["_f"], e["rank"]
    if rank is None:  # (the caller passes ranked lines only)
        return None
    if e["kind"] == "nccl_comm_init":
        if str(f.get("state", "")).startswith("Init") and f.get("bus_id"):
            return (nccl_host.get(rank, f.get("host")), f"busId {f['bus_id']}")
        return None
    device = f.get("device")
    if not device or not str(device).startswith("cuda"):
        return None
    return (e["node"] or (info["host"] if (info := ctx.ranks.get(rank)) is not None else None), str(device))
