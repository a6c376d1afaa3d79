"""logscope's vocabulary, defined once: severities, phases, categories and the roles of findings, with their order;
and the shapes of the records the stages pass on (Event, Finding, RankRow), as TypedDicts.

Each enum is a `StrEnum`, so a member is the very string the JSON contract carries (`Severity.ERROR == "error"`), and
dicts built from event and finding rows compare with members directly. The JSON Schema (docs/schema) and the rule
schema list the same values; tests/test_vocab.py checks that they agree.
"""

# No `from __future__ import annotations` here: the TypedDicts below need their annotations evaluated for
# `__required_keys__` / `__optional_keys__` to tell NotRequired keys apart (tests/test_vocab_records.py reads them).
from enum import StrEnum
from typing import Any, NotRequired, TypedDict


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


# Keyed by `str | None` so that an event's phase, None until align sets it, can be looked up (it has no place).
PHASE_ORDER: dict[str | None, int] = {p.value: i for i, p in enumerate(Phase)}


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


# -- The records that flow between the stages: plain dicts at run time, typed for the reader and for mypy.
#
# TypedDicts cost nothing when the code runs (a TypedDict call or literal builds a plain dict, and this module
# imports nothing but the standard library's `enum` and `typing`); tests/test_vocab_records.py checks that every key
# the pipeline writes is declared here, and the finding's against docs/schema/diagnosis-v1.json.


class Event(TypedDict):
    """One recognised line: the `EVENT_SCHEMA` columns (events/table.py) plus `_f`, its fields decoded.

    The extractor (events/extract.py) writes every key; align fills in `rank`, `attempt`, `phase` and `pg`. A Flight
    Recorder entry that a rule cites as evidence (rules/checks/flight_evidence.py) is an event without the keys
    marked NotRequired.
    """

    sid: int  # index of the source in the analysis' source list (dump entries: below every real one)
    source: str
    line: int
    rank: int | None
    local_rank: NotRequired[int | None]
    node: str | None
    attempt: int | None
    ts: float | None
    ts_text: str | None
    kind: str
    level: str
    phase: str | None
    text: str
    fields: NotRequired[str]  # `_f` as JSON (the event table's column)
    seq: int | None
    op: str | None
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int | None
    pg: str | None
    iteration: NotRequired[int | None]
    exitcode: NotRequired[int | None]
    tee_lrank: int | None
    grank: NotRequired[int | None]
    _f: dict[str, Any]  # the signature's named captures (free-form: each kind has its own)
    actor_pid: NotRequired[int | None]  # not a column: align reads it to find a Ray worker's rank


class EvidenceLine(TypedDict):
    line: int
    text: str


class Evidence(TypedDict):
    """A line a finding rests on (docs/schema: $defs/evidence)."""

    path: str
    line: int
    rank: int | None
    text: str
    context: NotRequired[list[EvidenceLine]]


class Finding(TypedDict):
    """What a rule found (rules/engine.py `finding`; docs/schema: findings[]).

    The verdict (verdict/causes.py) adds `role`, `caused_by` and `onset`; before the diagnosis is written it strips
    the internal keys (verdict/decide.py INTERNAL_KEYS), so the contract's finding has none of them.
    """

    rule: str
    category: str
    severity: str
    confidence: float
    title: str
    message: str
    ranks: list[int]
    culprit_ranks: list[int]
    collective: dict[str, Any] | None  # docs/schema: $defs/collective
    evidence: list[Evidence]
    next_step: str  # a workflow step id (docs/schema allows null; a rule always names one)
    role: NotRequired[str]  # a Role
    caused_by: NotRequired[str | None]
    # Internal: for ranking the findings into the verdict, stripped from the contract.
    specificity: NotRequired[int]
    survived: NotRequired[bool]
    next_step_command: NotRequired[str | None]
    next_step_detail: NotRequired[str | None]
    onset: NotRequired[float | None]


class RankRow(TypedDict):
    """One rank's facts: a row of the rank table (align/model.py RANK_SCHEMA)."""

    rank: int
    node: str | None
    host: str | None
    local_rank: int | None
    attempt: int | None
    status: str  # visible | hidden | silent
    visible: bool
    exit_code: int | None
    signal: str | None
    stopped_by: str | None  # who sent a SIGTERM it died of: launcher (teardown) | outside (align/align.py)
    phase: str | None
    last_iteration: int | None
    last_seq_enqueued: int | None
    last_seq_completed: int | None
    last_kind: str | None
    last_text: str | None
    device: str | None
    bus_id: str | None
    world_size: int | None
    sources: list[str]
    events: int
