"""What every start works out again from the same text, kept between runs: the parsed YAML of the signature
catalogue and the rule files, and the prefilters' required literals.

On a small run start-up is all of the cost, and these are a seventh of it (~90 ms of ~0.65 s on 2 cores); read
back, they cost a few milliseconds. One JSON file in the user's cache folder holds them, each under a hash of the
text it was worked out from (and, for the literals, of the code that works them out), so an edited rule file or
catalogue is read again and never served stale. JSON, never pickle: reading the cache evaluates nothing. A cache
that is missing, unreadable or corrupt is ignored, and one that cannot be written is left alone: the answer is
always the same, only slower. The folder is $LOGSCOPE_CACHE_DIR (empty: no cache), else $XDG_CACHE_HOME/logscope,
else ~/.cache/logscope.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from logscope import __version__
from logscope.errors import OutputError
from logscope.outputs import write_atomic

CACHE_DIR_ENV = "LOGSCOPE_CACHE_DIR"
# Entries kept at most: a rule folder edited many times leaves old keys behind, and those not used by this process
# go first once there are more.
MAX_ENTRIES = 4096

T = TypeVar("T")


def cache_dir() -> Path | None:
    """Where the cache lives, or None when $LOGSCOPE_CACHE_DIR is set empty or there is no home (no cache)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured is not None:
        return Path(configured) if configured else None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    home = os.path.expanduser("~")
    # Only an absolute folder (the XDG rule): with no home ("~" unexpanded) no cache, never a folder in the cwd,
    # which may be the logs' own.
    base = xdg if os.path.isabs(xdg) else os.path.join(home, ".cache") if os.path.isabs(home) else None
    return Path(base) / "logscope" if base is not None else None


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def text_key(namespace: str, text: str) -> str:
    return f"{namespace}:{text_hash(text)}"


class Store:
    """The cache file's entries, read once per process and written back at exit when something was added."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, str] = self._read() if path is not None else {}
        self._used: set[str] = set()
        self._added = False

    def _read(self) -> dict[str, str]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_bytes())
        except (OSError, ValueError):  # missing, unreadable, half-written by another tool, not JSON
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, str)}

    def value(self, key: str, compute: Callable[[], T], encode: Callable[[T], object] = lambda v: v) -> object:
        """The value stored under `key`, else `encode(compute())`, stored when JSON gives it back unchanged. Each
        call returns a fresh copy (callers may change what they get); the caller turns it back into its own type."""
        self._used.add(key)
        stored = self._entries.get(key)
        if stored is not None:
            try:
                return json.loads(stored)
            except ValueError:  # an entry changed by hand: worked out again below
                pass
        value = encode(compute())
        if self.path is not None and (text := _as_json(value)) is not None:
            self._entries[key] = text
            if not self._added:
                atexit.register(self.save)
            self._added = True
        return value

    def save(self) -> None:
        """Write the entries back, atomically (a reader sees the old file or the new one, never half of one)."""
        if self.path is None or not self._added:
            return
        self._added = False
        entries = self._entries
        if len(entries) > MAX_ENTRIES:
            entries = {k: v for k, v in entries.items() if k in self._used}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(entries, separators=(",", ":")))
        except (OSError, OutputError):  # a read-only home, a full disk: the next run works it out again
            return


def _as_json(value: object) -> str | None:
    """`value` as JSON text, or None when JSON would not give it back as it is (YAML can hold keys and scalars
    that JSON cannot: those are not stored)."""
    try:
        text = json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return text if json.loads(text) == value else None


_stores: dict[tuple[str | None, ...], Store] = {}


def store() -> Store:
    """This process's store for the cache folder in effect now (tests point it elsewhere per test). Found by the
    settings that name the folder: working the folder out costs ~20 µs, and a start asks ~230 times."""
    settings = (os.environ.get(CACHE_DIR_ENV), os.environ.get("XDG_CACHE_HOME"), os.environ.get("HOME"))
    found = _stores.get(settings)
    if found is None:
        folder = cache_dir()
        found = _stores[settings] = Store(folder / f"derived-{__version__}.json" if folder is not None else None)
    return found


def file_key(path: str) -> str:
    """A hash of a module's source, for entries that the code in it works out: edited code, new entries."""
    try:
        return hashlib.blake2b(Path(path).read_bytes(), digest_size=8).hexdigest()
    except OSError:  # no source beside the module (a zip import): a key no run repeats, so nothing stale is read
        return os.urandom(8).hex()
