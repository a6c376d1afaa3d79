"""Capped, readable strings for the page: every log-derived string passes `clip` before a template sees it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MAX_TEXT_CHARS = 400  # one log line in tables and tooltips


def rank_ranges(ranks: Iterable[int]) -> str:
    """Compact rank list: [0, 1, 2, 3, 7] -> "0–3, 7"."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = prev = None
    for rank in ordered:
        if prev is not None and rank == prev + 1:
            prev = rank
            continue
        if start is not None:
            parts.append(_span(start, prev))
        start = prev = rank
    if start is not None:
        parts.append(_span(start, prev))
    return ", ".join(parts)


def _span(start: int, end: int | None) -> str:
    if end is None or end == start:
        return str(start)
    if end == start + 1:
        return f"{start}, {end}"
    return f"{start}–{end}"


def ranks_label(ranks: Sequence[int]) -> str:
    """'rank 3' / 'ranks 1–7'; 'no rank' when empty."""
    if not ranks:
        return "no rank"
    return ("rank " if len(set(ranks)) == 1 else "ranks ") + rank_ranges(ranks)


def clip(text: str | None, limit: int = MAX_TEXT_CHARS) -> str:
    """Cap one untrusted string; say how much was cut so nobody mistakes a clipped line for the whole line."""
    if text is None:
        return ""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} … [{len(text) - limit} more chars]"
