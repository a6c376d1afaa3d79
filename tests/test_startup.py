"""The start-up comparison of per-rank files (events/startup.py), on a real rsl_rl run where rank 1 built its
policy with another activation: each start-up line is worked out once for all the ranks that print it."""

from __future__ import annotations

from pathlib import Path

import pytest

from logscope.events import startup
from logscope.events.templates import MASK_TEXT
from logscope.ingest.sources import discover

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "fixtures" / "rl5" / "rsl_rl_config_activation_rank1_3nodes"


def test_a_start_up_line_all_ranks_print_is_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    template = startup._template

    def counted(text: str) -> str | None:
        calls.append(text)
        return template(text)

    monkeypatch.setattr(startup, "_template", counted)
    inventory = discover(RUN, follow_symlinks=False)
    sources = [src for src, _ in inventory.sources]
    rows = startup.startup_differences(sources, {src.path: opener for src, opener in inventory.sources})
    assert [row["local_rank"] is not None for row in rows] == [True]
    assert "ReLU" in rows[0]["_f"]["differs"]
    # Three ranks print the same policy summary: each of its lines is templated once, not once per rank.
    assert len(calls) == len({line.translate(MASK_TEXT) for line in calls})
    assert sum("Linear(in_features=" in line for line in calls) == 3  # one per layer, for three ranks
