"""Helpers for the reliability tests: real fixture trees copied into tmp_path, the CLI run as a subprocess."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
# A real torchrun run (torch 2.13.0+cpu, gloo): rank 1 skips an all_reduce, rank 0 times out (scenario.yaml).
RUN = REPO / "fixtures/real/runs/03_skip_allreduce_rank1_stall_gloo_timeout"
NODE = "logs/none_97seex9t"
RANK0 = f"{NODE}/attempt_0/0"
RANK1 = f"{NODE}/attempt_0/1"
CLI_TIMEOUT_S = 180
# torchrun's banner rule ("W1202 ... run.py:874] *****..."): a real line that is no event, to fill big inputs.
QUIET_LINE = next(line for line in (RUN / "console.log").read_bytes().splitlines(keepends=True) if b"*****" in line)


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def diagnosis(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout)
        return data

    @property
    def notes(self) -> list[str]:
        notes: list[str] = self.diagnosis["notes"]
        return notes


def cli(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = CLI_TIMEOUT_S
) -> Result:
    """`python -m logscope ...` in a subprocess; never a traceback, whatever it was given."""
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = os.pathsep.join([str(REPO), full_env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, "-m", "logscope", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=cwd or REPO,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return Result(proc.returncode, proc.stdout, proc.stderr)


def analysed(path: Path, *args: str | Path, **kwargs: Any) -> Result:
    """Analyse as JSON on stdout and check the run produced a diagnosis (exit 0 or 1)."""
    result = cli("analyze", path, "-f", "json", *args, **kwargs)
    assert result.rc in (0, 1), result.stderr
    return result


def refused(result: Result, fragment: str) -> None:
    """Exit 2 with exactly one line on stderr, `logscope: ...`, that says what was wrong."""
    assert result.rc == 2, (result.rc, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("logscope: "), lines[0]
    assert fragment in lines[0], lines[0]


def has_note(result: Result, *fragments: str) -> str:
    """The first note that holds every fragment (the assertion names all notes when none does)."""
    for note in result.notes:
        if all(f in note for f in fragments):
            return note
    raise AssertionError(f"no note with {fragments!r} in {result.notes!r}")


def tree_digest(path: Path) -> dict[str, tuple[str, str]]:
    """Every entry under `path` (itself included) by lstat: type, and content hash or link target.
    Never opens a FIFO and never follows a link, so it is safe on the damaged trees."""
    entries = [path, *path.rglob("*")] if path.is_dir() and not path.is_symlink() else [path]
    out: dict[str, tuple[str, str]] = {}
    for entry in entries:
        rel = entry.relative_to(path).as_posix() if entry != path else "."
        st = entry.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(entry))
        elif stat.S_ISREG(st.st_mode):
            digest = hashlib.sha256(entry.read_bytes()).hexdigest()
            out[rel] = ("file", f"{digest}:{st.st_mode:o}:{st.st_mtime_ns}")
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", f"{st.st_mode:o}")
        else:
            out[rel] = ("special", f"{st.st_mode:o}")
    return out


@pytest.fixture
def run_copy(tmp_path: Path) -> Callable[..., Path]:
    """A writable copy of the real run (or another fixture case) under tmp_path, to damage."""

    def make(name: str = "run", source: Path = RUN) -> Path:
        dest = tmp_path / name
        shutil.copytree(source, dest, symlinks=True)
        for p in [dest, *dest.rglob("*")]:
            if not p.is_symlink():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
        return dest

    return make


@pytest.fixture(scope="session")
def baseline() -> dict[str, Any]:
    """The diagnosis of the undamaged run: what a damaged copy is compared with."""
    return analysed(RUN).diagnosis
