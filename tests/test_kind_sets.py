"""The Python kind groups (module-level `*_KINDS` constants) name only kinds the catalogue defines or the pipeline
synthesises: a signature renamed or removed in signatures.yaml fails here instead of silently emptying a group."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import logscope
from logscope.events.catalogue import SYNTHESIZED_KINDS, catalogue


def kind_groups() -> Iterator[tuple[str, frozenset[str]]]:
    for info in pkgutil.walk_packages(logscope.__path__, "logscope."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            is_group = name.endswith("_KINDS") and name != "SYNTHESIZED_KINDS"
            if is_group and isinstance(value, (set, frozenset, tuple)) and all(isinstance(v, str) for v in value):
                yield f"{info.name}.{name}", frozenset(value)


GROUPS = sorted(dict(kind_groups()).items())


def test_the_groups_are_found() -> None:
    names = {name for name, _ in GROUPS}
    assert {"logscope.rules.checks.failures.COMM_KINDS", "logscope.align.state.END_KINDS"} <= names


@pytest.mark.parametrize(("name", "kinds"), GROUPS, ids=[name for name, _ in GROUPS])
def test_kind_group_names_known_kinds(name: str, kinds: frozenset[str]) -> None:
    known = set(catalogue().kinds()) | set(SYNTHESIZED_KINDS)
    assert sorted(kinds - known) == [], name
