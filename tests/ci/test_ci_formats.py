"""The CI formats (sarif, github, junit) on real analyses of the fixture trees, each checked against its
schema or, for GitHub's workflow commands, against the runner's own parsing and unescaping rules."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import jsonschema
import pytest
import xmlschema

from logscope.analysis import analyze
from logscope.model import Analysis
from logscope.report import github, html, junit, sarif

REPO = Path(__file__).resolve().parents[2]
REAL_RUNS = REPO / "fixtures" / "real" / "runs"
REAL_PUBLIC = REPO / "fixtures" / "real" / "public"
GENERATED_RUNS = REPO / "fixtures" / "runs"
SCHEMAS = REPO / "tests" / "data" / "schemas"
Analysed = Callable[[Path], Analysis]

CASES = [
    REAL_RUNS / "01_healthy_ws2",
    REAL_RUNS / "07_config_disagreement_rank1_seed_numenvs",
    REAL_RUNS / "10_python_exception_rank1_record",
    REAL_RUNS / "12_sigkill_rank1",
    REAL_RUNS / "20_silent_single_rank_nproc1",
    REAL_PUBLIC / "13_megatron_duplicate_gpu_interleaved",
    REAL_PUBLIC / "32_llamafactory_qlora_oom_childfailed_root_cause",
    GENERATED_RUNS / "healthy_ws4",  # rsl_rl's ANSI-bold iteration header
]
IDS = [case.name for case in CASES]

SARIF_VALIDATOR = jsonschema.Draft4Validator(json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text()))
JUNIT_SCHEMA = xmlschema.XMLSchema(str(SCHEMAS / "junit-10.xsd"))
SEVERITY_ORDER = ("info", "note", "warning", "error", "critical")


def with_findings(analysed: Analysed) -> list[Path]:
    return [case for case in CASES if analysed(case).diagnosis["findings"]]


# ---------------------------------------------------------------------------------------------- sarif


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sarif_is_valid_sarif_2_1_0(case: Path, analysed: Analysed) -> None:
    document = json.loads(sarif.render(analysed(case)))
    SARIF_VALIDATOR.validate(document)
    assert document["version"] == "2.1.0"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sarif_has_one_result_per_finding_and_one_rule_per_rule_id(case: Path, analysed: Analysed) -> None:
    analysis = analysed(case)
    findings = analysis.diagnosis["findings"]
    run = json.loads(sarif.render(analysis))["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "logscope"
    assert driver["version"] == analysis.diagnosis["logscope_version"]
    assert [rule["id"] for rule in driver["rules"]] == list(dict.fromkeys(f["rule"] for f in findings))
    assert len(run["results"]) == len(findings)
    for result, finding in zip(run["results"], findings, strict=True):
        assert result["ruleId"] == finding["rule"]
        assert driver["rules"][result["ruleIndex"]]["id"] == finding["rule"]
        assert result["level"] == sarif.LEVELS[finding["severity"]]
        assert result["message"]["text"] == finding["message"]
        assert result["properties"]["culpritRanks"] == finding["culprit_ranks"]
        assert result["properties"]["confidence"] == finding["confidence"]
        assert result["properties"]["category"] == finding["category"]
    assert run["properties"]["verdict"] == analysis.diagnosis["verdict"]


def test_sarif_locations_point_at_the_evidence_lines_in_the_log_files(analysed: Analysed) -> None:
    checked = 0
    for case in with_findings(analysed):
        run = json.loads(sarif.render(analysed(case)))["runs"][0]
        for result, finding in zip(run["results"], analysed(case).diagnosis["findings"], strict=True):
            assert len(result["locations"]) == len(finding["evidence"])
            for location, evidence in zip(result["locations"], finding["evidence"], strict=True):
                physical = location["physicalLocation"]
                uri = physical["artifactLocation"]["uri"]
                assert physical["artifactLocation"]["uriBaseId"] == sarif.LOG_ROOT
                assert not uri.startswith("/")
                path = unquote(uri)
                assert path == evidence["path"]
                line = physical["region"]["startLine"]
                assert line == evidence["line"]
                if "!" not in path:  # an archive member has no file of its own to open
                    lines = (case / path).read_text(encoding="utf-8", errors="replace").splitlines()
                    assert 1 <= line <= len(lines)
                checked += 1
    assert checked > 0


def test_sarif_rule_descriptors_use_the_rule_docs_when_the_rules_have_them(analysed: Analysed) -> None:
    for case in with_findings(analysed):
        analysis = analysed(case)
        for rule in json.loads(sarif.render(analysis))["runs"][0]["tool"]["driver"]["rules"]:
            doc = analysis.rule_docs.get(rule["id"])
            assert doc is not None, rule["id"]  # every rule that fired was one the analysis ran
            assert rule["shortDescription"]["text"] == doc["title"]
            assert rule["fullDescription"]["text"] == doc["what"]
            if doc.get("why"):
                assert doc["why"] in rule["help"]["text"]


def test_a_users_rule_is_documented_in_sarif_and_html_like_a_built_in_one(tmp_path: Path) -> None:
    # A copy of LS951 under a team's own id, given with --rules: its What / Why come from its file, not the pack.
    rule = (REPO / "rules/LS951_single_rank.yaml").read_text().replace("id: LS951", "id: TEAM951")
    rule = rule.replace("title: The job ran a single rank", "title: Our job ran one rank")
    rule = rule.replace("Nothing fails, so nobody notices", "Our nightly gate would not notice")
    (tmp_path / "team.yaml").write_text(rule)
    analysis = analyze(REAL_RUNS / "20_silent_single_rank_nproc1", rules_dirs=[tmp_path])
    assert "TEAM951" in {f["rule"] for f in analysis.diagnosis["findings"]}
    rules = json.loads(sarif.render(analysis))["runs"][0]["tool"]["driver"]["rules"]
    (descriptor,) = [r for r in rules if r["id"] == "TEAM951"]
    assert descriptor["shortDescription"]["text"] == "Our job ran one rank"
    assert "Our nightly gate would not notice" in descriptor["help"]["text"]  # the rule file's `why`
    assert "Our nightly gate would not notice" in html.render(analysis)


def test_sarif_describes_a_rule_without_docs_from_its_finding(analysed: Analysed) -> None:
    real = analysed(REAL_RUNS / "12_sigkill_rank1")
    diagnosis = copy.deepcopy(real.diagnosis)
    finding = diagnosis["findings"][0]
    finding["rule"] = "TEAM001"  # a rule from a user's --rules folder has no built-in documentation
    analysis = Analysis(diagnosis=diagnosis, events=real.events, ranks=real.ranks, notes=real.notes)
    document = json.loads(sarif.render(analysis))
    SARIF_VALIDATOR.validate(document)
    (descriptor,) = [r for r in document["runs"][0]["tool"]["driver"]["rules"] if r["id"] == "TEAM001"]
    assert descriptor["shortDescription"]["text"] == finding["title"]
    assert descriptor["fullDescription"]["text"] == finding["message"]


def test_sarif_uri_of_awkward_paths_is_a_relative_reference() -> None:
    assert sarif.artifact_uri("logs/run 1/attempt_0/0/stdout.log") == "logs/run%201/attempt_0/0/stdout.log"
    assert sarif.artifact_uri("ci.zip!logs/0/stdout.log") == "ci.zip!logs/0/stdout.log"
    assert sarif.artifact_uri("C:\\ci\\console.log") == "C%3A/ci/console.log"
    assert sarif.artifact_uri("node:1/console.log") == "node%3A1/console.log"


# ---------------------------------------------------------------------------------------------- junit


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_junit_is_valid_against_the_jenkins_junit_schema(case: Path, analysed: Analysed) -> None:
    JUNIT_SCHEMA.validate(junit.render(analysed(case)))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_junit_has_a_case_per_checklist_item_and_per_finding(case: Path, analysed: Analysed) -> None:
    diagnosis = analysed(case).diagnosis
    root = ET.fromstring(junit.render(analysed(case)))
    suites = root.findall("testsuite")
    assert [suite.get("name") for suite in suites] == ["logscope"]
    cases = suites[0].findall("testcase")
    checklist, findings = cases[: len(diagnosis["checklist"])], cases[len(diagnosis["checklist"]) :]
    assert len(findings) == len(diagnosis["findings"])
    for element, item in zip(checklist, diagnosis["checklist"], strict=True):
        assert element.get("name", "").startswith(item["id"])
        outcome = {"pass": None, "fail": "failure", "unknown": "skipped"}[item["status"]]
        children = {child.tag for child in element} - {"system-out"}
        assert children == ({outcome} if outcome else set())
    for element, finding in zip(findings, diagnosis["findings"], strict=True):
        assert finding["rule"] in element.get("name", "")
        failure = element.find("failure")
        if finding["severity"] in ("warning", "error", "critical"):
            assert failure is not None
            assert failure.get("type") == finding["severity"]
            for evidence in finding["evidence"]:
                assert f"{evidence['path']}:{evidence['line']}:" in (failure.text or "")
        else:
            assert failure is None
    suite = suites[0]
    assert int(suite.get("tests", "")) == len(cases)
    assert int(suite.get("failures", "")) == sum(1 for c in cases if c.find("failure") is not None)
    assert int(suite.get("skipped", "")) == sum(1 for c in cases if c.find("skipped") is not None)


def test_junit_drops_characters_xml_cannot_carry(analysed: Analysed) -> None:
    analysis = _with_evidence_text(analysed(REAL_RUNS / "10_python_exception_rank1_record"), "\x1b[1mbold\x00\x07")
    text = junit.render(analysis)
    JUNIT_SCHEMA.validate(text)
    assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
    assert "bold" in text


def test_junit_of_a_real_traceback_with_control_characters_is_valid(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with log.open("w") as handle:
        message = "\x1b[31mloss exploded\x1b[0m \x07\x0b at step 3"
        subprocess.run([sys.executable, "-c", f"raise RuntimeError({message!r})"], stderr=handle, timeout=60)
    assert "\x1b[31m" in log.read_text()
    analysis = analyze(log)
    assert analysis.diagnosis["findings"]
    text = junit.render(analysis)
    JUNIT_SCHEMA.validate(text)
    assert "loss exploded" in text


# ---------------------------------------------------------------------------------------------- github


def unescape_data(value: str) -> str:
    """The Actions runner's unescaping of a command's message (ActionCommand.UnescapeData)."""
    return value.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_property(value: str) -> str:
    """The runner's unescaping of a property value (ActionCommand.UnescapeProperty)."""
    return value.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def parse_command(line: str) -> tuple[str, dict[str, str], str] | None:
    """A workflow command as the runner reads it from one output line; None when the line is not one."""
    text = line.strip()
    if not text.startswith("::"):
        return None
    end = text.find("::", 2)
    if end < 0:
        return None
    head, data = text[2:end], text[end + 2 :]
    name, _, props = head.partition(" ")
    properties = {}
    for item in props.split(",") if props else []:
        key, _, value = item.partition("=")
        properties[key] = unescape_property(value)
    return name, properties, unescape_data(data)


def runner_lines(output: str) -> list[str]:
    """Output split the way the runner splits a step's stdout: on LF, CR or CRLF."""
    return output.replace("\r\n", "\n").replace("\r", "\n").split("\n")[:-1]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_github_prints_one_command_per_finding_and_a_verdict(case: Path, analysed: Analysed) -> None:
    diagnosis = analysed(case).diagnosis
    lines = runner_lines(github.render(analysed(case)))
    assert len(lines) == len(diagnosis["findings"]) + 1
    commands = [parse_command(line) for line in lines]
    assert all(command is not None for command in commands)
    for command, finding in zip(commands, diagnosis["findings"], strict=False):
        assert command is not None
        name, properties, message = command
        assert name == github.COMMANDS[finding["severity"]]
        assert properties["title"] == f"logscope {finding['rule']}: {finding['title']}"
        assert message.startswith(finding["message"])
        if finding["evidence"]:
            first = finding["evidence"][0]
            assert properties["file"] == (case / first["path"]).as_posix()
            assert properties["line"] == str(first["line"])
            assert Path(properties["file"]).is_file()
    verdict_command = commands[-1]
    assert verdict_command is not None
    name, properties, message = verdict_command
    verdict = diagnosis["verdict"]
    worst = max((f["severity"] for f in diagnosis["findings"]), key=SEVERITY_ORDER.index, default="info")
    assert name == ("notice" if verdict["category"] == "healthy" else github.COMMANDS[worst])
    assert properties["title"] == f"logscope verdict: {verdict['category']}"
    assert verdict["summary"] in message
    assert f"Next step {verdict['next_step']['id']}" in message


def test_github_escaping_round_trips_through_the_runners_unescaping() -> None:
    hostile = "50% done\r\n::error::x, a:b %0A %25 %3A"
    assert unescape_data(github.escape_data(hostile)) == hostile
    assert unescape_property(github.escape_property(hostile)) == hostile
    escaped = github.escape_property(hostile)
    assert not any(ch in escaped for ch in "\r\n:,")
    assert github.escape_data("a\nb") == "a%0Ab"
    assert github.escape_property("a:b,c") == "a%3Ab%2Cc"


def _with_evidence_text(analysis: Analysis, text: str) -> Analysis:
    """A real analysis whose evidence lines and finding text say `text` (what a hostile log could print)."""
    diagnosis: dict[str, Any] = copy.deepcopy(analysis.diagnosis)
    assert diagnosis["findings"], "the case must have findings"
    for finding in diagnosis["findings"]:
        finding["title"] += text
        finding["message"] += text
        for evidence in finding["evidence"]:
            evidence["text"] = text
    diagnosis["verdict"]["summary"] += text
    return Analysis(diagnosis=diagnosis, events=analysis.events, ranks=analysis.ranks, notes=analysis.notes)


HOSTILE = [
    "\n::add-mask::secret",
    "\r::stop-commands::pwned",
    "x\r\n::error file=.github/workflows/ci.yml,line=1::fake",
    "%0A::warning::decoded-too-early",
    "a,title=override::b",
    "\u2028::notice::separator",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_github_log_text_cannot_inject_a_workflow_command(text: str, analysed: Analysed) -> None:
    analysis = _with_evidence_text(analysed(REAL_RUNS / "10_python_exception_rank1_record"), text)
    output = github.render(analysis)
    lines = runner_lines(output)
    assert len(lines) == len(analysis.diagnosis["findings"]) + 1  # no line of the log's own
    for line, finding in zip(lines, analysis.diagnosis["findings"], strict=False):
        command = parse_command(line)
        assert command is not None
        name, properties, _ = command
        assert name == github.COMMANDS[finding["severity"]]
        assert set(properties) <= {"file", "line", "title"}
        assert properties["title"].endswith(github.printable(text))  # the hostile text stays inside its title
    assert "\u2028" not in output


def test_github_a_real_traceback_with_a_hostile_message_stays_one_annotation(tmp_path: Path) -> None:
    """A real Python traceback whose message tries to inject commands (logs print what code raises)."""
    message = "bad batch 50%, see ::error file=a,line=1::not from logscope %0A %25"
    log = tmp_path / "train.log"
    with log.open("w") as handle:
        subprocess.run(
            [sys.executable, "-c", f"raise RuntimeError({message!r})"], stderr=handle, check=False, timeout=60
        )
    assert message in log.read_text()
    analysis = analyze(log)
    lines = runner_lines(github.render(analysis))
    assert len(lines) == len(analysis.diagnosis["findings"]) + 1
    parsed = [parse_command(line) for line in lines]
    assert all(command is not None and command[0] in ("error", "warning", "notice") for command in parsed)
    shown = [command[2] for command in parsed if command is not None]
    assert any(message in text for text in shown), "the exception line is the evidence, intact after unescaping"


def test_formats_of_an_archived_run_locate_evidence_inside_the_archive(tmp_path: Path) -> None:
    source = REAL_RUNS / "12_sigkill_rank1"
    archive = tmp_path / "artifact.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                handle.write(path, path.relative_to(source).as_posix())
    analysis = analyze(archive)
    assert analysis.diagnosis["findings"]
    run = json.loads(sarif.render(analysis))["runs"][0]
    SARIF_VALIDATOR.validate({"version": "2.1.0", "runs": [run]})
    uris = [
        location["physicalLocation"]["artifactLocation"]["uri"]
        for result in run["results"]
        for location in result["locations"]
    ]
    assert uris and all(uri.startswith("artifact.zip!") for uri in uris)
    with zipfile.ZipFile(archive) as handle:
        members = set(handle.namelist())
    assert all(unquote(uri).split("!", 1)[1] in members for uri in uris)
    for line in runner_lines(github.render(analysis))[:-1]:
        command = parse_command(line)
        assert command is not None
        assert command[1]["file"].startswith(f"{tmp_path.as_posix()}/artifact.zip!")
    JUNIT_SCHEMA.validate(junit.render(analysis))
