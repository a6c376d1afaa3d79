"""The HTML report, checked on its markup (parsed with html.parser; the browser tests are separate)."""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import shutil
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from logscope.analysis import analyze
from logscope.events.table import empty_events
from logscope.model import Analysis
from logscope.report import html
from logscope.report.html import findings as html_findings
from logscope.report.html import ranks as html_ranks
from logscope.report.html import text as html_text

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "real" / "runs"
STALL = RUNS / "03_skip_allreduce_rank1_stall_gloo_timeout"
HEALTHY = RUNS / "01_healthy_ws2"
MISMATCH = RUNS / "21_debug_detail_collective_mismatch"
HOSTILE_PAYLOAD = '<script>window.__pwned=1</script>"><img src=x onerror="window.__pwned=2"> javascript:alert(1)'


class Page(HTMLParser):
    """Just enough of a DOM for assertions: every start tag in order, and the text inside each element."""

    VOID = frozenset({"meta", "link", "img", "br", "hr", "input", "source", "wbr", "area", "base", "col", "embed"})

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.markup = markup
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []  # every text node, unescaped
        self.script_bodies: list[str] = []
        self._open: list[tuple[str, dict[str, str], list[str]]] = []
        # (tag, attributes, text content) of every element, in closing order
        self.element_text: list[tuple[str, dict[str, str], str]] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attributes))
        if tag not in self.VOID:
            self._open.append((tag, attributes, []))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            name, attributes, chunks = self._open.pop()
            text = "".join(chunks)
            self.element_text.append((name, attributes, text))
            if self._open:
                self._open[-1][2].append(text)
            if name == "script":
                self.script_bodies.append(text)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        if self._open:
            self._open[-1][2].append(data)

    def find(self, predicate: Callable[[str, dict[str, str]], bool]) -> list[tuple[str, dict[str, str], str]]:
        return [e for e in self.element_text if predicate(e[0], e[1])]

    def text_of(self, **attr: str) -> str:
        """Whitespace-normalised text of the one element with these attributes."""
        (hit,) = self.find(lambda _t, a: all(a.get(k.replace("_", "-")) == v for k, v in attr.items()))
        return " ".join(hit[2].split())

    def section(self, section_id: str) -> Page:
        """The page's `<section id=...>` on its own (sections do not nest)."""
        match = re.search(rf'<section[^>]* id="{section_id}"[^>]*>.*?</section>', self.markup, re.S)
        assert match, f"no section {section_id}"
        return Page(match.group(0))

    def text(self) -> str:
        return "".join(self.texts)

    def ids(self) -> set[str]:
        return {a["id"] for _, a in self.tags if "id" in a}


@pytest.fixture(scope="module")
def stall() -> Analysis:
    return analyze(STALL)


@pytest.fixture(scope="module")
def stall_page(stall: Analysis) -> Page:
    return Page(html.render(stall))


def test_verdict_comes_first_with_category_culprit_and_summary(stall: Analysis, stall_page: Page) -> None:
    verdict = stall.diagnosis["verdict"]
    sections = [a.get("id") for t, a in stall_page.tags if t == "section"]
    assert sections[0] == "verdict"
    assert stall_page.text_of(data_testid="category") == verdict["category"].replace("_", " ")
    assert stall_page.text_of(data_testid="culprit") == html_text.ranks_label(verdict["culprit_ranks"])
    assert stall_page.text_of(data_testid="summary") == " ".join(verdict["summary"].split())


def test_next_step_command_sits_in_a_copy_box(stall: Analysis, stall_page: Page) -> None:
    step = stall.diagnosis["verdict"]["next_step"]
    assert step["command"], "the stall fixture's verdict names a command to run next"
    assert stall_page.text_of(id="next-command") == " ".join(step["command"].split())
    buttons = [a for t, a in stall_page.tags if t == "button" and a.get("data-copy") == "next-command"]
    assert len(buttons) == 1


def test_checklist_shows_every_item_with_its_status(stall: Analysis, stall_page: Page) -> None:
    words = stall_page.section("checklist").text().split()
    for item in stall.diagnosis["checklist"]:
        position = words.index(item["id"])
        assert words[position + 1] == item["status"]


def test_hostile_log_line_is_shown_as_text_never_as_markup(tmp_path: Path) -> None:
    tree = _hostile_copy(tmp_path)
    page = Page(html.render(analyze(tree)))

    assert any(HOSTILE_PAYLOAD in t for t in page.texts), "the hostile line is on the page, as text"
    scripts = [a for t, a in page.tags if t == "script"]
    assert scripts == [{}], "only the report's own inline script, no injected one"
    assert not [t for t, _ in page.tags if t in ("img", "iframe", "object", "embed")]
    handlers = [(t, k) for t, a in page.tags for k in a if k.startswith("on")]
    assert handlers == []
    hrefs = [a.get("href", "") for _, a in page.tags if "href" in a]
    assert all(h.startswith("#") for h in hrefs), "every link is in-page; log text never becomes a URL"


def test_page_is_self_contained_and_only_its_own_script_may_run(stall_page: Page) -> None:
    assert not [t for t, _ in stall_page.tags if t == "link"]
    external = [(t, a) for t, a in stall_page.tags for k in ("src", "href") if k in a and not a[k].startswith("#")]
    assert external == []
    (policy,) = [
        a["content"] for t, a in stall_page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    ]
    assert "default-src 'none'" in policy
    (body,) = stall_page.script_bodies
    digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy, "the CSP hash must match the inline script or it never runs"


def test_evidence_links_lead_to_an_existing_rank_view(stall: Analysis, stall_page: Page) -> None:
    evidence_ranks = {
        e["rank"] for f in stall.diagnosis["findings"] for e in f["evidence"] if e.get("rank") is not None
    }
    assert evidence_ranks, "the stall fixture's findings cite rank lines"
    links = {a["href"][1:] for t, a in stall_page.tags if t == "a" and a.get("href", "").startswith("#rank-")}
    assert links
    assert links <= stall_page.ids()
    views = {a["id"] for t, a in stall_page.tags if t == "details" and "rank-log" in a.get("class", "")}
    assert {f"rank-{r}" for r in evidence_ranks} <= {re.sub(r"-a\d+$", "", v) for v in views}


def test_finding_shows_its_evidence_lines_in_context(stall: Analysis, stall_page: Page) -> None:
    findings = stall_page.find(lambda t, a: t == "details" and "finding" in a.get("class", "").split())
    assert len(findings) == len(stall.diagnosis["findings"])
    for finding, shown in zip(stall.diagnosis["findings"], findings, strict=True):
        for evidence in finding["evidence"][: html_findings.MAX_EVIDENCE_PER_FINDING]:
            assert f"{evidence['path']}:{evidence['line']}" in shown[2]
            for context in evidence.get("context") or []:
                assert html_text.clip(context["text"], html_findings.MAX_EVIDENCE_TEXT_CHARS) in shown[2]


def test_repeated_lines_are_collapsed_across_ranks(stall: Analysis, stall_page: Page) -> None:
    shared = (
        stall.events.filter(pl.col("rank").is_not_null() & pl.col("phase").is_not_null())
        .group_by("text")
        .agg(ranks=pl.col("rank").unique().sort())
        .filter(pl.col("ranks").list.len() >= 2)
    )
    assert shared.height > 0, "both ranks of the stall fixture print the same startup lines"
    rows = [e[2] for e in stall_page.section("repeated").element_text if e[0] == "tr"]
    for text, ranks in shared.head(html_ranks.MAX_REPEATED_GROUPS).iter_rows():
        matching = [r for r in rows if html_text.clip(text) in r]
        assert len(matching) == 1, f"one collapsed row for {text!r}"
        assert f"{html_text.ranks_label(ranks)} said" in matching[0]


def test_notes_from_the_analysis_are_listed(stall: Analysis) -> None:
    extra = copy.copy(stall)
    extra.notes = [*stall.notes, "logs/none/attempt_0/1/stdout.log: truncated at 4096 bytes"]
    notes = Page(html.render(extra)).section("notes").text()
    for note in extra.notes + list(stall.diagnosis.get("notes") or []):
        assert note in notes


def test_replay_result_is_shown_as_a_table(stall: Analysis) -> None:
    with_replay = copy.copy(stall)
    with_replay.diagnosis = {
        **stall.diagnosis,
        "replay": {
            "backend": "gloo",
            "runs": [
                {"world_size": 1, "env": None, "outcome": "ok", "time_per_op_us": 41.5},
                {"world_size": 2, "env": "NCCL_P2P_DISABLE=1", "outcome": "hang", "time_per_op_us": None},
            ],
        },
    }
    section = Page(html.render(with_replay)).section("replay")
    headers = [e[2] for e in section.element_text if e[0] == "th"]  # leaves close in document order
    assert headers == ["world_size", "env", "outcome", "time_per_op_us"]
    cells = [e[2] for e in section.element_text if e[0] == "td"]
    assert cells == ["1", "—", "ok", "41.5", "2", "NCCL_P2P_DISABLE=1", "hang", "—"]
    assert "gloo" in section.text()


def test_no_replay_section_without_a_replay(stall_page: Page) -> None:
    assert "replay" not in stall_page.ids()


def test_healthy_run_renders_without_a_culprit() -> None:
    healthy = analyze(HEALTHY)
    assert healthy.diagnosis["verdict"]["culprit_ranks"] == [], "a healthy run blames nobody"
    page = Page(html.render(healthy))
    assert page.text_of(data_testid="culprit") == "no culprit rank"
    assert page.text_of(data_testid="category") == healthy.diagnosis["verdict"]["category"].replace("_", " ")


def test_report_size_stays_bounded_for_a_huge_event_table(stall: Analysis) -> None:
    huge = _scaled(stall, world_size=64, repeat_train=300)
    assert huge.events.height > 100_000
    markup = html.render(huge)
    assert len(markup.encode()) < 3_000_000
    page = Page(markup)
    views = page.find(lambda t, a: t == "details" and "rank-log" in a.get("class", ""))
    assert 0 < len(views) <= html_ranks.MAX_RANK_VIEWS
    row_counts = _rows_per_rank_view(markup)
    assert max(row_counts.values()) <= html_ranks.MAX_ROWS_PER_RANK_VIEW
    assert any("events not shown" in t for t in page.texts), "the page says how many rows it left out"


def test_identical_ranks_share_one_lane_at_1024_ranks(stall: Analysis) -> None:
    big = _scaled(stall, world_size=1024, repeat_train=0)
    page = Page(html.render(big))
    rank_lanes = [
        a["data-ranks"] for t, a in page.tags if t == "g" and "lane" in a.get("class", "").split() and a["data-ranks"]
    ]
    # the fixture's two ranks behave differently; every copy of rank 0 is identical to it
    assert sorted(rank_lanes) == sorted([",".join(str(r) for r in range(1024) if r != 1), "1"])
    labels = [e[2] for e in page.find(lambda t, a: t == "text" and "lane-label" in a.get("class", ""))]
    assert any("ranks 0, 2–1023 identical" in label for label in labels)


def test_one_rank_that_stops_earlier_gets_its_own_lane(stall: Analysis) -> None:
    big = _scaled(stall, world_size=1024, repeat_train=0)
    last_iteration = big.events.filter(pl.col("rank") == 700)["iteration"].max()
    big.events = big.events.filter(~((pl.col("rank") == 700) & (pl.col("iteration") == last_iteration)))
    page = Page(html.render(big))
    labels = [
        " ".join(e[2].split()) for e in page.find(lambda t, a: t == "text" and "lane-label" in a.get("class", ""))
    ]
    assert "rank 700" in labels
    assert any("ranks 0, 2–699, 701–1023 identical" in label for label in labels)


def test_collective_mismatch_marks_both_ops_when_no_rank_is_the_majority() -> None:
    # the fixture's two ranks ran different collectives at the same SeqNum: neither is the majority
    flags = _odd_flags(Page(html.render(analyze(MISMATCH))), "last op")
    assert flags == {"0": True, "1": True}


def test_the_one_rank_off_the_majority_is_highlighted() -> None:
    # 8 ranks: rank 1 keeps its own log (BROADCAST at the mismatching SeqNum), the others are copies of rank 0
    big = _scaled(analyze(MISMATCH), world_size=8, repeat_train=0)
    flags = _odd_flags(Page(html.render(big)), "last op")
    assert flags == {"0, 2–7": False, "1": True}


def test_rank_ranges_are_compact() -> None:
    assert html_text.rank_ranges([7, 0, 1, 2, 3]) == "0–3, 7"
    assert html_text.rank_ranges([4, 5]) == "4, 5"
    assert html_text.rank_ranges([]) == ""
    assert html_text.ranks_label([3]) == "rank 3"
    assert html_text.ranks_label([1, 2, 3]) == "ranks 1–3"


def test_long_lines_are_clipped_with_a_count() -> None:
    assert html_text.clip("x" * 10, 4) == "xxxx … [6 more chars]"
    assert html_text.clip("short", 10) == "short"


# ----------------------------------------------------------------------------------------------------


def _hostile_copy(tmp_path: Path) -> Path:
    """A copy of the stall fixture with one hostile exception line appended to rank 1's stderr."""
    tree = tmp_path / STALL.name
    shutil.copytree(STALL, tree)
    (stderr,) = tree.glob("logs/*/attempt_0/1/stderr.log")
    with stderr.open("a", encoding="utf-8") as handle:
        handle.write(f"[rank1]: RuntimeError: {HOSTILE_PAYLOAD}\n")
    return tree


def _scaled(base: Analysis, world_size: int, repeat_train: int) -> Analysis:
    """A `world_size`-rank job made of the real fixture's lines: rank 1 keeps its own log, every other rank is
    a copy of rank 0; `repeat_train` more copies of rank 0's training lines make the table huge."""
    events = base.events
    rank0 = events.filter(pl.col("rank") == 0)
    train = rank0.filter(pl.col("phase") == "train")
    step: int = events.select(pl.col("line").max()).item() + 1
    rank0 = pl.concat([rank0, *(train.with_columns(line=pl.col("line") + step * (i + 1)) for i in range(repeat_train))])
    parts = [events.filter(pl.col("rank").ne_missing(0))]
    parts += [rank0.with_columns(rank=pl.lit(r, dtype=pl.Int64)) for r in range(world_size) if r != 1]
    scaled_events = pl.concat(parts)

    rows = base.diagnosis["ranks"]
    (row0,) = [r for r in rows if r["rank"] == 0]
    scaled_rows = [r for r in rows if r["rank"] != 0] + [
        {**row0, "rank": rank, "local_rank": rank % 8, "node": f"node{rank // 8}"}
        for rank in range(world_size)
        if rank != 1
    ]
    diagnosis = {**base.diagnosis, "ranks": sorted(scaled_rows, key=lambda r: r["rank"])}
    return Analysis(diagnosis=diagnosis, events=scaled_events, ranks=pl.DataFrame(diagnosis["ranks"]), notes=[])


def _rows_per_rank_view(markup: str) -> dict[str, int]:
    """Event rows inside each per-rank <details> view."""
    counts: dict[str, int] = {}
    for match in re.finditer(r'<details class="rank-log" id="([^"]+)">(.*?)</details>', markup, re.S):
        counts[match.group(1)] = len(re.findall(r'<tr class="lvl-', match.group(2)))
    return counts


def _odd_flags(page: Page, header: str) -> dict[str, bool]:
    """Whether the `header` cell of each collective-table row is highlighted, keyed by the row's rank list."""
    table = page.section("collectives")
    headers = [text for tag, _, text in table.element_text if tag == "th"]
    column = headers.index(header)
    flags: dict[str, bool] = {}
    cells: list[tuple[str, dict[str, str]]] = []
    for tag, attrs, text in table.element_text:  # a row's cells close before the row does
        if tag == "td":
            cells.append((" ".join(text.split()), attrs))
        elif tag == "tr" and cells:
            ranks = cells[0][0].split(" (")[0]  # "0, 2–7 (×7)" -> "0, 2–7"
            flags[ranks] = "odd" in cells[column][1].get("class", "").split()
            cells = []
    return flags


def test_a_rank_that_logged_no_value_is_not_a_disagreement(stall_page: Page) -> None:
    # in the stall fixture only rank 0 logs its process-group timeout; rank 1's cell is empty, not different
    flags = _odd_flags(stall_page, "timeout ms")
    assert flags == {"0": False, "1": False}


def test_a_diagnosis_without_events_or_ranks_still_renders(stall: Analysis) -> None:
    bare = {**stall.diagnosis, "ranks": [], "findings": [], "checklist": [], "notes": []}
    page = Page(html.render(Analysis(diagnosis=bare, events=empty_events(), ranks=pl.DataFrame(), notes=[])))
    assert "No recognised events to place on a timeline." in page.text()
    assert "No rule matched." in page.text()
    assert page.text_of(data_testid="category") == bare["verdict"]["category"].replace("_", " ")
