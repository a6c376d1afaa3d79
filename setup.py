"""The wheel carries each built-in rule's test cases, so `logscope rules test` works wherever it is installed.

Everything else about the build is in pyproject.toml; this only adds one step to build_py: the case folders that
the rules in rules/ name (`tests: positive/negative: - {path: fixtures/...}`) are copied into
logscope/rulepack/cases/ under the same relative paths. tests/test_packaging.py checks the wheel against the rule
pack as the loader reads it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CASE_PATH = re.compile(r"\{\s*path:\s*([^,}\s]+)")


def rule_case_paths() -> list[str]:
    found: set[str] = set()
    for rule in sorted((HERE / "rules").glob("*.yaml")):
        found.update(CASE_PATH.findall(rule.read_text(encoding="utf-8")))
    return sorted(found)


class BuildWithRuleCases(build_py):
    def run(self) -> None:
        super().run()
        cases = Path(self.build_lib) / "logscope" / "rulepack" / "cases"
        for rel in rule_case_paths():
            source, target = HERE / rel, cases / rel
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True, symlinks=True)
            elif source.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


setup(cmdclass={"build_py": BuildWithRuleCases})
