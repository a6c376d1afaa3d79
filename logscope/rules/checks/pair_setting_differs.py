"""The check `pair_setting_differs`, behind LS409 (rules/LS409_pair_setting_differs.yaml), of the fallback stage: a
setting that the only two ranks printing it printed with different values, whether or not the run then failed. With
two ranks there is no majority; the one that is not rank 0 is the one that differs from the rank the others take
their start from."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Context, Hit, Rule, check
from logscope.vocab import Event


@check("pair_setting_differs")
def pair_setting_differs(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The settings two ranks printed with different values (the rank that is not rank 0)."""
    rows = [e for e in events if ctx.field(e, "about") == "pair_setting" and e["rank"] is not None]
    if not rows:
        return None
    ranks = {e["rank"] for e in rows if e["rank"] is not None}
    return Hit(
        rows[:4],
        ranks,
        culprits=sorted(ranks),
        values={"differs": ctx.field(rows[0], "differs"), "peers_print": ctx.field(rows[0], "peers_print")},
    )
