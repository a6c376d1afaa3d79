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
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import IO

from logscope.errors import READ_ERRORS
from logscope.events.extract import Extractor
from logscope.events.templates import MASK_TEXT
from logscope.ingest.normalise import NCCL_RECORD, Line, normalise
from logscope.ingest.sources import Source
from logscope.vocab import Event

KIND = "rank_value_differs"
HEAD_BYTES = 256 * 1024
MAX_SOURCES = 64
MIN_RANKS = 3
# "Rank 7", "rank: 3", "global_rank=2", "RANK 1/8" in the text; the first mention is the line's own rank.
_RANK_IN_TEXT = re.compile(r"(?i)(?<![\w.])(?:global[_ ]?)?rank\s*[:=#]?\s*(\d{1,5})(?![\d.])")
# "[local_rank 2]": on one node the local rank is the process's own (torchrun numbers a node's workers 0..N-1).
_LOCAL_RANK_IN_TEXT = re.compile(r"(?i)(?<![\w.])local[_ ]rank\s*[:=#]?\s*(\d{1,5})(?![\d.])")
_NUMBER = re.compile(r"[-+]?\d[\d.]*(?:[eE][-+]?\d+)?")
# Lines about the loop's progress or a failure: their values differ by when the rank printed them.
_DYNAMIC = re.compile(
    r"(?i)(?<![a-z])(?:epoch|iter\w*|step|steps|seq\w*|sequence|watchdog|timeout|timed|elapsed|eta|it/s|s/it|exit\w*|"
    r"returncode|signal)(?![a-z])"
)
# A logger's name right after the rank tag, as logging's "[rank%d] %(name)s: %(message)s" prints it.
_LOGGER_AFTER_TAG = re.compile(r"R\] [A-Za-z_][\w.-]*: (?=[a-z])")
# A logger's name before the script's rank tag ("r25e.train: [RANK 1] ...") reads as a setting whose value is the tag.
_RANK_TAG_VALUE = re.compile(r"(?i)\[rank\b")
# A step's count after its word: "step 8", "epoch=3", "iteration 120/500".
_PINNED = re.compile(r"(?i)(?<![a-z])(?:epoch|iter|iteration|step)\s*[:=#]?\s*\d+(?:\s*/\s*\d+)?(?![\d.])[ :,]*")
_DIGITS_AS_LETTERS = str.maketrans("0123456789", "abcdefghij")
# The digits a line's facets depend on by value: its rank's, a step's count, and digits inside a name ("fsdp2",
# "torch.float32"); every other number is masked in a facet's template and only the rank's first value counts.
_VALUE_DIGITS = re.compile(
    r"(?i)(?<![\w.])(?:global[_ ]?|local[_ ])?rank\s*[:=#]?\s*\d+|"
    r"(?<![a-z])(?:epoch|iter|iteration|step)\s*[:=#]?\s*\d+(?:\s*/\s*\d+)?|[a-z_]\d+"
)
# The facet of a line pinned to a step of the loop: a number there is what the rank computed at that step (a
# tensor's width, or its share of an uneven split), not a setting; it names a failure's rank (LS204), no failure.
LOOP_FACET = "@loop "
STEP_VALUE = "step_value"  # the `about` of a value a rank computed at a step (rules/engine.py reads it)
BY_NODE_ONLY = " #by-node"  # the end of a facet compared only where its values split the ranks by node
DTYPE_FACET = " #dtype"  # the end of a facet of the element types a line names
# A setting named for the loop's progress ("step=12", "global_step: 40") or for how the process ended ("exitcode: -6"
# in torchrun's line about each worker); "grad_accum_steps" or "max_steps" is the job's configuration.
_DYNAMIC_KEY = re.compile(
    r"(?i)(?:global[_ ]?)?(?:epoch|epochs|iter\w*|step|steps|it|seq\w*|elapsed|eta|exit\w*|returncode|signal)$"
)
# Values that differ between healthy ranks or runs: metrics, clocks, hosts, addresses, paths, process ids,
# devices and data shards (for a line, anywhere in it; for a setting, its name). Seeds are compared: offset by the
# rank they differ on every rank, and only one rank against a majority that agrees is reported.
_VARYING_WORDS = (
    r"loss|acc(?!um)\w*|reward|time|sec|ms|%|host\w*|node|ip|addr\w*|port|pid|device|cuda|gpu|npu|shard|local[_ ]?rank|"
    r"memory|mem|gb|mb|throughput|speed|samples?|tokens?|date|hash|checksum"
)
_VARYING_LEAD = r"(?i)https?://|/|\\|@|0x[0-9a-f]+|(?<![0-9a-z])(?=[0-9a-f]{8,}(?![0-9a-z]))[0-9]*[a-f]|(?<![a-z])"
_VARYING = re.compile(rf"{_VARYING_LEAD}(?:lr|batches|{_VARYING_WORDS})(?![a-z])")
# A setting's name: a learning rate given as a setting ("lr=0.05", "lr_schedule=constant") is the job's, the same
# on every rank; only where a line prints it among progress numbers does it move. So is a count of batches named
# "batches": in a line's words it is the rank's share of the data ("local data exhausted after 5 batches").
_VARYING_KEY = re.compile(rf"{_VARYING_LEAD}(?:{_VARYING_WORDS})(?![a-z])")
# A quantity per device, GPU or node is the job's setting ("per_device_train_batch_size",
# "train_micro_batch_size_per_gpu"), not the rank's device.
_PER_UNIT = re.compile(r"(?i)_?per_(?:device|gpu|node)")
# A switch ("multi_gpu=False", "use_cuda: true") is the job's mode even where its name has a device's word: a
# device or a shard of the rank's own is a number or a name, never a yes or no.
_BOOLEAN = re.compile(r"(?i)(?:true|false|yes|no|on|off)$")
# Settings named for what is the rank's own, not the job's: its identity, its place, its process.
_OWN_KEY = re.compile(r"(?i)rank|member|group|world|\bid\b|_id|pid|host|node|name|restart")
# `srun --label`'s task number before a line: the task is the rank.
_SRUN_LABEL = re.compile(r"\s*(\d{1,5}): (?=\S)")
# "num_envs=512", "batch_size: 32": a setting's name and its value
# (Also JSON's and Python dicts' quoted form: "grad_accum_steps": 2, 'lr': 0.01.)
_SETTING = re.compile(r"(?<![\w.])([A-Za-z_][\w.]{0,40})[\"']?\s*[=:]\s*[\"']?([^\s,;\"'}]{1,60})")
# "batch_size 16", "num_envs 512": a snake_case name and a number, the way loggers print settings without "=".
_SPACED_SETTING = re.compile(r"(?<![\w.-])([A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+) (-?\d+(?:\.\d+)?)(?![\w.:/%-])")
# A word with a slash: a path, a URL, "colwise/rowwise", "rank 1/4".
_SLASHED = re.compile(r"\S*/\S*")
# A clock or a date in the line ("16:59:58 [rank1] done", "2026-12-05 16:59:58,123").
_CLOCK = re.compile(r"(?<![\d.:])(?:\d{4}-\d\d-\d\d[ T])?\d{1,2}:\d\d:\d\d(?:[.,]\d+)?(?![\d:])|\d{4}-\d\d-\d\d")
# A C++ logger's source location: "[/__w/.../gloo/transport/tcp/debug_logger.cc:9]", "ProcessGroupNCCL.cpp:612]".
_CPP_SOURCE = re.compile(r"\.(?:cc|cpp|cu|h|hpp):\d+\]")
# torch's name of a tensor's element type as str(dtype) prints it: "torch.float32", "torch.bfloat16", "torch.int64".
_DTYPE = re.compile(r"\btorch\.(?:b?float\d*|u?int\d+|complex\d+|half|double|long|bool)\b")
# A template about tensors going into a collective: a difference there is a collective mismatch. Whole words, so a
# setting is not one: "DistributedType.MULTI_CPU, mixed_precision=bf16", "tensorboard_dir", "param_dtype".
# (Also the process groups a rank creates: new_group is a collective every rank must call in the same order.)
_TENSOR = re.compile(
    r"(?i)\btensors?\b|torch\.Size|shape|numel|\bdtype\b|bucket|\bsub-?groups?\b|new_group|" + _DTYPE.pattern
)
# A setting of the communication layer ("NCCL_SOCKET_IFNAME=ens5"): a rank that differs there fails to connect, a
# comm error its own lines show, or runs on with another transport.
_COMM_SETTING = re.compile(r"(?:NCCL|GLOO|TORCH_NCCL|UCX|FI|TP_SOCKET)_[A-Z_]+$")
# Two ranks' prints glued on one line when they wrote at once ("[rank 1] lr=0.001[rank 2] lr=0.01"): split before
# a rank tag that does not start the line.
_GLUED_TAG = re.compile(r"(?<=\S)(?=\[(?:rank|RANK|Rank) ?\d{1,5}\] )")
_GLUED_WORD = re.compile(r"\[(?:rank|RANK|Rank)")  # (a quick test first: the split tries every position)
# A rank's first line for a facet: its values, and where it is (source id, line number, the normalised line).
_Said = tuple[tuple[str, ...], int, int, Line]


@dataclass
class _Seen:
    """Texts read so far, each by its template: its digits read as 0 but for those of `_VALUE_DIGITS`, with what
    else its facets depend on (`context`). A text whose template was seen says the facets read then."""

    spans: dict[tuple[object, ...], list[tuple[int, int]]] = field(default_factory=dict)
    templates: set[tuple[object, ...]] = field(default_factory=set)

    def first(self, text: str, *context: object) -> bool:
        """Whether `text` is the first of its template (and remember it)."""
        blind = (text.translate(MASK_TEXT), *context)
        # `_VALUE_DIGITS` reads a digit as any digit, so texts of one blind template have their value digits at the
        # same places: found once per template, then sliced.
        spans = self.spans.get(blind)
        if spans is None:
            spans = self.spans[blind] = [m.span() for m in _VALUE_DIGITS.finditer(text)]
        template = (blind, *(text[start:end] for start, end in spans))
        if template in self.templates:
            return False
        self.templates.add(template)
        return True


@dataclass
class _Read:
    """The templates read so far (see `_read_line`): of normalised lines, and of whole lines as read, before they
    are split at glued rank tags and normalised (most of a line's cost)."""

    lines: _Seen = field(default_factory=_Seen)
    wholes: _Seen = field(default_factory=_Seen)

    def repeats(self, whole: str, labelled: re.Match[str] | None) -> bool:
        """Whether `whole` repeats a line read before, so that its facets are those read then. Its prefixes (a
        timestamp, a tee tag) are cut by `normalise` and its glued rank tags split whatever their digits, and a digit
        kept in the text is one of `_VALUE_DIGITS` here as after. A line of NCCL's (it keeps that prefix) is not
        remembered: its addresses and timings make each unique."""
        return not NCCL_RECORD.match(whole) and not self.wholes.first(whole, labelled[1] if labelled else None)


def _facets(
    text: str, label: int | None = None, one_node: bool = False
) -> tuple[int, list[tuple[str, tuple[str, ...], str]]] | None:
    """The line's rank and what it says, as (facet, values, line) triples: one per "key=value" setting where the
    line has them (its other settings may be the rank's own), else the whole line's numbers. None for a line that
    names no rank (in its text, its local rank where the logs are one node's, or by the task label `srun --label`
    put before it) or says only what varies."""
    m = _RANK_IN_TEXT.search(text)
    if m is None and label is None and one_node:
        m = _LOCAL_RANK_IN_TEXT.search(text)
    if m is not None:
        rank, rest = int(m.group(1)), text[: m.start(1)] + "R" + text[m.end(1) :]
    elif label is not None:
        rank, rest = label, text
    else:
        return None
    rest = _CLOCK.sub(" ", rest)  # the time each rank printed the line is its own
    rest = _LOGGER_AFTER_TAG.sub("R] ", rest)  # "[rank3] train: creating ...": the logger's name is no setting
    # A progress word with its count ("step 8:", "epoch=3") pins the line to that moment: the same line at the same
    # step is compared across ranks (what each rank fed a collective then). Its digits become letters so that they
    # stay in the template and are no value.
    pinned = _PINNED.sub(lambda m: "<" + m[0].rstrip(" :,").translate(_DIGITS_AS_LETTERS) + ">", rest)
    # The element types a line names are compared on their own (at that step), whatever else it says: a step's
    # count may be the rank's share of an uneven split, a shard's size its own; a tensor's type is neither.
    template = " ".join(_NUMBER.sub("0", pinned).split())
    found_dtypes = tuple(_DTYPE.findall(rest))
    dtypes = [(template + DTYPE_FACET, found_dtypes, text)] if found_dtypes else []
    # Other free words about progress make a line of the loop; a setting named so ("gradient_accumulation_steps 2")
    # is only left out.
    if _DYNAMIC.search(_SPACED_SETTING.sub(" ", _SETTING.sub(" ", _PINNED.sub(" ", rest)))):
        return (rank, dtypes) if dtypes else None
    loop = pinned != rest
    rest = pinned
    if _CPP_SOURCE.search(rest):  # a library's own C++ log line (gloo's retries, c10d's internals), not a setting
        return (rank, dtypes) if dtypes else None
    # Both spellings: "ds config: micro_batch 8 gradient_accumulation_steps 2" has a "key: word" and spaced settings.
    found = _SETTING.findall(rest) + _SPACED_SETTING.findall(rest)
    settings = [
        (k, v)
        for k, v in found
        if (_BOOLEAN.match(v) or not _VARYING_KEY.search(_PER_UNIT.sub("", k)))
        and not _DYNAMIC_KEY.match(k)
        and not _RANK_TAG_VALUE.match(v)
    ]
    if settings:
        # The same line on every rank whatever its settings' values, words included ("lr_schedule=constant").
        skeleton = " ".join(_NUMBER.sub("0", _SETTING.sub(r"\1=", rest)).split())
        # (At a step of the loop they are what the rank computed then, "counts=[5, 6, 10, 11]": no settings.)
        facets: list[tuple[str, tuple[str, ...], str]] = [
            (f"{LOOP_FACET if loop else ''}{skeleton} | {k}", (v,), text) for k, v in settings
        ]
        # On a line of settings, numbers outside them ("ds config: micro_batch 8 ... zero stage 1") are settings too,
        # compared together (words with a slash left out).
        # Beside a single setting ("fsdp2: hidden 96, 14986 sharded params", where "fsdp2: hidden" reads as one)
        # they may be data a rank computed: compared only where they split the ranks by node.
        bare = _SLASHED.sub(" ", _SPACED_SETTING.sub(" ", _SETTING.sub(" ", rest)))
        if not _VARYING.search(bare) and (values := tuple(_NUMBER.findall(bare))):
            mark = " #" if len(settings) >= 2 else BY_NODE_ONLY
            facets.append((f"{LOOP_FACET if loop else ''}{skeleton}{mark}", values, text))
        return rank, facets + dtypes
    # (A line pinned to a step is compared whatever its words: its values only ever name the rank of a size check
    # that names none, and at one step a majority that agrees on a count of tokens or samples is one.)
    if _VARYING.search(rest) and not loop:
        return (rank, dtypes) if dtypes else None
    values = tuple(_NUMBER.findall(rest))
    return (rank, [((LOOP_FACET if loop else "") + template, values, text), *dtypes]) if values else None


def _pair_differs(facet: str, rank: int, mine: _Said, rank0: _Said) -> bool:
    """Whether a setting that rank `rank` and rank 0 alone print differs between them for another reason than the
    rank itself: on a line of settings (two or more) about one rank, not named for the rank, node or process, and
    not a value derived from the rank (a seed offset by it, a host named after it)."""
    if " | " not in facet or _OWN_KEY.search(facet.rsplit(" | ", 1)[1]):
        return False
    text = mine[3].text
    if len(_SETTING.findall(text)) < 2 or len({m.group(1) for m in _RANK_IN_TEXT.finditer(text)}) > 1:
        return False
    (value,), (value0,) = mine[0], rank0[0]
    if value == value0 or value.replace(str(rank), "0") == value0:
        return False
    try:
        return float(value) - float(value0) != rank
    except ValueError:
        return True


def _read_line(
    raw: str,
    n: int,
    sid: int,
    labelled: re.Match[str] | None,
    first: dict[str, dict[int, _Said]],
    about: dict[str, str],
    one_node: bool,
    read: _Read,
) -> None:
    """Record the facets one rank's line says (its first line for each facet counts).

    A line that repeats one already read, its numbers aside (but for those in `_VALUE_DIGITS`), says the same facets
    for the same rank, whose first values are kept already: it is not read again. Each collective's fingerprint under
    TORCH_DISTRIBUTED_DEBUG=DETAIL would otherwise be read in full, a fifth of a millisecond each.
    """
    # NCCL's own records (`normalise` keeps their prefix, so a line that starts with one is one): its environment
    # is LS405's, its timings vary.
    if NCCL_RECORD.match(raw):
        return
    line = normalise(raw)
    if NCCL_RECORD.match(line.text):
        return
    label = int(labelled[1]) if labelled and line.prefixes[:1] == ("srun_label",) else None
    if not read.lines.first(line.text, label, line.grank):
        return
    facets = _facets(line.text, label, one_node)
    if facets is None:
        return
    rank, said = facets
    if line.grank is not None and line.grank != rank:
        return  # a line about another rank ("[rank0]: waiting for rank 3")
    for facet, values, what in said:
        first[facet].setdefault(rank, (values, sid, n, line))
        about[facet] = what


def rank_value_differences(sources: list[Source], openers: dict[str, Callable[[], IO[bytes]]]) -> list[Event]:
    """Event rows (one per differing rank) for a rank whose values of a per-rank line differ from all its peers'."""
    first: dict[str, dict[int, _Said]] = defaultdict(dict)
    about: dict[str, str] = {}
    # A rank's own file before a console: the console's tee copy of a line is dropped when the file has it.
    order = sorted(range(len(sources)), key=lambda sid: sources[sid].role == "console")
    one_node = len({_node(src) for src in sources}) <= 1
    read = _Read()
    for sid in order[:MAX_SOURCES]:
        src = sources[sid]
        if src.path not in openers or src.role == "error_json":
            continue
        try:
            with openers[src.path]() as handle:
                head = handle.read(HEAD_BYTES).decode("utf-8", errors="replace").splitlines()
        except READ_ERRORS:
            continue
        for n, whole in enumerate(head, 1):
            # Most lines name no rank: skip them before normalising (a colour code could split the word, so a
            # line with one is always normalised).
            labelled = _SRUN_LABEL.match(whole)
            if "\x1b" not in whole and "rank" not in whole.lower() and labelled is None:
                continue
            if read.repeats(whole, labelled):
                continue
            for raw in _GLUED_TAG.split(whole) if _GLUED_WORD.search(whole) else (whole,):
                _read_line(raw, n, sid, labelled, first, about, one_node, read)
    rows: list[Event] = []
    # One event per rank, its first differing line, and one more where that was a step's value: a value a rank
    # computed at a step only names a failure's rank, a setting or tensor that differs is a finding of its own.
    seen: set[tuple[int, bool]] = set()
    for facet, per_rank in first.items():
        # A setting is about a tensor when its own name or value says so ("numel=3786" beside "shard_align=64" on a
        # line of settings: the alignment is the setting that differs); a line's numbers when the line says so.
        key = facet.rsplit(" | ", 1)[1] if " | " in facet else ""
        said = f"{key} {' '.join(next(iter(per_rank.values()))[0])}" if key else about[facet]
        about_what = "tensor" if _TENSOR.search(said) else "setting"
        if facet.startswith(LOOP_FACET):
            about_what = STEP_VALUE
        if about_what == "setting" and _COMM_SETTING.match(facet.rsplit(" | ", 1)[-1]):
            about_what = "comm_setting"
        if facet.endswith(BY_NODE_ONLY):
            if about_what != "setting" or (by_node := _node_split(per_rank, sources)) is None:
                continue
            common, odd = by_node
        elif len(per_rank) == 2 and about_what in ("setting", "comm_setting") and 0 in per_rank:
            # Two ranks and no majority: the one that is not rank 0 (whose parameters and config the others take)
            # differs from it (rule LS409).
            (other,) = set(per_rank) - {0}
            if not _pair_differs(facet, other, per_rank[other], per_rank[0]):
                continue
            common, about_what, odd = per_rank[0][0], "pair_setting", [other]
        elif len(per_rank) < MIN_RANKS:
            continue
        else:
            common, count = Counter(v for v, *_ in per_rank.values()).most_common(1)[0]
            if count == len(per_rank) - 1:
                odd = [next(r for r, (v, *_) in per_rank.items() if v != common)]
            elif about_what == "setting" and (by_node := _node_split(per_rank, sources)):
                common, odd = by_node
            elif facet.endswith(DTYPE_FACET) and (by_node := _node_split(per_rank, sources)):
                # Each node's ranks hold tensors of their node's type: a setting of the node's, not one rank's tensor.
                (common, odd), about_what = by_node, "setting"
            else:
                continue
        for rank in odd:
            if (rank, about_what == STEP_VALUE) in seen:
                continue
            _, sid, n, line = per_rank[rank]
            peer = next(p for r, (v, _, _, p) in per_rank.items() if v == common)
            fields = {
                "differs": line.text.strip()[:200],
                "peers_print": peer.text.strip()[:200],
                "about": about_what,
                "rank": rank,
            }
            row = Extractor._row(sid, sources[sid], n, KIND, "warning", None, line, fields)
            row["grank"] = rank
            rows.append(row)
            seen.add((rank, about_what == STEP_VALUE))
    return rows


def _node_split(per_rank: dict[int, _Said], sources: list[Source]) -> tuple[tuple[str, ...], list[int]] | None:
    """A setting whose two values split the ranks by node (a stale config or environment on one node): rank 0's
    value and the ranks of the nodes that printed the other one. None unless every rank's line comes from a known
    node, there are two values, and no node printed both."""
    node_of = {rank: _node(sources[said[1]]) for rank, said in per_rank.items()}
    values = {said[0] for said in per_rank.values()}
    if 0 not in per_rank or len(values) != 2 or None in node_of.values():
        return None
    nodes_by_value: dict[tuple[str, ...], set[str | None]] = defaultdict(set)
    for rank, said in per_rank.items():
        nodes_by_value[said[0]].add(node_of[rank])
    first, second = nodes_by_value.values()
    if first & second:
        return None
    common = per_rank[0][0]
    return common, sorted(r for r, said in per_rank.items() if said[0] != common)


def _node(src: Source) -> str | None:
    """The node a source is from: its torchrun run folder, or for a launcher's console the folder that holds it (each
    agent's console in its node's folder)."""
    if src.node is not None or src.role != "console":
        return src.node
    return str(PurePath(src.path).parent)
