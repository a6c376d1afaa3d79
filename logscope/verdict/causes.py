"""Cause versus consequence: which finding is the first thing that went wrong, and which ones it explains.

In a multi-rank failure most lines are consequences: peers' watchdog timeouts, "remote process exited", "Connection
closed by peer", SIGTERM/SIGABRT teardown. Each failure finding gets a role (vocab.Role) and, when it is a
consequence, the rule of the finding that explains it. The verdict is the first cause.

What makes a finding a consequence, in this order:
1. every line it rests on says that a peer went away (remote errors, lost connections, teardown), and another
   failure finding names the rank that went; where the ranks that went away left no error of their own (their
   logs just stop), their vanishing is the cause and what the others reported after it its consequence;
2. another failure finding is of a kind that explains it (a mismatch, a skipped sync, a crash or an OOM explains
   its peers' timeouts and communication errors: the rule's specificity encodes that order) and names a culprit
   among the ranks this one waited for, or this one names no culprit of its own; ranks that disagree on their
   configuration explain any collective mismatch between them, and a crash of those ranks (or of every rank, or of
   all the others);
   a lost connection is explained by a failure of the rank(s) that went away; a rank that left cleanly (no error
   line of its own) explains the different calls the ranks it left behind were stuck in;
3. a more specific finding that reads the same out-of-memory lines as something else explains the OOM (a size of
   terabytes an object collective read off the wire is a mismatch);
4. when both carry clocks, a failure that started later than another one's first line, on other ranks.
"""

from __future__ import annotations

from typing import Any

import regex

from logscope.align.state import SAME_MOMENT_S, clock
from logscope.rules.api import PEER_CAUSED, REMOTE_KINDS, TAGGED
from logscope.rules.checks.rows import TRACEBACK_FRAME_KINDS
from logscope.vocab import SEVERITY_ORDER, Event, Evidence, Finding, Role, Severity

# How NCCL, gloo and c10d word a failure that another process caused.
_REMOTE_WORDING = regex.compile(
    r"remote process|RemoteError|[Cc]onnection (?:closed|reset) by (?:remote )?peer|socketProgress|"
    r"[Bb]roken pipe|peer .{0,40}(?:closed|exited)|recvValue failed|sendBytes failed|failed to recv, got 0 bytes|"
    + PEER_CAUSED.pattern
)
# The rule for a rank that printed another NCCL/gloo setting (rules/LS410_comm_setting_differs.yaml).
COMM_SETTING_RULE = "LS410"
# Lines that prove the process group formed (a collective ran): a rendezvous error after them is no failure to form.
WORLD_FORMED_KINDS = TAGGED("world_formed")
# Exceptions a program raises on its own bad data or code: where the rank that runs with another setting raises one,
# its crash stands (config_disagreement only says where to look).
PROGRAMMING_ERRORS = frozenset(
    {"TypeError", "ValueError", "KeyError", "IndexError", "AttributeError", "NameError", "AssertionError"}
)
# torch's RuntimeError for tensors the rank's own code combined with shapes that do not fit: a programming error as
# much as a TypeError (loading a peer's state_dict of another shape says "size mismatch for ...", not this).
_LOCAL_SHAPE_ERROR = regex.compile(
    r"The size of tensor a \(\d+\) must match the size of tensor b|shapes cannot be multiplied|"
    r"is invalid for input of size"
)
# A traceback frame in a load of parameters that peers send: "in set_model_state_dict", "in _broadcast_state_dict",
# "in load_state_dict", "in _sync_module_states".
_LOADING_PEERS_FRAME = regex.compile(r", in \w*(?:state_dict|sync_module_states|sync_params)\w*$")
_EXCEPTION_TYPE = regex.compile(r"(?:^|[\s:])(?:[A-Za-z_]\w*\.)*(?P<type>[A-Za-z_]\w*(?:Error|Exception)): ")
# Categories whose findings are symptoms that another rank's failure produces.
SYMPTOMS = frozenset({"collective_timeout", "comm_error", "stall", "crash"})
# Categories that are a cause of their own (a rank's own fault or a disagreement between ranks).
CAUSES = frozenset(
    {"oom", "crash", "collective_mismatch", "config_disagreement", "missing_sync", "single_rank", "rendezvous_failure"}
)
# Failures that end the process they happen in (a timeout raises, a crash or an OOM kills it): its peers then lose
# their connection to it.
ENDS_A_PROCESS = frozenset({"collective_timeout", "crash", "oom"})


def is_remote_line(e: Event | Evidence) -> bool:
    """A line that says a peer went away: a consequence wherever another rank failed by itself."""
    return e.get("kind") in REMOTE_KINDS or bool(_REMOTE_WORDING.search(str(e.get("text") or "")))


def failing(f: Finding) -> bool:
    return SEVERITY_ORDER[f["severity"]] >= SEVERITY_ORDER[Severity.ERROR]


def onset(f: Finding, events: dict[tuple[str, int], Event]) -> float | None:
    """The earliest clock among a finding's evidence lines (None when none carries a stamp)."""
    times = [
        t
        for item in f["evidence"]
        if (e := events.get((item["path"], item["line"]))) is not None and (t := clock(e)) is not None
    ]
    return min(times) if times else None


def assign_roles(findings: list[Finding], rows: list[Event]) -> None:
    """Set `role`, `caused_by` and (internal) `onset` on every finding (in place)."""
    events = {(e["source"], e["line"]): e for e in rows}
    starts = {id(f): onset(f, events) for f in findings}
    remote_only = {
        id(f): bool(f["evidence"])
        and all(is_remote_line(events.get((item["path"], item["line"]), item)) for item in f["evidence"])
        for f in findings
    }
    # A finding that rests only on tracebacks' first lines ("Traceback (most recent call last):", the rest cut off
    # in a paste) does not say what failed: it explains nothing else.
    headers_only = {
        id(f): bool(f["evidence"])
        and all(
            (e := events.get((item["path"], item["line"]))) is not None and e["kind"] == "traceback_start"
            for item in f["evidence"]
        )
        for f in findings
    }
    failures = [f for f in findings if failing(f)]
    loading_peers = {
        id(f) for f in failures if f["category"] == "crash" and _programming_error(f) and _raised_loading_peers(f, rows)
    }
    # Once ranks trained, the world had formed: a rendezvous error then (an agent that lost the store when its
    # peer's agent exited) is a symptom of whatever ended the run, not a world that never formed.
    formed = False
    world: set[int] = set()
    erred: set[int] = set()  # ranks with an error line of their own
    for r in rows:  # one pass over the rows for the three facts
        if r["rank"] is None:
            continue
        world.add(r["rank"])
        if r["level"] == "error":
            erred.add(r["rank"])
        if (r["level"] != "error" and r["phase"] in ("sync", "train")) or r["kind"] in WORLD_FORMED_KINDS:
            formed = True
    for f in findings:
        f["role"] = (
            Role.CAUSE if failing(f) or (f["severity"] == Severity.WARNING and not f.get("survived")) else Role.CONTEXT
        )
        f["caused_by"] = None
        f["onset"] = starts[id(f)]
    for f in failures:
        explainer = _explainer(
            f,
            [g for g in failures if not headers_only[id(g)]],
            starts,
            remote_only,
            formed,
            world,
            erred,
            id(f) in loading_peers,
        )
        if explainer is not None:
            f["role"] = Role.CONSEQUENCE
            f["caused_by"] = explainer["rule"]


def _explainer(
    f: Finding,
    failures: list[Finding],
    starts: dict[int, float | None],
    remote_only: dict[int, bool],
    formed: bool,
    world: set[int],
    erred: set[int],
    loading_peers: bool,
) -> Finding | None:
    """The finding that explains `f` (the most specific of those that do), None when `f` is a cause.
    `loading_peers`: `f`'s exception was raised loading parameters its peers sent."""
    best: Finding | None = None
    for g in failures:
        g_went = _went_away_silently(g, remote_only)
        if g is f or (remote_only[id(g)] and not g_went):
            continue
        # A remote-only finding is explained by any failure that names ranks; a rendezvous error after the world
        # formed by any other failure.
        late_rendezvous = f["category"] == "rendezvous_failure" and formed and g["category"] != "rendezvous_failure"
        if _went_away_silently(f, remote_only):
            # Peers that vanished without a word are explained only by a failure of their own.
            explains = bool(set(f["culprit_ranks"]) & (set(g["ranks"]) | set(g["culprit_ranks"])))
        elif g_went:
            # What the ranks left behind reported once their peers vanished.
            explains = f["category"] in SYMPTOMS and bool(f["ranks"]) and set(f["ranks"]) <= set(g["ranks"])
        elif (remote_only[id(f)] and (g["culprit_ranks"] or g["ranks"])) or late_rendezvous:
            explains = True
        elif f["rule"] == COMM_SETTING_RULE and g["category"] == "comm_error":
            # The rank's own communication setting differs and its communication layer failed: the failure is what
            # the verdict names (the labelling guide's comm_error), the setting says why.
            explains = bool(set(f["culprit_ranks"]) & (set(g["culprit_ranks"]) | set(g["ranks"])))
        elif f["category"] == "comm_error" and g["category"] in ENDS_A_PROCESS and _went_away_failing(f, g):
            # The peer that went away had failed itself (timed out, crashed): that failure ended the connection.
            explains = True
        elif (
            f["category"] in ("collective_mismatch", "missing_sync")
            and g["category"] == "collective_mismatch"
            and g["culprit_ranks"]
            and not set(g["culprit_ranks"]) & (erred | set(f["culprit_ranks"]))
        ):
            # A rank that left its loop without an error of its own: the ranks it left behind wait in whichever
            # collective each had reached, so the different calls they were in say nothing of their own.
            explains = True
        elif f["category"] == "oom" and g["specificity"] > f["specificity"] and _reads_the_same_lines(f, g):
            # A more specific rule read the same out-of-memory line as something else (a size of terabytes that
            # an object collective read off the wire): its reading is the cause.
            explains = True
        elif (
            f["category"] in ("collective_timeout", "rendezvous_failure")
            and not f["culprit_ranks"]
            and g["category"] == "config_disagreement"
            and g["culprit_ranks"]
            and not set(g["culprit_ranks"]) & erred
        ):
            # Ranks waited for nobody they could name, and the rank(s) set up differently failed nowhere: they ran
            # apart (another mode, another world), which is what the others waited for.
            explains = True
        elif f["category"] == g["category"] == "collective_mismatch" and not f["culprit_ranks"] and g["culprit_ranks"]:
            # A mismatch that names nobody (gloo's size check) beside one that names the rank whose tensor
            # differed: one failure, and the second says whose it is.
            explains = True
        elif (
            f["category"] == "missing_sync"
            and not f["culprit_ranks"]
            and g["category"] in ("crash", "oom", "config_disagreement")
            and g["culprit_ranks"]
        ):
            # A sync that never completed and names nobody, beside a rank that failed by itself or runs another
            # model: the sync is a collective, and that rank is why it never completed.
            explains = True
        elif (
            f["category"] == "config_disagreement"
            and g["category"] == "collective_mismatch"
            and _left_early_with_its_setting(f, g, world, erred)
        ):
            # The rank with another setting than the majority's is the one that ran fewer collectives and left
            # without an error of its own (a stale max_steps): the labelling guide's reading of a rank that leaves
            # early is the mismatch, the setting says why.
            explains = True
        elif f["category"] == "collective_mismatch" and g["category"] == "config_disagreement":
            # Ranks that run with different settings call different collectives: the disagreement is the cause.
            explains = not _left_early_with_its_setting(g, f, world, erred)
        elif f["category"] == "crash" and g["category"] == "config_disagreement" and g["culprit_ranks"]:
            # A rank that runs with another setting than its peers fails of it (its loss diverges; one of a node's
            # ranks with another setting aborts and takes its node down), every rank's check that the replicas
            # agree raises, or all its peers fail taking its parameters (a model of another size): the setting is
            # the cause. A crash of some other rank is not.
            # A programming error of the odd rank's own (a TypeError on a string it was given, a ValueError of its
            # own check) is a bug its code path hits, which one GPU with that setting would hit too: the crash is
            # the cause, the setting where to look.
            crashed, odd = set(f["culprit_ranks"]), set(g["culprit_ranks"])
            own_bug = _programming_error(f) and not loading_peers  # (a shape error loading a peer's tensor is not)
            explains = (bool(crashed) and crashed <= odd and not own_bug) or (
                len(crashed) >= 2 and (crashed == world or crashed == world - odd)
            )
        elif f["category"] in SYMPTOMS and g["specificity"] > f["specificity"]:
            # A more specific finding explains this one when it names who the others waited for, or this one
            # names nobody; a rank's own crash does not explain a disagreement found elsewhere.
            explains = not f["culprit_ranks"] or bool(set(g["culprit_ranks"]) & set(f["culprit_ranks"]))
            if f["category"] == "crash" and g["category"] not in CAUSES - {"crash"}:
                explains = explains and not (set(f["culprit_ranks"]) - set(g["culprit_ranks"]))
        else:
            explains = False
        f_start, g_start = starts[id(f)], starts[id(g)]
        if explains and f_start is not None and g_start is not None and g_start > f_start + SAME_MOMENT_S:
            explains = g["category"] in CAUSES - {"crash"}  # a disagreement is a cause whenever it was printed
        if explains and (best is None or g["specificity"] > best["specificity"]):
            best = g
    return best


def _left_early_with_its_setting(config: Finding, mismatch: Finding, world: set[int], erred: set[int]) -> bool:
    """The ranks that printed another setting than the majority's (three ranks or more: of two, neither is the odd
    one) are those the mismatch names, and they printed no error of their own."""
    odd = set(config["culprit_ranks"])
    return len(world) >= 3 and bool(odd) and odd == set(mismatch["culprit_ranks"]) and not odd & erred


def _programming_error(f: Finding) -> bool:
    """Every exception among the finding's evidence is one a program raises on its own bad data (TypeError,
    ValueError, KeyError..., torch's shape errors of its own tensors), not one from what its peers sent it (a
    RuntimeError loading their parameters, a check that the replicas agree)."""
    raised = [(m["type"], item["text"]) for item in f["evidence"] if (m := _EXCEPTION_TYPE.search(item["text"]))]
    return bool(raised) and all(t in PROGRAMMING_ERRORS or _LOCAL_SHAPE_ERROR.search(text) for t, text in raised)


def _raised_loading_peers(f: Finding, rows: list[Event]) -> bool:
    """Some exception of the finding was raised inside a load of parameters its peers sent (a state dict broadcast
    from rank 0, a sync of module states): a shape error there is a peer's tensor against this rank's model."""
    for item in f["evidence"]:
        frames = [
            e for e in rows if e["source"] == item["path"] and e["rank"] == item["rank"] and e["line"] < item["line"]
        ]
        for e in sorted(frames, key=lambda e: e["line"], reverse=True):
            if e["kind"] == "traceback_start":
                break
            if e["kind"] in TRACEBACK_FRAME_KINDS and _LOADING_PEERS_FRAME.search(e["text"]):
                return True
    return False


def _reads_the_same_lines(f: Finding, g: Finding) -> bool:
    """Every evidence line of `f` is evidence of `g` too."""
    mine = {(item["path"], item["line"]) for item in f["evidence"]}
    return bool(mine) and mine <= {(item["path"], item["line"]) for item in g["evidence"]}


def rank_key(f: Finding) -> tuple[Any, ...]:
    """Order of findings for the verdict: failures first, causes before consequences, then specificity."""
    return (
        SEVERITY_ORDER[f["severity"]] >= SEVERITY_ORDER[Severity.WARNING] and not f.get("survived"),
        f.get("role") == Role.CAUSE,
        f["specificity"],
        SEVERITY_ORDER[f["severity"]],
        f["confidence"],
    )


def first_cause(ranked: list[Finding]) -> Finding | None:
    """The verdict's finding: the top cause, unless another rank's own failure (crash, OOM) visibly came first."""
    causes = [f for f in ranked if f.get("role") == Role.CAUSE]
    if not causes:
        return None
    top = causes[0]
    top_onset = top.get("onset")
    if top["category"] in ("crash", "oom") and top_onset is not None:
        earlier = [
            (onset, f)
            for f in causes[1:]
            if f["category"] in ("crash", "oom")
            and (onset := f.get("onset")) is not None
            and onset < top_onset - SAME_MOMENT_S
            and not set(f["culprit_ranks"]) & set(top["culprit_ranks"])
        ]
        if earlier:
            return min(earlier, key=lambda pair: pair[0])[1]
    return top


def _went_away_silently(f: Finding, remote_only: dict[int, bool]) -> bool:
    """A crash known only from its peers' lost connections: the ranks it names are not the ones that reported it
    (their own logs stop with no error; LS504 makes it a crash only then)."""
    return (
        remote_only[id(f)]
        and f["category"] == "crash"
        and bool(f["culprit_ranks"])
        and not set(f["culprit_ranks"]) & set(f["ranks"])
    )


def _went_away_failing(f: Finding, g: Finding) -> bool:
    """Every rank `f` says went away is one `g` saw fail."""
    return bool(f["culprit_ranks"]) and set(f["culprit_ranks"]) <= set(g["ranks"])
