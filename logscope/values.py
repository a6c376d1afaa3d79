"""Numbers out of text fields (a signature's captures, a Flight Recorder dump's values): None or nothing where the
text is not a number. Shared by ingest and align, so it sits below both."""

from __future__ import annotations

from typing import Any


def int_or_none(value: Any) -> int | None:
    """An int as it is (however long); a number's text ("3", " 42 ") as an int; None for anything else (a bool too)."""
    if value is None or isinstance(value, bool):  # (None is most fields' value: no exception to raise and catch)
        return None
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


# A 64-bit column's range: NCCL prints an unset NumelIn as 2^64 - 1 ("NumelIn=18446744073709551615").
INT64_MAX = 2**63 - 1


def int64_or_none(value: Any) -> int | None:
    """`int_or_none`, but None for a number a signed 64-bit column cannot hold."""
    number = int_or_none(value)
    return number if number is not None and -INT64_MAX - 1 <= number <= INT64_MAX else None


def int_list(value: Any) -> list[int]:
    """ "[4, 4]", "4,4" -> [4, 4]."""
    text = str(value or "").strip().strip("[]")
    return [int(x) for x in text.replace(" ", "").split(",") if x.strip().lstrip("-").isdigit()]


def int_ranges(value: Any) -> list[int]:
    """srun's task lists: "3,7", "9-10,12-15"."""
    out: list[int] = []
    for part in str(value or "").split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            out.extend(range(int(low), int(high or low) + 1) if int(high or low) - int(low) < 65536 else [])
    return out
