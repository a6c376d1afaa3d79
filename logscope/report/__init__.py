"""Reporters: each turns an `Analysis` into one output format (`render(analysis) -> str`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from logscope.model import Analysis

# format name -> (module under logscope.report, file extension)
FORMATS: dict[str, tuple[str, str]] = {
    "text": ("text", ".txt"),
    "json": ("jsonout", ".json"),
    "html": ("html", ".html"),
    "sarif": ("sarif", ".sarif"),
    "github": ("github", ".github.txt"),
    "junit": ("junit", ".xml"),
}


def renderer(fmt: str) -> Callable[[Analysis], str]:
    module_name, _ = FORMATS[fmt]
    module = importlib.import_module(f"logscope.report.{module_name}")
    render: Callable[[Analysis], str] = module.render
    return render


def format_for_path(path: str) -> str | None:
    """The format an output file name asks for (`report.html` -> html); None when the extension says nothing."""
    lower = path.lower()
    if lower.endswith(".sarif") or lower.endswith(".sarif.json"):
        return "sarif"
    if lower.endswith(".xml"):
        return "junit"
    for fmt, (_, ext) in FORMATS.items():
        if lower.endswith(ext):
            return fmt
    return None
