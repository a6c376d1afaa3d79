"""SARIF 2.1.0: one run, one result per finding, located at the log lines of its evidence.

Code-scanning tools (GitHub code scanning, GitLab, VS Code's SARIF viewer) read this; the verdict and the
validation checklist ride along in the run's property bag.
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import quote

from logscope import __version__
from logscope.model import Analysis
from logscope.vocab import Evidence, Finding

SARIF_SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

# SARIF has four levels; logscope's five severities fold onto them.
LEVELS = {"critical": "error", "error": "error", "warning": "warning", "note": "note", "info": "note"}

# The evidence paths are relative to the analysed input; results point into it through this base id.
LOG_ROOT = "LOGROOT"


def render(analysis: Analysis) -> str:
    return json.dumps(sarif_log(analysis), indent=2, ensure_ascii=False) + "\n"


def sarif_log(analysis: Analysis) -> dict[str, Any]:
    diagnosis = analysis.diagnosis
    findings: list[Finding] = diagnosis.get("findings", [])
    rule_ids = list(dict.fromkeys(finding["rule"] for finding in findings))
    rule_index = {rule_id: index for index, rule_id in enumerate(rule_ids)}
    first_finding = {rule_id: next(f for f in findings if f["rule"] == rule_id) for rule_id in rule_ids}
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "logscope",
                "version": diagnosis.get("logscope_version") or __version__,
                "rules": [
                    _rule_descriptor(rule_id, first_finding[rule_id], analysis.rule_docs.get(rule_id) or {})
                    for rule_id in rule_ids
                ],
            }
        },
        "originalUriBaseIds": {
            LOG_ROOT: {"description": {"text": f"the analysed input: {diagnosis.get('input', '')}"}}
        },
        "results": [_result(finding, rule_index[finding["rule"]]) for finding in findings],
        "properties": {
            "input": diagnosis.get("input"),
            "verdict": diagnosis.get("verdict"),
            "checklist": diagnosis.get("checklist", []),
            "job": diagnosis.get("job"),
        },
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def _rule_descriptor(rule_id: str, example_finding: Finding, doc: dict[str, Any]) -> dict[str, Any]:
    """A SARIF rule from the rule's docs; a rule without docs (an Analysis built by hand) from its finding."""
    title = doc.get("title") or example_finding["title"]
    what = doc.get("what") or example_finding["message"]
    help_parts = [part for part in (doc.get("why"), doc.get("example")) if part]
    help_text = "\n\n".join(help_parts) if help_parts else what
    markdown_parts = []
    if doc.get("why"):
        markdown_parts.append(str(doc["why"]))
    if doc.get("example"):
        markdown_parts.append("Example:\n\n```\n" + str(doc["example"]).rstrip("\n") + "\n```")
    descriptor: dict[str, Any] = {
        "id": rule_id,
        "name": rule_id,
        "shortDescription": {"text": title},
        "fullDescription": {"text": what},
        "help": {"text": help_text, **({"markdown": "\n\n".join(markdown_parts)} if markdown_parts else {})},
        "defaultConfiguration": {"level": LEVELS.get(example_finding["severity"], "warning")},
        "properties": {"category": example_finding["category"]},
    }
    return descriptor


def _result(finding: Finding, rule_index: int) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": finding["rule"],
        "ruleIndex": rule_index,
        "level": LEVELS.get(finding["severity"], "warning"),
        "message": {"text": finding["message"] or finding["title"]},
        "locations": [_location(evidence) for evidence in finding.get("evidence", [])],
        "properties": {
            "title": finding["title"],
            "category": finding["category"],
            "severity": finding["severity"],
            "confidence": finding["confidence"],
            "ranks": finding.get("ranks", []),
            "culpritRanks": finding.get("culprit_ranks", []),
            "collective": finding.get("collective"),
            "nextStep": finding.get("next_step"),
        },
    }
    return result


def _location(evidence: Evidence) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": evidence["line"], "snippet": {"text": evidence["text"]}}
    location: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": artifact_uri(evidence["path"]), "uriBaseId": LOG_ROOT},
            "region": region,
        }
    }
    if evidence.get("rank") is not None:
        location["properties"] = {"rank": evidence["rank"]}
    return location


def artifact_uri(path: str) -> str:
    """A relative URI reference for a log path: `a.zip!logs/0/stdout.log` stays readable, a space becomes %20
    and a colon %3A (so that `C:` or `x:y` is never read as a URI scheme)."""
    posix = PureWindowsPath(path).as_posix() if "\\" in path else PurePosixPath(path).as_posix()
    return quote(posix.lstrip("/"), safe="/!$&'()*+,;=@-._~")
