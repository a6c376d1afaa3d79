"""Shared fixtures for the CI-format, scan and diff tests: real analyses of the fixture trees, cached."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
import typer

from logscope.analysis import analyze
from logscope.compare.command import register
from logscope.model import Analysis


@cache
def _analysed(path: Path) -> Analysis:
    return analyze(path)


@pytest.fixture(scope="session")
def analysed() -> Callable[[Path], Analysis]:
    """One real analysis per fixture tree per test session (reporters and comparisons never modify it)."""
    return _analysed


@pytest.fixture(scope="session")
def compare_app() -> typer.Typer:
    """A typer app with just the `scan` and `diff` commands, registered as the main CLI registers them."""
    app = typer.Typer()
    register(app)
    return app
