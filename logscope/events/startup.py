"""Cross-rank comparison of what each rank printed at start-up: one rank that set itself up differently.

Ranks of one job print the same start-up lines (model summaries, resolved settings) but for their rank number,
device and host. Compared as templates (digits masked, spacing collapsed), a rank that lacks a line every other
rank printed, and printed instead one no other rank did, was configured differently ("(1): ReLU()" where its peers
have "(1): ELU(alpha=1.0)"). Only per-rank files of a torchrun tree are compared, and only with three ranks or more:
with two there is no majority to say which one differs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import IO

from logscope.errors import READ_ERRORS
from logscope.events.extract import Extractor
from logscope.events.templates import MASK_TEXT
from logscope.ingest.normalise import normalise
from logscope.ingest.sources import Source
from logscope.vocab import Event

KIND = "startup_differs"
# A rank's start-up: its first lines, up to this many, read from the first bytes of its stdout.
HEAD_LINES = 80
HEAD_BYTES = 64 * 1024
MIN_RANKS = 3
_DIGITS = re.compile(r"[-+]?\d[\d.]*(?:[eE][-+]?\d+)?")  # a number, its sign and exponent included
_SPACE = re.compile(r"\s+")
# Lines that differ between healthy ranks whatever their digits: addresses, paths, hosts, times, and libraries'
# own log lines (NCCL INFO, which rank 0 prints more of).
_VARYING = re.compile(
    r"https?://|/|\\|@|[0-9a-f]{8,}|\b(?:host|hostname|node|ip|addr|address|port|pid|time|NCCL|INFO|WARN)\b", re.I
)
# A setting's name: what comes before its value ("(1): ReLU()", "activation=relu", "num_envs: 0").
_KEY = re.compile(r"^(.{1,40}?)(?:: |=)")


# A line of the loop or of its end: the start-up is over (a short run's first 80 lines may reach its last, and
# ranks end differently by design: "done" on rank 0, "evaluation runs on rank 0 only, exiting" on the others).
_LOOP_OR_END = re.compile(
    r"(?i)(?<![a-z_])(?:epoch|iter\w*|step|steps|done|finished|exiting|completed?)(?![a-z_])|\d+\s*/\s*\d+\s*\["
)


def _start_up(head: list[str], known: dict[str, tuple[bool, str | None]]) -> list[tuple[int, str, str]]:
    """The rank's lines before its first line of the training loop or of its end, with their templates.

    Neither whether a line is of the loop nor its template depends on its digits' values (numbers are masked, and
    every pattern reads a digit as any digit), so both are worked out once per line read with its digits as 0
    (`known`): the ranks of a job print the same start-up lines but for their numbers."""
    lines = []
    for n, raw in enumerate(head, 1):
        key = raw.translate(MASK_TEXT)
        seen = known.get(key)
        if seen is None:
            seen = known[key] = (_LOOP_OR_END.search(raw) is not None, _template(raw))
        ends, template = seen
        if ends:
            break
        if template is not None:
            lines.append((n, raw, template))
    return lines


def _template(text: str) -> str | None:
    line = _SPACE.sub(" ", _DIGITS.sub("0", normalise(text).text)).strip()
    if len(line) < 4 or _VARYING.search(line):
        return None
    return line


def _key(template: str) -> str | None:
    m = _KEY.match(template)
    return m.group(1) if m else None


def startup_differences(sources: list[Source], openers: dict[str, Callable[[], IO[bytes]]]) -> list[Event]:
    """Event rows (one per differing rank file) for the rank whose start-up lines differ from all its peers'."""
    final = max((s.attempt or 0 for s in sources if s.role == "stdout"), default=0)
    heads: dict[int, tuple[Source, list[tuple[int, str, str]]]] = {}
    known: dict[str, tuple[bool, str | None]] = {}  # see `_start_up`
    for sid, src in enumerate(sources):
        if src.role != "stdout" or (src.attempt or 0) != final or src.path not in openers:
            continue
        try:
            with openers[src.path]() as handle:
                head = handle.read(HEAD_BYTES).decode("utf-8", errors="replace").splitlines()[:HEAD_LINES]
        except READ_ERRORS:
            continue
        lines = _start_up(head, known)
        if lines:
            heads[sid] = (src, lines)
    if len(heads) < MIN_RANKS:
        return []
    sets = {sid: {t for _, _, t in lines} for sid, (_, lines) in heads.items()}
    # How many ranks print each template: one pass, so a 1024-rank tree costs no pairwise set work.
    printed_by = Counter(t for own in sets.values() for t in own)
    everyone_else = {t for t, n in printed_by.items() if n == len(sets) - 1}
    only_one = {t for t, n in printed_by.items() if n == 1}
    deviants = []
    for sid, own in sets.items():
        missing = everyone_else - own  # printed by every other rank, not by this one
        extra = own & only_one  # printed by this rank alone
        # The same setting with another value: a line of its own and a line of all its peers under one name.
        keys = {_key(t) for t in missing} - {None}
        extra = {t for t in extra if _key(t) in keys}
        missing = {t for t in missing if _key(t) in {_key(e) for e in extra}}
        if missing and extra:
            deviants.append((sid, missing, extra))
    if len(deviants) != 1:
        return []
    sid, missing, extra = deviants[0]
    src, lines = heads[sid]
    first = next((n, raw) for n, raw, t in lines if t in extra)
    peer_sid = next(o for o in heads if o != sid)
    peer_line = next(raw for _, raw, t in heads[peer_sid][1] if t in missing)
    line = normalise(first[1])
    fields = {"differs": line.text.strip()[:200], "peers_print": normalise(peer_line).text.strip()[:200]}
    return [Extractor._row(sid, src, first[0], KIND, "warning", "init", line, fields)]
