"""The Python kind groups (module-level `*_KINDS` constants) name only kinds the catalogue defines or the pipeline
synthesises: a signature renamed or removed in signatures.yaml fails here instead of silently emptying a group. The
groups are tag families of signatures.yaml (`catalogue().tagged`) or kinds named one by one (`kinds`), both checked
when their module loads; this test also catches a group written as a plain set."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import logscope
from logscope.events.catalogue import TAGS, catalogue, kinds


def kind_groups() -> Iterator[tuple[str, frozenset[str]]]:
    for info in pkgutil.walk_packages(logscope.__path__, "logscope."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            is_group = name.endswith("_KINDS")
            if is_group and isinstance(value, (set, frozenset, tuple)) and all(isinstance(v, str) for v in value):
                yield f"{info.name}.{name}", frozenset(value)


GROUPS = sorted(dict(kind_groups()).items())


def test_the_groups_are_found() -> None:
    names = {name for name, _ in GROUPS}
    assert {"logscope.rules.checks.failures.COMM_KINDS", "logscope.align.state.END_KINDS"} <= names


@pytest.mark.parametrize(("name", "group"), GROUPS, ids=[name for name, _ in GROUPS])
def test_kind_group_names_known_kinds(name: str, group: frozenset[str]) -> None:
    assert sorted(group - catalogue().known_kinds()) == [], name


def test_every_tag_names_a_family() -> None:
    """No tag is declared and left unused (a family the reasoning reads must have members)."""
    assert [tag for tag in TAGS if not catalogue().tagged(tag)] == []


def test_an_unknown_kind_or_tag_fails_at_load() -> None:
    with pytest.raises(ValueError, match="unknown event kinds"):
        kinds("iteration", "no_such_kind")
    with pytest.raises(ValueError, match="unknown tags"):
        catalogue().tagged("no_such_tag")


def test_synthesized_kinds_carry_tags() -> None:
    """torchrun's failure table is made by the pipeline, yet it is a launcher's report of a rank's exit."""
    assert "child_failure" in catalogue().known_kinds() and "child_failure" not in catalogue().kinds()
    assert "child_failure" in catalogue().tagged("torchrun_failure") & catalogue().tagged("launcher_report")
