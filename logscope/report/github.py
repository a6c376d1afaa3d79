"""GitHub Actions workflow commands: one annotation per finding, then one with the verdict and the next step.

The runner reads a workflow command from any stdout line that starts with `::`. Every value written here comes
from logs (untrusted), so each is escaped the way the runner unescapes it: `%`, CR and LF in the message, and
also `:` and `,` in properties. With CR and LF escaped, a log line can never begin a line of its own, so it
cannot inject a command (`::add-mask::`, `::stop-commands::`, a fake `::error`).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

import regex

from logscope.model import Analysis
from logscope.vocab import SEVERITY_ORDER, Evidence, Finding

COMMANDS = {"critical": "error", "error": "error", "warning": "warning", "note": "notice", "info": "notice"}

# ANSI colour/cursor sequences (common in training logs) carry nothing for an annotation.
ANSI_ESCAPE = regex.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# Other control characters, and the Unicode line/paragraph separators, which some viewers break lines on.
CONTROL = regex.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]")


def render(analysis: Analysis) -> str:
    diagnosis = analysis.diagnosis
    base = _evidence_base(str(diagnosis.get("input", "")))
    lines = [_finding_command(finding, base) for finding in diagnosis.get("findings", [])]
    lines.append(_verdict_command(diagnosis))
    return "\n".join(lines) + "\n"


def escape_data(text: str) -> str:
    """Escape a command's message the way the Actions runner unescapes it."""
    return printable(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a property value (`file=`, `title=`): as data, plus `:` and `,`, which end a property."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, properties: dict[str, str | int], message: str) -> str:
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{name}{' ' + props if props else ''}::{escape_data(message)}"


def printable(text: str) -> str:
    """`text` without ANSI escape sequences, other control characters turned into spaces."""
    return CONTROL.sub(" ", ANSI_ESCAPE.sub("", text))


def _evidence_base(input_path: str) -> PurePosixPath:
    """Evidence paths are relative to the analysed input (a folder) or name the input itself (a file or an
    archive); GitHub wants paths relative to the workspace, which is where `logscope analyze` ran."""
    base = PurePosixPath(input_path.replace("\\", "/"))
    return base if Path(input_path).is_dir() else base.parent


def _finding_command(finding: Finding, base: PurePosixPath) -> str:
    properties: dict[str, str | int] = {}
    evidence: list[Evidence] = finding.get("evidence", [])
    if evidence:
        properties["file"] = (base / evidence[0]["path"]).as_posix()
        properties["line"] = evidence[0]["line"]
    properties["title"] = f"logscope {finding['rule']}: {finding['title']}"
    parts = [finding["message"] or finding["title"]]
    if finding.get("culprit_ranks"):
        parts.append("Culprit ranks: " + ", ".join(str(rank) for rank in finding["culprit_ranks"]))
    for item in evidence:
        rank = f"rank {item['rank']} " if item.get("rank") is not None else ""
        parts.append(f"{rank}{item['path']}:{item['line']}: {item['text']}")
    if finding.get("next_step"):
        parts.append(f"Next step: {finding['next_step']}")
    return command(COMMANDS.get(finding["severity"], "warning"), properties, "\n".join(parts))


def _verdict_command(diagnosis: dict[str, Any]) -> str:
    verdict: dict[str, Any] = diagnosis["verdict"]
    severities = [finding["severity"] for finding in diagnosis.get("findings", [])]
    worst = max(severities, key=SEVERITY_ORDER.__getitem__) if severities else "info"
    name = "notice" if verdict["category"] == "healthy" else COMMANDS.get(worst, "notice")
    step: dict[str, Any] = verdict["next_step"]
    culprits = ", ".join(str(rank) for rank in verdict.get("culprit_ranks", []))
    parts = [f"{verdict['category']}: {verdict['summary']}"]
    if culprits:
        parts.append(f"Culprit ranks: {culprits} (confidence {verdict['confidence']:.2f})")
    parts.append(f"Next step {step['id']}: {step['title']}")
    if step.get("command"):
        parts.append(f"Command: {step['command']}")
    if step.get("detail"):
        parts.append(str(step["detail"]))
    return command(name, {"title": f"logscope verdict: {verdict['category']}"}, "\n".join(parts))
