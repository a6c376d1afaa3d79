"""The CI contract: the diagnosis as JSON (docs/schema/diagnosis-v1.json)."""

from __future__ import annotations

import json

from logscope.model import Analysis


def render(analysis: Analysis) -> str:
    return json.dumps(analysis.diagnosis, indent=2, ensure_ascii=False) + "\n"
