"""Required literals of the prefilters: sound (a line a prefilter passes holds one of them), on every fixture line
and on constructed cases, because the extractor leaves out the hit expressions of signatures whose literals a batch
does not hold."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import regex

from logscope.events.catalogue import catalogue
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
        full = frame.select(pl.concat_list(extractor._hit_exprs).list.drop_nulls().alias("sigs"))["sigs"].to_list()
        assert narrowed == full
