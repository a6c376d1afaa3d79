"""The second process that reads a large input with this one (see `logscope.events.parallel`): when it is worth
starting, and the process itself with its message pipes.

Nothing here imports polars: the helper is started before this process imports the pipeline's stages, so the
two imports (about 0.3 s each) overlap.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import logscope
from logscope.ingest.sources import Inventory

# Below this the second interpreter (about 0.4 s to start and import polars) would cost more than it saves.
PARALLEL_MIN_BYTES = 128 << 20
# A group closes once it holds this much: small enough that the last groups even out the two processes' ends,
# large enough that a group of small sources fills a batch (see extract.BATCH_CHARS).
GROUP_BYTES = 8 << 20
# polars' allocator (its own jemalloc, configured by this variable) hands freed pages back to the system half a
# second after they are freed, and every batch then faults fresh pages in: on dense-8x128MB a sixth of the CPU time
# was the kernel's (1.0-1.4 s of 7.4, 350 000 page faults). jemalloc's own default, 10 s, keeps them for the next
# batches (120 000 faults, 0.5-0.85 s). Each process then holds its working set for the whole read: the peak RSS
# summed over both is up to ~80 MiB higher on dense-8x64MB, still flat with the input's size. A value the user set
# is kept.
_JEMALLOC_CONF = "_RJEM_MALLOC_CONF"
_JEMALLOC_DECAY = "dirty_decay_ms:10000"

Group = tuple[int, int]  # [start, stop) in the inventory's sources


def groups(inventory: Inventory) -> list[Group] | None:
    """Consecutive sources, each run closed once it holds GROUP_BYTES; None when the input is read in one pass:
    small, one source, one core, or archive members (an archive's decompression limit is shared by its members,
    so one reader must count them)."""
    if _cores() < 2 or len(inventory.sources) < 2 or inventory.tar_archives:
        return None
    if any(src.archive is not None or src.size is None for src, _ in inventory.sources):
        return None
    sizes = [src.size or 0 for src, _ in inventory.sources]
    if sum(sizes) < PARALLEL_MIN_BYTES:
        return None
    found: list[Group] = []
    start, held = 0, 0
    for i, size in enumerate(sizes):
        held += size
        if held >= GROUP_BYTES:
            found.append((start, i + 1))
            start, held = i + 1, 0
    if start < len(sizes):
        found.append((start, len(sizes)))
    return found


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Helper:
    """`python -c 'from logscope.events.parallel import child_main; child_main()'`, talking JSON lines: one
    message per line each way (ASCII escapes, so a message never holds a line end)."""

    def __init__(self, proc: subprocess.Popen[bytes], groups: list[Group]) -> None:
        self.proc = proc
        self.groups = groups  # how the input it was started for is shared out

    @classmethod
    def start_for(cls, inventory: Inventory) -> Helper | None:
        """A helper started now, if `inventory` is worth reading in two processes and one can be started."""
        shared = groups(inventory)
        if shared is None:
            return None
        package_root = str(Path(logscope.__file__).resolve().parents[1])  # the same logscope, wherever it lives
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        # Two processes share the cores: each polars takes half, or their thread pools fight over them (on two
        # cores, 8 x 128 MB: 10 % more CPU and 9 % more time). This process's polars is not imported yet when
        # the command line gets here; where it is, the setting has no effect on it.
        threads = str(max(1, _cores() // 2))
        env.setdefault("POLARS_MAX_THREADS", threads)
        env.setdefault(_JEMALLOC_CONF, _JEMALLOC_DECAY)
        if "polars" not in sys.modules:
            os.environ.setdefault("POLARS_MAX_THREADS", threads)
            os.environ.setdefault(_JEMALLOC_CONF, _JEMALLOC_DECAY)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", "from logscope.events.parallel import child_main; child_main()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                # Its own session: a Ctrl-C at the terminal reaches only this process, which stops the helper,
                # instead of interrupting the helper too and printing its KeyboardInterrupt traceback.
                start_new_session=True,
            )
        except OSError:  # no interpreter to start: the input is read here alone
            return None
        return cls(proc, shared)

    def send(self, message: dict[str, Any]) -> None:
        """Raises OSError (BrokenPipeError) once the helper is gone."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def messages(self) -> Iterator[dict[str, Any]]:
        """What the helper sends, until it exits; ValueError on a line that is not JSON."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message: dict[str, Any] = json.loads(line)
            yield message

    def wait(self) -> int:
        return self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # its stdin's buffer could not be flushed: the helper is gone
                    stream.close()
