"""The probe process torchrun starts on every rank: run the planned collectives, check them, time them,
report.

Launched as a script path (`torchrun ... logscope/replay/worker.py --plan P --results D`), so it imports only
the standard library and torch: it must not need logscope to be installed on the probe's Python path.

Each rank appends one JSON line per planned case to `D/rank<R>.jsonl`. A case that does not finish within the
plan's timeout is reported by a watchdog thread as `hang`, which then ends the process with EXIT_HANG; a
SIGTERM from torchrun (another rank failed first) is reported for the case in progress before the process
exits.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import datetime
import json
import os
import signal
import statistics
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_FAILED = 1  # a case ended in error or wrong_result
EXIT_HANG = 86  # the watchdog fired: a case outlived the timeout
EXIT_TERMINATED = 143  # SIGTERM from the launcher while a case was running (128 + 15)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

# Test hook, documented in docs/replay.md: "NAME=VALUE". When set and the environment does not hold
# NAME=VALUE, the last rank issues every tensor op with one element more than the others — a real size
# mismatch — so a test can make a baseline fail that only "NAME=VALUE" fixes, and check the sweep protocol
# with gloo, where NCCL_* are no-ops.
FAULT_UNLESS_ENV = "LOGSCOPE_REPLAY_TEST_FAULT_UNLESS"

# Largest N such that every integer in [0, N] is exact in the dtype: fill values and their sums stay below it,
# so the expected result is exact and compared with ==.
_EXACT_LIMIT = {
    "float16": 2048,
    "bfloat16": 256,
    "float32": 2**24,
    "float64": 2**53,
    "int8": 127,
    "uint8": 255,
    "int32": 2**31 - 1,
    "int64": 2**63 - 1,
}

# nccl-tests' bus-bandwidth factors (src/<op>.cu, *GetBw), by op, for n ranks.
_BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_gather_base": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "reduce_scatter_base": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_to_all_base": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}


def bus_factor(op: str, world_size: int) -> float | None:
    factor = _BUS_FACTORS.get(op)
    return None if factor is None else factor(world_size)


def bandwidths(op: str, bytes_moved: int, seconds: float, world_size: int) -> tuple[float | None, float | None]:
    """(algbw, busbw) in GB/s (1e9 bytes) as nccl-tests computes them; None for barrier or a zero time."""
    factor = bus_factor(op, world_size)
    if factor is None or seconds <= 0:
        return None, None
    algbw = bytes_moved / 1.0e9 / seconds
    return algbw, algbw * factor


@dataclass
class _Case:
    op: str
    numel: int
    dtype: str
    index: int


@dataclass
class _Progress:
    """What the main thread is doing now; read by the watchdog and the SIGTERM thread."""

    case: _Case | None = None
    phase: str = "start"
    iteration: int | None = None
    deadline: float | None = None
    budget_s: float = 0.0
    reported: set[int] = field(default_factory=set)


class _Reporter:
    def __init__(self, path: Path, base: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._handle = path.open("a", encoding="utf-8")
        self._base = base
        self.progress = _Progress()

    def write(self, case: _Case | None, record: dict[str, Any]) -> bool:
        """Write the record of `case` once (the main thread, the watchdog and the SIGTERM thread may race)."""
        with self._lock:
            index = -1 if case is None else case.index
            if index in self.progress.reported:
                return False
            self.progress.reported.add(index)
            line = dict(self._base)
            if case is not None:
                line.update(case=case.index, op=case.op, numel=case.numel, dtype=case.dtype)
            line.update(record)
            self._handle.write(json.dumps(line) + "\n")
            self._handle.flush()
            return True

    def begin(self, case: _Case | None, phase: str, iteration: int | None, timeout_s: float) -> None:
        with self._lock:
            self.progress.case = case
            self.progress.phase = phase
            self.progress.iteration = iteration
            self.progress.deadline = time.monotonic() + timeout_s
            self.progress.budget_s = timeout_s

    def idle(self) -> None:
        with self._lock:
            self.progress.deadline = None

    def where(self) -> str:
        p = self.progress
        if p.case is None:
            return p.phase
        at = f" iteration {p.iteration}" if p.iteration is not None else ""
        return f"{p.case.op}{at} ({p.phase})"


def _watchdog(reporter: _Reporter) -> None:
    while True:
        time.sleep(0.05)
        progress = reporter.progress
        if progress.deadline is not None and time.monotonic() > progress.deadline:
            reporter.write(
                progress.case,
                {"status": "hang", "error": f"no progress for {progress.budget_s:g} s in {reporter.where()}"},
            )
            os._exit(EXIT_HANG)


def _sigterm_waiter(reporter: _Reporter) -> None:
    signal.sigwait({signal.SIGTERM})
    if reporter.progress.deadline is not None:
        reporter.write(
            reporter.progress.case,
            {
                "status": "error",
                "error": f"terminated by SIGTERM from the launcher while in {reporter.where()} "
                "(another rank failed first)",
            },
        )
    os._exit(EXIT_TERMINATED)


def _die_with_parent() -> None:
    """Linux: SIGKILL this worker when torchrun dies, so a killed launcher cannot orphan it."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def fill_values(dtype: str, world_size: int) -> tuple[Callable[[int], int], Callable[[int], int]]:
    """(summand, tag): summand(r) is rank r's contribution to a reduction, all sums exact; tag(i) is a
    distinct exact non-zero value per rank or chunk, for ops that move data without reducing it."""
    limit = _EXACT_LIMIT[dtype]
    spread = max(1, min(8, limit // max(world_size, 1)))
    # More ranks than exact integers (bfloat16 beyond 256 ranks): the ranks past `cutoff` add 0.
    cutoff = limit // spread

    def summand(rank: int) -> int:
        return 1 + rank % spread if rank < cutoff else 0

    return summand, (lambda i: 1 + i % (limit - 1))


class _Buffers:
    """Buffers, the call, and the exact expected result of one case on one rank."""

    def __init__(self, torch: Any, dist: Any, case: _Case, rank: int, world: int, device: Any) -> None:
        self.torch, self.dist, self.case = torch, dist, case
        self.rank, self.world, self.device = rank, world, device
        self.dtype = getattr(torch, case.dtype)
        self.summand, self.tag = fill_values(case.dtype, world)
        self.chunk = case.numel // world if world else 0
        self.element_size = torch.empty(0, dtype=self.dtype).element_size()
        self.skipped: str | None = None
        if case.op in ("send_recv", "send", "recv") and world < 2:
            self.skipped = f"{case.op} needs two ranks; world size is {world}"
        self._allocate()

    def _full(self, numel: int, value: float) -> Any:
        return self.torch.full((numel,), value, dtype=self.dtype, device=self.device)

    def _allocate(self) -> None:
        op, n, numel = self.case.op, self.world, self.case.numel
        if op in ("all_reduce", "reduce", "broadcast", "send_recv", "send", "recv"):
            self.inp = self._full(numel, 0)
        elif op == "all_gather":
            self.inp = self._full(numel, 0)
            self.outs = [self._full(numel, 0) for _ in range(n)]
        elif op == "all_gather_base":
            self.inp = self._full(numel, 0)
            self.out = self._full(numel * n, 0)
        elif op == "reduce_scatter":
            self.ins = [self._full(self.chunk, 0) for _ in range(n)]
            self.out = self._full(self.chunk, 0)
        elif op == "reduce_scatter_base":
            # The whole logged input: an uneven split is the caller's (or the logs') to answer for.
            self.inp = self._full(numel, 0)
            self.out = self._full(self.chunk, 0)
        elif op == "all_to_all":
            self.ins = [self._full(self.chunk, 0) for _ in range(n)]
            self.outs = [self._full(self.chunk, 0) for _ in range(n)]
        elif op == "all_to_all_base":
            self.inp = self._full(self.chunk * n, 0)
            self.out = self._full(self.chunk * n, 0)
        if op in ("send_recv", "recv"):
            self.recv = self._full(numel, 0)

    def bytes_moved(self) -> int:
        """The byte count nccl-tests divides by the time (its `count * typesize [* nranks]`)."""
        op, n, e = self.case.op, self.world, self.element_size
        if op == "barrier":
            return 0
        if op in ("all_gather", "all_gather_base"):
            return self.case.numel * n * e
        if op in ("reduce_scatter", "reduce_scatter_base", "all_to_all", "all_to_all_base"):
            return self.chunk * n * e
        return self.case.numel * e

    def fill(self) -> None:
        op, r, n = self.case.op, self.rank, self.world
        if op in ("all_reduce", "reduce"):
            self.inp.fill_(self.summand(r))
        elif op == "broadcast":
            self.inp.fill_(self.tag(0) if r == 0 else 0)
        elif op in ("all_gather", "all_gather_base"):
            self.inp.fill_(self.tag(r))
            for out in self.outs if op == "all_gather" else [self.out]:
                out.zero_()
        elif op == "reduce_scatter":
            for t in self.ins:
                t.fill_(self.summand(r))
            self.out.zero_()
        elif op == "reduce_scatter_base":
            self.inp.fill_(self.summand(r))
            self.out.zero_()
        elif op == "all_to_all":
            for j, t in enumerate(self.ins):
                t.fill_(self.tag(r * n + j))
            for t in self.outs:
                t.zero_()
        elif op == "all_to_all_base":
            for j in range(n):
                self.inp[j * self.chunk : (j + 1) * self.chunk].fill_(self.tag(r * n + j))
            self.out.zero_()
        elif op in ("send_recv", "send"):
            self.inp.fill_(self.tag(r))
        if op in ("send_recv", "recv"):
            self.recv.zero_()

    def run(self) -> None:
        dist, op, r, n = self.dist, self.case.op, self.rank, self.world
        if op == "all_reduce":
            dist.all_reduce(self.inp, op=dist.ReduceOp.SUM)
        elif op == "reduce":
            dist.reduce(self.inp, dst=0, op=dist.ReduceOp.SUM)
        elif op == "broadcast":
            dist.broadcast(self.inp, src=0)
        elif op == "all_gather":
            dist.all_gather(self.outs, self.inp)
        elif op == "all_gather_base":
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            gather(self.out, self.inp)
        elif op == "reduce_scatter":
            dist.reduce_scatter(self.out, self.ins, op=dist.ReduceOp.SUM)
        elif op == "reduce_scatter_base":
            scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            scatter(self.out, self.inp, op=dist.ReduceOp.SUM)
        elif op == "all_to_all":
            dist.all_to_all(self.outs, self.ins)
        elif op == "all_to_all_base":
            dist.all_to_all_single(self.out, self.inp)
        elif op == "barrier":
            dist.barrier()
        else:  # send_recv, send, recv: one step of a ring, rank r -> r+1
            p2p = []
            if op in ("send_recv", "send"):
                p2p.append(dist.P2POp(dist.isend, self.inp, (r + 1) % n))
            if op in ("send_recv", "recv"):
                p2p.append(dist.P2POp(dist.irecv, self.recv, (r - 1) % n))
            for work in dist.batch_isend_irecv(p2p):
                work.wait()
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _expected(self) -> list[tuple[str, Any, int]]:
        """(name, tensor, expected value) for every region whose content the op defines on this rank."""
        op, r, n = self.case.op, self.rank, self.world
        total = sum(self.summand(i) for i in range(n))
        if op == "all_reduce" or (op == "reduce" and r == 0):
            return [("output", self.inp, total)]
        if op == "broadcast":
            return [("output", self.inp, self.tag(0))]
        if op == "all_gather":
            return [(f"output[{j}]", t, self.tag(j)) for j, t in enumerate(self.outs)]
        if op == "all_gather_base":
            numel = self.case.numel
            return [(f"output[{j}]", self.out[j * numel : (j + 1) * numel], self.tag(j)) for j in range(n)]
        if op in ("reduce_scatter", "reduce_scatter_base"):
            return [("output", self.out, total)]
        if op == "all_to_all":
            return [(f"output[{i}]", t, self.tag(i * n + r)) for i, t in enumerate(self.outs)]
        if op == "all_to_all_base":
            c = self.chunk
            return [(f"output[{i}]", self.out[i * c : (i + 1) * c], self.tag(i * n + r)) for i in range(n)]
        if op in ("send_recv", "recv"):
            return [("received", self.recv, self.tag((r - 1) % n))]
        return []

    def mismatch(self) -> str | None:
        """None when the result is exactly what the op must produce; else where and what differs."""
        for name, tensor, value in self._expected():
            wrong = (tensor != value).nonzero()
            if wrong.numel():
                index = int(wrong[0].item())
                got = tensor[index].item()
                return (
                    f"{name} element {index}: got {got!r}, expected {value} "
                    f"({wrong.numel()} of {tensor.numel()} elements wrong)"
                )
        return None


def _classify(exc: BaseException) -> str:
    # gloo and ProcessGroupNCCL report an expired collective as an exception mentioning the timeout.
    text = str(exc).lower()
    return "hang" if "timed out" in text or "timeout" in text else "error"


def _run_case(
    reporter: _Reporter,
    torch: Any,
    dist: Any,
    case: _Case,
    rank: int,
    world: int,
    device: Any,
    plan: dict[str, Any],
) -> dict[str, Any]:
    timeout_s = float(plan["timeout_s"])
    warmup, iters = int(plan["warmup"]), int(plan["iters"])
    reporter.begin(case, "allocate", None, timeout_s)
    buffers = _Buffers(torch, dist, case, rank, world, device)
    if buffers.skipped:
        return {"status": "skipped", "error": buffers.skipped}
    times: list[float] = []
    for i in range(warmup + iters):
        buffers.fill()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        reporter.begin(case, "warm-up" if i < warmup else "timed", i, timeout_s)
        start = time.perf_counter()
        buffers.run()
        elapsed = time.perf_counter() - start
        reporter.begin(case, "check", i, timeout_s)
        wrong = buffers.mismatch()
        if wrong is not None:
            return {"status": "wrong_result", "error": f"iteration {i}: {wrong}"}
        if i >= warmup:
            times.append(elapsed)
    median = statistics.median(times) if times else 0.0
    bytes_moved = buffers.bytes_moved()
    algbw, busbw = bandwidths(case.op, bytes_moved, median, world)
    return {
        "status": "ok",
        "error": None,
        "iters": len(times),
        "bytes": bytes_moved,
        "time_us": {"median": median * 1e6, "min": min(times) * 1e6 if times else 0.0},
        "algbw_gbps": algbw,
        "busbw_gbps": busbw,
    }


def _cases(plan: dict[str, Any], rank: int, world: int) -> list[_Case]:
    cases = []
    fault = os.environ.get(FAULT_UNLESS_ENV, "")
    name, _, value = fault.partition("=")
    inject = bool(name) and os.environ.get(name) != value and world >= 2 and rank == world - 1
    for index, case in enumerate(plan["cases"]):
        mine = case.get("per_rank", {}).get(str(rank), {})
        op = mine.get("op", case["op"])
        numel = int(mine.get("numel", case["numel"]))
        if inject and op != "barrier":
            numel += 1
        cases.append(_Case(op=op, numel=numel, dtype=case["dtype"], index=index))
    return cases


def _device_facts(torch: Any, device: Any) -> dict[str, Any]:
    facts: dict[str, Any] = {"torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        facts["device_name"] = props.name
        facts["bus_id"] = getattr(props, "pci_bus_id", None)
        version = torch.cuda.nccl.version()  # (major, minor, patch[, suffix])
        parts = version if isinstance(version, tuple) else (version,)
        facts["nccl_version"] = ".".join(str(v) for v in parts if str(v))
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="logscope replay probe (started by torchrun)")
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--results", required=True, type=Path)
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text(encoding="utf-8"))
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout_s = float(plan["timeout_s"])
    base = {"rank": rank, "local_rank": local_rank, "world_size": world, "host": os.uname().nodename}
    reporter = _Reporter(args.results / f"rank{rank}.jsonl", base)
    # torchrun starts each worker in a session of its own: the launcher kills leftovers by this pid.
    started = {"pid": os.getpid(), "rank": rank, "local_rank": local_rank}
    (args.results / f"started-rank{rank}.json").write_text(json.dumps(started), encoding="utf-8")
    _die_with_parent()

    # Block SIGTERM before any other thread exists (torch starts its own), so every thread inherits the mask
    # and the waiter below receives it synchronously even while the main thread sits inside a C++ collective.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=_sigterm_waiter, args=(reporter,), daemon=True).start()
    threading.Thread(target=_watchdog, args=(reporter,), daemon=True).start()

    reporter.begin(None, "import torch", None, timeout_s + 60)
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning, module="torch")
    backend = plan["backend"]
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    reporter.begin(None, "init_process_group", None, timeout_s)
    cases = _cases(plan, rank, world)
    try:
        # The process group's own timeout backs up the watchdog: it fires a little later, so the watchdog
        # reports.
        pg_timeout = timeout_s + max(2.0, timeout_s / 4)
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=pg_timeout))
    except Exception as exc:
        for case in cases:
            reporter.write(case, {"status": _classify(exc), "error": f"init_process_group: {exc}".strip()})
        return EXIT_FAILED
    facts = _device_facts(torch, device)
    failed = False
    for case in cases:
        try:
            record = _run_case(reporter, torch, dist, case, rank, world, device, plan)
        except Exception as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            record = {"status": _classify(exc), "error": last}
        reporter.write(case, {**record, **facts})
        if record["status"] in ("error", "hang"):
            failed = True
            break
        # Stop together: a wrong result on one rank ends the plan on every rank instead of leaving peers
        # waiting in the next case.
        reporter.begin(case, "agree", None, timeout_s)
        flag = torch.tensor([1 if record["status"] == "wrong_result" else 0], device=device)
        try:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        except Exception:
            failed = True  # a peer died after its own report; nothing more to learn here
            break
        if int(flag.item()):
            failed = True
            break
    if not failed:
        reporter.begin(None, "destroy_process_group", None, timeout_s)
        dist.destroy_process_group()
    reporter.idle()
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    # os._exit: after a failed collective, torch's own threads may block a normal interpreter shutdown.
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
