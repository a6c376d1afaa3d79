"""Stack dumps of live processes (py-spy, faulthandler, pystack, gdb) read back into one dump per process, with the
rank it belongs to where that can be told and the functions its threads were in."""

from __future__ import annotations

from dataclasses import dataclass, field

import regex

from logscope.events.catalogue import kinds
from logscope.rules.api import Context
from logscope.rules.checks.rows import frame_function
from logscope.vocab import Event

# Where a dumped process waits for its peers: torch.distributed's collectives, the store barrier, NCCL's calls.
WAIT_FUNCTIONS = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "broadcast",
        "broadcast_object_list",
        "barrier",
        "monitored_barrier",
        "all_to_all",
        "all_to_all_single",
        "reduce",
        "gather",
        "scatter",
        "send",
        "recv",
        "_store_based_barrier",
        "ncclGroupEnd",
        "getNCCLComm",
        "ncclCommInitRank",
    }
)

# Functions that sync a model's initial parameters from rank 0 before training: torch DDP's constructor
# (torch/distributed/utils.py, distributed.py), FSDP's, DeepSpeed's engine, rsl_rl's PPO and skrl's Model.
SYNC_FUNCTIONS = frozenset(
    {
        "_sync_module_states",
        "_sync_params_and_buffers",
        "_verify_param_shape_across_processes",
        "_verify_model_across_ranks",
        "_sync_module_params_and_buffers",
        "_broadcast_model",
        "broadcast_parameters",
    }
)

# Frames as the signatures read them: plain, torch.distributed's own (c10d_call), torchrun's, py-spy's and gdb's.
DUMP_FRAME_KINDS = kinds("traceback_frame", "c10d_call", "launcher_frame", "dump_frame")
PID_IN_TEXT = regex.compile(r"\bpid[=:] ?(\d+)")


@dataclass
class StackDump:
    """One process's stack dump: where its threads were when a debugger or py-spy looked."""

    header: Event
    rank: int | None
    pid: int | None
    recent_first: bool = True  # faulthandler, py-spy and gdb print the innermost frame first, pystack last
    functions: list[str] = field(default_factory=list)  # as printed

    @property
    def collective(self) -> str | None:
        return next((fn for fn in self.functions if fn in WAIT_FUNCTIONS), None)

    @property
    def sync_function(self) -> str | None:
        """The framework's initial parameter sync this process is in (DDP's constructor, DeepSpeed's engine,
        rsl_rl's and skrl's broadcast_parameters), if it is in one."""
        return next((fn for fn in self.functions if fn in SYNC_FUNCTIONS), None)

    @property
    def innermost(self) -> str | None:
        if not self.functions:
            return None
        return self.functions[0] if self.recent_first else self.functions[-1]


def stack_dumps(ctx: Context) -> list[StackDump]:
    """The stack dumps in the input, one per process, each with the rank it belongs to where that can be told: the
    rank's own file, or the dumped pid joined with a line of the rank that names its pid."""
    headers = ctx.by_kind.get("stack_dump", [])
    if not headers:
        return []
    dumps = _dumps_by_process(headers, _pid_ranks(ctx))
    _add_frames(ctx, dumps)
    return dumps


def _pid_ranks(ctx: Context) -> dict[int, int]:
    """pid -> global rank, from the ranks' own lines that name their pid (NCCL's host:pid:tid, a job's pid=...)."""
    out: dict[int, int] = {}
    for e in ctx.rows:
        if e["rank"] is None or e["kind"] in ("stack_dump", "dump_frame"):
            continue
        pid = e["_f"].get("pid")
        if pid is None and (m := PID_IN_TEXT.search(str(e["text"]))) is not None:
            pid = m[1]
        if pid is not None and str(pid).isdigit():
            out.setdefault(int(pid), e["rank"])
    return out


def _dumps_by_process(headers: list[Event], pid_rank: dict[int, int]) -> list[StackDump]:
    """One dump per process from the dump and thread headers, in file order."""
    dumps: list[StackDump] = []
    current: dict[int, StackDump] = {}  # per file, the process being dumped
    for h in sorted(headers, key=lambda e: (e["sid"], e["line"])):
        f = h["_f"]
        # pystack's and gdb's thread ids are Linux thread ids: the main thread's is the process's pid.
        pid = next((int(f[k]) for k in ("pid", "pystack_thread", "lwp") if str(f.get(k) or "").isdigit()), None)
        rank = h["rank"] if h["rank"] is not None else pid_rank.get(pid) if pid is not None else None
        previous = current.get(h["sid"])
        # One process's dump names it once and then lists its threads: py-spy's "Process N:" line, then its
        # "Thread N (idle)" lines; faulthandler's, pystack's and gdb's threads follow one another. A thread header
        # starts another process only where it says another rank, or another pid that is a rank's.
        same = previous is not None and f.get("pid") is None and (rank is None or rank == previous.rank)
        if same and previous is not None:
            if previous.rank is None:
                previous.rank = rank
            continue
        dump = StackDump(h, rank, pid, recent_first=f.get("pystack_thread") is None)
        dumps.append(dump)
        current[h["sid"]] = dump
    return dumps


def _add_frames(ctx: Context, dumps: list[StackDump]) -> None:
    """Give each frame line to the dump above it in its file, as the bare function name."""
    frames = sorted(
        (e for k in DUMP_FRAME_KINDS for e in ctx.by_kind.get(k, [])),
        key=lambda e: (e["sid"], e["line"]),
    )
    by_sid: dict[int, list[StackDump]] = {}
    for d in dumps:
        by_sid.setdefault(d.header["sid"], []).append(d)
    for e in frames:
        owners = [d for d in by_sid.get(e["sid"], []) if d.header["line"] < e["line"]]
        if owners:
            fn = frame_function(e)
            owners[-1].functions.append(fn.rsplit("::", 1)[-1].rsplit(".", 1)[-1])


def dumps_text(dumps: list[StackDump]) -> str:
    """What the dumps say, for a message: where each process waits or is (nothing where there are none)."""
    if not dumps:
        return ""
    parts = []
    for d in dumps[:8]:
        who = f"rank {d.rank}" if d.rank is not None else f"pid {d.pid}" if d.pid is not None else "a process"
        where = d.collective or d.innermost or "no frame shown"
        sync = f" under {d.sync_function}, the initial parameter sync" if d.collective and d.sync_function else ""
        parts.append(f"{who} waits in {where}{sync}" if d.collective else f"{who} is in {where}")
    return " Stack dumps of the live processes: " + "; ".join(parts) + "."
