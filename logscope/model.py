"""What one analysis produces: the diagnosis (the JSON contract) plus the tables behind it, for the reporters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from logscope.vocab import Category, Severity

if TYPE_CHECKING:  # the command line imports this before polars, which it imports only once a helper is started
    import polars as pl

SCHEMA_ID = "logscope/diagnosis/v1"

CATEGORIES = tuple(c.value for c in Category)
SEVERITIES = tuple(s.value for s in Severity)


@dataclass
class Analysis:
    """Result of `logscope.analysis.analyze`.

    diagnosis: the `logscope/diagnosis/v1` document (docs/schema/diagnosis-v1.json), JSON-ready.
    events:    the aligned event table (`logscope.events.table.EVENT_SCHEMA` columns), one row per recognised line.
    ranks:     one row per rank (the same facts as diagnosis["ranks"], as a polars table).
    rule_docs: the documentation of the rules the analysis ran (built-in and --rules), by rule id: reporters read
               it from here, so a user's rules are documented in HTML and SARIF like the built-in ones.
    """

    diagnosis: dict[str, Any]
    events: pl.DataFrame
    ranks: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    rule_docs: dict[str, dict[str, Any]] = field(default_factory=dict)
