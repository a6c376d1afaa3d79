from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from logscope.analysis import analyze
from logscope.model import Analysis

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


@lru_cache(maxsize=128)
def analysed(path: str) -> Analysis:
    """Analyses are pure functions of the fixture tree: share them across tests."""
    return analyze(REPO / path)


@pytest.fixture
def repo() -> Path:
    return REPO
