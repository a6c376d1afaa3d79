"""The text report's own layout (report/text.py): prose wrapped at the width with its indent kept, the command to
paste whole, and a table's last column cut to fit."""

from __future__ import annotations

from logscope.report.text import _cells, _Text, render
from tests.conftest import analysed

STALL = "fixtures/real/runs/03_skip_allreduce_rank1_stall_gloo_timeout"


def test_prose_wraps_at_the_width_and_the_command_stays_whole() -> None:
    analysis = analysed(STALL)
    lines = render(analysis, width=60).splitlines()
    command = analysis.diagnosis["verdict"]["next_step"]["command"]
    assert len(command) > 60
    assert f"  $ {command}" in lines  # one line, to paste
    header = next(i for i, line in enumerate(lines) if line.startswith("rank "))
    table = range(header, lines.index("", header))
    prose = [line for i, line in enumerate(lines) if i not in table and "$ " not in line]
    assert max(map(len, prose)) <= 60 or all(len(line.split()) == 1 for line in prose if len(line) > 60)
    evidence = [i for i, line in enumerate(lines) if line.startswith("           logs/")]
    assert evidence and lines[evidence[0] + 1].startswith("           ")  # a continued line keeps its indent


def test_a_table_cuts_its_last_column_to_the_width_with_an_ellipsis() -> None:
    text = _Text(30)
    text.table(("rank", "last event"), [("0", "a" * 40), ("12", "short")])
    header, first, second = text.lines
    assert header == "rank  last event"
    assert len(first) == 30 and first.endswith("…") and first.startswith("0     aaa")
    assert second == "12    short"


def test_a_wide_character_takes_two_columns() -> None:
    text = _Text(80)
    text.table(("node", "x"), [("東京", "1"), ("ab", "2")])
    first, second = text.lines[1:]
    assert _cells(first[: first.index("1")]) == _cells(second[: second.index("2")]) == 6
