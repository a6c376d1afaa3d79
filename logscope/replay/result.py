"""The replay result: per-rank records folded into per-case and per-run outcomes, and the JSON document that
`analyze --with-replay FILE` embeds as the diagnosis's `replay` section."""

from __future__ import annotations

import json
import platform
import re
import shutil
import socket
import subprocess
from itertools import takewhile
from pathlib import Path
from typing import Any

from logscope.errors import InputError
from logscope.replay.launch import ProbeRun
from logscope.replay.worker import bandwidths

SCHEMA_ID = "logscope/replay/v1"
_PCIE_HOPS = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nvidia-smi's legend, nearest first
FAILED = ("hang", "error", "wrong_result")
# Which status names a case when ranks disagree: a hang explains the errors it causes, not the other way
# round.
_PRIORITY = ("hang", "error", "wrong_result", "not_run", "ok", "skipped")


def worst(statuses: list[str]) -> str:
    present = set(statuses)
    if present and present <= {"skipped"}:
        return "skipped"
    return next((s for s in _PRIORITY if s in present and s != "skipped"), "ok")


def _missing_record(run: ProbeRun, rank: int, wall_limit_s: float) -> dict[str, Any]:
    if run.timed_out:
        return {"status": "hang", "error": f"the probe outlived its {wall_limit_s:g} s limit and was killed"}
    reason = run.rank_errors.get(rank)
    if reason is None and not run.started_ranks and run.launcher_error:
        reason = f"no rank started; torchrun: {run.launcher_error}"
    return {"status": "error", "error": reason or "the process ended without a report"}


def fold_run(
    run: ProbeRun, cases: list[dict[str, Any]], expected_ranks: list[int], wall_limit_s: float
) -> list[dict[str, Any]]:
    """One entry per planned case: the outcome, each rank's record, and timings over the ranks that passed."""
    ranks = sorted(set(expected_ranks) | set(run.started_ranks) | {r["rank"] for r in run.records})
    by_key = {(r["rank"], r.get("case")): r for r in run.records}
    folded = []
    failed_before: set[int] = set()
    for index, case in enumerate(cases):
        per_rank = []
        for rank in ranks:
            record = by_key.get((rank, index)) or by_key.get((rank, None))
            if record is None:
                # What this rank was to call, from the plan: the rank itself never said.
                call = {
                    "op": case["op"],
                    "numel": case["numel"],
                    **case.get("per_rank", {}).get(str(rank), {}),
                }
                if rank in failed_before:
                    record = {"rank": rank, **call, "status": "not_run", "error": "an earlier case failed"}
                else:
                    record = {"rank": rank, **call, **_missing_record(run, rank, wall_limit_s)}
            per_rank.append(record)
            if record["status"] in FAILED:
                failed_before.add(rank)
        folded.append(_case_summary(case, per_rank))
    return folded


def _case_summary(case: dict[str, Any], per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    outcome = worst([r["status"] for r in per_rank])
    summary: dict[str, Any] = {
        "op": case["op"],
        "numel": case["numel"],
        "dtype": case["dtype"],
        "outcome": outcome,
        "time_us": None,
        "algbw_gbps": None,
        "busbw_gbps": None,
        "ranks": per_rank,
    }
    timed = [r for r in per_rank if r["status"] == "ok" and r.get("time_us")]
    if outcome == "ok" and timed:
        # The collective is done when the slowest rank is: its median is the op's time.
        median_us = max(r["time_us"]["median"] for r in timed)
        summary["time_us"] = {"median": median_us, "min": min(r["time_us"]["min"] for r in timed)}
        world = int(timed[0]["world_size"])
        algbw, busbw = bandwidths(case["op"], int(timed[0]["bytes"]), median_us / 1e6, world)
        summary["algbw_gbps"], summary["busbw_gbps"] = algbw, busbw
    return summary


def run_outcome(cases: list[dict[str, Any]]) -> str:
    return worst([c["outcome"] for c in cases])


def failure_line(cases: list[dict[str, Any]]) -> str | None:
    """`op: status on ranks a, b — rank a: first error` for the first failed case; None when none failed."""
    for case in cases:
        if case["outcome"] not in FAILED:
            continue
        bad = [r for r in case["ranks"] if r["status"] in FAILED]
        first = next((r for r in bad if r.get("error")), bad[0])
        ranks = ", ".join(str(r["rank"]) for r in bad)
        return f"{case['op']}: {case['outcome']} on rank(s) {ranks} — rank {first['rank']}: {first.get('error')}"
    return None


def interconnect_class(topo: str) -> str | None:
    """GPU-to-GPU link class from `nvidia-smi topo -m` output: NVLink when any GPU pair is NV#, else the PCIe
    hops between GPUs, nearest first (NIC columns are left out)."""
    gpu_columns = 0
    links: set[str] = set()
    for line in topo.splitlines():
        cells = line.split()
        if not gpu_columns and cells and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) > 1:
            gpu_columns = sum(1 for _ in takewhile(lambda c: re.fullmatch(r"GPU\d+", c), cells))
            continue
        if gpu_columns and cells and re.fullmatch(r"GPU\d+", cells[0]):
            links.update(c for c in cells[1 : 1 + gpu_columns] if re.fullmatch(r"NV\d+|PIX|PXB|PHB|NODE|SYS", c))
    if not links:
        return None
    nvlink = sorted(link for link in links if link.startswith("NV"))
    if nvlink:
        return f"NVLink ({', '.join(nvlink)})"
    return f"PCIe ({', '.join(hop for hop in _PCIE_HOPS if hop in links)})"


def _interconnect() -> str | None:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        done = subprocess.run([binary, "topo", "-m"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return interconnect_class(done.stdout)


def machine_facts(records: list[dict[str, Any]], backend: str) -> dict[str, Any]:
    """Where the probe ran (W9: a workaround is named with the machine it was found on)."""
    gpus = sorted({str(r["device_name"]) for r in records if r.get("device_name")})
    gpus_used = {(r.get("host"), r["device"]) for r in records if str(r.get("device", "")).startswith("cuda")}
    facts: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "torch": next((r["torch"] for r in records if r.get("torch")), None),
        "nccl_version": next((r["nccl_version"] for r in records if r.get("nccl_version")), None),
        "gpu": ", ".join(gpus) or None,
        "gpu_count": len(gpus_used) or None,
        "interconnect": _interconnect() if backend == "nccl" else None,
    }
    return facts


def machine_name(machine: dict[str, Any]) -> str:
    parts = [str(machine["hostname"])]
    if machine.get("gpu"):
        count = f"{machine['gpu_count']}× " if machine.get("gpu_count") else ""
        parts.append(f"{count}{machine['gpu']}")
    if machine.get("interconnect"):
        parts.append(str(machine["interconnect"]))
    if not machine.get("gpu"):
        parts.append("CPU only")
    return ", ".join(parts)


def load_replay(path: Path) -> dict[str, Any]:
    """Read a replay result written by `logscope replay --out FILE` (for `analyze --with-replay FILE`)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read replay result {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(f"replay result {path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA_ID:
        raise InputError(f"{path} is not a logscope replay result (schema {SCHEMA_ID!r})")
    return document
