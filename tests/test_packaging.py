"""A wheel (not only an editable install) carries the built-in rule pack, the signature catalogue and the templates."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_packages_listed_in_pyproject_are_the_package_folders() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "logscope").rglob("__init__.py")}
    data = {
        ".".join(d.relative_to(REPO).parts)
        for p in (REPO / "logscope").rglob("templates")
        for d in (p, *p.rglob("*"))
        if d.is_dir() and d.name != "__pycache__"
    }
    assert listed == folders | data | {"logscope.rulepack"}


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel, and what the build printed (-v: the backend's own warnings)."""
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (built,) = out.glob("torch_logscope-*.whl")
    return built, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(build: tuple[Path, str]) -> Path:
    return build[0]


def test_the_build_prints_no_packaging_warning(build: tuple[Path, str]) -> None:
    printed = build[1]
    assert "running bdist_wheel" in printed or "Building wheel" in printed, "the backend's output is shown"
    for warning in ("Package would be ignored", "SetuptoolsDeprecationWarning", "License classifiers"):
        assert warning not in printed, warning


def test_wheel_ships_every_rule_file_and_the_data_files(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    rules = {p.name for p in (REPO / "rules").glob("*.yaml")}
    assert {
        n.removeprefix("logscope/rulepack/") for n in names if n.startswith("logscope/rulepack/") and "/cases/" not in n
    } == rules
    for data in (
        "logscope/events/signatures.yaml",
        "logscope/rules/schema.json",
        "logscope/report/templates/report.html.j2",
        "logscope/report/templates/sections/verdict.html.j2",
    ):
        assert data in names


def test_wheel_carries_every_case_the_rules_name(wheel: Path) -> None:
    from logscope.rules.loader import load_rules

    names = set(zipfile.ZipFile(wheel).namelist())
    for rule in load_rules():
        for kind in ("positive", "negative"):
            for case in rule.tests.get(kind, []):
                here = REPO / case["path"]
                files = [here] if here.is_file() else [p for p in here.rglob("*") if p.is_file()]
                assert files, case["path"]
                for f in files:
                    assert f"logscope/rulepack/cases/{f.relative_to(REPO).as_posix()}" in names, (rule.id, f)


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def test_rules_test_passes_from_an_installed_wheel(installed: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "logscope", "rules", "test"],
        cwd=tmp_path,  # not the checkout: the cases must come from the wheel
        env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    passed = re.search(r"^(\d+) passed, 0 failed$", done.stdout, re.M)
    assert passed and int(passed.group(1)) > 100, done.stdout[-500:]
    assert (
        str(installed)
        in subprocess.run(
            [sys.executable, "-c", "import logscope.rules.testing as t; print(t.PACKAGED_CASES)"],
            cwd=tmp_path,
            env={"PYTHONPATH": str(installed), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


def test_installed_wheel_loads_the_rule_pack_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    target = installed
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


def test_every_install_line_in_the_docs_installs_this_distribution() -> None:
    """`logscope` on the package index is another project: no doc may tell anyone to install it."""
    name = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["name"]
    assert name == "torch-logscope"
    lines = [
        (doc.name, line)
        for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for line in doc.read_text(encoding="utf-8").splitlines()
        if re.search(r"\bpip install\b", line)
    ]
    assert len(lines) >= 4
    for doc, line in lines:
        installs = re.sub(r".*?\bpip install\b", "", line, count=1)
        assert not re.search(r"(?<![\w-])logscope(?:\[|\s|$|['\"])", installs.split("#")[0]), (doc, line)
        assert re.search(r'torch-logscope|torch_logscope|-e "?\.|\$LOGSCOPE_PIP', installs), (doc, line)
