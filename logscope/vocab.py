"""logscope's vocabulary, defined once: severities, phases, categories and the roles of findings, with their order.

Each is a `StrEnum`, so a member is the very string the JSON contract carries (`Severity.ERROR == "error"`), and
dicts built from event and finding rows compare with members directly. The JSON Schema (docs/schema) and the rule
schema list the same values; tests/test_vocab.py checks that they agree.
"""

from __future__ import annotations

from enum import StrEnum


class Severity(StrEnum):
    INFO = "info"
    NOTE = "note"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


SEVERITY_ORDER: dict[str, int] = {s.value: i for i, s in enumerate(Severity)}


def at_least(severity: str, threshold: str) -> bool:
    return SEVERITY_ORDER[severity] >= SEVERITY_ORDER[threshold]


class Phase(StrEnum):
    """Where a rank is in the life of a job; `fail` is where its failure lines sit."""

    LAUNCH = "launch"
    INIT = "init"
    SYNC = "sync"
    TRAIN = "train"
    END = "end"
    FAIL = "fail"


PHASE_ORDER: dict[str, int] = {p.value: i for i, p in enumerate(Phase)}


class Category(StrEnum):
    COLLECTIVE_TIMEOUT = "collective_timeout"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    CONFIG_DISAGREEMENT = "config_disagreement"
    MISSING_SYNC = "missing_sync"
    COMM_ERROR = "comm_error"
    RENDEZVOUS_FAILURE = "rendezvous_failure"
    CRASH = "crash"
    OOM = "oom"
    STALL = "stall"
    SINGLE_RANK = "single_rank"
    HEALTHY = "healthy"


class Role(StrEnum):
    """A finding's place in the story of the failure (verdict/causes.py)."""

    CAUSE = "cause"  # the first thing that went wrong, on its own
    CONSEQUENCE = "consequence"  # what another finding's failure made happen (peers' timeouts, teardown)
    CONTEXT = "context"  # true, but not part of this failure (a warning, a recovered attempt)


# Below this calibrated confidence a verdict is called a guess in every output (docs/accuracy.md has the table).
GUESS_BELOW = 0.5
