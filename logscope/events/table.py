"""The event table: one row per recognised line, the contract between `events` and everything after it."""

from __future__ import annotations

import polars as pl

from logscope.vocab import Event, Phase

PHASES = tuple(p.value for p in Phase)

# Columns every event row has. `fields` holds the signature's named captures as JSON; the columns after it are
# the fields that alignment and rules need typed, promoted out of `fields` when a signature captures them.
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "sid": pl.Int64(),  # index of the source in the analysis' source list
    "source": pl.String(),  # path of the log relative to the input (archive members as "a.zip!member")
    "line": pl.Int64(),  # 1-based physical line number in `source`
    "rank": pl.Int64(),  # global rank, resolved by `align` (null when unknown)
    "local_rank": pl.Int64(),
    "node": pl.String(),
    "attempt": pl.Int64(),
    "ts": pl.Float64(),  # wall-clock epoch seconds when the line carries a full date; else null
    "ts_text": pl.String(),  # the raw timestamp as printed (may lack a year, may be monotonic)
    "kind": pl.String(),  # event kind from the signature catalogue
    "level": pl.String(),  # benign | info | warning | error
    "phase": pl.String(),  # launch | init | sync | train | end | fail (set by `align`)
    "text": pl.String(),  # the line with its prefixes stripped
    "fields": pl.String(),  # JSON object of captured fields
    "seq": pl.Int64(),
    "op": pl.String(),
    "numel_in": pl.Int64(),
    "numel_out": pl.Int64(),
    "timeout_ms": pl.Int64(),
    "pg": pl.String(),
    "iteration": pl.Int64(),
    "exitcode": pl.Int64(),
    "tee_lrank": pl.Int64(),  # local rank from torchrun's `[default<N>]:` prefix (console lines)
    "grank": pl.Int64(),  # global rank from the c10 / excepthook `[rank<N>]:` prefix
}

PROMOTED_INT = ("seq", "numel_in", "numel_out", "timeout_ms", "iteration", "exitcode")
PROMOTED_STR = ("op", "pg")


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=EVENT_SCHEMA)


# Between stages an event also travels as a dict: the EVENT_SCHEMA keys plus `_f`, its `fields` decoded. The
# extractor builds these dicts once and align and the rules work on them, so no stage turns the table back into
# dicts or parses the JSON again.
def events_frame(rows: list[Event]) -> pl.DataFrame:
    """The event table of event dicts (keys outside EVENT_SCHEMA, such as `_f`, are left out)."""
    if not rows:
        return empty_events()
    # Column by column: faster than polars' row-wise constructor, same types (both strict).
    # (`row[name]`: mypy checks a TypedDict key only when it is a literal; these are the EVENT_SCHEMA names.)
    return pl.DataFrame(
        [
            pl.Series(name, [row[name] for row in rows], dtype=dtype)  # type: ignore[literal-required]
            for name, dtype in EVENT_SCHEMA.items()
        ]
    )
