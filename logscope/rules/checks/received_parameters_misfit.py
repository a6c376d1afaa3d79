"""The check `received_parameters_misfit`, behind LS217 (rules/LS217_received_parameters_misfit.yaml): a rank's load of
the parameters a broadcast brought it failed because they belong to another model or module (PyTorch's "Error(s)
in loading state_dict" raised below a parameter sync or broadcast): the ranks paired different objects in the
broadcast. A load from a checkpoint file has no broadcast in its traceback and stays a crash."""

from __future__ import annotations

from typing import Any

import regex

from logscope.rules.api import Context, Hit, Rule, check
from logscope.rules.checks.rows import frame_function, traceback_frames
from logscope.rules.checks.stack_dumps import SYNC_FUNCTIONS
from logscope.vocab import Event

# nn.Module.load_state_dict's error for a state dict of another model: missing or unexpected keys, other shapes.
_LOAD_FAILED = regex.compile(r"Error\(s\) in loading state_dict")
# A frame that receives what peers sent: a library's parameter sync or a broadcast of torch.distributed's.
_RECEIVING = regex.compile(r"(?i)broadcast|sync_(?:module|param)")


@check("received_parameters_misfit")
def received_parameters_misfit(rule: Rule, ctx: Context, events: list[Event], params: dict[str, Any]) -> Hit | None:
    """The ranks whose exception is a failed state-dict load inside a broadcast or parameter sync. Where every rank
    but rank 0 (the source of such broadcasts) failed so, rank 0 is the one that sent the other thing."""
    raised = {}
    for e in events:
        if e["rank"] is None or e["rank"] in raised or not _LOAD_FAILED.search(str(e["_f"].get("reason") or "")):
            continue
        functions = [frame_function(f) for f in traceback_frames(ctx, e)]
        if any(fn in SYNC_FUNCTIONS or _RECEIVING.search(fn) for fn in functions):
            raised[e["rank"]] = e
    if not raised:
        return None
    world = ctx.job.get("world_size") or 0
    receivers = set(range(1, world))
    culprits = [0] if world >= 3 and receivers <= set(raised) and 0 not in raised else sorted(raised)
    return Hit(list(raised.values()), set(raised), culprits=culprits)
