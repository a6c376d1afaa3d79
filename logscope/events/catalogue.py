"""The signature catalogue (signatures.yaml): loaded once, validated, compiled."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources

import regex

from logscope import safeyaml
from logscope.events.literals import Literals, required_literals

LEVELS = ("benign", "info", "warning", "error")
_KEYS = {"kind", "level", "phase", "prefilter", "pattern", "wrapped", "limit", "cap", "source"}


@dataclass(frozen=True)
class Signature:
    kind: str
    level: str
    phase: str | None
    prefilter: str
    pattern_text: str
    wrapped: bool
    limit: int | None
    cap: int | None

    # Compiled on first use: most signatures never match a given input, and compiling all of them is a fifth of
    # a process's start (the scan itself uses `prefilter` in polars).
    @cached_property
    def pattern(self) -> regex.Pattern[str]:
        return regex.compile(self.pattern_text)

    @cached_property
    def prefilter_re(self) -> regex.Pattern[str]:
        return regex.compile(self.prefilter)

    @cached_property
    def literals(self) -> Literals | None:
        """Strings one of which every line that passes the prefilter contains (None: no such set is known)."""
        return required_literals(self.prefilter)

    def may_pass(self, text: str) -> bool:
        """False only if the prefilter passes on no line of `text` (no required literal occurs in it)."""
        return self.literals is None or any(literal in text for literal in self.literals)


@dataclass(frozen=True)
class Catalogue:
    signatures: tuple[Signature, ...]
    union_prefilter: str  # every prefilter, for the one scan over all lines (Rust regex / grep -E)

    def kinds(self) -> list[str]:
        return sorted({s.kind for s in self.signatures})


def _load() -> list[dict[str, object]]:
    text = resources.files("logscope.events").joinpath("signatures.yaml").read_text(encoding="utf-8")
    data = safeyaml.load(text)
    if not isinstance(data, list):
        raise ValueError("signatures.yaml must be a list of signatures")
    return data


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    signatures = []
    for entry in _load():
        unknown = set(entry) - _KEYS
        if unknown:
            raise ValueError(f"signature {entry.get('kind')}: unknown keys {sorted(unknown)}")
        level = str(entry["level"])
        if level not in LEVELS:
            raise ValueError(f"signature {entry['kind']}: level {level!r} not in {LEVELS}")
        prefilter = str(entry["prefilter"])
        limit = entry.get("limit")
        cap = entry.get("cap")
        signatures.append(
            Signature(
                kind=str(entry["kind"]),
                level=level,
                phase=str(entry["phase"]) if entry.get("phase") else None,
                prefilter=prefilter,
                pattern_text=str(entry["pattern"]),
                wrapped=bool(entry.get("wrapped", False)),
                limit=int(str(limit)) if limit is not None else None,
                cap=int(str(cap)) if cap is not None else None,
            )
        )
    union = "|".join(f"(?:{s.prefilter})" for s in signatures)
    return Catalogue(signatures=tuple(signatures), union_prefilter=union)


def grep_patterns() -> list[str]:
    """The prefilters as `grep -E` patterns, so a benchmark can compare logscope against grep honestly."""
    return [s.prefilter for s in catalogue().signatures]
