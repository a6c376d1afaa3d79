"""Where each requested format goes: stdout, a named file, or a folder; every file written atomically."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from logscope.errors import OutputError
from logscope.ingest.sources import classify
from logscope.model import Analysis
from logscope.outputs import is_inside, write_atomic


@dataclass
class Plan:
    files: list[tuple[str, Path]] = field(default_factory=list)  # (format, path)
    stdout_format: str | None = "text"


def plan_outputs(
    input_path: Path,
    formats: list[str],
    outputs: list[str],
    allow_inside_input: bool,
    format_for_path: Callable[[str], str | None],
) -> Plan:
    from logscope.report import FORMATS

    plan = Plan()
    folder = None
    for out in outputs:
        path = Path(out)
        if path.is_dir() or out.endswith("/"):
            folder = path
            continue
        fmt = format_for_path(out)
        if fmt is None:
            if len(formats) == 1:
                fmt = formats[0]
            else:
                raise OutputError(
                    f"cannot tell the format of {out}: use an extension ({', '.join(FORMATS)}) or --format"
                )
        plan.files.append((fmt, path))
    if folder is not None:
        if folder.exists() and not folder.is_dir():
            raise OutputError(f"cannot write to {folder}: it is a file, not a folder")
        for fmt in formats or ["json", "html"]:
            plan.files.append((fmt, folder / f"logscope{FORMATS[fmt][1]}"))
        plan.stdout_format = None
    elif plan.files:
        named = {fmt for fmt, _ in plan.files}
        rest = [f for f in formats if f not in named]
        plan.stdout_format = rest[0] if len(rest) == 1 else None
        if len(rest) > 1:
            raise OutputError("several formats but one output file: give -o per format or an output folder")
    else:
        if len(formats) > 1:
            raise OutputError("several formats need an output folder (-o DIR) or one -o file per format")
        plan.stdout_format = formats[0] if formats else "text"
    for _, path in plan.files:
        if _overwrites_input(path, input_path):
            raise OutputError(f"refusing to overwrite {path}: it is part of the input")
        inside = is_inside(path.parent if path.parent != Path("") else Path("."), input_path)
        if inside and input_path.is_dir() and not allow_inside_input:
            raise OutputError(f"refusing to write {path} inside the input tree (pass --allow-output-in-input)")
        parent = path.parent if str(path.parent) else Path(".")
        blocking = next((p for p in (parent, *parent.parents) if p.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise OutputError(f"cannot write {path}: {blocking} is a file, not a folder")
    return plan


def _overwrites_input(path: Path, input_path: Path) -> bool:
    """The input file itself, or a log in the input tree: never replaced, not even when output is allowed
    inside the input."""
    if not path.exists():
        return False
    if path.resolve() == input_path.resolve():
        return True
    if not (input_path.is_dir() and is_inside(path, input_path)):
        return False
    return classify(path.resolve().relative_to(input_path.resolve()).as_posix(), None) is not None


def write_outputs(
    plan: Plan, analysis: Analysis, renderer: Callable[[str], Callable[[Analysis], str]], quiet: bool = False
) -> None:
    """Render each format once and write it; a missing output folder is created (as pytest's --junitxml does), and
    each file written is named on stderr unless quiet."""
    rendered = {
        fmt: renderer(fmt)(analysis)
        for fmt in {f for f, _ in plan.files} | ({plan.stdout_format} if plan.stdout_format else set())
    }
    for fmt, path in plan.files:
        parent = path.parent if str(path.parent) else Path(".")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot write {path}: cannot create folder {parent}: {exc.strerror or exc}") from None
        write_atomic(path, rendered[fmt])
        if not quiet:
            sys.stderr.write(f"logscope: wrote {fmt} to {path}\n")
    if plan.stdout_format:
        sys.stdout.write(rendered[plan.stdout_format])
        sys.stdout.flush()
