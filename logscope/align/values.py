"""Numbers out of the text fields a signature captured: None or nothing where the text is not a number."""

from __future__ import annotations

from typing import Any


def int_or_none(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def int_list(value: Any) -> list[int]:
    """ "[4, 4]", "4,4" -> [4, 4]."""
    text = str(value or "").strip().strip("[]")
    return [int(x) for x in text.replace(" ", "").split(",") if x.strip().lstrip("-").isdigit()]
