"""Required literals of the prefilters: sound (a line a prefilter passes holds one of them), on every fixture line
and on constructed cases, because the extractor leaves out the hit expressions of signatures whose literals a batch
does not hold."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import regex

from logscope.events.catalogue import ascii_variant, catalogue
from logscope.events.extract import Extractor
from logscope.events.literals import required_literals

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("NCCL WARN", {"NCCL WARN"}),
        (r"Traceback \(most recent call last\)", {"Traceback (most recent call last)"}),
        ("RendezvousTimeoutError|DistStoreError", {"RendezvousTimeoutError", "DistStoreError"}),
        (r"nranks [0-9]+ cudaDev [0-9]+", {" cudaDev "}),  # the longer run of the two
        ("contain(s)? NaN values", {"contain NaN values", "contains NaN values"}),  # an optional group, spelled out
        ("(Error|Exception)(: |$)", {"Error", "Exception"}),  # `$` makes the second group optional
        ("(?:a|bc)+d", {"a", "bc"}),  # a repeat at least once requires its body; ties keep the first
        ("x*y", {"y"}),
        ("(?i)nccl warn", None),  # case folded: no exact strings
        ("a(?i:b)c", {"a"}),  # the flagged group is skipped, the rest still holds
        ("(world_size|seed)=[^ ]", {"world_size=", "seed="}),
        ("[0-9]+%", {"%"}),
        (r"\d+", None),
        ("a?", None),
        ("", None),
    ],
)
def test_required_literals(pattern: str, expected: set[str] | None) -> None:
    found = required_literals(pattern)
    assert (None if found is None else set(found)) == expected


def test_every_prefilter_has_literals() -> None:
    # A prefilter without them is always planned; none of today's needs that (add a literal to one that would).
    assert [s.kind for s in catalogue().signatures if s.literals is None] == []


def fixture_lines() -> list[str]:
    lines: list[str] = []
    for path in sorted((ROOT / "fixtures").rglob("*")):
        if path.is_file() and path.suffix in (".log", ".txt", ""):
            for line in path.read_bytes().decode("utf-8", "replace").split("\n"):
                lines.extend(line.split("\r"))
    return lines


def test_literals_are_sound_on_every_fixture_line() -> None:
    lines = fixture_lines()
    assert len(lines) > 5000
    passed = 0
    for sig in catalogue().signatures:
        for line in lines:
            m = sig.prefilter_re.search(line)
            if m:
                passed += 1
                assert sig.may_pass(m.group(0)), (sig.kind, line)  # within the match itself
    assert passed > 1000  # the fixtures exercise the prefilters, so the check above means something


def test_hits_planned_from_literals_are_the_hits_of_every_prefilter() -> None:
    extractor = Extractor(catalogue())
    selected = [line for line in fixture_lines() if regex.search(catalogue().union_prefilter, line)]
    assert len(selected) > 1000
    for start in range(0, len(selected), 200):
        frame = pl.DataFrame({"t": selected[start : start + 200]})
        narrowed = frame.select(extractor._hits(frame, extractor._every))["sigs"].to_list()
        every = [extractor._hit_expr(i) for i in extractor._every]
        full = frame.select(pl.concat_list(every).list.drop_nulls().alias("sigs"))["sigs"].to_list()
        assert narrowed == full


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"nccl[A-Z]\w+", "nccl[A-Z][0-9A-Za-z_]+"),
        (r"(^\s*|\s\s)x", r"(^[\t\n\x0B\x0C\r ]*|[\t\n\x0B\x0C\r ][\t\n\x0B\x0C\r ])x"),
        (r"[\w.<>]+ \([^():]+\.py", r"[0-9A-Za-z_.<>]+ \([^():]+\.py"),  # inside a class: the ranges alone
        (r"\S+:\d", r"[\x00-\x08\x0E-\x1F!-\x7F]+:[0-9]"),
        (r"\bx\b[\b]", r"(?-u:\b)x(?-u:\b)[\b]"),
        (r"[]\w]\w", r"[]0-9A-Za-z_][0-9A-Za-z_]"),  # a `]` first in a class is a literal, the class goes on
        (r"[^]\s]\.\(", r"[^]\t\n\x0B\x0C\r ]\.\("),
    ],
)
def test_ascii_variant(pattern: str, expected: str) -> None:
    assert ascii_variant(pattern) == expected


def test_ascii_classes_match_the_same_ascii_characters() -> None:
    # Every ASCII character, as Rust's regex (polars) reads the Unicode class and its ASCII spelling.
    chars = pl.Series([chr(i) for i in range(128)])
    for cls in (r"\w", r"\s", r"\S", r"\d"):
        unicode = chars.str.contains(f"^{cls}$").to_list()
        spelled = chars.str.contains(f"^{ascii_variant(cls)}$").to_list()
        assert unicode == spelled, cls
    words = pl.Series(["a b", "ab", "_x", "x.", ".", "a1 b2"])
    assert words.str.contains(r"\b").to_list() == words.str.contains(ascii_variant(r"\b")).to_list()


def test_ascii_prefilters_pass_the_same_ascii_fixture_lines() -> None:
    lines = pl.Series([line for line in fixture_lines() if line.isascii()])
    assert len(lines) > 5000
    changed = [s for s in catalogue().signatures if s.ascii_prefilter != s.prefilter]
    assert changed  # the catalogue uses \w, \s and \S
    for sig in catalogue().signatures:
        assert lines.str.contains(sig.prefilter).to_list() == lines.str.contains(sig.ascii_prefilter).to_list()


def test_limited_hits_are_the_hits_of_every_limited_prefilter() -> None:
    extractor = Extractor(catalogue())
    selected = [line for line in fixture_lines() if regex.search(catalogue().union_prefilter, line)]
    live = extractor._limited[::2]
    for start in range(0, len(selected), 700):
        frame = pl.DataFrame({"t": selected[start : start + 700]})
        found = extractor._limited_hits(frame, live)
        full = frame.select(pl.concat_list([extractor._hit_expr(i) for i in extractor._limited]).list.drop_nulls())
        assert found["lsigs"].to_list() == full.to_series().to_list()
        assert found["first"].to_list() == [next((i for i in hits if i in live), None) for hits in found["lsigs"]]
