from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from logscope.cache import CACHE_DIR_ENV

# The tests (and the command lines they start) keep logscope's cache in a folder of their own, not the user's: set
# before anything loads the catalogue, whose parse the cache holds.
os.environ[CACHE_DIR_ENV] = _CACHE_DIR = tempfile.mkdtemp(prefix="logscope-test-cache-")
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)

from logscope.analysis import analyze  # noqa: E402
from logscope.model import Analysis  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"


@lru_cache(maxsize=128)
def analysed(path: str) -> Analysis:
    """Analyses are pure functions of the fixture tree: share them across tests."""
    return analyze(REPO / path)


@lru_cache(maxsize=1)
def benchmark_generator() -> Any:
    """benchmarks/generate.py, whose trees copy every line shape from real torchrun, NCCL and c10d logs."""
    spec = importlib.util.spec_from_file_location("benchmark_generate", REPO / "benchmarks" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def repo() -> Path:
    return REPO
