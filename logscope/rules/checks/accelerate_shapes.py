"""The check `accelerate_shapes`, behind LS214 (rules/LS214_accelerate_shape_mismatch.yaml): accelerate's debug mode
raised "Cannot apply desired operation due to shape mismatches" and listed every process's shape; the process whose
shape differs from a clear majority is the culprit."""

from __future__ import annotations

from collections import Counter
from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.values import int_or_none
from logscope.vocab import Event

# The shape list follows the exception within this many lines of the same file.
LIST_SPAN = 12


@check("accelerate_shapes")
def accelerate_shapes(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """Every rank's shape as one report lists it, and the odd one out of a clear majority."""
    if not events:
        return None
    first = events[0]
    shapes: dict[int, str] = {}
    listed: list[Event] = []
    for e in ctx.by_kind.get("accelerate_process_shape", []):
        process = int_or_none(e["_f"].get("process"))
        if e["sid"] == first["sid"] and 0 < e["line"] - first["line"] <= LIST_SPAN and process is not None:
            shapes.setdefault(process, str(e["_f"].get("shape")))
            listed.append(e)
    common, count = Counter(shapes.values()).most_common(1)[0] if shapes else ("", 0)
    odd = sorted(p for p, shape in shapes.items() if shape != common) if count * 2 > len(shapes) else []
    per_process = ", ".join(f"process {p}: {shape}" for p, shape in sorted(shapes.items())) or "not listed"
    return Hit(
        [first, *listed],
        {e["rank"] for e in events if e["rank"] is not None},
        culprits=odd,
        values={"per_process": per_process},
        confidence_factor=1.0 if odd else 0.7,
    )
