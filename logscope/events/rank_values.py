"""Cross-rank comparison of lines that name their rank: one rank printing another value than all its peers.

Scripts and libraries print the same line on every rank with the rank in it ("Rank 7 tensor before allreduce:
torch.Size([32768000])", "[rank3]: num_envs: 4096"). Read as a template (the rank number set aside, the other
numbers masked), the values of one template should agree across ranks unless they are the rank's own (its device,
its seed) or the loop's (loss, step), which then differ on every rank. When all ranks but one print the same
values and that one prints others, it disagrees with its peers: another tensor size going into a collective, or
another setting. Only the first line of each template per rank counts (a later one may be a later step), lines
about progress, time, hosts, addresses and paths are left out, and three ranks are needed for a majority.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import IO

from logscope.errors import READ_ERRORS
from logscope.events.extract import Extractor
from logscope.ingest.normalise import normalise
from logscope.ingest.sources import Source
from logscope.vocab import Event

KIND = "rank_value_differs"
HEAD_BYTES = 256 * 1024
MAX_SOURCES = 64
MIN_RANKS = 3
# "Rank 7", "rank: 3", "global_rank=2", "RANK 1/8" in the text; the first mention is the line's own rank.
_RANK_IN_TEXT = re.compile(r"(?i)(?<![\w.])(?:global[_ ]?)?rank\s*[:=#]?\s*(\d{1,5})(?![\d.])")
_NUMBER = re.compile(r"[-+]?\d[\d.]*(?:[eE][-+]?\d+)?")
# Lines about the loop's progress or a failure: their values differ by when the rank printed them.
_DYNAMIC = re.compile(
    r"(?i)(?<![a-z])(?:epoch|iter\w*|step|steps|seq\w*|sequence|watchdog|timeout|timed|elapsed|eta|it/s|s/it)(?![a-z])"
)
# Values that differ between healthy ranks or runs: metrics, clocks, hosts, addresses, paths, process ids,
# devices, seeds and data shards (for a line, anywhere in it; for a setting, its name).
_VARYING = re.compile(
    r"(?i)https?://|/|\\|@|0x[0-9a-f]+|(?<![0-9a-z])(?=[0-9a-f]{8,}(?![0-9a-z]))[0-9]*[a-f]|(?<![a-z])(?:loss|lr|"
    r"acc\w*|reward|time|sec|ms|%|host\w*|node|ip|addr\w*|port|pid|device|cuda|gpu|npu|seed|shard|local[_ ]?rank|"
    r"memory|mem|gb|mb|throughput|speed|samples?|tokens?|date|hash|checksum)(?![a-z])"
)
# "num_envs=512", "batch_size: 32": a setting's name and its value.
_SETTING = re.compile(r"(?<![\w.])([A-Za-z_][\w.]{0,40})\s*[=:]\s*([^\s,;]{1,60})")
# A template about tensors going into a collective: a difference there is a collective mismatch.
_TENSOR = re.compile(r"(?i)tensor|torch\.Size|shape|numel|dtype|bucket")


def _facets(text: str) -> tuple[int, list[tuple[str, tuple[str, ...], str]]] | None:
    """The line's rank and what it says, as (facet, values, line) triples: one per "key=value" setting where the
    line has them (its other settings may be the rank's own), else the whole line's numbers. None for a line that
    names no rank or says only what varies."""
    m = _RANK_IN_TEXT.search(text)
    if m is None:
        return None
    rest = text[: m.start(1)] + "R" + text[m.end(1) :]
    if _DYNAMIC.search(rest):
        return None
    template = " ".join(_NUMBER.sub("0", rest).split())
    settings = [(k, v) for k, v in _SETTING.findall(rest) if not _VARYING.search(k)]
    if settings:
        return int(m.group(1)), [(f"{template} | {k}", (v,), text) for k, v in settings]
    if _VARYING.search(rest):
        return None
    values = tuple(_NUMBER.findall(rest))
    return (int(m.group(1)), [(template, values, text)]) if values else None


def rank_value_differences(sources: list[Source], openers: dict[str, Callable[[], IO[bytes]]]) -> list[Event]:
    """Event rows (one per differing rank) for a rank whose values of a per-rank line differ from all its peers'."""
    first: dict[str, dict[int, tuple[tuple[str, ...], int, int, str]]] = defaultdict(dict)
    about: dict[str, str] = {}
    # A rank's own file before a console: the console's tee copy of a line is dropped when the file has it.
    order = sorted(range(len(sources)), key=lambda sid: sources[sid].role == "console")
    for sid in order[:MAX_SOURCES]:
        src = sources[sid]
        if src.path not in openers or src.role == "error_json":
            continue
        try:
            with openers[src.path]() as handle:
                head = handle.read(HEAD_BYTES).decode("utf-8", errors="replace").splitlines()
        except READ_ERRORS:
            continue
        for n, raw in enumerate(head, 1):
            # Most lines name no rank: skip them before normalising (a colour code could split the word, so a
            # line with one is always normalised).
            if "\x1b" not in raw and "rank" not in raw.lower():
                continue
            line = normalise(raw)
            facets = _facets(line.text)
            if facets is None:
                continue
            rank, said = facets
            if line.grank is not None and line.grank != rank:
                continue  # a line about another rank ("[rank0]: waiting for rank 3")
            for facet, values, what in said:
                first[facet].setdefault(rank, (values, sid, n, raw))
                about[facet] = what
    rows: list[Event] = []
    seen: set[int] = set()  # one event per rank: its first differing line says enough
    for facet, per_rank in first.items():
        if len(per_rank) < MIN_RANKS:
            continue
        common, count = Counter(v for v, *_ in per_rank.values()).most_common(1)[0]
        if count != len(per_rank) - 1:
            continue
        rank = next(r for r, (v, *_) in per_rank.items() if v != common)
        if rank in seen:
            continue
        _, sid, n, raw = per_rank[rank]
        peer_raw = next(p for r, (v, _, _, p) in per_rank.items() if v == common)
        line = normalise(raw)
        fields = {
            "differs": line.text.strip()[:200],
            "peers_print": normalise(peer_raw).text.strip()[:200],
            "about": "tensor" if _TENSOR.search(about[facet]) else "setting",
            "rank": rank,
        }
        row = Extractor._row(sid, sources[sid], n, KIND, "warning", None, line, fields)
        row["grank"] = rank
        rows.append(row)
        seen.add(rank)
    return rows
