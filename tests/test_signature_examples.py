"""Every signature's `examples:` (real lines, with their source in signatures.yaml) are read as that signature's
kind, and none of its `counterexamples:` is: the catalogue's own line-by-line tests, run through the real extractor
(prefilter scan, normalisation, pattern)."""

from __future__ import annotations

import pytest

from logscope.events.catalogue import catalogue
from logscope.events.extract import Extractor
from logscope.ingest.read import Block
from logscope.ingest.sources import Source

SOURCE = Source("example.log", "console", None)
CASES = [
    pytest.param(sig.kind, line, want, id=f"{sig.kind}-{'ex' if want else 'counter'}{i}")
    for sig in catalogue().signatures
    for want, lines in ((True, sig.examples), (False, sig.counterexamples))
    for i, line in enumerate(lines)
]


def kinds_of(line: str) -> set[str]:
    events = Extractor(catalogue()).run([Block(0, SOURCE, line.encode("utf-8"), True)]).events
    return set(events["kind"].to_list())


def test_every_signature_has_a_real_example() -> None:
    assert [sig.kind for sig in catalogue().signatures if not sig.examples] == []


@pytest.mark.parametrize(("kind", "line", "want"), CASES)
def test_signature_example(kind: str, line: str, want: bool) -> None:
    assert (kind in kinds_of(line)) is want, f"{kind}: {line!r}"
