"""JUnit XML: one test suite "logscope", one test case per validation-checklist item and per finding.

CI systems (GitLab `artifacts:reports:junit`, Jenkins, GitHub test-report actions) show failed cases on the
pipeline page. Checklist items: pass -> passed, fail -> <failure>, unknown -> <skipped>. Findings at warning
or above are <failure>s; info and note findings are passed cases whose text is kept in <system-out>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import regex

from logscope.model import Analysis
from logscope.report.github import printable
from logscope.vocab import Finding

FAILING_SEVERITIES = ("warning", "error", "critical")

# Characters XML 1.0 cannot carry at all, escaped or not (lone surrogates, U+FFFE/U+FFFF), left after
# `printable` has removed ANSI sequences and control characters.
NOT_XML = regex.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def render(analysis: Analysis) -> str:
    diagnosis = analysis.diagnosis
    cases = [_checklist_case(item) for item in diagnosis.get("checklist", [])]
    cases += [_finding_case(finding) for finding in diagnosis.get("findings", [])]
    failures = sum(1 for case in cases if case.find("failure") is not None)
    skipped = sum(1 for case in cases if case.find("skipped") is not None)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0"}
    suites = ET.Element("testsuites", {"name": "logscope", **counts})
    suite = ET.SubElement(suites, "testsuite", {"name": "logscope", **counts, "skipped": str(skipped)})
    suite.append(_properties(diagnosis))
    suite.extend(cases)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def xml_text(text: str) -> str:
    """`text` without ANSI escape sequences, and with the characters XML 1.0 forbids replaced (ElementTree
    would write them raw and the file would not parse)."""
    return NOT_XML.sub("\ufffd", printable(text))


def _properties(diagnosis: dict[str, Any]) -> ET.Element:
    verdict: dict[str, Any] = diagnosis["verdict"]
    job: dict[str, Any] = diagnosis.get("job", {})
    values = {
        "input": diagnosis.get("input"),
        "verdict": verdict["category"],
        "culprit_ranks": ",".join(str(rank) for rank in verdict.get("culprit_ranks", [])),
        "confidence": f"{verdict['confidence']:.2f}",
        "summary": verdict["summary"],
        "next_step": f"{verdict['next_step']['id']}: {verdict['next_step']['title']}",
        "world_size": job.get("world_size"),
        "backend": job.get("backend"),
    }
    properties = ET.Element("properties")
    for name, value in values.items():
        if value is not None:
            ET.SubElement(properties, "property", {"name": name, "value": xml_text(str(value))})
    return properties


def _checklist_case(item: dict[str, Any]) -> ET.Element:
    name = f"{item['id']} {item['title']}" if item.get("title") else item["id"]
    case = ET.Element("testcase", {"classname": "logscope.checklist", "name": xml_text(name)})
    evidence = xml_text("\n".join(item.get("evidence", [])))
    if item["status"] == "fail":
        first = item["evidence"][0] if item.get("evidence") else f"{item['id']} failed"
        failure = ET.SubElement(case, "failure", {"type": "checklist", "message": xml_text(first)})
        failure.text = evidence
    elif item["status"] == "unknown":
        first = item["evidence"][0] if item.get("evidence") else "not enough evidence in the logs"
        skipped = ET.SubElement(case, "skipped", {"message": xml_text(first)})
        skipped.text = evidence
    elif evidence:
        ET.SubElement(case, "system-out").text = evidence
    return case


def _finding_case(finding: Finding) -> ET.Element:
    case = ET.Element(
        "testcase",
        {
            "classname": f"logscope.findings.{finding['category']}",
            "name": xml_text(f"{finding['rule']}: {finding['title']}"),
        },
    )
    lines = [finding["message"]]
    if finding.get("culprit_ranks"):
        lines.append("culprit ranks: " + ", ".join(str(rank) for rank in finding["culprit_ranks"]))
    lines.append(f"confidence: {finding['confidence']:.2f}")
    for evidence in finding.get("evidence", []):
        rank = f"[rank {evidence['rank']}] " if evidence.get("rank") is not None else ""
        lines.append(f"{evidence['path']}:{evidence['line']}: {rank}{evidence['text']}")
    if finding.get("next_step"):
        lines.append(f"next step: {finding['next_step']}")
    body = xml_text("\n".join(lines))
    if finding["severity"] in FAILING_SEVERITIES:
        failure = ET.SubElement(case, "failure", {"type": finding["severity"], "message": xml_text(finding["message"])})
        failure.text = body
    else:
        ET.SubElement(case, "system-out").text = body
    return case
