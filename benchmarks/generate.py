"""Generate large, realistic torchrun log trees for the logscope benchmark.

Every line shape below is copied from a real log: the torchrun runs in /work/shared/real-logs/runs, the
public excerpts in /work/shared/real-logs/public, and the verbatim examples in shared/reference/torch_logs.md
(§1.3, §1.4, §2.4, §3.3, §4.2) and isaaclab.md (§3.1, §4.1). Only the numbers vary (seeded), so lines are not
identical.

Speed: each file is written from a template of a few MB that holds literal text and a few "slots"
(timestamps, iteration numbers, epochs). The template is rendered again for every repetition with its counters
advanced, and streamed to disk, so an 8 GB case needs neither 8 GB of memory nor per-line Python work for most
of its bytes.

    python benchmarks/generate.py 8x128MB 1024x256KB single-2GB targz-1GB
    python benchmarks/generate.py --list
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import BinaryIO

GENERATOR_VERSION = 1
DATA_DIR = Path(__file__).resolve().parent / "data"
TEMPLATE_BYTES = 4 << 20  # one rendered repetition; large enough that the per-repetition overhead is negligible
RANKS_PER_NODE = 8
RUN_START = 1752048000.0  # 2025-07-09 08:00:00 UTC: the date of the real 2.6-2.10 cascade quoted in torch_logs.md
RUN_SECONDS = 9 * 3600.0  # nominal wall-clock span of every generated run
STDOUT_SHARE = 0.8  # NCCL INFO, Kit and rsl_rl go to stdout; tqdm and the c10 logger to stderr

_SIZE_RE = re.compile(r"^(\d+)(KB|MB|GB)$")
_UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


@dataclass(frozen=True)
class Case:
    name: str
    layout: str  # "tree" | "console" | "targz"
    ranks: int
    bytes_per_rank: int
    dense: bool = False  # the debug settings of a hang hunt: a third to a half of the lines are events

    @property
    def nominal_bytes(self) -> int:
        return self.ranks * self.bytes_per_rank


def parse_size(text: str) -> int:
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"bad size {text!r} (use e.g. 256KB, 128MB, 1GB)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_case(name: str) -> Case:
    """`<N>x<size>`: per-rank tree; `single-<size>`: one console file of 8 ranks; `targz-<size>`: archive;
    `dense-<N>x<size>`: a per-rank tree written with the debug settings on (`write_dense_rank`)."""
    if name.startswith("dense-"):
        tree = parse_case(name[len("dense-") :])
        if tree.layout != "tree":
            raise ValueError(f"unknown case {name!r} (a dense case is a tree: e.g. dense-8x64MB)")
        return Case(name, "tree", tree.ranks, tree.bytes_per_rank, dense=True)
    if name.startswith("single-"):
        return Case(name, "console", RANKS_PER_NODE, parse_size(name[len("single-") :]) // RANKS_PER_NODE)
    if name.startswith("targz-"):
        return Case(name, "targz", RANKS_PER_NODE, parse_size(name[len("targz-") :]) // RANKS_PER_NODE)
    ranks, sep, size = name.partition("x")
    if not sep or not ranks.isdigit() or int(ranks) < 1:
        raise ValueError(f"unknown case {name!r} (use e.g. 8x128MB, single-2GB, targz-1GB)")
    return Case(name, "tree", int(ranks), parse_size(size))


STANDARD_CASES = ("8x128MB", "8x1GB", "1024x256KB", "single-2GB", "targz-1GB", "dense-8x128MB")


# --------------------------------------------------------------------------------------------------
# Templates: literal text with counter slots, rendered once per repetition.


class SlotKind:
    """Renders `(rep, base)` to text; `base` is what the template fixed (an index or a time fraction)."""

    def __init__(self, render: Callable[[int, float], str]) -> None:
        self.render = render


class Template:
    def __init__(self) -> None:
        self._parts: list[str] = []
        self._slots: list[tuple[SlotKind, float]] = []
        self._literal: list[str] = []
        self.approx_chars = 0

    def text(self, text: str) -> None:
        self._literal.append(text)
        self.approx_chars += len(text)

    def slot(self, kind: SlotKind, base: float, width_hint: int) -> None:
        self._parts.append("".join(self._literal))
        self._literal = []
        self._slots.append((kind, base))
        self.approx_chars += width_hint

    def seal(self) -> None:
        self._parts.append("".join(self._literal))
        self._literal = []

    def render(self, rep: int) -> bytes:
        pieces: list[str] = [self._parts[0]]
        for (kind, base), literal in zip(self._slots, self._parts[1:], strict=True):
            pieces.append(kind.render(rep, base))
            pieces.append(literal)
        return "".join(pieces).encode("utf-8")


@dataclass
class Timeline:
    """Maps (repetition, fraction of one) to wall-clock seconds; every file of a run spans RUN_SECONDS."""

    reps: int = 1

    def at(self, rep: int, frac: float) -> float:
        return RUN_START + (rep + frac) * RUN_SECONDS / max(self.reps, 1)


def kit_datetime(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch))


def c10_header(epoch: float, ns: int, level: str, source: str) -> str:
    """`[E709 17:05:38.162555850 ProcessGroupNCCL.cpp:632] `: month not zero-padded, monotonic ns."""
    tm = time.gmtime(epoch)
    return f"[{level}{tm.tm_mon * 100 + tm.tm_mday} {time.strftime('%H:%M:%S', tm)}.{ns:09d} {source}] "


def hms(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(max(seconds, 0.0)))


# --------------------------------------------------------------------------------------------------
# Line shapes.

KIT_WARNINGS = (  # isaaclab.md §4.1, verbatim channel + message
    ("omni.kit.app.plugin", "No crash reporter present, dumps uploading isn't available."),
    ("omni.usd_config.extension", "Enable omni.materialx.libs extension to use MaterialX"),
    ("omni.datastore", "OmniHub is inaccessible"),
    (
        "omni.isaac.dynamic_control",
        "omni.isaac.dynamic_control is deprecated as of Isaac Sim 4.5. No action is needed from end-users.",
    ),
    ("carb", "Acquiring non optional plugin interface which is not listed as dependency: ..."),
    ("omni.physx.plugin", "USD stage detach not called, holding a loose ptr to a stage!"),
)

OP_TYPES = ("ALLREDUCE", "BROADCAST", "ALLGATHER")


@dataclass(frozen=True)
class RankIdentity:
    rank: int
    local_rank: int
    node: int
    world: int
    host: str
    pid: int


def identity(rank: int, world: int, seed: int) -> RankIdentity:
    rng = random.Random(f"{seed}:identity:{rank}")
    node = rank // RANKS_PER_NODE
    return RankIdentity(rank, rank % RANKS_PER_NODE, node, world, f"gpu-node-{node:03d}", rng.randrange(2000, 99000))


class Writer:
    """Emits lines (each with the console prefix, if any) into a template; owns the counters' slot kinds."""

    def __init__(self, template: Template, timeline: Timeline, rng: random.Random, iters_per_rep: int) -> None:
        self.t = template
        self.timeline = timeline
        self.rng = rng
        self.prefix = ""
        self.iters_per_rep = iters_per_rep
        self.iterations_total = 1
        self.epochs_per_rep = 1
        self.kit_date = SlotKind(lambda rep, frac: kit_datetime(self.timeline.at(rep, frac)))
        self.kit_uptime = SlotKind(lambda rep, frac: f"{int((self.timeline.at(rep, frac) - RUN_START) * 1000):,}")
        self.iteration = SlotKind(self._iteration_header)
        self.timesteps = SlotKind(lambda rep, j: str((rep * self.iters_per_rep + int(j) + 1) * 98304))
        self.elapsed = SlotKind(lambda rep, frac: hms(self.timeline.at(rep, frac) - RUN_START))
        self.eta = SlotKind(lambda rep, frac: hms(RUN_START + RUN_SECONDS - self.timeline.at(rep, frac)))
        self.epoch = SlotKind(lambda rep, j: str(rep * self.epochs_per_rep + int(j)))
        self.fingerprints_per_rep = 1
        self.fingerprint_base = 0  # SequenceNumber of the stream's first fingerprint (`write_fingerprints`)
        self.fingerprint_seq = SlotKind(
            lambda rep, j: str(self.fingerprint_base + rep * self.fingerprints_per_rep + int(j))
        )
        self.c10_info_time = SlotKind(self._c10_info_time)

    def _iteration_header(self, rep: int, j: float) -> str:
        it = rep * self.iters_per_rep + int(j)
        title = f" \033[1m Learning iteration {it}/{self.iterations_total} \033[0m "
        return title.center(80, " ")

    def _c10_info_time(self, rep: int, frac: float) -> str:
        """`[I709 08:00:00.123456789 `: c10's INFO header up to the source file (see `c10_header`)."""
        epoch = self.timeline.at(rep, frac)
        return c10_header(epoch, int(epoch % 1 * 1e9), "I", "")[:-2]

    def line(self, text: str) -> None:
        self.t.text(self.prefix + text + "\n")

    # -- NCCL (torch_logs.md §4.2; NCCL_DEBUG=INFO goes to stdout) ----------------------------------
    def nccl_header(self, who: RankIdentity) -> None:
        head = f"{who.host}:{who.pid}:{who.pid} [{who.local_rank}] NCCL INFO "
        self.line(head + "Bootstrap: Using enp6s0:192.168.68.52<0>")
        self.line(head + "cudaDriverVersion 12090")
        self.line("NCCL version 2.21.5+cuda12.4")
        self.line(head + "NET/IB : Using [RO]; OOB enp6s0:192.168.68.52<0>")
        self.line(head + "Using network Socket")
        self.line(head + "Comm config Blocking set to 1")

    def nccl_comm_init(self, who: RankIdentity) -> None:
        rng = self.rng
        tid = who.pid + rng.randrange(1, 400) if rng.random() < 0.5 else who.pid
        head = f"{who.host}:{who.pid}:{tid} [{who.local_rank}] NCCL INFO "
        comm = f"0x{rng.randrange(0x10000000, 0x7FFFFFFF):x}"
        comm_id = f"0x{rng.getrandbits(64):016x}"
        bus = f"{(who.local_rank + 1) * 0x100000 + rng.choice((0, 0x1000)):x}"
        nranks = who.world
        api = rng.choice(("ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommSplit"))
        ident = f"comm {comm} rank {who.rank} nranks {nranks} cudaDev {who.local_rank} nvmlDev {who.local_rank}"
        self.line(f"{head}{api} {ident} busId {bus} commId {comm_id} - Init START")
        self.line(f"{head}Setting affinity for GPU {who.local_rank} to ffff,ff000000")
        nodes = max(1, (nranks + RANKS_PER_NODE - 1) // RANKS_PER_NODE)
        local_ranks = min(nranks, RANKS_PER_NODE)
        self.line(
            f"{head}comm {comm} rank {who.rank} nRanks {nranks} nNodes {nodes} localRanks {local_ranks} "
            f"localRank {who.local_rank} MNNVL 0"
        )
        channels = rng.choice((2, 4, 8, 16, 24))
        ring = " " + "".join(f"{r:4d}" for r in range(min(nranks, 8)))
        for ch in range(channels):
            self.line(f"{head}Channel {ch:02d}/{channels:02d} :{ring}")
        nxt, prv = (who.rank + 1) % nranks, (who.rank - 1) % nranks
        self.line(f"{head}Trees [0] {nxt}/-1/-1->{who.rank}->{prv} [1] {prv}/-1/-1->{who.rank}->{nxt}")
        self.line(f"{head}P2P Chunksize set to {rng.choice((131072, 524288))}")
        for ch in range(channels):
            peer_local = nxt % RANKS_PER_NODE
            if nxt // RANKS_PER_NODE == who.node:
                self.line(f"{head}Channel {ch:02d}/0 : {who.rank}[{who.local_rank}] -> {nxt}[{peer_local}] via P2P/IPC")
            else:
                self.line(
                    f"{head}Channel {ch:02d}/0 : {who.rank}[{who.local_rank}] -> {nxt}[{peer_local}] "
                    f"[send] via NET/IB/{rng.randrange(4)}/GDRDMA"
                )
        self.line(f"{head}Connected all trees")
        self.line(
            f"{head}{channels} coll channels, {channels} collnet channels, 0 nvls channels, "
            f"{channels * 2} p2p channels, {channels * 2} p2p channels per peer"
        )
        self.line(f"{head}{api} {ident} busId {bus} commId {comm_id} - Init COMPLETE")

    # -- Isaac Sim / Kit (isaaclab.md §4.1) ---------------------------------------------------------------
    def kit_startup(self) -> None:
        self.line("[INFO][AppLauncher]: Loading experience file: /workspace/isaaclab/apps/isaaclab.python.headless.kit")
        self.line("Loading user config located at: '/isaac-sim/kit/data/Kit/Isaac-Sim/4.5/user.config.json'")
        self.line("[Info] [carb] Logging to file: /isaac-sim/kit/logs/Kit/Isaac-Sim/4.5/kit_20250709_080000.log")

    def kit_warning(self, frac: float) -> None:
        channel, message = self.rng.choice(KIT_WARNINGS)
        self.t.text(self.prefix)
        self.t.slot(self.kit_date, frac, 19)
        self.t.text(" [")
        self.t.slot(self.kit_uptime, frac, 10)
        self.t.text(f"ms] [Warning] [{channel}] {message}\n")

    # -- rsl_rl OnPolicyRunner.log, v2.x format (isaaclab.md §3.1 (a)), rank 0 only ----------------
    def rsl_rl_iteration(self, j: int, frac: float) -> None:
        rng, pad = self.rng, 35
        collection, learning = rng.uniform(0.8, 1.6), rng.uniform(0.2, 0.5)
        self.line("#" * 80)
        self.t.text(self.prefix)
        self.t.slot(self.iteration, j, 80)
        self.t.text("\n")
        self.line("")
        fps = 98304 / (collection + learning)
        self.line(
            f"{'Computation:':>{pad}} {fps:.0f} steps/s (collection: {collection:.3f}s, learning {learning:.3f}s)"
        )
        self.line(f"{'Mean action noise std:':>{pad}} {rng.uniform(0.3, 1.0):.2f}")
        self.line(f"{'Mean value_function loss:':>{pad}} {rng.uniform(0.001, 0.4):.4f}")
        self.line(f"{'Mean surrogate loss:':>{pad}} {rng.uniform(-0.02, 0.01):.4f}")
        self.line(f"{'Mean entropy loss:':>{pad}} {rng.uniform(5.0, 12.0):.4f}")
        self.line(f"{'Mean reward:':>{pad}} {rng.uniform(-2.0, 30.0):.2f}")
        self.line(f"{'Mean episode length:':>{pad}} {rng.uniform(100.0, 1000.0):.2f}")
        self.line(f"{'Episode_Reward/track_lin_vel_xy_exp:':>{pad}} {rng.uniform(0.0, 1.0):.4f}")
        self.line("-" * 80)
        self.t.text(f"{self.prefix}{'Total timesteps:':>{pad}} ")
        self.t.slot(self.timesteps, j, 9)
        self.t.text("\n")
        self.line(f"{'Iteration time:':>{pad}} {collection + learning:.2f}s")
        self.t.text(f"{self.prefix}{'Time elapsed:':>{pad}} ")
        self.t.slot(self.elapsed, frac, 8)
        self.t.text(f"\n{self.prefix}{'ETA:':>{pad}} ")
        self.t.slot(self.eta, frac, 8)
        self.t.text("\n")

    # -- The debug settings of a hang hunt (dense cases) -------------------------------------------------------
    def fingerprint(self, who: RankIdentity, j: int, frac: float) -> None:
        """TORCH_DISTRIBUTED_DEBUG=DETAIL: ProcessGroupWrapper's line before every collective. Prefix and
        wording: real run 21 (shared/real-logs/runs/21_debug_detail_collective_mismatch, stderr.log, torch 2.x);
        the CUDA tensor's options: NVIDIA/nccl#1160 (fixtures/cases/blind3_nccl_fsdp_example_hang_before_loop);
        the shape: the one flattened gradient all_reduce of fixtures/gpu/nccl_job.py (46988 parameters), so
        every rank runs the same collective at the same SequenceNumber."""
        self.t.text(f"{self.prefix}[rank{who.rank}]:")
        self.t.slot(self.c10_info_time, frac, 26)
        self.t.text(
            f"ProcessGroupWrapper.cpp:710] [Rank {who.rank}] Running collective: CollectiveFingerPrint(SequenceNumber="
        )
        self.t.slot(self.fingerprint_seq, j, 8)
        self.t.text(
            ", OpType=ALLREDUCE, TensorShape=[46988], TensorDtypes=Float, TensorDeviceTypes=TensorOptions("
            "dtype=float (default), device=cuda, layout=Strided (default), requires_grad=false (default), "
            "pinned_memory=false (default), memory_format=(nullopt)))\n"
        )

    def nccl_coll(self, who: RankIdentity, comm: str, stream: str) -> None:
        """NCCL_DEBUG_SUBSYS=COLL: NCCL's line for every collective (NVIDIA/nccl#1193,
        fixtures/cases/r9a_nccl_1193_raytrain_128rank_allreduce_seq5020_timeout: `datatype 7` is float32)."""
        rng = self.rng
        buff = f"0x{rng.randrange(0x7F0000000000, 0x7FFFFFFFFFFF):x}"
        self.line(
            f"{who.host}:{who.pid}:{who.pid + 1} [{who.local_rank}] NCCL INFO AllReduce: opCount "
            f"{rng.randrange(0x1000, 0xFFFF):x} sendbuff {buff} recvbuff {buff} count 46988 datatype 7 op 0 root 0 "
            f"comm {comm} [nranks={who.world}] stream {stream}"
        )

    def cpp_info_pg(self, who: RankIdentity) -> None:
        """TORCH_CPP_LOG_LEVEL=INFO: ProcessGroupNCCL's lines when the default group starts, verbatim from
        fixtures/gpu/healthy_ws2_hostid_cpp_info (torch 2.11, stderr.log lines 2-9) but TORCH_DISTRIBUTED_DEBUG,
        which is DETAIL here."""
        r = who.rank

        def c10(step: int, source: str) -> str:
            return c10_header(RUN_START + step * 0.001, 123187871 + step * 5000, "I", source)

        pg = f"[PG ID 0 PG GUID 0 Rank {r}]"
        default = f"[rank{r}]:"
        self.line(
            c10(0, "ProcessGroupNCCL.cpp:1725") + f"{pg} HeartbeatMonitor environments: TORCH_NCCL_ENABLE_MONITORING "
            "(Whether to kill program when no watchdog heartbeat detected): 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 1, "
            "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 15000, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, "
            "TORCH_NCCL_COORD_CHECK_MILSEC: 1000, TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN: 1"
        )
        self.line(
            c10(1, "ProcessGroupNCCL.cpp:2058") + f"{pg} PGNCCL Watchdog environments: TORCH_NCCL_RETHROW_CUDA_ERRORS: "
            "1, TORCH_NCCL_PROPAGATE_ERROR: 0, TORCH_NCCL_DESYNC_DEBUG: 0"
        )
        self.line(
            c10(2, "ProcessGroupNCCL.cpp:988") + f"{pg} ProcessGroupNCCL initialization options: size: {who.world}, "
            f"global rank: {r}, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: -2, "
            "PG Name: 0"
        )
        self.line(
            c10(3, "ProcessGroupNCCL.cpp:999") + f"{pg} ProcessGroupNCCL environments: NCCL version: 2.21.5, "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING: 1, TORCH_NCCL_ENABLE_TIMING: 0, TORCH_NCCL_BLOCKING_WAIT: 0, "
            "TORCH_DISTRIBUTED_DEBUG: DETAIL, TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK: 0, "
            "TORCH_NCCL_TRACE_BUFFER_SIZE: 2000, TORCH_NCCL_NAN_CHECK: 0, TORCH_NCCL_CUDA_EVENT_CACHE: 1"
        )
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
        self.line(default + c10(4, "ProcessGroupNCCL.cpp:1068") + f"{pg} Using non-blocking mode: 0")
        self.line(
            default + c10(5, "ProcessGroupNCCL.cpp:3146") + f"{pg} ProcessGroupNCCL broadcast unique ID through "
            "store took 0.064149 ms"
        )
        self.line(default + c10(6, "NCCLUtils.cpp:91") + f"Rank {r}: creating NCCL communicator with mode: blocking")
        self.line(default + c10(7, "ProcessGroupNCCL.cpp:3180") + f"{pg} NCCL_DEBUG: INFO")

    # -- tqdm to a file: a 10-cell bar, `\r` before every refresh, `\n` on close (isaaclab.md §3.3) ----------
    def tqdm_bar(self, j: int) -> None:
        rng = self.rng
        total = rng.choice((1000, 2400, 4800))
        rate = rng.uniform(20.0, 80.0)
        updates = rng.randrange(40, 120)
        self.t.text(self.prefix)
        for u in range(updates + 1):
            n = total * u // updates
            done = n / total
            cells = int(done * 10)
            partial = " ▏▎▍▌▋▊▉"[int((done * 10 - cells) * 8)] if cells < 10 else ""
            bar = ("█" * cells + partial).ljust(10)
            if n == 0:
                stats = "00:00<?, ?it/s"
            else:
                speed = rate * rng.uniform(0.9, 1.1)
                stats = f"{hms(n / rate)[3:]}<{hms((total - n) / rate)[3:]}, {speed:.2f}it/s"
            self.t.text("\rEpoch ")
            self.t.slot(self.epoch, j, 4)
            self.t.text(f": {done * 100:3.0f}%|{bar}| {n}/{total} [{stats}]")
        self.t.text("\n")


# --------------------------------------------------------------------------------------------------
# The failure at the end (torch_logs.md §3.3, torch 2.6-2.10 wording) and torchrun's summary (§1.4, §2.4).


@dataclass(frozen=True)
class Failure:
    culprit: int  # the rank one collective behind
    detectors: tuple[int, ...]  # ranks whose watchdog fires
    seq: int  # SeqNum the detectors time out on
    numel: int
    when: float


def plan_failure(world: int, seed: int) -> Failure:
    rng = random.Random(f"{seed}:failure:{world}")
    culprit = rng.randrange(1, world) if world > 1 else 0  # not rank 0, which is where most tools look first
    others = [r for r in range(world) if r != culprit]
    detectors = tuple(sorted(rng.sample(others, min(3, len(others)))))
    return Failure(
        culprit,
        detectors,
        rng.randrange(20000, 90000),
        rng.randrange(1_000_000, 9_000_000),
        RUN_START + RUN_SECONDS,
    )


def cascade_lines(who: RankIdentity, failure: Failure, rng: random.Random) -> list[str]:
    r, seq = who.rank, failure.seq
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {r}]"
    when = failure.when + rng.uniform(0.0, 0.4)
    ns = rng.randrange(10**8, 9 * 10**8)
    line_no = {
        "wd": 632,
        "status": 2271,
        "fr": 670,
        "first": 2106,
        "dump": 1746,
        "prep": 1536,
        "some": 684,
        "down": 698,
        "term": 1899,
    }

    def c10(key: str, step: int) -> str:
        return f"[rank{r}]:" + c10_header(
            when + step * 0.0003, ns + step * 17000, "E", f"ProcessGroupNCCL.cpp:{line_no[key]}"
        )

    if r == failure.culprit:
        # The rank one behind never enqueued `seq`; it only hears of the timeout from a peer (§3.3, end).
        return [
            c10("dump", 0) + f"{pg} Observed flight recorder dump signal from another rank via TCPStore.",
            c10("dump", 1) + f"{pg} Received a dump signal due to a collective timeout from  rank "
            f"{failure.detectors[0]} and we will try our best to dump the debug info. "
            f"Last enqueued NCCL work: {seq - 1}, last completed NCCL work: {seq - 1}."
            "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used "
            "across ranks, the order of collectives is not same for all ranks or the scheduled collective, "
            "for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons "
            "such as network errors "
            "or bugs in the communications library (e.g. NCCL), etc. ",
        ]
    ran_for = 600000 + rng.randrange(0, 90)
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={failure.numel}, NumelOut={failure.numel}, "
        f"Timeout(ms)=600000)"
    )
    timeout = (
        f"[Rank {r}] Watchdog caught collective operation timeout: {work} ran for {ran_for} milliseconds "
        "before timing out."
    )
    return [
        c10("wd", 0) + timeout,
        c10("status", 1) + f"{pg}  failure detected by watchdog at work sequence id: {seq} PG status: "
        f"last enqueued work: {seq}, last completed work: {seq - 1}",
        c10("fr", 2) + "Stack trace of the failed collective not found, potentially because FlightRecorder is "
        "disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
        c10("first", 3) + f"{pg} First PG on this rank to signal dumping.",
        c10("some", 4) + f"[Rank {r}] Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        c10("down", 5) + f"[Rank {r}] To avoid data inconsistency, we are taking the entire process down.",
        c10("term", 6) + f"{pg} Process group watchdog thread terminated with exception: {timeout}",
        "Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 "
        "(most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, "
        "std::char_traits<char>, std::allocator<char> >) + 0x98 (0x7f92e62535e8 in "
        "/opt/conda/lib/python3.10/site-packages/torch/lib/libc10.so)",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {pg} Process group watchdog thread terminated with exception: {timeout}",
    ]


def torchrun_summary(failure: Failure, first: RankIdentity) -> list[str]:
    when = failure.when + 1.2
    tm = time.gmtime(when)
    glog = f"E{time.strftime('%m%d %H:%M:%S', tm)}.816000 56204 "
    lines = [
        glog + "site-packages/torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) "
        f"local_rank: {first.local_rank} (pid: {first.pid}) of binary: /opt/conda/bin/python3.10",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        "train.py FAILED",
        "-" * 60,
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "-" * 60,
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {time.strftime('%Y-%m-%d_%H:%M:%S', tm)}",
        f"  host      : {first.host}",
        f"  rank      : {first.rank} (local_rank: {first.local_rank})",
        f"  exitcode  : -6 (pid: {first.pid})",
        "  error_file: <N/A>",
        f"  traceback : Signal 6 (SIGABRT) received by PID {first.pid}",
        "=" * 60,
    ]
    return lines


# --------------------------------------------------------------------------------------------------
# Per-stream content.

ITERS_PER_REP = 400  # rank 0 rsl_rl blocks per 4 MB stdout template (~12% of its bytes)


def build_stdout_template(who: RankIdentity, rng: random.Random, timeline: Timeline, target: int) -> Writer:
    w = Writer(Template(), timeline, rng, iters_per_rep=0)
    iters = 0
    while w.t.approx_chars < target:
        frac = w.t.approx_chars / target
        roll = rng.random()
        if who.rank == 0 and roll < 0.25:
            w.rsl_rl_iteration(iters, frac)
            iters += 1
        elif roll < 0.45:
            w.kit_warning(frac)
        else:
            w.nccl_comm_init(who)
    w.iters_per_rep = max(iters, 1)
    w.t.seal()
    return w


def build_stderr_template(who: RankIdentity, rng: random.Random, timeline: Timeline, target: int) -> Writer:
    w = Writer(Template(), timeline, rng, iters_per_rep=1)
    bars = 0
    while w.t.approx_chars < target:
        w.tqdm_bar(bars)
        bars += 1
    w.epochs_per_rep = bars
    w.t.seal()
    return w


def write_stream(out: BinaryIO, writer: Writer, body_bytes: int, header: bytes) -> int:
    """Render the template until `body_bytes` are written; the last repetition is cut at a line end."""
    size0 = len(writer.t.render(0))
    reps = max(body_bytes // max(size0, 1), 0)
    writer.timeline.reps = reps + 1
    writer.iterations_total = (reps + 1) * writer.iters_per_rep
    out.write(header)
    written = len(header)
    for rep in range(reps):
        block = writer.t.render(rep)
        out.write(block)
        written += len(block)
    remaining = body_bytes - reps * size0
    if remaining > 0:
        block = writer.t.render(reps)
        cut = block.rfind(b"\n", 0, remaining) + 1
        out.write(block[:cut])
        written += cut
    return written


def header_text(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("utf-8")


def rank_header(who: RankIdentity, rng: random.Random) -> bytes:
    w = Writer(Template(), Timeline(), rng, iters_per_rep=1)
    w.kit_startup()
    w.nccl_header(who)
    w.nccl_comm_init(who)
    w.line(f"Synchronizing parameters for rank {who.rank}...")
    w.t.seal()
    return w.t.render(0)


def write_rank(directory: Path, who: RankIdentity, bytes_per_rank: int, failure: Failure, seed: int) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{seed}:rank:{who.rank}")
    out_target = int(bytes_per_rank * STDOUT_SHARE)
    err_target = bytes_per_rank - out_target
    written = 0
    with open(directory / "stdout.log", "wb", buffering=0) as out:
        header = rank_header(who, rng)
        writer = build_stdout_template(who, rng, Timeline(), min(TEMPLATE_BYTES, out_target))
        written += write_stream(out, writer, max(out_target - len(header), 0), header)
    with open(directory / "stderr.log", "wb", buffering=0) as err:
        writer = build_stderr_template(who, rng, Timeline(), min(TEMPLATE_BYTES // 4, err_target))
        tail = ""
        if who.rank == failure.culprit or who.rank in failure.detectors:
            tail = "".join(line + "\n" for line in cascade_lines(who, failure, rng))
        tail_bytes = tail.encode("utf-8")
        written += write_stream(err, writer, max(err_target - len(tail_bytes), 0), b"")
        err.write(tail_bytes)
        written += len(tail_bytes)
    return written


# --------------------------------------------------------------------------------------------------
# Dense cases: NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=COLL, TORCH_CPP_LOG_LEVEL=INFO and TORCH_DISTRIBUTED_DEBUG=DETAIL,
# the settings people turn on when a job hangs. About 40 % of the lines are events (fingerprints, communicator
# inits, transports): stderr is ProcessGroupWrapper's fingerprint of every collective, stdout NCCL's line for the
# same collectives between communicator-init blocks (a new communicator for a subgroup or a P2P pair).

DENSE_STDOUT_SHARE = 0.5
DENSE_SEQ_BASE = 20_000_000  # SequenceNumbers of a long run: eight digits from the first to the last (up to
# 10 million collectives per rank), so every repetition has one size


def build_dense_stdout_template(who: RankIdentity, rng: random.Random, timeline: Timeline, target: int) -> Writer:
    w = Writer(Template(), timeline, rng, iters_per_rep=0)
    comm = f"0x{rng.randrange(0x10000000, 0x7FFFFFFF):x}"
    stream = f"0x{rng.randrange(0x550000000000, 0x56FFFFFFFFFF):x}"
    iters = 0
    while w.t.approx_chars < target:
        frac = w.t.approx_chars / target
        roll = rng.random()
        if who.rank == 0 and roll < 0.05:
            w.rsl_rl_iteration(iters, frac)
            iters += 1
        elif roll < 0.06:
            w.nccl_comm_init(who)
        elif roll < 0.25:
            w.kit_warning(frac)
        else:
            w.nccl_coll(who, comm, stream)
    w.iters_per_rep = max(iters, 1)
    w.t.seal()
    return w


def build_fingerprint_template(who: RankIdentity, rng: random.Random, timeline: Timeline, target: int) -> Writer:
    w = Writer(Template(), timeline, rng, iters_per_rep=1)
    count = 0
    while w.t.approx_chars < target:
        w.fingerprint(who, count, w.t.approx_chars / target)
        count += 1
    w.fingerprints_per_rep = count
    w.t.seal()
    return w


def write_fingerprints(out: BinaryIO, writer: Writer, body_bytes: int, last_seq: int) -> int:
    """`write_stream`, the fingerprints numbered so that the last one written is `last_seq` (every repetition
    has the same size: the numbers have as many digits)."""
    writer.fingerprint_base = last_seq  # as many digits as the final numbers, so the sizes below are theirs
    size0 = len(writer.t.render(0))
    reps = body_bytes // max(size0, 1)
    cut = writer.t.render(reps)[: max(body_bytes - reps * size0, 0)]
    written = reps * writer.fingerprints_per_rep + cut[: cut.rfind(b"\n") + 1].count(b"Running collective")
    writer.fingerprint_base = last_seq - written + 1
    return write_stream(out, writer, body_bytes, b"")


def write_dense_rank(directory: Path, who: RankIdentity, bytes_per_rank: int, failure: Failure, seed: int) -> int:
    """A rank of a dense case: every rank's last fingerprint is the SequenceNumber the watchdogs time out on, but
    the culprit's, which is one behind (it never reached that collective)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"{seed}:dense:{who.rank}")
    out_target = int(bytes_per_rank * DENSE_STDOUT_SHARE)
    err_target = bytes_per_rank - out_target
    written = 0
    with open(directory / "stdout.log", "wb", buffering=0) as out:
        header = rank_header(who, rng)
        writer = build_dense_stdout_template(who, rng, Timeline(), min(TEMPLATE_BYTES, out_target))
        written += write_stream(out, writer, max(out_target - len(header), 0), header)
    with open(directory / "stderr.log", "wb", buffering=0) as err:
        head = Writer(Template(), Timeline(), rng, iters_per_rep=1)
        head.cpp_info_pg(who)
        head.t.seal()
        header = head.t.render(0)
        err.write(header)
        tail = ""
        if who.rank == failure.culprit or who.rank in failure.detectors:
            tail = "".join(line + "\n" for line in cascade_lines(who, failure, rng))
        tail_bytes = tail.encode("utf-8")
        writer = build_fingerprint_template(who, rng, Timeline(), min(TEMPLATE_BYTES, err_target))
        last_seq = failure.seq - 1 if who.rank == failure.culprit else failure.seq
        body = max(err_target - len(header) - len(tail_bytes), 0)
        written += len(header) + write_fingerprints(err, writer, body, last_seq)
        err.write(tail_bytes)
        written += len(tail_bytes)
    return written


def run_dir_name(seed: int, node: int) -> str:
    rng = random.Random(f"{seed}:rundir:{node}")
    return "none_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))


def generate_tree(
    root: Path, ranks: int, bytes_per_rank: int, seed: int, dense: bool = False
) -> tuple[int, int, Failure]:
    """torchrun --log_dir layout; a multi-node job gets one log dir per node (`node<NNN>/`), one per agent."""
    failure = plan_failure(ranks, seed)
    if dense:
        failure = replace(failure, seq=failure.seq + DENSE_SEQ_BASE)
    write = write_dense_rank if dense else write_rank
    total = files = 0
    for rank in range(ranks):
        who = identity(rank, ranks, seed)
        node_root = root / f"node{who.node:03d}" if ranks > RANKS_PER_NODE else root
        directory = node_root / run_dir_name(seed, who.node) / "attempt_0" / str(who.local_rank)
        total += write(directory, who, bytes_per_rank, failure, seed)
        files += 2
    return total, files, failure


def generate_console(path: Path, ranks: int, bytes_per_rank: int, seed: int) -> tuple[int, Failure]:
    """One torchrun console (`--tee 3`): worker lines behind `[default<local_rank>]:`, ranks interleaved."""
    failure = plan_failure(ranks, seed)
    people = [identity(r, ranks, seed) for r in range(ranks)]
    rng = random.Random(f"{seed}:console")
    timeline = Timeline()
    w = Writer(Template(), timeline, rng, iters_per_rep=0)
    target = TEMPLATE_BYTES
    iters = bars = 0
    while w.t.approx_chars < target:
        frac = w.t.approx_chars / target
        who = rng.choice(people)
        w.prefix = f"[default{who.local_rank}]:"
        roll = rng.random()
        if roll < 0.04:
            w.prefix = "[default0]:"
            w.rsl_rl_iteration(iters, frac)
            iters += 1
        elif roll < 0.20:
            w.kit_warning(frac)
        elif roll < 0.30:
            w.tqdm_bar(bars)
            bars += 1
        else:
            w.nccl_comm_init(who)
    w.iters_per_rep, w.epochs_per_rep = max(iters, 1), max(bars, 1)
    w.t.seal()
    agent = "W0709 08:00:00.957000 9874 torch/distributed/run.py:874] "  # real runs/01 console, its date moved
    stars = "*" * 41
    header = header_text(
        [
            agent,
            agent + stars,
            agent + "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
            "your system being overloaded, please further tune the variable for optimal performance in your "
            "application as needed. ",
            agent + stars,
        ]
    )
    for who in people:
        header += b"".join(
            f"[default{who.local_rank}]:".encode() + line + b"\n" for line in rank_header(who, rng).split(b"\n") if line
        )
    tail_lines: list[str] = []
    for who in people:
        if who.rank == failure.culprit or who.rank in failure.detectors:
            tail_lines += [f"[default{who.local_rank}]:{line}" for line in cascade_lines(who, failure, rng)]
    tail_lines += torchrun_summary(failure, people[failure.detectors[0]])
    tail = header_text(tail_lines)
    with open(path, "wb", buffering=0) as out:
        written = write_stream(out, w, max(ranks * bytes_per_rank - len(header) - len(tail), 0), header)
        out.write(tail)
    return written + len(tail), failure


@dataclass
class Manifest:
    case: str
    layout: str
    ranks: int
    bytes: int  # total bytes of log text (for targz: before compression)
    files: int
    analyze_path: str  # relative to the case directory: what `logscope analyze` and grep read
    archive_bytes: int | None
    culprit_rank: int
    timeout_ranks: list[int]
    seq: int
    seed: int
    generator_version: int
    seconds: float


def case_dir(case: Case) -> Path:
    return DATA_DIR / case.name


def load_manifest(case: Case, seed: int) -> Manifest | None:
    path = case_dir(case) / "manifest.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    manifest = Manifest(**data)
    if manifest.seed != seed or manifest.generator_version != GENERATOR_VERSION:
        return None
    return manifest


def generate(case: Case, seed: int = 0, force: bool = False) -> Manifest:
    """Create the case under benchmarks/data/<case> (reused when already generated with this seed/version)."""
    existing = None if force else load_manifest(case, seed)
    if existing is not None:
        return existing
    root = case_dir(case)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    started = time.perf_counter()
    archive_bytes: int | None = None
    if case.layout == "tree":
        total, files, failure = generate_tree(root / "logs", case.ranks, case.bytes_per_rank, seed, case.dense)
        analyze_path = "logs"
    elif case.layout == "console":
        total, failure = generate_console(root / "console.log", case.ranks, case.bytes_per_rank, seed)
        files, analyze_path = 1, "console.log"
    else:
        staging = root / "staging"
        total, files, failure = generate_tree(staging, case.ranks, case.bytes_per_rank, seed)
        archive = root / "logs.tar.gz"
        compressor = ["-I", "pigz"] if shutil.which("pigz") else ["-z"]
        subprocess.run(["tar", *compressor, "-cf", str(archive), "-C", str(staging), "."], check=True)
        shutil.rmtree(staging)
        archive_bytes = archive.stat().st_size
        analyze_path = "logs.tar.gz"
    manifest = Manifest(
        case=case.name,
        layout=case.layout,
        ranks=case.ranks,
        bytes=total,
        files=files,
        analyze_path=analyze_path,
        archive_bytes=archive_bytes,
        culprit_rank=failure.culprit,
        timeout_ranks=list(failure.detectors),
        seq=failure.seq,
        seed=seed,
        generator_version=GENERATOR_VERSION,
        seconds=round(time.perf_counter() - started, 2),
    )
    (root / "manifest.json").write_text(json.dumps(asdict(manifest), indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", default=list(STANDARD_CASES), help="e.g. 8x128MB 8x1GB single-2GB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="regenerate even if the case exists")
    parser.add_argument("--list", action="store_true", help="list the standard cases and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name in STANDARD_CASES:
            case = parse_case(name)
            print(f"{name:14} {case.layout:8} {case.ranks:5} ranks  {case.nominal_bytes / 2**20:8.0f} MiB")
        return 0
    try:
        cases = [parse_case(name) for name in args.cases]
    except ValueError as exc:
        print(f"generate.py: {exc}", file=sys.stderr)
        return 2
    for case in cases:
        m = generate(case, args.seed, args.force)
        rate = m.bytes / 2**20 / m.seconds if m.seconds else float("inf")
        print(
            f"{m.case:14} {m.bytes / 2**20:9.1f} MiB in {m.files:5} files, {m.seconds:6.1f} s "
            f"({rate:.0f} MiB/s)  -> {case_dir(case) / m.analyze_path}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
