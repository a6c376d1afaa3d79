"""`--sweep-env`: the NCCL workarounds tried one at a time against the probe (W8), each fix confirmed (V5).

Protocol: the baseline first (the job's own NCCL environment); then each variable alone on top of it; whenever
a variable turns a failing baseline into a pass, the baseline runs again right after, to show it still fails
without the variable. Nothing is written anywhere: the result is a table and a recommendation naming the
machine (W9).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from logscope.errors import LogscopeError
from logscope.replay.result import FAILED

# workflow.md "NCCL workarounds documented for Isaac Lab" and torch_logs.md §6, in that order.
SWEEP_VARIABLES: tuple[tuple[str, str], ...] = (
    ("NCCL_P2P_DISABLE", "1"),
    ("NCCL_SHM_DISABLE", "1"),
    ("NCCL_CUMEM_HOST_ENABLE", "0"),
    ("NCCL_CUMEM_ENABLE", "0"),
    ("NCCL_IB_DISABLE", "1"),
    ("NCCL_ALGO", "Ring"),
    ("NCCL_PROTO", "Simple"),
    ("NCCL_P2P_LEVEL", "NVL"),
    ("NCCL_NVLS_ENABLE", "0"),
)

# A run: (label, variables added to the baseline environment) -> the run's entry of the replay result.
RunProbe = Callable[[str, dict[str, str]], dict[str, Any]]


def parse_variables(text: str) -> list[tuple[str, str]]:
    """`NAME=VALUE,NAME=VALUE` (for --sweep-vars)."""
    variables = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise LogscopeError(f"--sweep-vars: {item!r} is not NAME=VALUE")
        variables.append((name, value))
    if not variables:
        raise LogscopeError("--sweep-vars: no variable given")
    return variables


def _first_case_time(run: dict[str, Any]) -> float | None:
    cases = run.get("cases") or []
    time_us = cases[0].get("time_us") if cases else None
    return None if time_us is None else float(time_us["median"])


def _row(variable: str, run: dict[str, Any] | None, note: str | None = None) -> dict[str, Any]:
    return {
        "variable": variable,
        "outcome": run["outcome"] if run else "not_run",
        "wall_s": run["wall_s"] if run else None,
        "time_us": _first_case_time(run) if run else None,
        "confirmed": None,
        "note": note,
    }


def run_sweep(
    run_probe: RunProbe, variables: list[tuple[str, str]], baseline_env: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(table rows, every run in the order it ran)."""
    runs: list[dict[str, Any]] = []
    baseline = run_probe("baseline", {})
    runs.append(baseline)
    rows = [_row("baseline", baseline)]
    baseline_failed = baseline["outcome"] in FAILED
    for name, value in variables:
        label = f"{name}={value}"
        if baseline_env.get(name) == value:
            rows.append(_row(label, None, "already set in the baseline environment"))
            continue
        run = run_probe(label, {name: value})
        runs.append(run)
        row = _row(label, run)
        rows.append(row)
        if baseline_failed and run["outcome"] == "ok":
            confirm = run_probe(f"baseline again, without {label}", {})
            runs.append(confirm)
            row["confirmed"] = confirm["outcome"] in FAILED
            row["note"] = (
                f"baseline failed again without it ({confirm['outcome']})"
                if row["confirmed"]
                else "the baseline passed on its re-run: the failure is intermittent, not fixed by this"
            )
    return rows, runs


def recommendation(rows: list[dict[str, Any]], machine: str) -> str:
    baseline = rows[0]
    if baseline["outcome"] not in FAILED:
        return (
            f"On {machine} the probe passes without any workaround: the failure did not reproduce here, "
            "so no NCCL variable is known to fix it. Look at the application (W6) or replay on the machine "
            "that failed."
        )
    fixes = [row["variable"] for row in rows[1:] if row["confirmed"]]
    flaky = [row["variable"] for row in rows[1:] if row["confirmed"] is False]
    if fixes:
        also = f" (also fixing it alone: {', '.join(fixes[1:])})" if len(fixes) > 1 else ""
        return (
            f"On {machine}, {fixes[0]} turns the failing probe into a pass and the probe fails again "
            f"without it (V5 pass){also}. Set it for jobs on this machine only, with a note naming the "
            "hardware; do not commit it into shared configs or scripts (W9)."
        )
    if flaky:
        return (
            f"On {machine} the probe failure is intermittent: it passed once with {', '.join(flaky)} but the "
            "baseline then passed too. No workaround is confirmed; repeat the sweep with more --iters."
        )
    return (
        f"On {machine} no single workaround variable fixes the probe ({baseline['outcome']} every time): the "
        "failure is not an NCCL transport setting. Look at the collectives the ranks issue (W6)."
    )
