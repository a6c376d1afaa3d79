"""Start the probe through torchrun and collect what every rank reported.

torchrun (`python -m torch.distributed.run`) is the distributed engine; this module only builds its argv, runs
it in a session of its own, and tears everything down afterwards. torchrun starts each worker in a session of
its own too, so the workers record their pids and anything still alive at the end is killed by process group.
No shell is involved: argv lists only, and every environment value that came from a log is checked first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logscope.errors import LogscopeError

WORKER = Path(__file__).with_name("worker.py")

# Names a replay may take from a job's logs: NCCL's and the c10d/gloo knobs that change how collectives
# behave.
_ENV_NAME = re.compile(r"^(?:NCCL|TORCH_NCCL|GLOO)_[A-Z0-9_]+$|^TORCH_DISTRIBUTED_DEBUG$|^TORCH_CPP_LOG_LEVEL$")
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_.,:;^=+@%/-]{0,200}$")
# Variables that name files or shared libraries (a log must not make the probe load a plugin or write a file)
# or another machine's network devices (they would break the probe on this one).
_ENV_REFUSED = re.compile(r"FILE|PLUGIN|_LIB|_PATH|_DIR|IFNAME|_HCA$|_DEV$")

_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)")
_ERROR_LINE = re.compile(r"what\(\):|Error|Exception|Fatal|Aborted|error")
_NOISE = re.compile(r"Failed to initialize NumPy|_conversion_method_template|FutureWarning|return func\(")


@dataclass
class Rendezvous:
    """torchrun's rendezvous flags. Static (master address and port) unless a rendezvous backend is given."""

    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_id: str | None = None

    @property
    def is_static(self) -> bool:
        return self.rdzv_backend in (None, "static")

    def check(self) -> None:
        """Refuse a static multi-node rendezvous that does not say where to meet."""
        if self.is_static and self.nnodes > 1 and (self.master_addr is None or self.master_port is None):
            raise LogscopeError(
                "a multi-node replay needs --master-addr and --master-port (or --rdzv-backend and --rdzv-endpoint)"
            )

    def resolved(self) -> Rendezvous:
        """Defaults filled in: loopback and a free port for one node; multi-node static needs both given."""
        self.check()
        if not self.is_static:
            return self
        return Rendezvous(
            nnodes=self.nnodes,
            node_rank=self.node_rank,
            master_addr=self.master_addr or "127.0.0.1",
            master_port=self.master_port or free_port(),
        )

    @property
    def on_loopback(self) -> bool:
        return self.is_static and self.nnodes == 1 and (self.master_addr or "127.0.0.1") in ("127.0.0.1", "localhost")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def loopback_interface() -> str | None:
    with contextlib.suppress(OSError):
        for _, name in socket.if_nameindex():
            if name.startswith("lo"):
                return name
    return None


def checked_env(env: Mapping[str, str], origin: str) -> tuple[dict[str, str], list[str]]:
    """The variables of `env` a probe may use, and one note per variable left out, saying why."""
    accepted: dict[str, str] = {}
    notes: list[str] = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            notes.append(f"{origin}: {name} not applied (only NCCL_*, TORCH_NCCL_*, GLOO_* and c10d debug variables)")
        elif _ENV_REFUSED.search(name):
            notes.append(f"{origin}: {name} not applied (names a file, library or another machine's device)")
        elif not _ENV_VALUE.match(value):
            notes.append(f"{origin}: {name} not applied (its value has characters a setting never needs)")
        else:
            accepted[name] = value
    return accepted, notes


def torchrun_argv(
    nproc_per_node: int,
    rendezvous: Rendezvous,
    plan_path: Path,
    results_dir: Path,
    log_dir: Path,
    tee: bool,
) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(rendezvous.nnodes)]
    argv += ["--nproc-per-node", str(nproc_per_node)]
    if rendezvous.is_static:
        argv += ["--node-rank", str(rendezvous.node_rank)]
        argv += ["--master-addr", str(rendezvous.master_addr), "--master-port", str(rendezvous.master_port)]
    else:
        argv += ["--rdzv-backend", str(rendezvous.rdzv_backend)]
        if rendezvous.rdzv_endpoint:
            argv += ["--rdzv-endpoint", rendezvous.rdzv_endpoint]
        if rendezvous.rdzv_id:
            argv += ["--rdzv-id", rendezvous.rdzv_id]
    # A failed probe is the answer; restarting it would only repeat it.
    argv += ["--max-restarts", "0", "--log-dir", str(log_dir), "--tee" if tee else "--redirects", "3"]
    argv += [str(WORKER), "--plan", str(plan_path), "--results", str(results_dir)]
    return argv


@dataclass
class ProbeRun:
    """One torchrun invocation and what came back from it."""

    argv: list[str]
    pid: int  # torchrun's pid, also its process group id
    exit_code: int | None
    timed_out: bool
    wall_s: float
    console: str
    records: list[dict[str, Any]] = field(default_factory=list)
    rank_errors: dict[int, str] = field(default_factory=dict)
    started_ranks: dict[int, int] = field(default_factory=dict)  # global rank -> local rank
    killed_leftovers: list[int] = field(default_factory=list)
    launcher_error: str | None = None  # torchrun's own last error line (e.g. its rendezvous failed)


def _kill_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _is_probe_process(pid: int, results_dir: Path) -> bool:
    """Guards against pid reuse: the process must still be a worker of this run (its argv names our dir)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(results_dir).encode() in cmdline


def _reap_workers(results_dir: Path) -> list[int]:
    killed = []
    for started in sorted(results_dir.glob("started-rank*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            pid = int(json.loads(started.read_text(encoding="utf-8"))["pid"])
            if _is_probe_process(pid, results_dir) and _kill_group(pid, signal.SIGKILL):
                killed.append(pid)
    return killed


def _rank_error(stderr_log: Path) -> str | None:
    try:
        return _last_error(stderr_log.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def _last_error(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _NOISE.search(line)]
    if not lines:
        return None
    chosen = next((line for line in reversed(lines) if "what():" in line), None)
    chosen = chosen or next((line for line in reversed(lines) if _ERROR_LINE.search(line)), lines[-1])
    return chosen[:400]


def _local_rank_errors(log_dir: Path) -> dict[int, str]:
    errors: dict[int, str] = {}
    for stderr_log in sorted(log_dir.glob("*/attempt_*/*/stderr.log")):
        with contextlib.suppress(ValueError):
            text = _rank_error(stderr_log)
            if text:
                errors[int(stderr_log.parent.name)] = text
    return errors


def _exit_codes(console: str) -> dict[int, int]:
    return {int(m["local"]): int(m["code"]) for m in _TORCHRUN_FAILED.finditer(console)}


def _signal_name(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f" ({signal.Signals(-code).name})"
    return ""


def _stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM torchrun's group (torchrun forwards it to its workers' groups); SIGKILL if it does not stop."""
    _kill_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid, signal.SIGKILL)
        proc.wait()


def run_probe(
    argv: list[str],
    env: Mapping[str, str],
    results_dir: Path,
    log_dir: Path,
    wall_limit_s: float,
    rank_base: int | None,
    grace_s: float = 5.0,
) -> ProbeRun:
    """Run torchrun; past `wall_limit_s`, SIGTERM its process group, then SIGKILL; then kill leftover workers.

    rank_base: global rank of this node's local rank 0 when the rendezvous is static (node_rank * nproc), used
    for ranks that died before saying who they were; None when the rendezvous assigns ranks.
    """
    console_path = results_dir / "torchrun.console.log"
    start = time.monotonic()
    timed_out = False
    with console_path.open("wb") as console_file:
        proc = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=console_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=wall_limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            # Past the limit, or interrupted (Ctrl-C): leave nothing running.
            if proc.poll() is None:
                _stop(proc, grace_s)
            _kill_group(proc.pid, signal.SIGKILL)  # stragglers of torchrun's own group
            killed = _reap_workers(results_dir)
    wall = time.monotonic() - start
    console = console_path.read_text(encoding="utf-8", errors="replace")
    run = ProbeRun(
        argv=argv,
        pid=proc.pid,
        exit_code=proc.returncode,
        timed_out=timed_out,
        wall_s=wall,
        console=console,
        killed_leftovers=killed,
        launcher_error=_last_error(console),
    )
    for path in sorted(results_dir.glob("rank*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and isinstance(record.get("rank"), int):
                    run.records.append(record)
    for started in sorted(results_dir.glob("started-rank*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            facts = json.loads(started.read_text(encoding="utf-8"))
            run.started_ranks[int(facts["rank"])] = int(facts["local_rank"])
    local_errors = _local_rank_errors(log_dir)
    codes = _exit_codes(console)
    local_to_global = {local: rank for rank, local in run.started_ranks.items()}
    for local, text in local_errors.items():
        code = codes.get(local)
        suffix = f" [exit code {code}{_signal_name(code)}]" if code is not None else ""
        rank = local_to_global.get(local, None if rank_base is None else rank_base + local)
        if rank is not None:
            run.rank_errors[rank] = text + suffix
    return run
