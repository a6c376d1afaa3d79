"""Blind prefilters (events/templates.py) and the template pass of the extractor's scans: sound on every fixture line
(a line a prefilter passes has a template the blind prefilter passes), and an extraction that tries templates first
finds exactly the events, evidence windows and notes of one that scans every line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import logscope.events.extract as extract
from logscope.events.catalogue import catalogue
from logscope.events.extract import Extractor
from logscope.events.templates import MASK, MASK_TEXT, blind
from logscope.ingest.read import Reader
from logscope.ingest.sources import discover
from tests.conftest import benchmark_generator

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("pattern", "line"),
    [
        # NCCL's error return: a class that takes 1-9 only must take the 0 that each of them becomes.
        (r"NCCL INFO [A-Za-z0-9_/.-]+\.(cc|cu|h):[0-9]+ -> [1-9]", "NCCL INFO init.cc:1324 -> 3"),
        (r"[^5]x", "7x"),  # a negated class that already takes 0
        (r"\x31\x1b", "1\x1b"),  # a digit spelled as an escape is masked too; other escapes are kept
        (r"E[0-9]{4} ", "E1205 "),  # a repetition's counts are not characters of the line
        (r"(?P<rank2>\d+) ranks", "8 ranks"),  # nor is a group's name
        (r"(?-u:\b)rank[1-7]", "rank3"),  # nor are a group's flags
        (r"[0-9]\.5", "2.5"),
    ],
)
def test_a_blind_prefilter_passes_the_template_of_a_line_its_prefilter_passes(pattern: str, line: str) -> None:
    spelled = blind(pattern)
    assert spelled is not None
    assert pl.Series([line]).str.contains(pattern).item()
    assert pl.Series([line.translate(MASK_TEXT)]).str.contains(spelled).item()


def test_a_construct_it_cannot_vouch_for_has_no_blind_spelling() -> None:
    assert blind(r"\p{Greek}") is None  # (polars reads Unicode classes the parse here does not)
    assert blind(r"[[:digit:]]") is None


def test_a_small_source_is_not_split_into_templates() -> None:
    # Spelling the catalogue's prefilters for templates costs more than scanning kilobytes: a small run does not.
    extractor = Extractor(catalogue())
    extractor.run(Reader(discover(ROOT / TREES[1], follow_symlinks=False)).blocks())
    assert "_blind" not in vars(extractor)


def test_every_prefilter_has_a_blind_spelling() -> None:
    # One without it turns the template pass off for every batch (`Extractor._blind`).
    assert [
        s.kind for s in catalogue().signatures if s.blind_prefilter is None or s.blind_ascii_prefilter is None
    ] == []


def test_the_mask_is_the_one_the_extractor_splits_by() -> None:
    assert (
        b"rank 12 seq 3041".translate(MASK) == "rank 12 seq 3041".translate(MASK_TEXT).encode() == b"rank 00 seq 0000"
    )


def event_lines() -> list[str]:
    """Every fixture line that a prefilter passes (where soundness matters), each once."""
    lines: set[str] = set()
    union = catalogue().union_prefilter
    for path in sorted((ROOT / "fixtures").rglob("*.log")):
        text = pl.Series(path.read_bytes().decode("utf-8", "replace").replace("\r", "\n").split("\n"))
        lines.update(text.filter(text.str.contains(union)).to_list())
    return sorted(lines)


def test_blind_prefilters_are_sound_on_every_fixture_line() -> None:
    lines = event_lines()
    assert len(lines) > 20000
    text = pl.Series(lines)
    masked = pl.Series([line.translate(MASK_TEXT) for line in lines])
    ascii_text = text.str.contains(r"^[\x00-\x7f]*$")
    passed = 0
    for sig in catalogue().signatures:
        for spelling, blind_spelling, rows in (
            (sig.prefilter, sig.blind_prefilter, pl.lit(True)),
            (sig.ascii_prefilter, sig.blind_ascii_prefilter, pl.lit(ascii_text)),
        ):
            frame = pl.DataFrame({"t": text, "m": masked}).filter(rows)
            checked = frame.select(
                pl.col("t").str.contains(spelling).alias("line"),
                pl.col("m").str.contains(str(blind_spelling)).alias("template"),
            )
            missed = frame.filter(checked["line"] & ~checked["template"])["t"].to_list()
            assert missed == [], (sig.kind, missed[:3])
            passed += int(checked["line"].sum())
    assert passed > 20000  # the fixtures exercise the prefilters, so the check above means something


def test_literals_read_on_templates_are_sound_on_every_fixture_line() -> None:
    # `Extractor._possible` drops a signature whose literals no template of a batch holds: a line its prefilter
    # passes must have a template holding one of them, digits masked too ("aught signal 11" of a segfault).
    lines = event_lines()
    text = pl.Series(lines)
    masked = [line.translate(MASK_TEXT) for line in lines]
    with_digits = 0
    for sig in catalogue().signatures:
        passing = text.str.contains(sig.prefilter).to_list()
        missed = [line for line, m, p in zip(lines, masked, passing, strict=True) if p and not sig.may_pass_template(m)]
        assert missed == [], (sig.kind, missed[:3])
        if sig.literals and any(c.isdigit() for literal in sig.literals for c in literal) and any(passing):
            with_digits += 1
    assert with_digits >= 1  # a literal with a digit meets a real line, so the masking is checked


def test_a_templated_batch_tries_only_the_prefilters_its_templates_may_pass() -> None:
    # Past FEW_LINES lines every prefilter used to be tried (and polars compiles each again past 32 of them); the
    # distinct templates of a real NCCL_DEBUG=INFO console narrow them to those whose literals they hold.
    path = ROOT / "fixtures/blind_runs/r28h_healthy_ddp_bucket1mb_metrics_cpplog_detail_nccl_info_ws4/node0/console.log"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) > extract.FEW_LINES
    masked = pl.Series("m", [line.translate(MASK_TEXT) for line in lines])
    frame = pl.DataFrame({"t": lines, "m": masked}).with_columns(pl.col("m").hash().alias("k"))
    extractor = Extractor(catalogue())
    every = list(range(len(extractor.signatures)))
    possible = extractor._possible(frame, every)
    passing = [i for i in every if frame["t"].str.contains(extractor.signatures[i].prefilter).any()]
    assert set(passing) <= set(possible)
    assert len(possible) < len(every) // 2


TREES = [
    "fixtures/real/runs/21_debug_detail_collective_mismatch",  # TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints
    "fixtures/gpu/skip_broadcast_rank3_ws4_hostid",  # NCCL_DEBUG=INFO on four ranks
    "fixtures/gpu/nccl_proto_differs_ws2_hostid",
    "fixtures/real/runs/08_allreduce_size_mismatch_rank1",  # with error.json files
    "fixtures/blind_runs/r28h_healthy_ddp_bucket1mb_metrics_cpplog_detail_nccl_info_ws4",
    "fixtures/runs/skip_allreduce_rank1/logs",
]


def extraction(path: Path, templates: bool) -> tuple[list[str], list[Any], list[str]]:
    """The events (in any order: a batch ends elsewhere), evidence windows and notes of reading `path`."""
    extractor = Extractor(catalogue())
    extractor._blind = templates
    found = extractor.run(Reader(discover(path, follow_symlinks=False)).blocks())
    return sorted(str(sorted(row.items())) for row in found.rows), sorted(found.contexts.items()), found.notes


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("batch_chars", [extract.BATCH_CHARS, 1 << 14])
def test_templates_first_finds_what_every_line_scanned_finds(
    tree: str, batch_chars: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small batches too: a source's later batches then meet the templates it tried before, its spent quotas, and
    # (NCCL's lines with their own addresses) the switch to splitting it plainly.
    monkeypatch.setattr(extract, "BATCH_CHARS", batch_chars)
    monkeypatch.setattr(extract, "TEMPLATE_MIN_BYTES", 0)
    cut: list[int] = []
    with_text = Extractor._with_text

    def counted(self: Extractor, lines: pl.DataFrame) -> pl.DataFrame:
        cut.append(lines.height)
        return with_text(self, lines)

    monkeypatch.setattr(Extractor, "_with_text", counted)
    templated = extraction(ROOT / tree, templates=True)
    assert cut  # the template pass ran
    assert templated == extraction(ROOT / tree, templates=False)


def test_a_source_whose_templates_hardly_repeat_is_split_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extract, "BATCH_CHARS", 1 << 12)
    monkeypatch.setattr(extract, "TEMPLATE_MIN_BYTES", 0)
    # A bar every batch meets (no batch has more templates than lines): no source is split plainly.
    monkeypatch.setattr(extract, "TEMPLATE_SHARE", 1)
    extractor = Extractor(catalogue())
    extractor.run(Reader(discover(ROOT / TREES[0], follow_symlinks=False)).blocks())
    assert not extractor._plain
    # A bar no batch meets: every source whose first batch was split into templates is split plainly after it.
    monkeypatch.setattr(extract, "TEMPLATE_SHARE", 1 << 20)
    extractor = Extractor(catalogue())
    extractor.run(Reader(discover(ROOT / TREES[0], follow_symlinks=False)).blocks())
    assert len(extractor._plain) >= 2


@pytest.mark.parametrize("dense", [False, True])
def test_templates_first_on_a_long_chatty_run(tmp_path: Path, dense: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Four ranks of NCCL_DEBUG=INFO (and, dense, a fingerprint before every collective), in batches small enough
    # that each source has several, with quota probes: spent kinds leave the union, capped kinds keep their latest
    # line, the NCCL streams switch to plain splitting, and templates are met again from batch to batch.
    benchmark_generator().generate_tree(tmp_path, 4, 1 << 20, 0, dense=dense)
    monkeypatch.setattr(extract, "BATCH_CHARS", 1 << 17)
    monkeypatch.setattr(extract, "PROBE_ROWS", 256)
    monkeypatch.setattr(extract, "TEMPLATE_MIN_BYTES", 0)
    templated = extraction(tmp_path, templates=True)
    assert len(templated[0]) > 300
    assert templated == extraction(tmp_path, templates=False)
