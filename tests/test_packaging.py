"""A wheel (not only an editable install) carries the built-in rule pack, the signature catalogue and the templates."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]


def test_packages_listed_in_pyproject_are_the_package_folders() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "logscope").rglob("__init__.py")}
    assert listed == folders | {"logscope.rulepack"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("logscope-*.whl")
    return built


def test_wheel_ships_every_rule_file_and_the_data_files(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    rules = {p.name for p in (REPO / "rules").glob("*.yaml")}
    assert {n.removeprefix("logscope/rulepack/") for n in names if n.startswith("logscope/rulepack/")} == rules
    for data in (
        "logscope/events/signatures.yaml",
        "logscope/rules/schema.json",
        "logscope/report/templates/report.html.j2",
    ):
        assert data in names


def test_installed_wheel_loads_the_rule_pack_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = (
        "from logscope.rules.loader import BUILTIN_RULES, load_rules; "
        "rules = load_rules(); print(BUILTIN_RULES); print(len(rules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,  # not the checkout, so nothing is found by accident
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    where, count = done.stdout.split()
    assert Path(where) == target / "logscope" / "rulepack"
    assert int(count) == len(list((REPO / "rules").glob("*.yaml")))
    assert not re.search(r"Traceback", done.stderr)
