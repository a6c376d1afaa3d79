"""The HTML report in a real headless Chromium (Debian `chromium`, driven by Playwright for Python)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from logscope.analysis import analyze
from logscope.model import Analysis
from logscope.report import html
from logscope.report.html import findings as html_findings
from logscope.report.html import text as html_text
from logscope.report.html import timeline as html_timeline

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "runs"
STALL = RUNS / "03_skip_allreduce_rank1_stall_gloo_timeout"
MISMATCH = RUNS / "21_debug_detail_collective_mismatch"
HOSTILE_PAYLOAD = '<script>window.__pwned=1</script>"><img src=x onerror="window.__pwned=2">'
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
if not CHROMIUM.exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)", allow_module_level=True)


class Browser:
    """A fresh Chromium profile; any request other than the report file itself is recorded and blocked."""

    def __init__(self, playwright: Any, profile: Path) -> None:
        self.attempted: list[str] = []
        self.context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 900},
        )
        self.context.grant_permissions(["clipboard-read", "clipboard-write"])
        self.context.route("**/*", self._route)
        self.context.on("request", self._record)

    def _record(self, request: Any) -> None:
        if not request.url.startswith("file://"):
            self.attempted.append(request.url)

    def _route(self, route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            self.attempted.append(route.request.url)
            route.abort()

    def open(self, report: Path) -> Any:
        page = self.context.new_page()
        page.goto(report.as_uri())
        page.wait_for_load_state("load")
        return page

    def close(self, page: Any) -> None:
        page.close()
        assert self.attempted == [], "the report must not request anything from the network"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with sync_api.sync_playwright() as playwright:
        session = Browser(playwright, tmp_path_factory.mktemp("chromium-profile"))
        yield session
        session.context.close()


def _write_report(tree: Path, out: Path) -> Path:
    out.write_text(html.render(analyze(tree)), encoding="utf-8")
    return out


def _screenshot(page: Any, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.evaluate("window.scrollTo(0, 0)")  # else the sticky section bar lands mid-page in a full-page shot
    page.screenshot(path=str(shot), full_page=True)
    if os.environ.get("LOGSCOPE_SCREENSHOT_DIR"):
        target = Path(os.environ["LOGSCOPE_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, target / name)
    assert shot.stat().st_size > 10_000
    return shot


def test_verdict_culprit_and_finding_evidence_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    analysis = analyze(STALL)
    report = tmp_path / "stall.html"
    report.write_text(html.render(analysis), encoding="utf-8")
    page = browser.open(report)
    verdict = analysis.diagnosis["verdict"]

    assert page.get_by_test_id("category").text_content() == verdict["category"].replace("_", " ")
    assert page.get_by_test_id("culprit").text_content() == html_text.ranks_label(verdict["culprit_ranks"])
    assert page.locator("#verdict").is_visible()

    finding = analysis.diagnosis["findings"][0]
    evidence = finding["evidence"][0]
    first = page.locator("details.finding").first
    window = first.locator(".logwin").first
    assert window.is_visible(), "the verdict's finding starts open"
    first.locator("summary").click()
    assert not window.is_visible(), "and its summary folds it"
    first.locator("summary").click()
    assert html_text.clip(evidence["text"], html_findings.MAX_EVIDENCE_TEXT_CHARS).strip() in window.inner_text()
    where = first.locator(".where").first.inner_text()
    assert f"{evidence['path']}:{evidence['line']}" in where

    _screenshot(page, tmp_path, "report-stall.png")
    browser.close(page)


def test_one_confidence_and_one_culprit_mark_on_the_page(browser: Browser, tmp_path: Path) -> None:
    """The header and the verdict's finding show the same confidence; a finding that blames another rank is not marked
    as the culprit (run 08: the verdict blames rank 1, the NCCL-error finding rank 0)."""
    tree = RUNS / "08_allreduce_size_mismatch_rank1"
    analysis = analyze(tree)
    verdict = analysis.diagnosis["verdict"]
    page = browser.open(_write_report(tree, tmp_path / "mismatch.html"))

    header = page.locator(".confidence").first.inner_text()
    shown = f"{round(verdict['confidence'] * 100)}%"
    assert shown in header
    marks = page.locator("details.finding .culprit-mark")
    assert marks.count() == 1
    assert marks.first.inner_text() == f"culprit {html_text.rank_ranges(verdict['culprit_ranks'])}"
    top = page.locator("details.finding.is-verdict")
    assert f"verdict · {shown} confidence" in top.locator("summary").inner_text()
    others = [
        f
        for f in analysis.diagnosis["findings"]
        if f["culprit_ranks"] and f["culprit_ranks"] != verdict["culprit_ranks"]
    ]
    assert others, "the fixture has a finding that blames another rank"
    other = page.locator("details.finding:not(.is-verdict)", has_text=others[0]["rule"]).first
    assert (
        other.locator(".finding-ranks").inner_text()
        == f"this finding blames {html_text.rank_ranges(others[0]['culprit_ranks'])}"
    )
    assert "(this finding)" in other.locator("summary").inner_text()
    assert other.get_attribute("open") is None, "only the verdict's finding starts open"
    _screenshot(page, tmp_path, "report-findings.png")
    browser.close(page)


def _text_outside_the_plot(page: Any) -> list[str]:
    return page.evaluate(
        """() => {
          const svg = document.querySelector('svg.lanes');
          const width = svg.viewBox.baseVal.width, height = svg.viewBox.baseVal.height;
          return [...svg.querySelectorAll('text')].map(t => [t.textContent, t.getBBox()])
            .filter(([_, b]) => b.x < 0 || b.y < 0 || b.x + b.width > width + 0.5 || b.y + b.height > height + 0.5)
            .map(([text]) => text);
        }"""
    )


@pytest.mark.parametrize("tree", [STALL, MISMATCH, RUNS / "08_allreduce_size_mismatch_rank1"], ids=lambda p: p.name[:2])
def test_timeline_labels_stay_inside_the_plot(browser: Browser, tmp_path: Path, tree: Path) -> None:
    page = browser.open(_write_report(tree, tmp_path / "report.html"))
    assert _text_outside_the_plot(page) == []
    browser.close(page)


def test_a_late_failing_collective_keeps_its_label_inside_the_plot(
    browser: Browser, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker can sit at the plot's right end (a collective logged in the fail phase); its label then ends there."""
    place = html_timeline.collective_mark_x
    monkeypatch.setattr(
        html_timeline, "collective_mark_x", lambda placed, coll: None if place(placed, coll) is None else 1070.0
    )
    page = browser.open(_write_report(MISMATCH, tmp_path / "late.html"))
    assert page.locator("svg.lanes .coll-label").count() == 1
    assert _text_outside_the_plot(page) == []
    browser.close(page)


def test_evidence_rank_link_opens_that_rank_view(browser: Browser, tmp_path: Path) -> None:
    page = browser.open(_write_report(STALL, tmp_path / "stall.html"))
    link = page.locator("details.finding .where a[href^='#rank-']").first
    target = link.get_attribute("href")[1:]
    view = page.locator(f"details#{target}")
    assert view.get_attribute("open") is None
    link.click()
    assert view.get_attribute("open") is not None
    assert view.locator("tbody tr").first.is_visible()
    browser.close(page)


def test_injected_script_in_a_log_line_does_not_run(browser: Browser, tmp_path: Path) -> None:
    tree = tmp_path / STALL.name
    shutil.copytree(STALL, tree)
    (stderr,) = tree.glob("logs/*/attempt_0/1/stderr.log")
    with stderr.open("a", encoding="utf-8") as handle:
        handle.write(f"[rank1]: RuntimeError: {HOSTILE_PAYLOAD}\n")
    page = browser.open(_write_report(tree, tmp_path / "hostile.html"))

    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("img").count() == 0
    view = page.locator("details.rank-log", has_text="window.__pwned").first
    view.locator("summary").click()
    shown = view.get_by_text(HOSTILE_PAYLOAD, exact=False)
    assert shown.first.is_visible(), "the hostile line is shown as text"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    _screenshot(page, tmp_path, "report-hostile.png")
    browser.close(page)


def test_copy_button_puts_the_next_step_command_on_the_clipboard(browser: Browser, tmp_path: Path) -> None:
    analysis = analyze(STALL)
    report = tmp_path / "stall.html"
    report.write_text(html.render(analysis), encoding="utf-8")
    page = browser.open(report)
    page.locator("button[data-copy='next-command']").click()
    assert page.evaluate("navigator.clipboard.readText()") == analysis.diagnosis["verdict"]["next_step"]["command"]
    browser.close(page)


def test_printing_expands_every_finding(browser: Browser, tmp_path: Path) -> None:
    page = browser.open(_write_report(STALL, tmp_path / "stall.html"))
    window = page.locator("details.finding").last.locator(".logwin").first
    assert not window.is_visible()
    page.emulate_media(media="print")
    page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    assert window.is_visible()
    assert not page.locator("button.copy").is_visible(), "copy buttons are hidden on paper"
    browser.close(page)


def test_collective_mismatch_report_highlights_the_disagreeing_op(browser: Browser, tmp_path: Path) -> None:
    page = browser.open(_write_report(MISMATCH, tmp_path / "mismatch.html"))
    odd = page.locator("#collectives td.odd")
    assert odd.count() > 0
    colour = odd.first.evaluate("td => getComputedStyle(td).backgroundColor")
    plain = page.locator("#collectives td:not(.odd)").first.evaluate("td => getComputedStyle(td).backgroundColor")
    assert colour != plain
    assert page.locator("#timeline svg.lanes g.lane").count() >= 2
    _screenshot(page, tmp_path, "report-mismatch.png")
    browser.close(page)


def test_a_1024_rank_job_stays_readable(browser: Browser, tmp_path: Path) -> None:
    # 1024 ranks made of the real fixture's lines: rank 1 keeps its own log, the others copy rank 0's
    base = analyze(STALL)
    rank0 = base.events.filter(pl.col("rank") == 0)
    events = pl.concat(
        [base.events.filter(pl.col("rank").ne_missing(0))]
        + [rank0.with_columns(rank=pl.lit(r, dtype=pl.Int64)) for r in range(1024) if r != 1]
    )
    (row0,) = [r for r in base.diagnosis["ranks"] if r["rank"] == 0]
    rows = [r for r in base.diagnosis["ranks"] if r["rank"] == 1]
    rows += [{**row0, "rank": r, "local_rank": r % 8} for r in range(1024) if r != 1]
    diagnosis = {**base.diagnosis, "ranks": sorted(rows, key=lambda r: r["rank"])}
    report = tmp_path / "ranks1024.html"
    report.write_text(html.render(Analysis(diagnosis, events, pl.DataFrame(rows), [])), encoding="utf-8")
    page = browser.open(report)

    lanes = page.locator("#timeline svg.lanes g.lane")
    assert lanes.count() <= 4, "identical ranks share a lane"
    assert page.locator("#timeline svg.lanes text.lane-label", has_text="ranks 0, 2–1023 identical").is_visible()
    height = page.locator("#timeline svg.lanes").bounding_box()["height"]
    assert height < 300, "the timeline of 1024 ranks fits on one screen"
    assert page.locator("#ranks tbody tr").count() == 1024
    page.locator("#timeline").screenshot(path=str(tmp_path / "timeline-1024.png"))
    _screenshot(page, tmp_path, "report-1024.png")
    browser.close(page)


def test_severity_filter_hides_findings(browser: Browser, tmp_path: Path) -> None:
    page = browser.open(_write_report(MISMATCH, tmp_path / "mismatch.html"))
    findings = page.locator("details.finding")
    severity = findings.first.get_attribute("data-severity")
    page.locator(f"input[data-severity-filter='{severity}']").uncheck()
    assert not findings.first.is_visible()
    page.locator(f"input[data-severity-filter='{severity}']").check()
    assert findings.first.is_visible()
    browser.close(page)


def test_flight_recorder_section_shows_each_ranks_last_collectives(browser: Browser, tmp_path: Path) -> None:
    tree = RUNS.parents[1] / "flight_recorder" / "gloo_straggler_no_dump_ws4"  # rank 2 left no dump
    analysis = analyze(tree)
    fr = analysis.diagnosis["flight_recorder"]
    report = tmp_path / "fr.html"
    report.write_text(html.render(analysis), encoding="utf-8")
    page = browser.open(report)
    page.locator('nav a[href="#flight-recorder"]').click()
    table = page.get_by_test_id("fr-ranks")
    assert table.is_visible()
    rows = table.locator("tbody tr")
    assert rows.count() == analysis.diagnosis["job"]["world_size"] == 4
    assert "no dump" in rows.nth(2).inner_text()  # the straggler's row says so instead of vanishing
    assert "SeqNum 6" in page.get_by_test_id("fr-hang").inner_text()
    assert fr is not None
    _screenshot(page, tmp_path, "report-flight-recorder.png")
    browser.close(page)
