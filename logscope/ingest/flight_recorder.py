"""Find PyTorch Flight Recorder dumps and read them without trusting them.

A rank that times out with TORCH_NCCL_DUMP_ON_TIMEOUT=1 (and a trace buffer) writes `<prefix><rank>`, the prefix
from TORCH_FR_DUMP_TEMP_FILE (default `/tmp/nccl_trace_rank_`): a pickle by default, JSON when asked. A dump holds
only dicts, lists, tuples, strings, numbers, booleans and None, so it is read by a small interpreter of exactly
those pickle opcodes (`pickletools.genops` decodes them; nothing here calls `pickle.load`): an opcode that would
fetch a global or call one is refused, and the file with it, in one note naming what it asked for. Nothing from a
dump is ever imported or called.
"""

from __future__ import annotations

import io
import json
import os
import pickletools
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from logscope.errors import READ_ERRORS, InputError
from logscope.values import int_or_none

# The name torch gives a dump by default; with another TORCH_FR_DUMP_TEMP_FILE prefix, any name ending in the
# rank is a candidate and its first bytes decide.
DEFAULT_NAME = re.compile(r"nccl_trace_rank_\d+(?:\.json)?")
_CANDIDATE_NAME = re.compile(r"(?P<prefix>.*?)(?P<rank>\d+)(?P<ext>\.json|\.pkl|\.pickle)?")
SNIFF_BYTES = 64 * 1024
MAX_DUMP_BYTES = 64 * 1024 * 1024  # torch's default buffer (2000 entries with stacks) is a few MiB
MAX_DUMPS = 4096
_PICKLE_KEYS = (b"entries", b"pg_config", b"pg_status")
_JSON_KEYS = (b'"entries"', b'"pg_config"', b'"pg_status"')

# Opcodes that fetch or call code (globals, the copyreg extension registry, persistent ids), or build objects
# through a class: a dump never needs them.
_CODE_OPCODES = frozenset(
    {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BUILD", "EXT1", "EXT2", "EXT4"}
    | {"PERSID", "BINPERSID"}
)
_SCALARS = frozenset(
    {"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4", "BINFLOAT", "FLOAT"}
    | {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}
    | {"BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"}
)


class RefusedDump(ValueError):
    """A file that is not a plain-data dump (it asks for a global, or is not a dump at all)."""


@dataclass(frozen=True)
class DumpFile:
    """A dump found under the input: its name as shown to the user and how to open it."""

    path: str
    open: Callable[[], IO[bytes]]


@dataclass
class Frame:
    name: str
    filename: str
    line: int | None


@dataclass
class FlightEntry:
    """One record of a rank's ring buffer: a collective or point-to-point op as that rank saw it."""

    index: int  # position in the dump's entry list (what the evidence cites)
    record_id: int | None
    pg: str  # process group name ("0" is the default group)
    pg_desc: str
    seq: int | None  # collective_seq_id: the SeqNum of the logs
    is_p2p: bool
    op: str  # profiling name, "nccl:all_reduce"
    input_sizes: list[Any]
    output_sizes: list[Any]
    input_dtypes: list[str]
    state: str  # scheduled | started | completed
    timeout_ms: int | None
    frames: list[Frame]


@dataclass
class FlightDump:
    rank: int
    path: str
    format: str  # pickle | json
    version: str
    comm_lib_version: str | None
    entries: list[FlightEntry]
    pg_ranks: dict[str, list[int]]  # process group name -> its global ranks (pg_config)
    pg_desc: dict[str, str]
    pg_status: dict[str, dict[str, int | None]]  # last_enqueued/started/completed_collective per group
    truncated: bool = False


@dataclass
class FlightRecorderRead:
    dumps: list[FlightDump] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def rank_of(name: str) -> int | None:
    """The rank a dump's file name ends in (torch appends it to the prefix), or None."""
    m = _CANDIDATE_NAME.fullmatch(name.rsplit("/", 1)[-1])
    return int(m["rank"]) if m else None


def is_candidate(name: str) -> bool:
    """A name a dump can have: torch's default, or any name ending in a rank."""
    return _CANDIDATE_NAME.fullmatch(name.rsplit("/", 1)[-1]) is not None


def is_dump_head(name: str, head: bytes) -> bool:
    """Whether a file is a Flight Recorder dump: torch's default name, or a name ending in a rank whose first bytes
    are a pickle or JSON object naming a dump's keys."""
    base = name.rsplit("/", 1)[-1]
    if DEFAULT_NAME.fullmatch(base):
        return True
    if not is_candidate(base):
        return False
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return any(k in head for k in _PICKLE_KEYS)
    return head.lstrip()[:1] == b"{" and any(k in head for k in _JSON_KEYS)


def is_dump(name: str, open_file: Callable[[], IO[bytes]]) -> bool:
    """`is_dump_head` for a file not yet open: opened only when its name alone does not decide."""
    if DEFAULT_NAME.fullmatch(name.rsplit("/", 1)[-1]) or not is_candidate(name):
        return is_dump_head(name, b"")
    try:
        with open_file() as handle:
            return is_dump_head(name, handle.read(SNIFF_BYTES))
    except READ_ERRORS:
        return False


def in_folder(folder: Path) -> list[DumpFile]:
    """Every dump under a folder given with --flight-recorder (any depth, any prefix)."""
    if not folder.is_dir():
        raise InputError(f"--flight-recorder {folder}: not a folder (give the folder the dumps were written to)")
    found: list[DumpFile] = []
    for dirpath, _, filenames in sorted(os.walk(folder)):
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full) and is_dump(name, _opener(full)):
                found.append(DumpFile(os.path.relpath(full, folder.parent), _opener(full)))
    return found


def bytes_opener(data: bytes) -> Callable[[], IO[bytes]]:
    def open_bytes() -> IO[bytes]:
        return io.BytesIO(data)

    return open_bytes


def _opener(path: str) -> Callable[[], IO[bytes]]:
    def open_file() -> IO[bytes]:
        return open(path, "rb")

    return open_file


def zip_opener(archive: Path, member: str) -> Callable[[], IO[bytes]]:
    def open_member() -> IO[bytes]:
        with zipfile.ZipFile(archive) as zf:  # a dump is read once: no need to keep the archive open
            return io.BytesIO(zf.read(member))

    return open_member


# ---------------------------------------------------------------------------------------------- reading
def read_dumps(files: list[DumpFile]) -> FlightRecorderRead:
    """Read every dump; a file that cannot be read, or is refused, costs that file (a note), never the analysis."""
    out = FlightRecorderRead()
    if len(files) > MAX_DUMPS:
        out.notes.append(f"{len(files)} Flight Recorder dumps: read the first {MAX_DUMPS}")
        files = files[:MAX_DUMPS]
    seen: dict[int, str] = {}
    for file in files:
        shown = file.path
        rank = rank_of(shown)
        if rank is None:
            continue
        try:
            with file.open() as handle:
                data = handle.read(MAX_DUMP_BYTES + 1)
            cut = len(data) > MAX_DUMP_BYTES
            dump = parse_dump(data[:MAX_DUMP_BYTES], rank, shown)
        except RefusedDump as exc:
            out.notes.append(f"{shown}: Flight Recorder dump refused: {exc}")
            continue
        except READ_ERRORS as exc:
            out.notes.append(f"{shown}: Flight Recorder dump unreadable ({exc})")
            continue
        if cut:
            dump.truncated = True
            out.notes.append(f"{shown}: Flight Recorder dump over {MAX_DUMP_BYTES >> 20} MiB: read its start only")
        elif dump.truncated:
            out.notes.append(f"{shown}: Flight Recorder dump truncated; read the {len(dump.entries)} entries before")
        if rank in seen:  # the pickle and the JSON of one rank's buffer: one is enough
            if dump.format == "pickle" and not any(d.rank == rank and d.format == "pickle" for d in out.dumps):
                out.dumps = [d for d in out.dumps if d.rank != rank]
            else:
                continue
        seen[rank] = shown
        out.dumps.append(dump)
    out.dumps.sort(key=lambda d: d.rank)
    return out


def parse_dump(data: bytes, rank: int, shown: str) -> FlightDump:
    """A dump from its bytes: JSON when it starts with `{`, otherwise the plain-data pickle interpreter."""
    if data.lstrip()[:1] == b"{":
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise RefusedDump(f"not valid JSON ({str(exc)[:80]})") from None
        truncated = False
        fmt = "json"
    else:
        raw, truncated = plain_unpickle(data)
        fmt = "pickle"
    if not isinstance(raw, dict) or not ("entries" in raw or "pg_config" in raw):
        raise RefusedDump("not a Flight Recorder dump (no entries, no pg_config)")
    return _dump(raw, rank, shown, fmt, truncated)


def plain_unpickle(data: bytes) -> tuple[Any, bool]:
    """The object a pickle of plain data builds, and whether the stream ended early (then whatever the stack held,
    so a cut dump still gives the entries before the cut). Refuses any opcode that fetches or calls code."""
    stack: list[Any] = []
    marks: list[list[Any]] = []
    memo: dict[int, Any] = {}
    pending_global: list[str] = []  # the last two strings pushed: what a STACK_GLOBAL would ask for

    try:
        for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
            name = opcode.name
            if name in _CODE_OPCODES:
                raise RefusedDump(_asked_for(name, arg, pending_global))
            if name in _SCALARS:
                stack.append(bytes(arg) if isinstance(arg, bytearray) else arg)
                if isinstance(arg, str):
                    pending_global = [*pending_global[-1:], arg]
            elif name == "NONE":
                stack.append(None)
            elif name in ("NEWTRUE", "NEWFALSE"):
                stack.append(name == "NEWTRUE")
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name == "EMPTY_SET":
                stack.append(set())
            elif name == "MARK":
                marks.append(stack)
                stack = []
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                top = tuple(stack[-n:])
                del stack[-n:]
                stack.append(top)
            elif name in ("TUPLE", "LIST", "DICT", "FROZENSET", "POP_MARK"):
                items = stack
                stack = marks.pop()
                if name == "TUPLE":
                    stack.append(tuple(items))
                elif name == "LIST":
                    stack.append(list(items))
                elif name == "DICT":
                    stack.append(dict(zip(items[::2], items[1::2], strict=True)))
                elif name == "FROZENSET":
                    stack.append(frozenset(items))
            elif name == "APPEND":
                item = stack.pop()
                stack[-1].append(item)
            elif name == "APPENDS":
                items = stack
                stack = marks.pop()
                stack[-1].extend(items)
            elif name == "SETITEM":
                value = stack.pop()
                key = stack.pop()
                stack[-1][key] = value
            elif name == "SETITEMS":
                items = stack
                stack = marks.pop()
                stack[-1].update(zip(items[::2], items[1::2], strict=True))
            elif name == "ADDITEMS":
                items = stack
                stack = marks.pop()
                stack[-1].update(items)
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[cast(int, arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[cast(int, arg)])
                if isinstance(stack[-1], str):
                    pending_global = [*pending_global[-1:], stack[-1]]
            elif name == "POP":
                stack.pop()
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "STOP":
                return stack.pop(), False
            elif name not in ("PROTO", "FRAME"):
                raise RefusedDump(f"pickle opcode {name} is not plain data")
    except RefusedDump:
        raise
    except ValueError as exc:  # pickletools' word for a stream that ends early, or for bytes that are no pickle
        if not any(word in str(exc) for word in ("exhausted", "remain", "not enough data")):
            raise RefusedDump(f"not a pickle ({str(exc)[:80]})") from None
    except (IndexError, KeyError, TypeError, AttributeError) as exc:
        raise RefusedDump(f"malformed pickle ({type(exc).__name__})") from None
    return _salvage([*[x for frame in marks for x in frame], *stack]), True


def _asked_for(name: str, arg: Any, strings: list[str]) -> str:
    if name in ("GLOBAL", "INST") and isinstance(arg, str):
        return f"it asks for the global {arg.replace(' ', '.')} (a dump holds only plain data; nothing was run)"
    if name == "STACK_GLOBAL" and len(strings) == 2:
        return f"it asks for the global {strings[0]}.{strings[1]} (a dump holds only plain data; nothing was run)"
    return f"pickle opcode {name} would build or call an object (a dump holds only plain data; nothing was run)"


def _salvage(items: list[Any]) -> dict[str, Any]:
    """What a cut pickle still holds: the top-level dict if it was started, and every entry list found."""
    top = next((x for x in items if isinstance(x, dict) and ("version" in x or "comm_lib_version" in x)), {})
    entries: list[Any] = list(top.get("entries") or [])
    for x in items:
        if isinstance(x, list) and x is not top.get("entries") and all(_entry_shaped(e) for e in x):
            entries.extend(x)
        elif _entry_shaped(x):
            entries.append(x)
    return {**top, "entries": entries}


def _entry_shaped(x: Any) -> bool:
    return isinstance(x, dict) and "profiling_name" in x and "collective_seq_id" in x


# ---------------------------------------------------------------------------------------------- schema
def _ranks(value: Any) -> list[int]:
    """pg_config's ranks: "[0, 1, 2, 3]" (a string in the dumps) or a list."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return [r for r in (int_or_none(v) for v in value) if r is not None] if isinstance(value, list | tuple) else []


def _strs(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _sizes(value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        return []
    return [[int_or_none(d) for d in s] if isinstance(s, list | tuple) else int_or_none(s) for s in value]


def _frames(value: Any) -> list[Frame]:
    if not isinstance(value, list | tuple):
        return []
    return [
        Frame(str(f.get("name", "?")), str(f.get("filename", "?")), int_or_none(f.get("line")))
        for f in value
        if isinstance(f, dict)
    ]


def _entry(index: int, e: dict[str, Any]) -> FlightEntry:
    group = e.get("process_group")
    pg, desc = (str(group[0]), str(group[1])) if isinstance(group, list | tuple) and len(group) == 2 else ("0", "")
    seq = int_or_none(e.get("collective_seq_id"))
    p2p = bool(e.get("is_p2p"))
    return FlightEntry(
        index=index,
        record_id=int_or_none(e.get("record_id")),
        pg=pg,
        pg_desc=desc,
        seq=None if p2p else seq,
        is_p2p=p2p,
        op=str(e.get("profiling_name") or "?"),
        input_sizes=_sizes(e.get("input_sizes")),
        output_sizes=_sizes(e.get("output_sizes")),
        input_dtypes=_strs(e.get("input_dtypes")),
        state=str(e.get("state") or "?"),
        timeout_ms=int_or_none(e.get("timeout_ms")),
        frames=_frames(e.get("frames")),
    )


def _dump(raw: dict[str, Any], rank: int, shown: str, fmt: str, truncated: bool) -> FlightDump:
    entries = raw.get("entries") if isinstance(raw.get("entries"), list | tuple) else []
    config = raw.get("pg_config") if isinstance(raw.get("pg_config"), dict) else {}
    if config and set(config) == {""}:  # gloo's dumps (torch 2.13) name the default group "" here, "0" elsewhere
        config = {"0": config[""]}
    status = raw.get("pg_status") if isinstance(raw.get("pg_status"), dict) else {}
    return FlightDump(
        rank=rank,
        path=shown,
        format=fmt,
        version=str(raw.get("version", "?")),
        comm_lib_version=str(raw["comm_lib_version"]) if raw.get("comm_lib_version") is not None else None,
        entries=[_entry(i, e) for i, e in enumerate(entries or []) if isinstance(e, dict)],
        pg_ranks={str(k): _ranks(v.get("ranks")) for k, v in (config or {}).items() if isinstance(v, dict)},
        pg_desc={str(k): str(v.get("desc", "")) for k, v in (config or {}).items() if isinstance(v, dict)},
        pg_status={
            str(k): {
                "enqueued": int_or_none(v.get("last_enqueued_collective")),
                "started": int_or_none(v.get("last_started_collective")),
                "completed": int_or_none(v.get("last_completed_collective")),
            }
            for k, v in (status or {}).items()
            if isinstance(v, dict)
        },
        truncated=truncated,
    )
