"""The signature catalogue (signatures.yaml): loaded once, validated, compiled."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from typing import cast

import regex

from logscope import cache, safeyaml
from logscope.events import literals as literals_module
from logscope.events.literals import Literals, required_literals
from logscope.events.templates import MASK_TEXT, blind

LEVELS = ("benign", "info", "warning", "error")
_KEYS = {
    "kind",
    "level",
    "phase",
    "prefilter",
    "pattern",
    "wrapped",
    "limit",
    "cap",
    "source",
    "tags",
    "names_rank",
    "requires_level",
    "examples",
    "counterexamples",
}
# An entry for a kind the pipeline makes itself (error.json files, torchrun's failure table, cross-rank comparisons):
# its kind, what makes it, and its tags.
_SYNTHESIZED_KEYS = {"kind", "synthesized", "tags"}
# Families of kinds that the reasoning groups by (rules/api.py derives its kind sets from them).
TAGS = (
    "comm",  # the communication layer reports a failure (NCCL, gloo, sockets)
    "remote",  # ... because a peer went away: a consequence of another rank's failure
    "timeout",  # a collective or barrier timed out
    "rendezvous",  # the world could not form (torchrun rendezvous, c10d store)
    "oom",
    "crash",  # a process failed by itself (exception, signal, fatal error)
    "exit",  # a line about a process's exit (code or signal), often printed by a launcher
    "teardown",  # the launcher or watchdog tearing processes down after a failure
    "generic",  # a catch-all line: only the fallback stage uses it
    # The state model's families (align/state.py and the checks read them).
    "launcher_report",  # a launcher's line about a worker (torchrun's agent, srun, mp.spawn's parent), not its own
    "torchrun_failure",  # torchrun's report that a worker failed, with its exit code
    "exit_code",  # a launcher's report of one rank's exit code (torchrun, mp.spawn, composer, mpirun)
    "end",  # a rank's training loop finished
    "progress",  # a rank moved forward in training (rank 0 prints most of these in RL libraries)
    "identity",  # names the printing rank and its world size
    "seqnum",  # a collective's SeqNum with the state it reached on the rank that prints it
    "weak",  # prose, READMEs and config files print these too ("Step 1: install", "torch==2.13")
    "distributed",  # only a distributed job prints it (a process group, NCCL, a parameter sync)
    "world_formed",  # printed only once every rank joined: the world formed
)


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
    tags: frozenset[str] = frozenset()
    names_rank: str | None = None  # field holding the rank a launcher's line is about ("process rank 3 exited")
    requires_level: str | None = None  # only a line whose prefix prints this level (an ERROR logger line)
    examples: tuple[str, ...] = ()  # real lines this signature must match (tests run them)
    counterexamples: tuple[str, ...] = ()  # real lines it must not match

    # Compiled on first use: most signatures never match a given input, and compiling all of them is a fifth of
    # a process's start (the scan itself uses `prefilter` in polars).
    @cached_property
    def pattern(self) -> regex.Pattern[str]:
        return regex.compile(self.pattern_text)

    @cached_property
    def prefilter_re(self) -> regex.Pattern[str]:
        return regex.compile(self.prefilter)

    @cached_property
    def ascii_prefilter(self) -> str:
        """The prefilter for ASCII text (see `ascii_variant`): the same lines pass, read faster."""
        return ascii_variant(self.prefilter)

    @cached_property
    def blind_prefilter(self) -> str | None:
        """The prefilter for a line's template, its digits read as 0 (`templates.blind`)."""
        return blind(self.prefilter)

    @cached_property
    def blind_ascii_prefilter(self) -> str | None:
        return blind(self.ascii_prefilter)

    @cached_property
    def literals(self) -> Literals | None:
        """Strings one of which every line that passes the prefilter contains (None: no such set is known)."""
        return cached_literals(self.prefilter)

    def may_pass(self, text: str) -> bool:
        """False only if the prefilter passes on no line of `text` (no required literal occurs in it)."""
        return self.literals is None or any(literal in text for literal in self.literals)

    @cached_property
    def template_literals(self) -> Literals | None:
        """`literals` with their digits read as 0: a line holding one, its template (`templates.MASK`) holds the
        masked one, digit for digit."""
        return None if self.literals is None else frozenset(s.translate(MASK_TEXT) for s in self.literals)

    def may_pass_template(self, templates: str) -> bool:
        """False only if the prefilter passes on no line whose template is a line of `templates`."""
        return self.template_literals is None or any(literal in templates for literal in self.template_literals)


@dataclass(frozen=True)
class Catalogue:
    signatures: tuple[Signature, ...]
    union_prefilter: str  # every prefilter, for the one scan over all lines (Rust regex / grep -E)
    synthesized: dict[str, frozenset[str]]  # the kinds the pipeline makes itself, with their tags

    def kinds(self) -> list[str]:
        return sorted({s.kind for s in self.signatures})

    def known_kinds(self) -> frozenset[str]:
        """Every kind an event can have: read by a signature or made by the pipeline."""
        return frozenset(self.kinds()) | frozenset(self.synthesized)

    def tagged(self, *tags: str) -> frozenset[str]:
        """The kinds of every signature or synthesized kind with one of `tags`."""
        wanted = set(tags)
        if not wanted <= set(TAGS):
            raise ValueError(f"unknown tags {sorted(wanted - set(TAGS))}")
        read = {s.kind for s in self.signatures if s.tags & wanted}
        return frozenset(read | {kind for kind, kind_tags in self.synthesized.items() if kind_tags & wanted})

    def of_kind(self, kind: str) -> tuple[Signature, ...]:
        return tuple(s for s in self.signatures if s.kind == kind)

    def kind_rows(self, tag: str | None = None) -> list[tuple[str, str, tuple[str, ...]]]:
        """Every kind (or those tagged `tag`) with its level ("made" for a synthesized kind) and its tags: what a
        rule file's `match.kinds` may name."""
        rows: dict[str, tuple[str, frozenset[str]]] = {}
        for s in self.signatures:  # a kind read by several signatures: the first one's level, every one's tags
            level, tags = rows.get(s.kind, (s.level, frozenset()))
            rows[s.kind] = (level, tags | s.tags)
        for kind, kind_tags in self.synthesized.items():
            rows[kind] = ("made", kind_tags)
        wanted = self.tagged(tag) if tag else None
        return [
            (kind, level, tuple(sorted(tags)))
            for kind, (level, tags) in sorted(rows.items())
            if wanted is None or kind in wanted
        ]


# Unicode classes spelled in ASCII: on ASCII text each matches exactly the characters the Unicode class does
# (tests/test_literals.py checks every ASCII character), and Rust's lazy DFA reads a union without Unicode classes
# faster (a quarter faster on ProcessGroupWrapper's fingerprint lines).
_ASCII_CLASSES = {"w": "0-9A-Za-z_", "s": r"\t\n\x0B\x0C\r ", "S": r"\x00-\x08\x0E-\x1F!-\x7F", "d": "0-9"}


def ascii_variant(pattern: str) -> str:
    """`pattern` with `\\w`, `\\s`, `\\S`, `\\d` and `\\b` in their ASCII spelling: on text that is all ASCII it passes
    exactly the lines `pattern` passes. Only for ASCII text (on other text the two differ)."""
    out: list[str] = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e in _ASCII_CLASSES:
                out.append(_ASCII_CLASSES[e] if in_class else f"[{_ASCII_CLASSES[e]}]")
            elif e == "b" and not in_class:
                out.append(r"(?-u:\b)")
            else:
                out.append(c + e)
            i += 2
            continue
        out.append(c)
        i += 1
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            for lead in ("^", "]"):  # a `]` first in a class (after any `^`) is a literal
                if pattern.startswith(lead, i):
                    out.append(lead)
                    i += 1
    return "".join(out)


def cached_literals(pattern: str) -> Literals | None:
    """`required_literals(pattern)`, read back from the cache when worked out before by the same code (all of
    them cost a small run ~30 ms)."""
    key = cache.text_key(f"literals-{_literals_code()}", pattern)
    found = cache.store().value(key, lambda: required_literals(pattern), lambda s: None if s is None else sorted(s))
    return None if found is None else frozenset(cast(list[str], found))


@lru_cache(maxsize=1)
def _literals_code() -> str:
    return cache.file_key(literals_module.__file__)


def _load() -> list[dict[str, object]]:
    text = resources.files("logscope.events").joinpath("signatures.yaml").read_text(encoding="utf-8")
    data = safeyaml.load_cached(text)
    if not isinstance(data, list):
        raise ValueError("signatures.yaml must be a list of signatures")
    return data


def _tags(entry: dict[str, object]) -> frozenset[str]:
    tags = frozenset(str(t) for t in entry.get("tags") or [])  # type: ignore[attr-defined]
    if not tags <= set(TAGS):
        raise ValueError(f"signature {entry['kind']}: unknown tags {sorted(tags - set(TAGS))}")
    return tags


@lru_cache(maxsize=1)
def catalogue() -> Catalogue:
    signatures = []
    synthesized: dict[str, frozenset[str]] = {}
    for entry in _load():
        if "synthesized" in entry:
            unknown = set(entry) - _SYNTHESIZED_KEYS
            if unknown:
                raise ValueError(f"synthesized kind {entry.get('kind')}: unknown keys {sorted(unknown)}")
            synthesized[str(entry["kind"])] = _tags(entry)
            continue
        unknown = set(entry) - _KEYS
        if unknown:
            raise ValueError(f"signature {entry.get('kind')}: unknown keys {sorted(unknown)}")
        level = str(entry["level"])
        if level not in LEVELS:
            raise ValueError(f"signature {entry['kind']}: level {level!r} not in {LEVELS}")
        prefilter = str(entry["prefilter"])
        limit = entry.get("limit")
        cap = entry.get("cap")
        tags = _tags(entry)
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
                tags=tags,
                names_rank=str(entry["names_rank"]) if entry.get("names_rank") else None,
                requires_level=str(entry["requires_level"]) if entry.get("requires_level") else None,
                examples=tuple(str(x) for x in entry.get("examples") or []),  # type: ignore[attr-defined]
                counterexamples=tuple(str(x) for x in entry.get("counterexamples") or []),  # type: ignore[attr-defined]
            )
        )
    union = "|".join(f"(?:{s.prefilter})" for s in signatures)
    return Catalogue(signatures=tuple(signatures), union_prefilter=union, synthesized=synthesized)


def kinds(*names: str) -> frozenset[str]:
    """A kind group named one by one, checked against the catalogue when its module loads: a kind renamed or
    removed in signatures.yaml fails at import instead of silently emptying the group."""
    unknown = set(names) - catalogue().known_kinds()
    if unknown:
        raise ValueError(f"unknown event kinds {sorted(unknown)}")
    return frozenset(names)


def grep_patterns() -> list[str]:
    """The prefilters as `grep -E` patterns, so a benchmark can compare logscope against grep honestly."""
    return [s.prefilter for s in catalogue().signatures]
