"""The check `pair_setting_differs`, behind LS409 (rules/LS409_pair_setting_differs.yaml), of the fallback stage: in
a failed run, a setting that the only two ranks printing it printed with different values. With two ranks there is
no majority; the one that is not rank 0 is the one that differs from the rank the others take their start from."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event, Severity, at_least


@check("pair_setting_differs")
def pair_setting_differs(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """In a failed run, the settings two ranks printed with different values (the rank that is not rank 0)."""
    rows = [e for e in events if ctx.field(e, "about") == "pair_setting" and e["rank"] is not None]
    if not rows or not any(at_least(f["severity"], Severity.ERROR) for f in ctx.findings):
        return None
    first = rows[0]
    return Hit(
        rows[:4],
        {e["rank"] for e in rows if e["rank"] is not None},
        culprits=sorted({e["rank"] for e in rows if e["rank"] is not None}),
        values={"differs": ctx.field(first, "differs"), "peers_print": ctx.field(first, "peers_print")},
    )
