"""Turn blocks of log text into typed events: one prefilter scan in polars, then per-signature matching.

Every line goes through one scan with the union of the catalogue's prefilters (polars, Rust regex: linear time,
both cores), in a batch of plain lines first once per line template (templates.py). Only the lines it selects are
normalised and matched against the signatures in Python.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import Any, cast

import polars as pl
import regex

from logscope.events.catalogue import Catalogue, Signature
from logscope.events.table import PROMOTED_INT, PROMOTED_STR, events_frame
from logscope.events.templates import MASK
from logscope.ingest.normalise import normalise
from logscope.ingest.read import Block
from logscope.ingest.sources import Source
from logscope.values import int64_or_none
from logscope.vocab import Event

BATCH_CHARS = 8 << 20
MAX_TEXT = 2000
CONTEXT = 2  # lines either side kept for warning/error events (evidence windows in reports)
MAX_CONTEXT_PER_SOURCE = 400
PROBE_ROWS = 1024  # selected lines charged before the rest of a batch is filtered again (see `_batch`)
FEW_LINES = 512  # up to this many, the hit expressions are only those of prefilters whose literals occur
TEMPLATE_MIN_BYTES = 2 << 20  # a source this large is split into templates (see `_templatable`)
TEMPLATE_SHARE = 8  # a source whose batch has more than one distinct template in this many lines is split plainly
# Bounds on what `_passing` keeps, so that memory does not grow with the input.
MAX_KNOWN_TEMPLATES = 1 << 18
MAX_KNOWN_UNIONS = 64
LATEST_TAIL = 64  # a block's last lines, where the latest line of a spent capped kind is looked for first
# Quotas are per stream: a source, or in a console one rank's `[default<N>]:` lines (key sid * STREAMS + 1 + N;
# the launcher's own lines are stream sid * STREAMS). A console holds every rank: one quota per source would let
# the chattiest ranks spend it and drop the later lines of all, so a rank would look as if it stopped early.
STREAMS = 1 << 16
_TEE_RUST = r"^\[[A-Za-z_][\w.-]*?(\d+)\]:"
# How many following lines a reflowed message may run on for (the watchdog's timeout, pasted at 80 columns: 3).
REFLOW_LINES = 3
# What a new line looks like; a wrapped continuation does not (it starts mid-word or mid-number).
_LINE_START = regex.compile(
    r"\s*(?:[\[(]|Traceback|File \"|\d{4}-\d\d-\d\d|[DIWEC]\d{4} |[\w.-]+:\d+:\d+ |frame #|Exception raised|"
    r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[:\s]|$)"
)

# The same test for polars (Rust regex; `match` anchors at the start, hence `^`).
_LINE_START_RUST = "^" + _LINE_START.pattern
_KV = regex.compile(r"\b([A-Za-z_][\w.]*)=([^\s,;]+)")
# "DDP rank: 0, world size: 1": the same settings written "key: value", with the key's words joined by "_".
_GLUED_TAG = regex.compile(r"\[(?:rank|RANK|Rank|default)(?![a-z])")
# (Also padded to a column: "Global rank    : 0", "World size     : 1".)
_KV_COLON = regex.compile(r"\b(rank|local[ _]rank|world[ _]size|seed|num[ _]envs) *: ?(\d+)\b", regex.I)
# ProcessGroupNCCL's settings echo: "TORCH_NCCL_BLOCKING_WAIT: 0", "TORCH_NCCL_ENABLE_MONITORING (Whether to ...): 1".
_TORCH_ENV = regex.compile(r"\b(TORCH_[A-Z0-9_]+)(?: \([^()]{0,200}\))?: ([^\s,]+)")
# One encoder for every event's fields: json.dumps with a non-default option builds a new encoder per call.
_FIELDS_JSON = json.JSONEncoder(ensure_ascii=False)
_RAISED = regex.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): ")
_EXC = regex.compile(r"^(?P<exc_type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*): (?P<reason>.*)", regex.S)


@dataclass
class Extraction:
    rows: list[Event]  # one event dict per recognised line (EVENT_SCHEMA keys plus `_f`), source order
    contexts: dict[tuple[int, int], list[tuple[int, str]]]  # (sid, line) -> [(line, text)] around the event
    notes: list[str] = field(default_factory=list)

    @property
    def events(self) -> pl.DataFrame:
        return events_frame(self.rows)


def _fields(sig: Signature, m: regex.Match[str], text: str) -> dict[str, Any]:
    found = {k: v for k, v in m.groupdict().items() if v is not None}
    # Alternatives of one signature name the same field `x`, `x2`, `x3` (a regex group name is unique).
    for key in [k for k in found if k[-1].isdigit()]:
        base = key.rstrip("0123456789")
        value = found.pop(key)
        found.setdefault(base, value)
    if sig.kind == "nccl_env_set" and "var" in found:
        found[str(found["var"])] = found.get("value")  # so rules compare NCCL_* settings by name
    if sig.kind == "pg_nccl_env":
        for key, value in _TORCH_ENV.findall(text):
            found.setdefault(key, value)
    if sig.kind == "config_values":
        for key, raw in _KV.findall(text):
            # Two ranks' prints glued on one line ("seed=1234[rank 1] seed=1234"): the value ends where the next
            # rank's tag starts.
            value = _GLUED_TAG.split(raw, 1)[0].rstrip(".:")
            found.setdefault(key, value)
            # "trainer.world_size=1": the setting is the last part of a dotted name.
            found.setdefault(key.rsplit(".", 1)[-1], value)
        for key, value in _KV_COLON.findall(text):
            found.setdefault(key.lower().replace(" ", "_"), value)
    return found


def _templates(lines: pl.DataFrame) -> pl.DataFrame:
    """The distinct templates of a templated batch's `lines`: each hash `k` with its masked text `m`."""
    return lines.select(pl.col("k", "m").gather(lines["k"].arg_unique()))


class _Lines:
    """A batch's lines by row, for the few that per-line matching reads around a candidate: from the split text,
    or, in a batch split into templates, cut out of the blocks."""

    def __init__(self, frame: pl.DataFrame, data: list[bytes]) -> None:
        self._split = "t" in frame.columns
        self._columns = [frame["t"]] if self._split else [frame["b"], frame["o"], frame["n"]]
        self._data = data
        self._height = frame.height

    def __len__(self) -> int:
        return self._height

    def __getitem__(self, row: int) -> str:
        if self._split:
            return str(self._columns[0][row])
        block, start, length = (column[row] for column in self._columns)
        return self._data[block][start : start + length].decode()


_PREFILTER: Callable[[Signature], str] = attrgetter("prefilter")  # a signature's prefilter, as written

SAME_START = 12  # lines whose first characters have one shape (digits aside) are records of one template


def _shape(text: pl.Expr) -> pl.Expr:
    return text.str.slice(0, SAME_START).str.replace_all(r"\d", "0")


def _unwrap_fixed_width(frame: pl.DataFrame, blocks: list[int]) -> pl.DataFrame:
    """Re-join messages that a terminal or a paste hard-wrapped at a fixed width (a watchdog line broken mid-number).

    A block is hard-wrapped when many of its lines have exactly the same length W >= 60 (padding spaces included).
    Each such line is joined with the lines after it; the continuation rows become empty so line numbers stay put.
    """
    lengths = frame.filter(pl.col("b").is_in(blocks)).select("b", pl.col("t").str.len_chars().alias("n"))
    totals = lengths.group_by("b").len().rename({"len": "lines"})
    widths = (
        lengths.filter(pl.col("n") >= 60)
        .group_by("b", "n")
        .len()
        .join(totals, on="b")
        .filter((pl.col("len") >= 3) & (pl.col("len") * 4 >= pl.col("lines")))
    )
    if widths.height == 0:
        return frame
    width_of = widths.sort("len").unique("b", keep="last").select("b", pl.col("n").alias("w"))
    # A full-width line absorbs the next line of its block unless that one starts a new message; the chain
    # goes on while the absorbed line is full width too. Only rows that absorb their successor need Python.
    marked = (
        frame.join(width_of, on="b", how="left", maintain_order="left")
        .with_columns(
            (pl.col("t").str.len_chars() == pl.col("w")).fill_null(False).alias("full"),
            _shape(pl.col("t")).alias("shape"),
        )
        .with_columns(
            (
                pl.col("full")
                & (pl.col("b").shift(-1) == pl.col("b")).fill_null(False)
                & ~pl.col("t").shift(-1).str.contains(_LINE_START_RUST).fill_null(True)
                # A line of the same template as the next or the previous one (fixed-width columns: Megatron's
                # "iteration  2/ 250000 | ...", nccl-tests' result rows) is a record of a table, not a wrapped one.
                & (pl.col("shape").shift(-1) != pl.col("shape")).fill_null(True)
                & (pl.col("shape").shift(1) != pl.col("shape")).fill_null(True)
            ).alias("absorbs")
        )
    )
    heads = marked["absorbs"].arg_true().to_list()
    texts = marked.select(
        pl.when(pl.col("full")).then(pl.col("t").str.strip_chars_end(" ")).otherwise(pl.col("t"))
    ).to_series()
    if not heads:
        return frame.with_columns(texts.alias("t"))
    raw = marked["t"]
    updates: dict[int, str] = {}
    absorbing = set(heads)
    for i in heads:
        if i - 1 in absorbing:  # inside a chain that started earlier
            continue
        j = i
        parts = [raw[i]]
        while j in absorbing:
            j += 1
            parts.append(raw[j])
            updates[j] = ""
        updates[i] = "".join(parts).rstrip(" ")
    rows = pl.Series(list(updates), dtype=pl.UInt32)
    return frame.with_columns(texts.scatter(rows, list(updates.values())).alias("t"))


class Extractor:
    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self.signatures = catalogue.signatures
        self._rows: list[Event] = []
        self._contexts: dict[tuple[int, int], list[tuple[int, str]]] = {}
        self._context_count: Counter[int] = Counter()
        self._kind_count: Counter[tuple[int, str]] = Counter()
        self._tails: dict[tuple[int, str], tuple[int, Source, int, Signature, regex.Match[str], Any]] = {}
        self.notes: list[str] = []
        self._hit_exprs: dict[int, pl.Expr] = {}  # built as asked (`_hit_expr`): a run asks for a few of them
        # Limited (chatty) signatures: their quota is spent on whole columns, before any per-line Python work.
        # Limited and capped signatures both have a per-source quota; past a cap, the batch's last line is kept too
        # (a capped kind keeps its latest event: the last iteration, the last SeqNum).
        self._limits: dict[int, int] = {}
        for i, sig in enumerate(self.signatures):
            quota = sig.limit if sig.limit is not None else sig.cap
            if quota is not None:
                self._limits[i] = quota
        self._capped = [i for i, sig in enumerate(self.signatures) if sig.cap is not None]
        self._unlimited_union = "|".join(
            f"(?:{s.prefilter})" for s in self.signatures if s.limit is None and s.cap is None
        )
        self._every = list(range(len(self.signatures)))
        # A line that no unlimited prefilter passes can pass only limited ones: its hits need only their regexes.
        self._limited = sorted(self._limits)
        self._seen: Counter[tuple[int, int]] = Counter()  # (stream, limited signature) -> lines charged so far
        self._charged: dict[tuple[int, int], set[int]] = {}  # (sid, limited signature) -> streams charged to it
        self.lines: Counter[int] = Counter()  # sid -> lines fed so far (the reader does not count them)
        self._sids = pl.Series(dtype=pl.Int64)  # the current batch's source of each block
        # Whether the current batch is all ASCII: then the scans use the prefilters' ASCII spelling (same lines).
        self._ascii = False
        self._ascii_union = "|".join(f"(?:{sig.ascii_prefilter})" for sig in self.signatures)
        self._data: list[bytes] = []  # the current batch's blocks
        self._plain: set[int] = set()  # sources whose lines are not split into templates (see `_batch`)
        self._known: dict[str, pl.DataFrame] = {}  # blind union -> the templates tried with it (`_passing`)

    def run(self, blocks: Iterable[Block]) -> Extraction:
        self.feed(blocks)
        extraction, latest = self.finish()
        extraction.rows.extend(latest)
        return extraction

    def feed(self, blocks: Iterable[Block]) -> None:
        batch: list[Block] = []
        size = 0
        templated = False
        for block in blocks:
            if block.source.role == "error_json":
                self.lines[block.sid] += block.data.count(b"\n") + 1
                self._error_json(block)
                continue
            # A batch is split into templates or plainly as a whole (`_batch`): a block of the other kind starts one.
            kind = self._templatable(block)
            if batch and kind != templated:
                self._batch(batch)
                batch, size = [], 0
            templated = kind
            batch.append(block)
            size += len(block.data)
            if size >= BATCH_CHARS:
                self._batch(batch)
                batch, size = [], 0
        if batch:
            self._batch(batch)

    def finish(self) -> tuple[Extraction, list[Event]]:
        """What was fed since the last `finish`, and apart from it the latest event of each capped kind past its cap
        (those come last). The extractor starts afresh for the next sources: its quotas are per source anyway."""
        latest = [
            self._row(sid, src, line_no, sig.kind, sig.level, sig.phase, line, _fields(sig, m, line.text))
            for sid, src, line_no, sig, m, line in self._tails.values()
        ]
        extraction = Extraction(self._rows, self._contexts, self.notes)
        self._rows, self._contexts, self._tails, self.notes = [], {}, {}, []
        return extraction, latest

    @cached_property
    def _blind(self) -> bool:
        """Whether every prefilter has a spelling for templates, which the scans then try first (`_select`)."""
        return all(s.blind_prefilter and s.blind_ascii_prefilter for s in self.signatures)

    def _templatable(self, block: Block) -> bool:
        """Whether a block's lines are split into templates: a large source's (a small one's scan costs less than
        spelling the prefilters for templates), not a paste (whose hard-wrapped lines are re-joined), not a
        terminal's carriage returns (split again), not a source whose templates hardly repeat."""
        size = block.source.size if block.source.size is not None else len(block.data)
        return (
            size >= TEMPLATE_MIN_BYTES
            and block.source.role != "console"
            and block.sid not in self._plain
            and not block.carriage
            and self._blind
        )

    # -- one batch of blocks: the vectorised scan
    def _batch(self, batch: list[Block]) -> None:
        self._data = [b.data for b in batch]
        try:
            self._scan(batch)
        finally:
            self._data = []  # (not kept while the next batch is read)

    def _scan(self, batch: list[Block]) -> None:
        # Terminals and pastes hard-wrap; files that torchrun writes for a rank do not.
        pasted = [i for i, b in enumerate(batch) if b.source.role == "console"]
        carriage = any(b.carriage for b in batch)  # a scan of the text is far cheaper than splitting every line
        # A batch of plain lines is split into its lines' templates (digits read as 0), and a line's own text is cut
        # from the block only where a scan selects it (`_select`): the templates of an event-dense stream are few.
        templated = all(self._templatable(b) for b in batch)
        split = [data.translate(MASK) for data in self._data] if templated else self._data
        lines = pl.Series(split, dtype=pl.Binary).cast(pl.String).str.split("\n")
        first_lines = []  # 1-based number of each block's first line in its source
        starts = []  # row of each block's first line once the blocks are exploded into lines
        row = 0
        for block, count in zip(batch, lines.list.len().to_list(), strict=True):
            first_lines.append(self.lines[block.sid] + 1)
            self.lines[block.sid] += count
            starts.append(row)
            row += count
        # Only the block number goes with every line: a line's source and number are worked out for the few
        # candidates (a column more on every line costs as much as a tenth of the scan).
        self._sids = pl.Series([b.sid for b in batch], dtype=pl.Int64)
        self._ascii = all(b.ascii for b in batch)
        column = "m" if templated else "t"
        frame = pl.DataFrame({"b": pl.Series(range(len(batch)), dtype=pl.Int32), column: lines}).explode(column)
        physical = "row"
        if carriage:
            # A carriage return overwrites the line on a terminal (tqdm, CRLF): each segment is a logical line
            # of its own, with the physical line's number.
            physical = "physical"
            frame = (
                frame.with_row_index(physical)
                .with_columns(pl.col("t").str.strip_chars_end("\r").str.split("\r"))
                .explode("t")
            )
        frame = frame.with_row_index("row")
        if templated:
            # Each line's template hashed (`k`), and where its text starts in its block (`o`) and how long it is.
            length = pl.col("m").str.len_bytes()
            frame = frame.with_columns(pl.col("m").hash().alias("k"), length.alias("n")).with_columns(
                ((pl.col("n") + 1).cum_sum().over("b") - pl.col("n") - 1).alias("o")
            )
            # Where templates hardly repeat (NCCL's per-collective lines, each with its own buffer addresses), trying
            # them first costs as much as the scan it spares: the rest of the source is split plainly.
            if frame["k"].n_unique() * TEMPLATE_SHARE > frame.height:
                self._plain.update(b.sid for b in batch)
        if pasted:
            frame = _unwrap_fixed_width(frame, pasted)
        candidates = self._candidates(frame, batch, set(pasted))
        if candidates.height == 0:
            return
        texts = _Lines(frame, self._data)
        blocks = frame["b"]
        found = candidates.select("row", "b", "q", "t", pl.col(physical).alias("at"), "sigs")
        for row, b, q, text, at, sigs in found.iter_rows():
            self._match(batch[b], q, first_lines[b] + at - starts[b], text, sigs, texts, blocks, row)

    def _candidates(self, frame: pl.DataFrame, batch: list[Block], pasted: set[int]) -> pl.DataFrame:
        """The lines of the batch that reach the per-line matching, each with `sigs` (see `_within_quota`).

        Blocks are filtered with the union of the prefilters whose quota their source has not spent: the
        blocks of sources in the same state share one scan (a batch can hold the end of one source and the start
        of the next).
        """
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, block in enumerate(batch):
            groups.setdefault(tuple(self._spent({block.sid})), []).append(i)
        parts = [
            self._candidates_of(
                frame if len(groups) == 1 else frame.filter(pl.col("b").is_in(members)),
                {batch[i].sid for i in members},
                list(spent),
                members,
                pasted,
            )
            for spent, members in groups.items()
        ]
        return pl.concat(parts).sort("row") if len(parts) > 1 else parts[0]

    def _candidates_of(
        self, frame: pl.DataFrame, sids: set[int], spent: list[int], blocks: list[int], pasted: set[int]
    ) -> pl.DataFrame:
        # A source's first batch: none of its quotas is spent, and charging a quarter of a million progress-bar
        # refreshes costs more than the rest of the batch. The first PROBE_ROWS selected lines spend the chatty
        # kinds' quotas; the lines after them are filtered with the narrower union, as long as that keeps
        # narrowing it. The frame is scanned in growing steps, so that the lines after a probe are scanned once,
        # with the narrower union (which selects a subset of what the wider one selects).
        parts = []
        scanned = 0
        step = 4 * PROBE_ROWS
        # Lines the union of the moment selected, not charged yet (all before `scanned`).
        pending = self._with_text(frame.clear())
        while len(spent) < len(self._limits):
            while pending.height <= PROBE_ROWS and scanned < frame.height:
                chunk = frame.slice(scanned, step)
                scanned += chunk.height
                step *= 2
                pending = pl.concat([pending, self._select(chunk, self._union(spent), self._live(spent))])
            if pending.height <= PROBE_ROWS:
                break
            parts.append(self._within_quota(self._with_stream(pending.head(PROBE_ROWS), pasted), spent))
            now_spent = self._spent(sids)
            pending = pending.slice(PROBE_ROWS)
            if len(now_spent) == len(spent):
                break
            spent = now_spent
            pending = self._select(pending, self._union(spent), self._live(spent))
        rest = self._select(frame.slice(scanned), self._union(spent), self._live(spent))
        selected = pl.concat([pending, rest]) if pending.height else rest
        parts.append(self._within_quota(self._with_stream(selected, pasted), spent))
        candidates = pl.concat(parts) if len(parts) > 1 else parts[0]
        spent_caps = [i for i in spent if i in self._capped]
        return self._with_latest(frame, candidates, spent_caps, blocks, pasted) if spent_caps else candidates

    def _with_stream(self, lines: pl.DataFrame, pasted: set[int]) -> pl.DataFrame:
        """`lines` of the current batch with their quota stream `q` (see STREAMS). Only for lines a prefilter
        selected: the tee-prefix capture is a slow regex (captures), far too slow for every line of a console."""
        stream = pl.lit(self._sids).gather(pl.col("b")) * STREAMS
        if pasted:
            tee_rank = pl.col("t").str.extract(_TEE_RUST, 1).cast(pl.Int64, strict=False)
            stream = (
                pl.when(pl.col("b").is_in(list(pasted)) & tee_rank.is_not_null())
                .then(stream + 1 + tee_rank)
                .otherwise(stream)
            )
        return lines.with_columns(stream.alias("q"))

    def _spent(self, sids: set[int]) -> list[int]:
        """The limited and capped signatures whose quota every one of `sids` has spent: every stream of the source
        that was charged to the signature has spent it (a console's ranks that never print a kind do not hold it).

        A spent limited signature's lines would be dropped anyway (in `_within_quota` or `_emit`). A spent capped
        signature needs only the latest of its lines, which `_with_latest` finds without sending every one of them
        (a progress bar's refreshes: most lines of a stderr) through the per-line quota.
        """

        def spent(i: int, quota: int) -> bool:
            sig = self.signatures[i]
            for sid in sids:
                streams = self._charged.get((sid, i))
                if not streams:
                    return False
                for q in streams:
                    if self._seen[(q, i)] < quota and not (
                        sig.limit is not None and self._kind_count[(q, sig.kind)] >= quota
                    ):
                        return False
            return True

        return [i for i, quota in self._limits.items() if spent(i, quota)]

    def _select(self, lines: pl.DataFrame, union: str, ids: list[int]) -> pl.DataFrame:
        """The `lines` that `union` (the prefilters of `ids`) passes, with their text. Lines of a templated batch are
        first tried by template: the same prefilters spelled for templates (`_blind_union`), once per distinct
        template, and only the lines of the templates it passes are cut out of their blocks and scanned with `union`.
        A template it fails is a line that `union` fails (templates.py), so the lines selected are those `union`
        passes. (Templates are told apart by a 64-bit hash: two of one batch with one hash, odds near 1 in 10^9 for
        10^5 templates, would share the first one's outcome.)"""
        if "t" in lines.columns:
            return lines.filter(pl.col("t").str.contains(union))
        passing = self._passing(_templates(lines), self._blind_union(ids))
        chosen = lines.filter(pl.col("k").is_in(passing.implode()))
        return self._with_text(chosen).filter(pl.col("t").str.contains(union))

    def _passing(self, templates: pl.DataFrame, blind: str) -> pl.Series:
        """The keys of the templates `blind` passes, among `templates` and those tried with it before: a stream
        repeats its templates from batch to batch, so each is tried once (while the cache is small)."""
        known = self._known.get(blind)
        new = templates if known is None else templates.join(known, on="k", how="anti")
        if known is None or new.height:
            tried = new.select("k", pl.col("m").str.contains(blind).alias("passes"))
            known = tried if known is None or known.height > MAX_KNOWN_TEMPLATES else pl.concat([known, tried])
            if len(self._known) >= MAX_KNOWN_UNIONS:
                self._known.clear()
            self._known[blind] = known
        return known.filter(pl.col("passes"))["k"]

    def _with_text(self, lines: pl.DataFrame) -> pl.DataFrame:
        """`lines` with their text `t`, cut out of their blocks where the batch was split into templates."""
        if "t" in lines.columns:
            return lines
        spans = lines.select("b", "o", "n").iter_rows()
        texts = [self._data[b][o : o + n].decode() for b, o, n in spans]
        return lines.with_columns(pl.Series("t", texts, dtype=pl.String))

    def _live(self, spent: list[int]) -> list[int]:
        """The signatures not `spent`: those of `_union(spent)`."""
        return [i for i in range(len(self.signatures)) if i not in spent]

    def _blind_union(self, ids: list[int]) -> str:
        """The union of the prefilters of `ids` for templates (`_blind_prefilter`)."""
        return "|".join(f"(?:{self._blind_prefilter(self.signatures[i])})" for i in ids)

    def _union(self, spent: list[int]) -> str:
        """The union prefilter without the spent signatures. They stay in `_hit_expr`, so on the lines that
        remain candidates they still shadow later signatures exactly as before. On an ASCII batch, spelled in
        ASCII (`Signature.ascii_prefilter`): it passes the same lines, and the scan reads them faster."""
        if not spent:
            return self._ascii_union if self._ascii else self.catalogue.union_prefilter
        return "|".join(f"(?:{self._prefilter(sig)})" for i, sig in enumerate(self.signatures) if i not in spent)

    def _prefilter(self, sig: Signature) -> str:
        return sig.ascii_prefilter if self._ascii else sig.prefilter

    def _blind_prefilter(self, sig: Signature) -> str:
        """`Signature.blind_prefilter`, in ASCII on ASCII (every one exists where a batch is templated: `_blind`)."""
        spelling = sig.blind_ascii_prefilter if self._ascii else sig.blind_prefilter
        assert spelling is not None
        return spelling

    def _with_latest(
        self, frame: pl.DataFrame, candidates: pl.DataFrame, spent: list[int], blocks: list[int], pasted: set[int]
    ) -> pl.DataFrame:
        """`candidates` plus, per block, stream and spent capped signature, the last line its prefilter passes.

        Such a line is usually among a block's last lines, so those are tried first. The blocks where one of the
        signatures passes none of them, and console blocks (each of their ranks has its own latest line), are
        scanned whole, once, with the union of the signatures (a block of one source has one stream, so its last
        line found in the tail is the one the whole scan finds).
        """
        ids = pl.Series(blocks, dtype=pl.Int32)
        starts = frame["b"].search_sorted(ids, side="left").to_list()
        ends = frame["b"].search_sorted(ids, side="right").to_list()
        bounds = [(b, start, end) for b, start, end in zip(blocks, starts, ends, strict=True) if end > start]
        union = "|".join(f"(?:{self._prefilter(self.signatures[i])})" for i in spent)

        def last_rows(lines: pl.DataFrame) -> tuple[set[int], set[tuple[int, int]]]:
            """The last row per block, stream and signature, and the (block, signature) pairs that have one."""
            hits = self._with_stream(self._select(lines, union, spent), pasted)
            last = hits.group_by("b", "q").agg(
                pl.col("row").filter(pl.col("t").str.contains(self._prefilter(self.signatures[i]))).last().alias(str(i))
                for i in spent
            )
            rows: set[int] = set()
            found: set[tuple[int, int]] = set()
            for b, _, *per_signature in last.iter_rows():
                for i, r in zip(spent, per_signature, strict=True):
                    if r is not None:
                        rows.add(int(r))
                        found.add((b, i))
            return rows, found

        tails = [(start, end) for b, start, end in bounds if b not in pasted]
        rows: set[int] = set()
        found: set[tuple[int, int]] = set()
        if tails:
            rows, found = last_rows(
                pl.concat([frame.slice(max(s, e - LATEST_TAIL), min(e - s, LATEST_TAIL)) for s, e in tails])
            )
        whole = [b for b, _, _ in bounds if b in pasted or any((b, i) not in found for i in spent)]
        if whole:
            rows |= last_rows(frame.filter(pl.col("b").is_in(whole)) if len(whole) < len(bounds) else frame)[0]
        rows.difference_update(candidates["row"].to_list())
        if not rows:
            return candidates
        extra = self._with_stream(self._with_text(frame.filter(pl.col("row").is_in(sorted(rows)))), pasted)
        extra = extra.with_columns(self._hits(extra, self._limited))
        return pl.concat([candidates, extra.select(candidates.columns)]).sort("row")

    def _within_quota(self, selected: pl.DataFrame, spent: list[int]) -> pl.DataFrame:
        """The selected lines that reach Python, each with `sigs`: the signatures whose prefilter it passes.

        Drops the lines only limited signatures select, beyond each (stream, signature) quota (STREAMS): a line that no
        unlimited prefilter selects is charged to the first limited signature whose prefilter selects it and whose
        quota is not `spent` yet (a progress bar's "Epoch 3: 40%|..." passes two), and per source only the first
        `limit` lines charged to a signature are kept. So a limited kind still yields at most
        `limit` events; fewer only if many of its first lines pass the prefilter but fail the pattern. Without
        this, 40% of an NCCL_DEBUG=INFO log reaches the per-line Python code.
        """
        if selected.height == 0:  # planning the hit expressions alone costs milliseconds, on every batch
            return selected.with_columns(pl.Series("sigs", [], dtype=pl.List(pl.Int32)))
        live_limited = self._possible(selected, [i for i in self._limits if i not in spent])
        if not live_limited:  # the live union passed only unlimited signatures' lines
            return selected.with_columns(self._hits(selected, self._every))
        marked = (
            self._limited_hits(selected, live_limited)
            .with_columns(pl.col("t").str.contains(self._unlimited_union).alias("free"))
            .with_columns(pl.when(pl.col("free")).then(None).otherwise(pl.col("first")).alias("lim"))
            .with_columns(
                pl.int_range(pl.len(), dtype=pl.Int64).over("q", "lim").alias("nth"),
                pl.len().over("q", "lim").alias("charged"),
            )
        )
        quota = []
        charged = marked.filter(pl.col("lim").is_not_null()).group_by("q", "lim").len()
        for q, lim, count in charged.iter_rows():
            quota.append((q, lim, self._limits[lim] - self._seen[(q, lim)]))
            self._seen[(q, lim)] += count
            self._charged.setdefault((q // STREAMS, lim), set()).add(q)
        kept = marked
        if quota:
            left = pl.DataFrame(quota, schema={"q": pl.Int64, "lim": pl.Int32, "left": pl.Int64}, orient="row")
            kept = marked.join(left, on=["q", "lim"], how="left").filter(
                pl.col("lim").is_null()
                | (pl.col("nth") < pl.col("left"))
                | (pl.col("lim").is_in(self._capped) & (pl.col("nth") == pl.col("charged") - 1))
            )
        return (
            pl.concat(
                [
                    (free := kept.filter(pl.col("free"))).with_columns(self._hits(free, self._every)),
                    kept.filter(~pl.col("free")).with_columns(pl.col("lsigs").alias("sigs")),
                ],
                how="diagonal",
            )
            .select(*selected.columns, "sigs")
            .sort("row")
        )

    def _limited_hits(self, lines: pl.DataFrame, live_limited: list[int]) -> pl.DataFrame:
        """`lines` with `lsigs`, the limited signatures whose prefilter each line passes (catalogue order), and
        `first`, the first of them in `live_limited`. Each prefilter is tried once, into bit masks; the few distinct
        masks (lines of one kind pass the same prefilters) are turned into lists here, not a list per line."""
        ids = self._possible(lines, self._limited)  # holds every one of live_limited
        words = [ids[k : k + 62] for k in range(0, len(ids), 62)]
        masks = [f"_mask{k}" for k in range(len(words))]

        def bits(column: str, spell: Callable[[Signature], str], only: set[int] | None = None) -> list[pl.Expr]:
            """Per word of `ids`, the bits of the prefilters (of `only`, spelled by `spell`) that each line's
            `column` passes."""
            exprs = []
            for word, name in zip(words, masks, strict=True):
                tried = [(j, spell(self.signatures[i])) for j, i in enumerate(word) if only is None or i in only]
                passed = pl.sum_horizontal(pl.col(column).str.contains(p).cast(pl.Int64) * (1 << j) for j, p in tried)
                exprs.append((passed if tried else pl.lit(0, dtype=pl.Int64)).alias(name))
            return exprs

        if "k" in lines.columns:
            # Tried per template first: a prefilter its template fails, every line of the template fails, so each
            # group of lines whose templates pass the same prefilters is tried with those alone.
            by_template = _templates(lines).with_columns(bits("m", self._blind_prefilter)).drop("m")
            grouped = lines.join(by_template, on="k", how="left", maintain_order="left")
            parts = []
            for values in by_template.select(masks).unique().iter_rows():
                only = {
                    i for word, value in zip(words, values, strict=True) for j, i in enumerate(word) if value >> j & 1
                }
                same = pl.all_horizontal(pl.col(name) == value for name, value in zip(masks, values, strict=True))
                group = grouped.filter(same)
                parts.append(group.with_columns(bits("t", _PREFILTER, only)) if only else group)
            marked = pl.concat(parts).sort("row") if len(parts) > 1 else parts[0]
        else:
            marked = lines.with_columns(bits("t", _PREFILTER))
        live = set(live_limited)
        table = []
        for values in marked.select(masks).unique().iter_rows():
            hits = [i for word, value in zip(words, values, strict=True) for j, i in enumerate(word) if value >> j & 1]
            table.append((*values, next((i for i in hits if i in live), None), hits))
        schema: dict[str, pl.DataType] = {name: pl.Int64() for name in masks}
        schema |= {"first": pl.Int32(), "lsigs": pl.List(pl.Int32)}
        found = pl.DataFrame(table, schema=schema, orient="row")
        return marked.join(found, on=masks, how="left", maintain_order="left").drop(masks)

    def _possible(self, lines: pl.DataFrame, ids: list[int]) -> list[int]:
        """The signatures of `ids` whose prefilter may pass on one of `lines`: on a few lines, or lines of a few
        templates, those with a required literal in them (`Signature.may_pass`, `may_pass_template`). Planning one
        hit expression costs ~40 µs, polars compiles each prefilter again once a call tries more than 32 (its
        regex cache holds 32), and a batch's candidate lines pass a handful of the catalogue's hundred prefilters."""
        if "m" in lines.columns:  # a templated batch: a thousand fingerprints are one template
            templates = _templates(lines)
            if templates.height <= FEW_LINES:
                text = "\n".join(templates["m"].to_list())
                return [i for i in ids if self.signatures[i].may_pass_template(text)]
        if lines.height > FEW_LINES:
            return ids
        text = "\n".join(lines["t"].to_list())
        return [i for i in ids if self.signatures[i].may_pass(text)]

    def _hits(self, lines: pl.DataFrame, ids: list[int]) -> pl.Expr:
        """`sigs` of `lines`: the signatures of `ids` whose prefilter each line passes, in catalogue order."""
        possible = self._possible(lines, ids)
        if not possible:
            return pl.lit([], dtype=pl.List(pl.Int32)).alias("sigs")
        return pl.concat_list([self._hit_expr(i) for i in possible]).list.drop_nulls().alias("sigs")

    def _hit_expr(self, i: int) -> pl.Expr:
        """Signature `i`'s number where its prefilter passes the line (building all of them costs a small run
        ~5 ms)."""
        found = self._hit_exprs.get(i)
        if found is None:
            prefilter = self.signatures[i].prefilter
            found = self._hit_exprs[i] = pl.when(pl.col("t").str.contains(prefilter)).then(pl.lit(i, dtype=pl.Int32))
        return found

    def _match(
        self,
        block: Block,
        stream: int,
        line_no: int,
        raw: str,
        sigs: list[int],
        texts: _Lines,
        blocks: pl.Series,
        row: int,
    ) -> None:
        line = normalise(raw)
        text = line.text
        has_next = row + 1 < len(texts) and blocks[row + 1] == blocks[row]
        for i in sigs:
            sig = self.signatures[i]
            if sig.requires_level is not None and line.level != sig.requires_level:
                continue
            m = sig.pattern.search(text)
            if m is None and sig.wrapped and has_next:
                # Hard-wrapped message: the rest of it is on the next physical line. Tried in catalogue order, so
                # a specific signature's joined line wins over a generic one (nccl_warn) matching the first half.
                joined = text + normalise(str(texts[row + 1])).text
                m = sig.pattern.search(joined)
                if m is None:
                    joined, m = self._reflowed(sig, text, texts, blocks, row)
                if m is not None:
                    line.text = joined
            if m is not None:
                self._emit(block, stream, line_no, sig, m, line, texts, blocks, row)
                return

    @staticmethod
    def _reflowed(
        sig: Signature, text: str, texts: _Lines, blocks: pl.Series, row: int
    ) -> tuple[str, regex.Match[str] | None]:
        """A message a paste reflowed at word boundaries ("...timeout:" / "    WorkNCCL(SeqNum=27732, ..."): the
        next few lines of the block, stripped, joined with single spaces."""
        parts = [text.rstrip()]
        for k in range(1, REFLOW_LINES + 1):
            if row + k >= len(texts) or blocks[row + k] != blocks[row]:
                break
            parts.append(normalise(str(texts[row + k])).text.strip())
            joined = " ".join(parts)
            if (m := sig.pattern.search(joined)) is not None:
                return joined, m
        return text, None

    def _emit(
        self,
        block: Block,
        stream: int,
        line_no: int,
        sig: Signature,
        m: regex.Match[str],
        line: Any,
        texts: _Lines,
        blocks: pl.Series,
        row: int,
    ) -> None:
        src = block.source
        if sig.limit is not None:
            key = (stream, sig.kind)
            self._kind_count[key] += 1
            if self._kind_count[key] > sig.limit:
                return
        if sig.cap is not None:
            key = (stream, sig.kind)
            self._kind_count[key] += 1
            if self._kind_count[key] > sig.cap:
                self._tails[key] = (block.sid, src, line_no, sig, m, line)  # only the latest one is kept
                return
        fields = _fields(sig, m, line.text)
        # A warning-kind line that its logger printed at error level ("[E socket.cpp:610] ... failed to connect to
        # any network address") is an error: the prefix knows the outcome.
        # So is one raised as an exception ("torch.distributed.DistNetworkError: The client socket has failed ...").
        raised = sig.level == "warning" and _RAISED.match(line.text) is not None
        level = "error" if sig.level == "warning" and (line.level == "error" or raised) else sig.level
        self._rows.append(self._row(block.sid, src, line_no, sig.kind, level, sig.phase, line, fields))
        if level in ("warning", "error") and self._context_count[block.sid] < MAX_CONTEXT_PER_SOURCE:
            self._context_count[block.sid] += 1
            lo = max(0, row - CONTEXT)
            window = []
            for r in range(lo, min(len(texts), row + CONTEXT + 1)):
                if blocks[r] == blocks[row]:
                    window.append((line_no + (r - row), normalise(str(texts[r]).rstrip("\r")).text[:MAX_TEXT]))
            self._contexts[(block.sid, line_no)] = window

    @staticmethod
    def _row(
        sid: int,
        src: Source,
        line_no: int,
        kind: str,
        level: str,
        phase: str | None,
        line: Any,
        fields: dict[str, Any],
    ) -> Event:
        row: dict[str, Any] = {  # an Event once the promoted fields are set below
            "sid": sid,
            "source": src.path,
            "line": line_no,
            "rank": None,
            "local_rank": src.local_rank,
            "node": src.node,
            "attempt": src.attempt,
            "ts": line.ts,
            "ts_text": line.ts_text,
            "kind": kind,
            "level": level,
            "phase": phase,
            "text": line.text[:MAX_TEXT],
            "fields": _FIELDS_JSON.encode(fields) if fields else "{}",
            "_f": fields,
            "tee_lrank": line.tee_local_rank,
            "grank": line.grank,
            "actor_pid": line.actor_pid,  # not a column: align reads it to find a Ray worker's rank
        }
        for name in PROMOTED_INT:
            row[name] = int64_or_none(fields.get(name))
        for name in PROMOTED_STR:
            value = fields.get(name)
            row[name] = str(value) if value is not None else None
        return cast(Event, row)

    # -- error.json (torch_logs.md §2.2): both the nested and the "new" string message format
    def _error_json(self, block: Block) -> None:
        try:
            data = json.loads(block.data)
        except ValueError:
            self.notes.append(f"{block.source.path}: error.json is not JSON, ignored")
            return
        if not isinstance(data, dict):
            self.notes.append(f"{block.source.path}: error.json has no message object, ignored")
            return
        message = data.get("message")
        fields: dict[str, Any] = {}
        if isinstance(message, dict):
            text = str(message.get("message", ""))
            extra = message.get("extraInfo") or {}
            if isinstance(extra, dict):
                fields["timestamp"] = extra.get("timestamp")
                stack = str(extra.get("py_callstack") or "").strip().splitlines()
                if stack:
                    fields["last_frame"] = stack[-1][:MAX_TEXT]
            if "errorCode" in message:
                fields["error_code"] = message.get("errorCode")
        elif isinstance(message, str):
            text = message
            fields["timestamp"] = data.get("timestamp")
        else:
            self.notes.append(f"{block.source.path}: error.json has no message, ignored")
            return
        exc = _EXC.match(text)
        if exc:
            fields["exc_type"], fields["reason"] = exc["exc_type"], exc["reason"][:MAX_TEXT]
        line = normalise(text.splitlines()[0] if text else "")
        sig_level, sig_phase = "error", "fail"
        self._rows.append(self._row(block.sid, block.source, 1, "error_file", sig_level, sig_phase, line, fields))
