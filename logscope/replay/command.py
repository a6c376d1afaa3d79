"""`logscope replay`: re-run the diagnosed collective through torchrun (W7), optionally sweeping NCCL
workarounds (W8, V5, W9). Exit codes: 0 every probe passed, 1 a probe reproduced a failure, 2 the tool could
not run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import tempfile
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from logscope import __version__
from logscope.errors import InputError, LogscopeError
from logscope.outputs import write_atomic
from logscope.replay.launch import Rendezvous, checked_env, loopback_interface, run_probe, torchrun_argv
from logscope.replay.result import (
    FAILED,
    SCHEMA_ID,
    failure_line,
    fold_run,
    load_replay,
    machine_facts,
    machine_name,
    run_outcome,
)
from logscope.replay.spec import ALL_OPS, CollectiveSpec, canonical_dtype, canonical_op, spec_from_diagnosis
from logscope.replay.sweep import SWEEP_VARIABLES, parse_variables, recommendation, run_sweep

__all__ = ["load_replay", "register", "replay"]  # load_replay: for `analyze --with-replay`

# What a passing probe means, and the workflow's next step from there (W6, W7, W10).
NOT_REPRODUCED = (
    "The communication layer moves this op and size between these ranks on this machine, so the job's failure "
    "came from what its ranks did around the collective (a rank that crashed, skipped or delayed it, or called "
    "another one) or from its own machines. Next: replay each rank's own logged call with --as-logged; run the "
    "probe on the job's machines at its world size (world size 2 without NVLink fails most often); across nodes, "
    "with --nnodes and --node-rank on every node (W10); and read the culprit rank's log around its last collective "
    "(W6)."
)
TORCH_MISSING = "torch is not installed: pip install 'torch-logscope[replay]'"
_PORT_ATTEMPTS = 3
_SPLIT_OPS = ("reduce_scatter", "reduce_scatter_base", "all_to_all", "all_to_all_base")


class Backend(StrEnum):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


@dataclass
class Settings:
    """Everything a probe run needs besides the world size and the extra environment."""

    spec: CollectiveSpec
    ops: list[str]
    numels: list[int]
    backend: str
    rendezvous: Rendezvous
    timeout_s: float
    iters: int
    warmup: int
    as_logged: bool
    log_dir: Path | None
    base_env: dict[str, str]


def _load_diagnosis(path: Path) -> dict[str, Any]:
    if path.suffix.lower() == ".json" and path.is_file():
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise InputError(f"{path} is not JSON: {exc}") from None
        if not isinstance(document, dict):
            raise InputError(f"{path} is not a logscope diagnosis")
        return document
    if not path.exists():
        raise InputError(f"{path} does not exist")
    try:
        from logscope.analysis import analyze
    except ModuleNotFoundError as exc:
        if exc.name != "logscope.analysis":
            raise
        raise LogscopeError("this logscope has no analyzer; replay a diagnosis .json instead") from None
    return analyze(path).diagnosis


def _torch_available() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def _cuda_devices() -> int:
    try:
        import torch  # only here: `import logscope` must never need torch
    except ImportError as exc:
        raise LogscopeError(f"{TORCH_MISSING} ({exc})") from None
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _resolve_backend(requested: Backend, job_backend: str | None, notes: list[str], probe_cuda: bool = True) -> str:
    if requested is not Backend.auto:
        return requested.value
    if not probe_cuda:  # a dry run without torch here: print the job's own backend for the machine that runs it
        notes.append(f"torch is not installed here: the commands use the job's backend ({job_backend or 'gloo'})")
        return job_backend or "gloo"
    cuda = _cuda_devices() > 0
    if job_backend == "nccl" and not cuda:
        notes.append("the job used nccl but this machine has no CUDA device: replaying with gloo")
        return "gloo"
    if job_backend in ("nccl", "gloo"):
        return job_backend
    return "nccl" if cuda else "gloo"


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise LogscopeError(f"{flag}: {text!r} is not a comma-separated list of integers") from None
    if not values or any(v < 0 for v in values):
        raise LogscopeError(f"{flag}: {text!r} must list non-negative integers")
    return values


def _world_sizes(
    spec: CollectiveSpec, world_sizes: str | None, nproc_per_node: int | None, nnodes: int, as_logged: bool
) -> list[int]:
    if world_sizes and nproc_per_node:
        raise LogscopeError("give --world-sizes or --nproc-per-node, not both")
    if as_logged:
        if spec.world_size is None:
            raise LogscopeError("--as-logged needs the job's world size, and the diagnosis does not know it")
        if world_sizes or nproc_per_node:
            raise LogscopeError(
                f"--as-logged replays the job's own world size ({spec.world_size}); drop the size flags"
            )
        sizes = [spec.world_size]
    elif nproc_per_node:
        sizes = [nproc_per_node * nnodes]
    elif world_sizes:
        sizes = _int_list(world_sizes, "--world-sizes")
    else:
        sizes = [spec.world_size or 1]
    for size in sizes:
        if size < 1 or size % nnodes:
            raise LogscopeError(f"world size {size} cannot be split over {nnodes} node(s)")
    return sizes


def _cases(settings: Settings, world_size: int, notes: list[str]) -> list[dict[str, Any]]:
    spec = settings.spec
    if settings.as_logged:
        if spec.world_size is not None and max(spec.per_rank, default=-1) >= spec.world_size:
            notes.append("per-rank calls name ranks beyond the job's world size; those are ignored")
        per_rank = {str(r): {"op": c.op, "numel": c.numel} for r, c in spec.per_rank.items() if r < world_size}
        if len({(c["op"], c["numel"]) for c in per_rank.values()} | {(spec.op, spec.numel)}) == 1:
            notes.append("the logs show every rank making the same call: --as-logged is a plain replay here")
        return [{"op": spec.op, "numel": spec.numel, "dtype": spec.dtype, "per_rank": per_rank}]
    cases = []
    for op in settings.ops:
        for numel in [0] if op == "barrier" else settings.numels:
            size = numel
            if op in _SPLIT_OPS and size % world_size:
                size += world_size - size % world_size
                notes.append(f"{op}: {numel} elements do not split over {world_size} ranks; replaying {size}")
            cases.append({"op": op, "numel": size, "dtype": spec.dtype})
    return cases


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_") or "run"


def _run_env(settings: Settings, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(settings.base_env)
    env.update(extra)
    return env


def _base_env(spec: CollectiveSpec, rendezvous: Rendezvous, notes: list[str]) -> dict[str, str]:
    env, refused = checked_env(spec.nccl_env, "job environment")
    notes.extend(refused)
    loopback = loopback_interface() if rendezvous.on_loopback else None
    if loopback:
        # One node, loopback rendezvous: keep the probe's traffic on loopback too.
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if name not in os.environ:
                env.setdefault(name, loopback)
    return env


class _Runner:
    """Runs one probe per (world size, extra environment) and turns it into a run entry of the result."""

    def __init__(self, settings: Settings, work_dir: Path, notes: list[str]) -> None:
        self.settings = settings
        self.work_dir = work_dir
        self.notes = notes
        self.records: list[dict[str, Any]] = []
        self.count = 0

    def prepare(self, world_size: int, label: str) -> tuple[list[dict[str, Any]], list[str], Path, Path, Path]:
        s = self.settings
        self.count += 1
        run_dir = self.work_dir / f"{self.count:02d}-ws{world_size}-{_slug(label)}"
        results = run_dir / "results"
        log_dir = (s.log_dir / run_dir.name) if s.log_dir else run_dir / "logs"
        cases = _cases(s, world_size, self.notes)
        plan_path = run_dir / "plan.json"
        # Resolved per run: each run gets a port of its own unless --master-port names one.
        rendezvous = s.rendezvous.resolved()
        argv = torchrun_argv(
            world_size // s.rendezvous.nnodes, rendezvous, plan_path, results, log_dir, bool(s.log_dir)
        )
        return cases, argv, plan_path, results, log_dir

    def plan(self, cases: list[dict[str, Any]]) -> dict[str, Any]:
        s = self.settings
        return {
            "backend": s.backend,
            "timeout_s": s.timeout_s,
            "iters": s.iters,
            "warmup": s.warmup,
            "cases": cases,
        }

    def run(self, world_size: int, label: str, extra: dict[str, str]) -> dict[str, Any]:
        s = self.settings
        nproc = world_size // s.rendezvous.nnodes
        rank_base = s.rendezvous.node_rank * nproc if s.rendezvous.is_static else None
        # Probes take seconds to start (torchrun, then torch in every rank): say what is running, on stderr.
        typer.echo(f"logscope replay: world size {world_size} [{label}]: starting {nproc} rank(s)…", err=True)
        for _ in range(_PORT_ATTEMPTS):
            cases, argv, plan_path, results, log_dir = self.prepare(world_size, label)
            results.mkdir(parents=True)
            log_dir.mkdir(parents=True, exist_ok=True)
            plan_path.write_text(json.dumps(self.plan(cases)), encoding="utf-8")
            wall_limit = 90 + s.timeout_s * (2 + len(cases))
            probe = run_probe(argv, _run_env(s, extra), results, log_dir, wall_limit, rank_base)
            # The free port we picked was taken before torchrun bound it: pick another one.
            if not s.rendezvous.is_static or s.rendezvous.master_port is not None or "EADDRINUSE" not in probe.console:
                break
            self.notes.append(f"{label}: the rendezvous port was taken meanwhile; retried on another")
        expected = list(range(rank_base, rank_base + nproc)) if rank_base is not None else []
        folded = fold_run(probe, cases, expected, wall_limit)
        ended = f"{run_outcome(folded)} in {probe.wall_s:.1f} s"
        typer.echo(f"logscope replay: world size {world_size} [{label}]: {ended}", err=True)
        self.records.extend(probe.records)
        if probe.killed_leftovers:
            self.notes.append(f"{label}: killed {len(probe.killed_leftovers)} leftover worker process group(s)")
        return {
            "label": label,
            "world_size": world_size,
            "nnodes": s.rendezvous.nnodes,
            "nproc_per_node": nproc,
            "backend": s.backend,
            "env": {**s.base_env, **extra},
            "command": argv,
            "log_dir": str(log_dir) if s.log_dir else None,
            "exit_code": probe.exit_code,
            "timed_out": probe.timed_out,
            "wall_s": round(probe.wall_s, 3),
            "outcome": run_outcome(folded),
            "cases": folded,
        }


def _dry_run(settings: Settings, sizes: list[int], sweep_vars: list[tuple[str, str]] | None, notes: list[str]) -> None:
    """Each probe's plan is written to a folder that is kept, so every printed command runs as it is."""
    work = Path(tempfile.mkdtemp(prefix="logscope-replay-"))
    runner = _Runner(settings, work, notes)
    extras: list[tuple[str, dict[str, str]]] = [("baseline", {})]
    if sweep_vars is not None:
        extras += [(f"{n}={v}", {n: v}) for n, v in sweep_vars]
    typer.echo(f"# the probes' plans are in {work}; run each command from any folder")
    for size in sizes:
        for label, extra in extras:
            cases, argv, plan_path, results, _ = runner.prepare(size, label)
            results.mkdir(parents=True)
            plan_path.write_text(json.dumps(runner.plan(cases)), encoding="utf-8")
            env = {**settings.base_env, **extra}
            prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
            typer.echo(f"# world size {size}, {label}; plan: {plan_path}")
            typer.echo(f"{prefix} {shlex.join(argv)}".strip())
    for note in dict.fromkeys(notes):
        typer.echo(f"# note: {note}")


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render_text(result: dict[str, Any]) -> str:
    spec = result["spec"]
    how = " (as logged, per rank)" if result["mode"] == "as_logged" else ""
    origin = f" from finding {spec['source']}" if spec["source"] else ""
    lines = [
        f"logscope replay of the logged {spec['op']} × {spec['numel']} {spec['dtype']}{how}{origin}, "
        f"backend {result['backend']}, on {machine_name(result['machine'])}"
    ]
    for run in result["runs"]:
        lines.append("")
        lines.append(f"world size {run['world_size']} [{run['label']}]: {run['outcome']} in {run['wall_s']:.1f} s")
        lines.append(
            f"  {'op':<20} {'numel':>10} {'dtype':<9} {'outcome':<12} {'med us':>10} {'min us':>10} "
            f"{'algbw GB/s':>10} {'busbw GB/s':>10}"
        )
        for case in run["cases"]:
            t = case["time_us"] or {}
            lines.append(
                f"  {case['op']:<20} {case['numel']:>10} {case['dtype']:<9} {case['outcome']:<12} "
                f"{_fmt(t.get('median'), 1):>10} {_fmt(t.get('min'), 1):>10} "
                f"{_gbps(case['algbw_gbps']):>10} {_gbps(case['busbw_gbps']):>10}"
            )
            for rank in case["ranks"]:
                call = f" ({rank['op']} × {rank['numel']})" if result["mode"] == "as_logged" else ""
                if rank["status"] != "ok" or call:
                    detail = f": {rank['error']}" if rank.get("error") else ""
                    lines.append(f"      rank {rank['rank']}{call}: {rank['status']}{detail}")
    sweep = result.get("sweep")
    if sweep:
        lines.append("")
        lines.append(f"sweep (one variable at a time, world size {sweep['world_size']}):")
        lines.append(f"  {'variable':<28} {'outcome':<12} {'wall s':>7} {'med us':>10}  confirmation")
        for row in sweep["table"]:
            confirmed = {True: "fails without it", False: "baseline passed too", None: ""}[row["confirmed"]]
            lines.append(
                f"  {row['variable']:<28} {row['outcome']:<12} {_fmt(row['wall_s'], 1):>7} "
                f"{_fmt(row['time_us'], 1):>10}  {confirmed or (row['note'] or '')}".rstrip()
            )
        lines.append("")
        lines.append(f"recommendation: {sweep['recommendation']}")
    lines.append("")
    lines.append(result["summary"])
    lines.extend(f"note: {note}" for note in result["notes"])
    return "\n".join(lines) + "\n"


def _summary(runs: list[dict[str, Any]], mode: str) -> str:
    failed = [run for run in runs if run["outcome"] in FAILED]
    if not failed:
        sizes = ", ".join(str(s) for s in dict.fromkeys(run["world_size"] for run in runs))
        return f"all probes passed (world size {sizes}); the failure did not reproduce. {NOT_REPRODUCED}"
    run = failed[0]
    what = "reproduced the logged failure" if mode == "as_logged" else "reproduced a failure"
    return f"the probe {what} at world size {run['world_size']} [{run['label']}]: {failure_line(run['cases'])}"


def replay(
    path: Annotated[Path, typer.Argument(help="A log folder/file (analysed first) or a diagnosis .json.")],
    backend: Annotated[
        Backend, typer.Option(help="auto: the job's backend when usable; nccl when CUDA, else gloo.")
    ] = Backend.auto,
    nproc_per_node: Annotated[
        int | None, typer.Option(min=1, help="Ranks on this node (world size = this × nnodes).")
    ] = None,
    world_sizes: Annotated[
        str | None, typer.Option(help="Comma list of world sizes to replay at, e.g. 1,2,4 (W7).")
    ] = None,
    nnodes: Annotated[
        int, typer.Option(min=1, help="Nodes (torchrun --nnodes); run the same command on every node.")
    ] = 1,
    node_rank: Annotated[int, typer.Option(min=0, help="This node's rank (static rendezvous).")] = 0,
    master_addr: Annotated[str | None, typer.Option(help="Rendezvous host; default 127.0.0.1 on one node.")] = None,
    master_port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Rendezvous port; default a free one.")
    ] = None,
    rdzv_backend: Annotated[str | None, typer.Option(help="Passed to torchrun (e.g. c10d).")] = None,
    rdzv_endpoint: Annotated[str | None, typer.Option(help="Passed to torchrun (host:port).")] = None,
    rdzv_id: Annotated[str | None, typer.Option(help="Passed to torchrun.")] = None,
    timeout: Annotated[
        float, typer.Option(min=0.5, help="Seconds one collective may take before it counts as a hang.")
    ] = 60.0,
    iters: Annotated[int, typer.Option(min=1, help="Timed iterations per op.")] = 5,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed iterations before them.")] = 1,
    numel: Annotated[str | None, typer.Option(help="Element count(s), comma list; default: the logged count.")] = None,
    op: Annotated[
        str | None, typer.Option(help="Op(s) to replay, comma list or 'all'; default: the logged op.")
    ] = None,
    dtype: Annotated[
        str | None, typer.Option(help="Element type (float32, bfloat16, ...); default: the logged one.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the torchrun commands and exit.")] = False,
    as_logged: Annotated[
        bool, typer.Option("--as-logged", help="Each rank issues the op and size its own log shows.")
    ] = False,
    log_dir: Annotated[
        Path | None, typer.Option(help="Keep the probe's per-rank logs here (torchrun --tee 3).")
    ] = None,
    sweep_env: Annotated[
        bool, typer.Option("--sweep-env", help="Try each NCCL workaround alone, confirm fixes (W8).")
    ] = False,
    sweep_vars: Annotated[str | None, typer.Option(help="NAME=VALUE,... to sweep instead of the default list.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the replay result as JSON.")] = False,
    out: Annotated[
        Path | None, typer.Option(help="Write the replay result JSON here (for analyze --with-replay).")
    ] = None,
) -> None:
    """Re-run the diagnosed collective through torchrun; report per rank: ok, hang, error or wrong result."""
    try:
        code = _replay(**locals())
    except LogscopeError as exc:
        typer.echo(f"logscope: {exc}", err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


def _replay(**opts: Any) -> int:
    o = opts  # the command's parameters, by name
    if not o["dry_run"] and not _torch_available():  # a dry run only prints commands: no torch needed here
        raise LogscopeError(TORCH_MISSING)
    notes: list[str] = []
    diagnosis = _load_diagnosis(o["path"])
    ops = [canonical_op(x) for x in o["op"].split(",") if x.strip()] if o["op"] and o["op"] != "all" else None
    if o["op"] == "all":
        ops = list(ALL_OPS)
    spec = spec_from_diagnosis(diagnosis, op_override=ops[0] if ops else None)
    notes.extend(spec.notes)
    if o["dtype"]:
        spec = replace(spec, dtype=canonical_dtype(o["dtype"]))
    if o["as_logged"] and (ops or o["numel"]):
        raise LogscopeError("--as-logged replays what each rank logged; drop --op and --numel")
    if o["sweep_vars"] and not o["sweep_env"]:
        raise LogscopeError("--sweep-vars needs --sweep-env")
    rendezvous = Rendezvous(
        nnodes=o["nnodes"],
        node_rank=o["node_rank"],
        master_addr=o["master_addr"],
        master_port=o["master_port"],
        rdzv_backend=o["rdzv_backend"],
        rdzv_endpoint=o["rdzv_endpoint"],
        rdzv_id=o["rdzv_id"],
    )
    rendezvous.check()
    sizes = _world_sizes(spec, o["world_sizes"], o["nproc_per_node"], o["nnodes"], o["as_logged"])
    sweep_vars = None
    if o["sweep_env"]:
        if len(sizes) != 1:
            raise LogscopeError("--sweep-env runs at one world size; give one in --world-sizes")
        sweep_vars = parse_variables(o["sweep_vars"]) if o["sweep_vars"] else list(SWEEP_VARIABLES)
    backend = _resolve_backend(o["backend"], spec.backend, notes, probe_cuda=not o["dry_run"] or _torch_available())
    if backend == "nccl" and not o["dry_run"]:
        gpus = _cuda_devices()
        need = max(sizes) // o["nnodes"]
        if gpus < need:
            raise LogscopeError(f"--backend nccl needs {need} GPU(s) per node, this machine has {gpus}")
    settings = Settings(
        spec=spec,
        ops=ops or [spec.op],
        numels=_int_list(o["numel"], "--numel") if o["numel"] else [spec.numel],
        backend=backend,
        rendezvous=rendezvous,
        timeout_s=float(o["timeout"]),
        iters=o["iters"],
        warmup=o["warmup"],
        as_logged=o["as_logged"],
        log_dir=o["log_dir"],
        base_env=_base_env(spec, rendezvous, notes),
    )
    if o["dry_run"]:
        _dry_run(settings, sizes, sweep_vars, notes)
        return 0
    result = _execute(settings, sizes, sweep_vars, notes)
    result["input"] = str(o["path"])
    text = json.dumps(result, indent=2) + "\n"
    if o["out"] is not None:
        write_atomic(o["out"], text)
    typer.echo(text if o["json_output"] else render_text(result), nl=False)
    return 1 if any(run["outcome"] in FAILED for run in result["runs"]) else 0


def _execute(
    settings: Settings, sizes: list[int], sweep_vars: list[tuple[str, str]] | None, notes: list[str]
) -> dict[str, Any]:
    mode = "as_logged" if settings.as_logged else "replay"
    with tempfile.TemporaryDirectory(prefix="logscope-replay-") as work:
        runner = _Runner(settings, Path(work), notes)
        sweep: dict[str, Any] | None = None
        rows: list[dict[str, Any]] = []
        if sweep_vars is None:
            runs = [runner.run(size, "baseline", {}) for size in sizes]
        else:
            size = sizes[0]
            rows, runs = run_sweep(lambda label, extra: runner.run(size, label, extra), sweep_vars, settings.base_env)
            sweep = {"world_size": size, "variables": [f"{n}={v}" for n, v in sweep_vars], "table": rows}
    machine = machine_facts(runner.records, settings.backend)
    if sweep is not None:
        sweep["recommendation"] = recommendation(rows, machine_name(machine))
    return {
        "schema": SCHEMA_ID,
        "logscope_version": __version__,
        "mode": mode,
        "spec": settings.spec.to_json(),
        "backend": settings.backend,
        "timeout_s": settings.timeout_s,
        "iters": settings.iters,
        "machine": machine,
        "runs": runs,
        "sweep": sweep,
        "outcome": "failed" if any(run["outcome"] in FAILED for run in runs) else "ok",
        "summary": _summary(runs, mode),
        "notes": list(dict.fromkeys(notes)),
    }


def register(app: typer.Typer) -> None:
    """Add `replay` to the logscope CLI."""
    app.command("replay")(replay)
