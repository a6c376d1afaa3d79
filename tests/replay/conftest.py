"""Fixtures of the replayer tests (helpers live in replay_helpers.py)."""

from __future__ import annotations

import pytest
import typer
from replay_helpers import make_app


@pytest.fixture(scope="session")
def replay_app() -> typer.Typer:
    return make_app()
