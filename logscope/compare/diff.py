"""`logscope diff RUN_A RUN_B`: what changed between two runs of a job.

Compared: the job (world size, nodes, backend, torch/NCCL versions, launcher, exit code), the NCCL
environment, the configuration each rank printed (seed, num_envs, task, config hash, …), throughput per rank
and in total (checklist V4: scaling must change throughput; V1: the single-GPU run trained), and, per rank,
the first event where the two runs' sequences of event kinds part.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import polars as pl
import regex
from jinja2 import Environment
from rich.table import Table
from rich.text import Text

from logscope.align.state import AGENT_KINDS, END_KINDS
from logscope.model import Analysis
from logscope.report.templating import html_environment

JOB_FIELDS = (
    "world_size",
    "nnodes",
    "attempts",
    "backend",
    "framework",
    "launcher",
    "torch_version",
    "nccl_version",
    "exit_code",
)

# Event kinds whose fields are configuration a rank printed, and the field names kept from each.
CONFIG_FIELDS: dict[str, tuple[str, ...]] = {
    "config_hash": ("config_hash",),
    "pg_initialized": ("backend", "world_size", "timeout_s"),
    "rank_identity": ("world_size", "world_size2"),
    "rl_games_seed": ("seed",),
    "env_seed": ("seed",),
    "device_assigned": ("device", "device2", "device3", "device4"),
    "model_params": ("num_params",),
    "torch_version": ("torch_version", "torch_version2"),
}
# The `key=value` words of a job's startup line (kind config_values) are its fields; rank ids are identity.
IDENTITY_KEYS = {"rank", "local_rank", "global_rank", "group_rank", "pid", "host"}
# Numbered alternatives in the signature catalogue (`world_size2`) are the same setting printed another way.
ALTERNATIVE_SUFFIX = regex.compile(r"(?<=[a-z])\d$")

# Throughput lines: which are already job totals (rsl_rl multiplies by the world size, rl_games' "fps total"),
# and which are one rank's own rate.
GLOBAL_THROUGHPUT = regex.compile(r"steps/s \(collection:|Steps per second:")
# Levels compared for sequence divergence: benign look-alikes differ between healthy runs for no reason.
SEQUENCE_LEVELS = ("info", "warning", "error")
# Relative change in total throughput below which scaling "did not change throughput".
THROUGHPUT_TOLERANCE = 0.10
MAX_TEXT = 300


def diff_runs(a: Analysis, b: Analysis) -> dict[str, Any]:
    """The comparison as JSON-ready data (also what the text and HTML views show)."""
    throughput_a, throughput_b = throughput(a), throughput(b)
    return {
        "a": _run_header(a),
        "b": _run_header(b),
        "job": _job_changes(a.diagnosis["job"], b.diagnosis["job"]),
        "nccl_env": _mapping_changes(
            a.diagnosis["job"].get("nccl_env") or {}, b.diagnosis["job"].get("nccl_env") or {}
        ),
        "config": _config_changes(rank_config(a.events), rank_config(b.events)),
        "throughput": {
            "a": throughput_a,
            "b": throughput_b,
            "ranks": sorted({*throughput_a["per_rank"], *throughput_b["per_rank"]}, key=int),
            **_throughput_change(throughput_a, throughput_b),
        },
        "checks": [
            _check_scaling(a.diagnosis, b.diagnosis, throughput_a, throughput_b),
            _check_single_gpu(a, b),
        ],
        "divergence": divergence(a.events, b.events),
    }


def _run_header(analysis: Analysis) -> dict[str, Any]:
    verdict = analysis.diagnosis["verdict"]
    return {
        "input": analysis.diagnosis.get("input"),
        "verdict": verdict["category"],
        "culprit_ranks": verdict["culprit_ranks"],
        "summary": verdict["summary"],
        "world_size": analysis.diagnosis["job"].get("world_size"),
    }


def _job_changes(job_a: dict[str, Any], job_b: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "field": name,
            "a": job_a.get(name),
            "b": job_b.get(name),
            "changed": job_a.get(name) != job_b.get(name),
        }
        for name in JOB_FIELDS
    ]


def _mapping_changes(map_a: dict[str, Any], map_b: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "a": map_a.get(name),
            "b": map_b.get(name),
            "changed": map_a.get(name) != map_b.get(name),
        }
        for name in sorted(set(map_a) | set(map_b))
    ]


def _fields(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    value = json.loads(raw)
    return value if isinstance(value, dict) else {}


def rank_config(events: pl.DataFrame) -> dict[int, dict[str, str]]:
    """rank -> {setting: value} from the configuration lines each rank printed (the first value wins),
    including the NCCL variables NCCL reports per rank ("NCCL_X set by environment to v")."""
    kinds = [*CONFIG_FIELDS, "config_values", "nccl_env_set"]
    rows = events.filter(pl.col("kind").is_in(kinds) & pl.col("rank").is_not_null())
    config: dict[int, dict[str, str]] = {}
    for rank, kind, raw in rows.select("rank", "kind", "fields").iter_rows():
        settings = config.setdefault(int(rank), {})
        fields = _fields(raw)
        if kind == "config_values":
            pairs = {key: str(value) for key, value in fields.items() if key not in IDENTITY_KEYS}
        elif kind == "nccl_env_set":
            pairs = {str(fields["var"]): str(fields["value"])} if fields.get("var") else {}
        else:
            pairs = {
                ALTERNATIVE_SUFFIX.sub("", name): str(fields[name])
                for name in CONFIG_FIELDS[kind]
                if fields.get(name) is not None
            }
        for key, value in pairs.items():
            settings.setdefault(key, value)
    return config


def _config_changes(config_a: dict[int, dict[str, str]], config_b: dict[int, dict[str, str]]) -> list[dict[str, Any]]:
    """One row per setting, with the values per rank in each run; changed when any rank's value differs."""
    keys = sorted({key for settings in (*config_a.values(), *config_b.values()) for key in settings})
    ranks = sorted(set(config_a) | set(config_b))
    rows = []
    for key in keys:
        per_rank = [
            {"rank": rank, "a": config_a.get(rank, {}).get(key), "b": config_b.get(rank, {}).get(key)}
            for rank in ranks
            if key in config_a.get(rank, {}) or key in config_b.get(rank, {})
        ]
        values_a = {item["a"] for item in per_rank if item["a"] is not None}
        values_b = {item["b"] for item in per_rank if item["b"] is not None}
        changed = values_a != values_b or any(
            item["a"] != item["b"] for item in per_rank if item["a"] is not None and item["b"] is not None
        )
        rows.append(
            {
                "key": key,
                "changed": changed,
                "a": sorted(values_a),
                "b": sorted(values_b),
                "per_rank": per_rank,
            }
        )
    return rows


def throughput(analysis: Analysis) -> dict[str, Any]:
    """Mean reported steps/s per rank and the job total.

    rsl_rl's "Computation: N steps/s (collection: …)" and "Steps per second:" and rl_games' "fps total"
    already count every rank; a plain "N steps/s" is one rank's own rate, and when only some ranks print it
    the total is estimated from them, as if every rank ran as fast (`estimated: true`).
    """
    events = analysis.events
    world_size = analysis.diagnosis["job"].get("world_size")
    rows = events.filter(pl.col("kind").is_in(["throughput", "iteration"]) & pl.col("rank").is_not_null())
    per_rank: dict[int, list[float]] = {}
    global_rates: list[float] = []
    for rank, kind, text, raw in rows.select("rank", "kind", "text", "fields").iter_rows():
        fields = _fields(raw)
        if kind == "iteration":
            if fields.get("fps_total") is not None:
                global_rates.append(float(fields["fps_total"]))
            continue
        rate = fields.get("steps_per_s") if fields.get("steps_per_s") is not None else fields.get("steps_per_s2")
        if rate is None:
            continue
        if GLOBAL_THROUGHPUT.search(text or ""):
            global_rates.append(float(rate))
        else:
            per_rank.setdefault(int(rank), []).append(float(rate))
    iterations = (
        events.filter((pl.col("kind") == "iteration") & pl.col("rank").is_not_null())
        .group_by("rank")
        .len()
        .sort("rank")
    )
    result: dict[str, Any] = {
        "unit": "steps/s",
        "per_rank": {str(rank): round(sum(rates) / len(rates), 1) for rank, rates in sorted(per_rank.items())},
        "iterations": {str(rank): count for rank, count in iterations.iter_rows()},
        "total": None,
        "estimated": False,
        "basis": "no throughput lines",
    }
    if global_rates:
        result.update(total=round(sum(global_rates) / len(global_rates), 1), basis="job-wide rate printed by the job")
    elif per_rank:
        rates = [sum(values) / len(values) for values in per_rank.values()]
        reporting = len(rates)
        if world_size and reporting < world_size:
            result.update(
                total=round(sum(rates) / reporting * world_size, 1),
                estimated=True,
                basis=f"{reporting} of {world_size} ranks print their rate; the others assumed equal",
            )
        else:
            result.update(total=round(sum(rates), 1), basis="sum of every rank's own rate")
    return result


def _throughput_change(tp_a: dict[str, Any], tp_b: dict[str, Any]) -> dict[str, Any]:
    if tp_a["total"] and tp_b["total"] is not None:
        return {"ratio": round(tp_b["total"] / tp_a["total"], 3)}
    return {"ratio": None}


def _check_scaling(
    diag_a: dict[str, Any], diag_b: dict[str, Any], tp_a: dict[str, Any], tp_b: dict[str, Any]
) -> dict[str, Any]:
    """V4: a different world size must show as a different total throughput."""
    ws_a, ws_b = diag_a["job"].get("world_size"), diag_b["job"].get("world_size")
    check: dict[str, Any] = {
        "id": "V4",
        "title": "Scaling changes throughput",
        "status": "unknown",
        "evidence": [],
    }
    if ws_a is None or ws_b is None:
        check["evidence"].append("the world size of one run is unknown")
        return check
    if ws_a == ws_b:
        check["evidence"].append(f"both runs have world size {ws_a}: nothing was scaled")
        return check
    if not tp_a["total"] or tp_b["total"] is None:
        check["evidence"].append("a run printed no throughput")
        return check
    ratio = tp_b["total"] / tp_a["total"]
    check["evidence"].append(
        f"world size {ws_a} -> {ws_b}, total throughput {tp_a['total']:.0f} -> {tp_b['total']:.0f}"
        f" {tp_a['unit']} (x{ratio:.2f})"
    )
    if tp_a["estimated"] or tp_b["estimated"]:
        check["evidence"].append("a total is estimated from the ranks that print their rate")
    scaled_up = ws_b > ws_a
    changed = ratio > 1 + THROUGHPUT_TOLERANCE if scaled_up else ratio < 1 - THROUGHPUT_TOLERANCE
    check["status"] = "pass" if changed else "fail"
    if not changed:
        check["evidence"].append("throughput did not follow the world size: is the job silently running one rank?")
    return check


def _trained(analysis: Analysis) -> tuple[bool, str]:
    kinds = analysis.events["kind"]
    iterations = int(kinds.is_in(["iteration", "progress_bar"]).sum())
    finished = bool(kinds.is_in(list(END_KINDS)).any())
    verdict = analysis.diagnosis["verdict"]["category"]
    evidence = f"{iterations} iteration lines, {'a' if finished else 'no'} training-time line, verdict {verdict}"
    return iterations > 0 and finished and verdict in ("healthy", "single_rank"), evidence


def _check_single_gpu(a: Analysis, b: Analysis) -> dict[str, Any]:
    """V1: of the two runs, the one on a single rank trained."""
    check: dict[str, Any] = {
        "id": "V1",
        "title": "The single-GPU run trained",
        "status": "unknown",
        "evidence": [],
    }
    singles = [(label, run) for label, run in (("A", a), ("B", b)) if run.diagnosis["job"].get("world_size") == 1]
    if not singles:
        check["evidence"].append("neither run has world size 1")
        return check
    statuses = []
    for label, run in singles:
        trained, evidence = _trained(run)
        statuses.append(trained)
        check["evidence"].append(f"run {label} (world size 1): {evidence}")
    check["status"] = "pass" if all(statuses) else "fail"
    return check


def _rank_sequences(events: pl.DataFrame) -> tuple[dict[int, list[dict[str, Any]]], dict[int, dict[str, Any]]]:
    """Each rank's own events in order, and apart from them the launcher's last word about the rank (torchrun's
    "failed (exitcode: -9) local_rank: 1", a ChildFailedError row): that line sits in another file, often first."""
    rows = events.filter(pl.col("rank").is_not_null() & pl.col("level").is_in(SEQUENCE_LEVELS))
    sequences: dict[int, list[dict[str, Any]]] = {}
    launcher: dict[int, dict[str, Any]] = {}
    for rank, kind, source, line, text in rows.select("rank", "kind", "source", "line", "text").iter_rows():
        event = {"kind": kind, "source": source, "line": line, "text": (text or "")[:MAX_TEXT]}
        if kind in AGENT_KINDS:
            launcher[int(rank)] = event
        else:
            sequences.setdefault(int(rank), []).append(event)
    return sequences, launcher


def divergence(events_a: pl.DataFrame, events_b: pl.DataFrame) -> list[dict[str, Any]]:
    """Per rank: the first point where the two runs part, aligned on the kinds of event both runs have.

    Kinds only one run has (a warning, a retry) are not a divergence by themselves in the middle of a run: the runs
    part where the events they share stop agreeing, or where one goes on past the last of them and the other does
    not; what each run did there (an extra kind included) is shown.
    """
    (seq_a, launcher_a), (seq_b, launcher_b) = _rank_sequences(events_a), _rank_sequences(events_b)
    result = []
    for rank in sorted(set(seq_a) | set(seq_b) | set(launcher_a) | set(launcher_b)):
        own_a, own_b = seq_a.get(rank, []), seq_b.get(rank, [])
        entry: dict[str, Any] = {
            "rank": rank,
            "events_a": len(own_a),
            "events_b": len(own_b),
            "launcher_a": launcher_a.get(rank),
            "launcher_b": launcher_b.get(rank),
            "index": None,
            "a": None,
            "b": None,
        }
        kinds_a, kinds_b = [e["kind"] for e in own_a], [e["kind"] for e in own_b]
        shared = set(kinds_a) & set(kinds_b)
        entry["only_a"] = sorted(set(kinds_a) - shared)
        entry["only_b"] = sorted(set(kinds_b) - shared)
        if not own_a or not own_b:
            entry["status"] = f"only in run {'A' if own_a else 'B'}" if own_a or own_b else "launcher lines only"
            result.append(entry)
            continue
        at_a = [i for i, k in enumerate(kinds_a) if k in shared]
        at_b = [i for i, k in enumerate(kinds_b) if k in shared]
        index = _first_difference([kinds_a[i] for i in at_a], [kinds_b[i] for i in at_b])
        # Past the last shared event the runs must end alike: one that goes on to its end line or a traceback
        # where the other stops has parted there.
        tail_a = kinds_a[at_a[-1] + 1 :] if at_a else kinds_a
        tail_b = kinds_b[at_b[-1] + 1 :] if at_b else kinds_b
        if index == len(at_a) == len(at_b) and tail_a == tail_b:
            entry["status"] = "same"
        else:
            entry.update(
                status="diverges",
                index=index,
                a=_event_at(own_a, at_a, index),
                b=_event_at(own_b, at_b, index),
                common=[kinds_a[i] for i in at_a[max(0, index - 3) : index]],
            )
        result.append(entry)
    return result


def _event_at(own: list[dict[str, Any]], shared_at: list[int], index: int) -> dict[str, Any] | None:
    """The run's event where the shared sequence parts: its `index`-th shared event, or past the shared ones the
    first event after them (a kind only this run has, such as its traceback), or nothing."""
    if index < len(shared_at):
        return own[shared_at[index]]
    after = shared_at[index - 1] + 1 if index else 0
    return own[after] if after < len(own) else None


def _first_difference(left: list[str], right: list[str]) -> int:
    for index, (x, y) in enumerate(zip(left, right, strict=False)):
        if x != y:
            return index
    return min(len(left), len(right))


def changed_only(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in rows if row["changed"]]


def _environment() -> Environment:
    return html_environment("logscope.compare")


def render_html_section(comparison: dict[str, Any]) -> str:
    """The comparison as one `<section>`, to embed in a larger report; log-derived strings are autoescaped."""
    return _environment().get_template("diff_section.html.j2").render(d=comparison, changed_only=changed_only)


def render_html_page(comparison: dict[str, Any]) -> str:
    """A small self-contained page (inline CSS, no scripts, no network) around the section."""
    return _environment().get_template("diff_page.html.j2").render(d=comparison, changed_only=changed_only)


def _shown(value: Any) -> str:
    if isinstance(value, dict):  # a setting whose value differs per rank: {"0": v0, "1": v1}
        return ", ".join(f"rank {rank}: {item}" for rank, item in value.items())
    return "—" if value is None else str(value)


def text_renderables(comparison: dict[str, Any]) -> list[Any]:
    """The comparison for a terminal: only what changed, then the checks and the divergence per rank."""
    a, b = comparison["a"], comparison["b"]
    parts: list[Any] = [
        Text(f"A: {a['input']}  ({a['verdict']}, world size {_shown(a['world_size'])})", style="bold"),
        Text(f"B: {b['input']}  ({b['verdict']}, world size {_shown(b['world_size'])})", style="bold"),
    ]
    changes = Table(title="What changed", title_justify="left")
    for column in ("", "A", "B"):
        changes.add_column(column, overflow="fold")
    for row in changed_only(comparison["job"]):
        changes.add_row(row["field"], Text(_shown(row["a"])), Text(_shown(row["b"])))
    for row in changed_only(comparison["nccl_env"]):
        changes.add_row(Text(row["name"]), Text(_shown(row["a"])), Text(_shown(row["b"])))
    for row in changed_only(comparison["config"]):
        for item in row["per_rank"]:
            if item["a"] != item["b"]:
                changes.add_row(
                    Text(f"{row['key']} (rank {item['rank']})"),
                    Text(_shown(item["a"])),
                    Text(_shown(item["b"])),
                )
    tp = comparison["throughput"]
    for rank in tp["ranks"]:
        changes.add_row(
            f"steps/s rank {rank}",
            _shown(tp["a"]["per_rank"].get(rank)),
            _shown(tp["b"]["per_rank"].get(rank)),
        )
    total_a = _shown(tp["a"]["total"]) + (" (est.)" if tp["a"]["estimated"] else "")
    total_b = _shown(tp["b"]["total"]) + (" (est.)" if tp["b"]["estimated"] else "")
    changes.add_row("steps/s total", total_a, total_b)
    parts.append(changes)
    for check in comparison["checks"]:
        style = {"pass": "green", "fail": "bold red"}.get(check["status"], "dim")
        parts.append(Text(f"{check['id']} {check['title']}: {check['status']}", style=style))
        for line in check["evidence"]:
            parts.append(Text(f"    {line}"))
    parts.append(Text("Event sequences per rank:", style="bold"))
    for row in comparison["divergence"]:
        head = f"  rank {row['rank']}: {row['status']} ({row['events_a']} / {row['events_b']} events)"
        parts.append(Text(head))
        if row["status"] == "diverges":
            for label in ("a", "b"):
                event = row[label]
                where = (
                    f"{event['kind']} at {event['source']}:{event['line']}: {event['text']}"
                    if event
                    else "no more events"
                )
                parts.append(Text(f"    {label.upper()} after {row['index']} shared events: {where}"))
        for label in ("a", "b"):
            if row[f"launcher_{label}"]:
                said = row[f"launcher_{label}"]
                parts.append(
                    Text(f"    launcher, run {label.upper()}: {said['text']} ({said['source']}:{said['line']})")
                )
    return parts
