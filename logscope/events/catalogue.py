"""The signature catalogue (signatures.yaml): loaded once, validated, compiled."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import regex

from logscope import safeyaml

LEVELS = ("benign", "info", "warning", "error")
_KEYS = {"kind", "level", "phase", "prefilter", "pattern", "wrapped", "limit", "cap", "source"}


@dataclass(frozen=True)
class Signature:
    kind: str
    level: str
    phase: str | None
    prefilter: str
    pattern: regex.Pattern[str]
    prefilter_re: regex.Pattern[str]
    wrapped: bool
    limit: int | None
    cap: int | None


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
                pattern=regex.compile(str(entry["pattern"])),
                prefilter_re=regex.compile(prefilter),
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
