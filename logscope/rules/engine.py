"""The rule engine: evaluate declarative YAML rules over the aligned event table, producing findings.

A rule selects evidence events (`match`: kinds + field conditions), decides whether they amount to a finding
(`condition`), and names the culprit ranks (`culprit`). Conditions and culprit strategies are the primitives below;
logic YAML cannot express lives in the checks/ package (one module per check), registered by name and still
declared by a rule file.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

import regex

from logscope.align.model import Aligned
from logscope.align.state import PROGRESS_KINDS, SAME_MOMENT_S, clock
from logscope.events.catalogue import kinds
from logscope.events.rank_values import STEP_VALUE
from logscope.ingest.normalise import nccl_process
from logscope.rules.api import API_OPTYPE, CHECKS, COMM_FAMILY, REMOTE_KINDS, Context, Hit, Rule, breaks_own_pattern
from logscope.rules.checks.collectives import LATER_S, timed_out_late
from logscope.rules.checks.failures import first_own_error, only_failed_worker
from logscope.rules.checks.rows import said_past
from logscope.values import int_or_none
from logscope.vocab import PHASE_ORDER, SEVERITY_ORDER, Event, Evidence, Finding, Phase

# Variables that identify a host or a rank and so differ by design.
UNSET = "<not set>"
PER_HOST_VARS = {"NCCL_HOSTID", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_COMM_ID"}
MAX_EVIDENCE = 12
STAGES = ("main", "fallback")
# Failures that a run which then finished evidently survived; a disagreement between ranks or a skipped sync is a
# silent bug even when the run exits 0, so those keep their severity.
SURVIVABLE = frozenset({"crash", "oom", "collective_timeout", "comm_error", "rendezvous_failure", "stall"})
# A culprit read off a paste from the one rank of the world whose timeout line is not in it.
PASTE_GUESS_FACTOR = 0.85
REGEX_TIMEOUT_S = 0.05  # user regexes run with a timeout: catastrophic backtracking cannot hang the run
MAX_REGEX_TIMEOUTS = 20  # per rule: past this its regexes count as no match, so a run's regex time is bounded


def _where_ok(rule: Rule, ctx: Context, row: Event) -> bool:
    for i, cond in enumerate(rule.match.get("where", [])):
        value = ctx.field(row, cond["field"])
        if "exists" in cond and (value is not None) != cond["exists"]:
            return False
        if "equals" in cond and str(value) != str(cond["equals"]):
            return False
        if "in" in cond and str(value) not in {str(v) for v in cond["in"]}:
            return False
        if "not_in" in cond and str(value) in {str(v) for v in cond["not_in"]}:
            return False
        for key, want in (("regex", True), ("not_regex", False)):
            if key in cond:
                found = False
                if ctx.regex_timeouts[rule.id] < MAX_REGEX_TIMEOUTS:
                    try:
                        pattern = rule.compiled[f"{i}.{key}"]
                        found = pattern.search(str(value or ""), timeout=REGEX_TIMEOUT_S) is not None
                    except TimeoutError:
                        ctx.regex_timeouts[rule.id] += 1
                if found != want:
                    return False
        try:
            if "gt" in cond and not (value is not None and float(value) > cond["gt"]):
                return False
            if "lt" in cond and not (value is not None and float(value) < cond["lt"]):
                return False
        except ValueError:
            return False
    return True


def matched(rule: Rule, ctx: Context) -> list[Event]:
    kinds = rule.match.get("kinds")
    rows = [r for k in kinds for r in ctx.by_kind.get(k, [])] if kinds else list(ctx.rows)
    if not rule.match.get("where"):  # (a rule of no kind and no condition reads every row: 120 000 at 1024 ranks)
        return rows
    return [r for r in rows if _where_ok(rule, ctx, r)]


# ---------------------------------------------------------------------------------------------- conditions
def cond_present(rule: Rule, ctx: Context, events: list[Event]) -> Hit | None:
    if not events:
        return None
    ranks = {e["rank"] for e in events if e["rank"] is not None}
    if len(ranks) < rule.condition.get("min_ranks", 1) and rule.condition.get("min_ranks"):
        return None
    return Hit(events, ranks)


def cond_absent_after_phase(rule: Rule, ctx: Context, events: list[Event]) -> Hit | None:
    """Ranks that reached phase P without any of the expected events: a missing line is evidence."""
    expect = set(rule.condition["expect"])
    reached = rule.condition.get("reached", "train")
    have = {r for r in ctx.visible if any(e["kind"] in expect for e in ctx.by_rank.get(r, []))}
    if rule.condition.get("peers_have", True) and not have:
        return None
    # A missing line is evidence only from a rank whose log covers where it would be: one that printed a kind of
    # line that a rank with the line printed before it (its config, its model) and one it printed after it, short of
    # the end (its training start). A rank that prints its config and then only its end (rank 0 alone narrates the
    # setup) may have joined the sync in silence.
    before: set[str] = set()
    after: set[str] = set()
    for r in have:
        own = ctx.by_rank[r]
        first = min(ctx.order(e) for e in own if e["kind"] in expect)
        for e in own:
            if e["level"] == "benign" or e["kind"] in expect or e["sid"] != first[1]:
                continue
            (before if ctx.order(e) < first else after).add(e["kind"])
    after = {k for k in after if k not in before}
    missing = sorted(
        r
        for r in ctx.visible - have
        if ctx.reached(r, reached)
        and any(e["kind"] in before for e in ctx.by_rank.get(r, []))
        and any(e["kind"] in after and e["phase"] != Phase.END for e in ctx.by_rank.get(r, []))
    )
    if not missing:
        return None
    evidence = [e for r in missing for e in ctx.by_rank[r] if PHASE_ORDER.get(e["phase"], -1) >= PHASE_ORDER[reached]][
        :4
    ]
    evidence += [e for e in ctx.rows if e["kind"] in expect][:2]
    factor = 0.8 if ctx.hidden else 1.0
    return Hit(
        evidence,
        set(missing),
        culprits=missing,
        confidence_factor=factor,
        values={"missing_ranks": missing, "peers": sorted(have), "expected": ", ".join(sorted(expect))},
    )


def cond_last_event(rule: Rule, ctx: Context, events: list[Event]) -> Hit | None:
    """Ranks whose last event (benign lines aside) is one of the kinds, with nothing after it."""
    kinds = set(rule.match.get("kinds", []))
    proof = ctx.completion
    if rule.condition.get("unless_ended", True) and (ctx.job.get("exit_code") == 0 or (proof and proof.proven)):
        return None
    # A rank silent after that line, whose peers' progress shows it took part, did not stop there.
    joined = proof.participating if proof else set()
    stuck: list[Event] = []
    for rank, rows in ctx.by_rank.items():
        if rank in joined:
            continue
        live = [r for r in rows if r["level"] != "benign" and r["kind"] not in ("worker_sigterm_sent",)]
        if not live or live[-1]["kind"] not in kinds or not _where_ok(rule, ctx, live[-1]):
            continue
        # Rows come file by file: a rank whose other file shows a later phase (its progress bar on stdout after
        # the sync line on stderr) did not stop at this line.
        at = PHASE_ORDER.get(live[-1]["phase"], -1)
        if not any(PHASE_ORDER.get(r["phase"], -1) > at for r in live if r["phase"] != "fail") and not said_past(
            ctx, rank, at
        ):
            stuck.append(live[-1])
    unranked = [r for r in ctx.rows if r["rank"] is None and r["level"] != "benign"]
    if not ctx.by_rank and unranked and unranked[-1]["kind"] in kinds:
        stuck.append(unranked[-1])
    if not stuck:
        return None
    # The sync is a collective: progress printed after a sync line in that line's own file (rank 0's loop printing
    # without a rank prefix, as rsl_rl's does) shows that it completed, and so it did on every rank.
    # An unranked communication error after it there (gloo's size check in an unprefixed console) says that the
    # sync failed, and why: the rule that reads that error reports it.
    after = [
        r
        for r in ctx.rows
        if r["kind"] in PROGRESS_KINDS or (r["rank"] is None and r["level"] == "error" and r["kind"] in COMM_FAMILY)
    ]
    if any(a["sid"] == s["sid"] and a["line"] > s["line"] for s in stuck for a in after):
        return None
    ranks = {e["rank"] for e in stuck if e["rank"] is not None}
    reached_past = sorted(
        r
        for r in ctx.visible - ranks
        if any(PHASE_ORDER.get(e["phase"], -1) > PHASE_ORDER.get(stuck[0]["phase"], 0) for e in ctx.by_rank[r])
    )
    factor = 0.7 if (ctx.hidden or not ctx.ranks) else 1.0
    return Hit(
        stuck,
        ranks,
        confidence_factor=factor,
        values={"stuck_ranks": sorted(ranks), "ahead_ranks": reached_past, "last_line": stuck[0]["text"]},
    )


def _per_rank_values(ctx: Context, events: list[Event], name: str) -> dict[int, str]:
    values: dict[int, str] = {}
    for e in events:
        value = ctx.field(e, name)
        if e["rank"] is not None and value is not None and _latest_attempt(ctx, e):
            text = str(value)
            # NCCL's own line says "2.28.9+cuda13.0", torch's lines "2.28.9": the same version.
            values[e["rank"]] = text.split("+", 1)[0] if name == "nccl_version" else text
    return values


def _latest_attempt(ctx: Context, e: Event) -> bool:
    info = ctx.ranks.get(e["rank"]) if e["rank"] is not None else None
    return (e["attempt"] or 0) >= ((info["attempt"] if info is not None else None) or 0)


def cond_field_differs(rule: Rule, ctx: Context, events: list[Event]) -> Hit | None:
    """Ranks disagree on a value they should share: the odd ones out of a clear majority, else (two ranks, a tie)
    the ones that differ from rank 0, the broadcast source."""
    offset_ok = set(rule.condition.get("allow_rank_offset", []))
    differing: dict[str, dict[int, str]] = {}
    culprits: set[int] = set()
    names: list[str] = []
    # For a wildcard family, the ranks whose logs echo that family at all: a variable one of them does not
    # echo while another does is unset there (NCCL prints "... set by environment" only for what is set). A line
    # of only per-host variables (a script's "NCCL_SOCKET_IFNAME=lo" in its start line) is no echo of the family:
    # a rank that failed before NCCL echoed its settings has none.
    echoing: dict[str, set[int]] = {}
    for name in rule.condition["fields"]:
        if name.endswith("*"):  # every field with that prefix, e.g. NCCL_* from the env echo lines
            prefix = name[:-1]
            found = sorted({k for e in events for k in e["_f"] if k.startswith(prefix)} - PER_HOST_VARS)
            names.extend(found)
            echoers = {
                rank
                for e in events
                if (rank := e["rank"]) is not None
                and _latest_attempt(ctx, e)
                and any(k.startswith(prefix) and k not in PER_HOST_VARS for k in e["_f"])
            }
            echoing.update(dict.fromkeys(found, echoers))
        else:
            names.append(name)
    for name in names:
        values = _per_rank_values(ctx, events, name)
        values.update({rank: UNSET for rank in echoing.get(name, set()) - set(values)})
        if len(values) < 2 or len(set(values.values())) < 2:
            continue
        if name in offset_ok and _offset_by_rank(values):
            continue
        differing[name] = values
        off_line = _off_the_rank_offset(values) if name in offset_ok else set()
        counts = Counter(values.values()).most_common()
        if off_line:
            culprits |= off_line  # a seed that breaks the base-plus-rank pattern the others follow
        elif len(values) >= 3 and counts[0][1] > counts[1][1] and counts[0][1] * 2 > len(values):
            culprits |= {r for r, v in values.items() if v != counts[0][0]}  # the odd ones out of a clear majority
        elif 0 in values:
            culprits |= {r for r, v in values.items() if v != values[0]}  # rank 0 is the broadcast source
        else:
            culprits |= {r for r, v in values.items() if v != counts[0][0]}
    if not differing:
        return None
    evidence = [e for e in events if any(ctx.field(e, n) is not None for n in differing)]
    evidence.sort(key=lambda e: (e["rank"] not in culprits, e["rank"] or 0))
    summary = "; ".join(
        f"{name}: " + ", ".join(f"rank {r}={v}" for r, v in sorted(values.items()))
        for name, values in differing.items()
    )
    return Hit(
        evidence,
        set().union(*[set(v) for v in differing.values()]),
        culprits=sorted(culprits),
        values={"fields": ", ".join(differing), "differences": summary},
    )


def _offset_by_rank(values: dict[int, str]) -> bool:
    try:
        nums = {r: int(v) for r, v in values.items()}
    except ValueError:
        return False
    ranks = sorted(nums)
    if len(ranks) < 2:
        return False
    step = (nums[ranks[1]] - nums[ranks[0]]) / max(1, ranks[1] - ranks[0])
    return step != 0 and all(nums[r] - nums[ranks[0]] == step * (r - ranks[0]) for r in ranks)


def _off_the_rank_offset(values: dict[int, str]) -> set[int]:
    """The ranks whose value is not base + rank where a clear majority (three ranks or more) of them is."""
    try:
        offsets = {r: int(v) - r for r, v in values.items()}
    except ValueError:
        return set()
    (base, count), *_ = Counter(offsets.values()).most_common()
    if len(offsets) < 3 or count * 2 <= len(offsets) or len(set(values.values())) < count:
        return set()  # too few ranks, no majority, or the majority prints one value (not offset at all)
    return {r for r, o in offsets.items() if o != base}


def cond_same_seq_differs(rule: Rule, ctx: Context, events: list[Event]) -> Hit | None:
    """Same SeqNum in the same process group, different op or size across ranks."""
    compare = rule.condition.get("compare", ["op", "numel_in"])
    by_seq: dict[tuple[str, int], dict[int, tuple[Any, ...]]] = defaultdict(dict)
    rows_at: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for e in events:
        if e["seq"] is None or e["rank"] is None:
            continue
        key = (e["pg"] or "0", e["seq"])
        by_seq[key][e["rank"]] = tuple(ctx.field(e, c) for c in compare)
        rows_at[key].append(e)
    for key in sorted(by_seq, key=lambda k: k[1]):
        sigs = by_seq[key]
        if len(set(sigs.values())) < 2:
            continue
        common = Counter(sigs.values()).most_common()
        minority: list[int]
        if len(sigs) >= 3 and common[0][1] > common[-1][1]:
            minority = sorted(r for r, s in sigs.items() if s != common[0][0])
        else:
            minority = _deviating(ctx, key[1], rows_at[key])
        factor = 1.0
        if not minority:
            minority, factor = sorted(sigs), 0.7  # nothing tells which side took the other branch
        ops = ", ".join(f"rank {r}: " + "/".join(str(x) for x in s) for r, s in sorted(sigs.items()))
        return Hit(
            rows_at[key],
            set(sigs),
            culprits=minority,
            confidence_factor=factor,
            values={"seq": key[1], "pg": key[0], "per_rank": ops},
        )
    return None


def _deviating(ctx: Context, seq: int, rows: list[Event]) -> list[int]:
    """With two ranks a vote cannot decide: blame the rank that broke its own pattern of collectives."""
    return sorted(
        {
            rank
            for e in rows
            if e["kind"] == "collective_fingerprint"
            and (rank := e["rank"]) is not None
            and breaks_own_pattern(ctx, rank, seq, e["op"], e["_f"].get("shape"))
        }
    )


def cond_seq_lag(rule: Rule, ctx: Context, events: list[Event]) -> Hit | None:
    """Ranks behind (or ahead of) the others in collective sequence number in the same process group."""
    latest: dict[int, Event] = {}
    seqs: dict[int, int] = {}  # rank -> the SeqNum of its latest event
    for e in events:
        seq, rank = e["seq"], e["rank"]
        if seq is None or rank is None or (e["pg"] or "0") != "0":
            continue
        if rank not in latest or seq > seqs[rank]:
            latest[rank], seqs[rank] = e, seq
    if len(latest) < 2:
        return None
    low, high = min(seqs.values()), max(seqs.values())
    if high - low < rule.condition.get("min_gap", 1):
        return None
    laggards = sorted(r for r, s in seqs.items() if s == low)
    return Hit(
        list(latest.values()),
        set(seqs),
        culprits=laggards,
        values={
            "low_seq": low,
            "high_seq": high,
            "gap": high - low,
            "per_rank": ", ".join(f"rank {r}: {s}" for r, s in sorted(seqs.items())),
        },
    )


def cond_check(rule: Rule, ctx: Context, events: list[Event]) -> Hit | None:
    return CHECKS[rule.condition["name"]](rule, ctx, events, rule.condition.get("params", {}))


CONDITIONS = {
    "present": cond_present,
    "absent_after_phase": cond_absent_after_phase,
    "last_event": cond_last_event,
    "field_differs": cond_field_differs,
    "same_seq_differs": cond_same_seq_differs,
    "seq_lag": cond_seq_lag,
    "check": cond_check,
}


# ---------------------------------------------------------------------------------------------- culprits
# Lines that tell where a rank's queue of collectives stood (align folds them into last_seq_enqueued/completed).
SEQ_REPORT_KINDS = kinds("nccl_pg_status", "nccl_dump_signal", "collective_fingerprint")
# A rank's lines of its own work, not of the communication layer: printed while its peers waited in a collective,
# they show it was elsewhere.
OWN_WORK_KINDS = PROGRESS_KINDS | kinds("rank_line")


def culprits_for(rule: Rule, ctx: Context, hit: Hit) -> list[int]:
    if hit.culprits is not None:
        return sorted(set(hit.culprits))
    strategy = rule.culprit
    reporters = sorted(hit.ranks)
    if strategy == "none":
        return []
    if strategy == "reporters":
        return reporters
    if strategy == "reporters_or_failed_worker":
        return reporters or only_failed_worker(ctx) or _device_named(ctx, hit)
    if strategy == "against_reference":
        return _against_reference(ctx, rule, hit)
    if strategy in ("fields", "fields_majority", "fields_or_reporters"):
        named = _named_ranks(ctx, hit, rule.culprit_fields)
        if strategy == "fields_or_reporters":
            return sorted(named) or reporters
        if strategy == "fields":
            return sorted(named)
        # Each rank names the one it disagrees with; the rank most of them name is the odd one out.
        return _most_named(named)
    if strategy == "peers_of_reporter":
        # The rank that computed another value than all its peers at the same step of the loop ("step 8: 33
        # features per record") is the peer that sent the other size.
        odd = [e["rank"] for e in ctx.by_kind.get("rank_value_differs", []) if e["_f"].get("about") == STEP_VALUE]
        if len(set(odd)) == 1 and odd[0] is not None:
            return [odd[0]]
        world = ctx.job.get("world_size") or 0
        if world == 2 and len(reporters) == 1:
            return [1 - reporters[0]]
        peers = sorted(ctx.visible - set(reporters))
        return peers if len(peers) == 1 else []
    if (
        strategy in ("laggards", "laggards_or_silent_peers", "silent_peers")
        and ctx.job.get("world_size") == 1
        and ctx.job.get("world_size_declared")
    ):
        return reporters  # alone in the world: the rank timed out on its own collective
    if strategy in ("laggards", "laggards_or_silent_peers"):
        lag = _laggards(ctx, hit)
        if lag:
            return lag
        if strategy == "laggards":
            return []
        return _silent_peers(ctx, hit)
    if strategy == "silent_peers":
        return _silent_peers(ctx, hit)
    if strategy == "minority":
        return reporters if len(reporters) * 2 < max(len(ctx.visible), 1) else []
    return reporters


def _against_reference(ctx: Context, rule: Rule, hit: Hit) -> list[int]:
    """Each line names the rank that found itself different (`culprit_fields[0]`) from a reference rank
    (`culprit_fields[1]`: DDP compares every process's parameters with process 0's). Where every other rank of
    the world found itself different from the same reference, the reference is the odd one; else the ones that
    did."""
    counted = _by_reported_counts(hit)
    if counted is not None:
        return counted
    named = _named_ranks(ctx, hit, rule.culprit_fields[:1])
    references = set(_named_ranks(ctx, hit, rule.culprit_fields[1:2]))
    world = ctx.job.get("world_size")
    if len(references) == 1 and len(named) >= 2 and isinstance(world, int):
        (ref,) = references
        if set(named) == set(range(world)) - {ref}:
            return [ref]
    return _most_named(named)  # else, as `fields_majority`


def _by_reported_counts(hit: Hit) -> list[int] | None:
    """Where the lines give counts ("Rank 0 has 6 params, while rank 2 has inconsistent 8 params"): each rank's own
    count, else the count a peer saw of it; the ranks whose count is not the most common one (on a tie, not the
    count rank 0 gave of itself: every rank compares itself with rank 0). A rank whose own count and a peer's view
    of it differ means the numbers were not counts (a rank outside the check sent other data): nobody is named.
    None: the lines give no counts."""
    own: dict[int, int] = {}
    seen: dict[int, int] = {}
    for e in hit.events:
        f = e["_f"]
        if f.get("params_a") is None or f.get("rank_a") is None:
            continue
        own[int(f["rank_a"])] = int(f["params_a"])
        if f.get("rank_b") is not None and f.get("params_b") is not None:
            seen[int(f["rank_b"])] = int(f["params_b"])
    if not own:
        return None
    if any(rank in own and own[rank] != count for rank, count in seen.items()):
        return []
    counts = {**seen, **own}
    tally = Counter(counts.values()).most_common()
    usual = tally[0][0]
    if len(tally) > 1 and tally[0][1] == tally[1][1]:
        if 0 not in own:
            return None  # a tie, and rank 0 did not say its own count: as the lines name the ranks
        usual = own[0]
    return sorted(rank for rank, count in counts.items() if count != usual)


def _named_ranks(ctx: Context, hit: Hit, fields: tuple[str, ...]) -> Counter[int]:
    """How many times the hit's lines name each rank in `fields` (a field may hold a list: "2, 3")."""
    named: Counter[int] = Counter()
    for e in hit.events:
        for name in fields:
            value = ctx.field(e, name)
            for part in str(value if value is not None else "").replace(" ", "").split(","):
                if part.isdigit():
                    named[int(part)] += 1
    return named


def _most_named(named: Counter[int]) -> list[int]:
    top = max(named.values(), default=0)
    return sorted(r for r, n in named.items() if n == top)


def _device_named(ctx: Context, hit: Hit) -> list[int]:
    """The rank of an unranked failure that names its GPU ("GPU 1 has a total capacity ..."), on one node where each
    process drives the GPU of its local rank (torchrun, Lightning, mp.spawn): a guess, so the finding is less sure."""
    if (ctx.job.get("nnodes") or 1) > 1:
        return []
    named = {int(m.group(1) or m.group(2)) for e in hit.events if (m := _GPU_INDEX.search(e["text"]))}
    if len(named) != 1:
        return []
    hit.confidence_factor *= DEVICE_GUESS_FACTOR
    return sorted(named)


def _laggards(ctx: Context, hit: Hit) -> list[int]:
    """The rank(s) with the lowest SeqNum among the timed-out / stuck ranks' reports; where clocks show that some
    ranks timed out only well after the others, the late ones (checks/collectives.py timed_out_late)."""
    reported_by = min((ctx.order(e)[0] for e in hit.events), default=float("inf"))
    if (late := timed_out_late(ctx, hit.events)) is not None:
        return late
    seqs: dict[int, int] = {}
    for e in hit.events:
        if e["rank"] is not None and e["seq"] is not None and (e["pg"] or "0") == "0":
            seqs[e["rank"]] = max(seqs.get(e["rank"], -1), e["seq"])
    # A reporter's queue is compared as its peers' is where every reporter's PG status line tells it: the furthest
    # it had enqueued by then, which may be past the collective that timed out. (Where one reporter's is missing,
    # its timeout's SeqNum is compared, as theirs are.)
    queued = {
        rank: max(then)
        for rank in seqs
        if (then := [at for when, at in _seq_reports(ctx, rank) if when <= reported_by + LATER_S])
    }
    if len(queued) == len(seqs):
        seqs = {rank: max(seq, queued[rank]) for rank, seq in seqs.items()}
    for rank, info in ctx.ranks.items():
        if rank in seqs or info["status"] != "visible":
            continue
        told = _seq_reports(ctx, rank) if reported_by != float("inf") else []
        if told:
            # Where the rank stood when the others failed, where its lines tell it by then; where it stood minutes
            # later (an abort with async error handling comes a minute after the timeout) says nothing of that.
            then = [at for when, at in told if when <= reported_by + LATER_S]
            if then:
                seqs[rank] = max(then)
            continue
        # The furthest collective the rank reached: the last it enqueued, else the one after its last completed.
        furthest = _furthest_seq(info.get("last_seq_enqueued"), info.get("last_seq_completed"))
        if furthest is not None:
            seqs[rank] = furthest
    if len(seqs) >= 2 and len(set(seqs.values())) > 1:
        low = min(seqs.values())
        return sorted(r for r, s in seqs.items() if s == low)
    return []


def _seq_reports(ctx: Context, rank: int) -> list[tuple[float, int]]:
    """(clock, furthest SeqNum) of each of the rank's lines that tells where its queue of collectives stood."""
    told = []
    for e in ctx.by_rank.get(rank, []):
        if e["kind"] not in SEQ_REPORT_KINDS or (e["pg"] or "0") != "0":
            continue  # (the default process group's, as align folds them)
        at = _furthest_seq(int_or_none(e["_f"].get("enqueued")), int_or_none(e["_f"].get("completed")))
        at = at if at is not None else e["seq"]
        if at is not None:
            told.append((ctx.order(e)[0], at))
    return told


def _furthest_seq(enqueued: int | None, completed: int | None) -> int | None:
    """The furthest collective a queue reached: the last it enqueued, else the one after its last completed."""
    return enqueued if enqueued is not None else completed + 1 if completed is not None else None


def _silent_peers(ctx: Context, hit: Hit) -> list[int]:
    """Visible ranks that did not report the failure: the rank the others were waiting for.

    Only ranks whose whole output is here count (a per-rank file or a tee'd console stream): in a pasted excerpt
    a rank without the line may just have been cut out of the paste.
    """
    reporters = set(hit.ranks)
    if not reporters:
        return []
    # A rank with its own files in a torchrun tree is here whole even when they hold no recognised line (it was busy
    # elsewhere, printing to a file of its own, and torchrun SIGTERMed it).
    complete = {
        r for r, rows in ctx.by_rank.items() if any(e["tee_lrank"] is not None or e["node"] is not None for e in rows)
    } | {r for r, info in ctx.ranks.items() if info.get("node") is not None}
    # A peer with an error of its own ("Connection closed by peer") is not silent: it failed after the waiters.
    erred = {r for r in ctx.states if first_own_error(ctx, r) is not None}
    world = ctx.job.get("world_size") if ctx.job.get("world_size_declared") else None
    if world == 2 and len(reporters) == 1 and _alive_without_timeout(ctx, 1 - next(iter(reporters)), erred):
        # Two ranks: the one that timed out waited for the other, which logged on without timing out.
        return [1 - next(iter(reporters))]
    # A rank that torchrun stopped at teardown (SIGTERM) with no error of its own was alive and not in the failed
    # collective, whether its summary entry is its only trace or its lines are in a console without a file of its own.
    torn_down = {r for r, info in ctx.ranks.items() if info["status"] != "silent" and info["stopped_by"] == "launcher"}
    peers = sorted(r for r in ((ctx.visible & complete) | torn_down) - reporters - erred)
    if not peers:
        # No rank stayed silent: a rank whose only error is a lost connection printed after the others timed out
        # came back to the collective late and found them gone. It is the one they waited for.
        peers = sorted(r for r in ctx.visible - reporters if _came_back_late(ctx, r, hit))
    if not peers:
        peers = _busy_while_waited(ctx, hit, reporters, erred)
    if not peers:
        peers = _the_one_not_reporting(ctx, hit, reporters, erred)
    # The culprit is the minority that is somewhere else; when most ranks are silent, silence says nothing.
    if peers and len(peers) <= len(reporters):
        return peers
    return []


def _busy_while_waited(ctx: Context, hit: Hit, reporters: set[int], erred: set[int]) -> list[int]:
    """Ranks that printed lines of their own work (progress, their script's rank-tagged lines) while the reporters
    waited in the collective that timed out, between entering it (a timeout before their timeouts) and timing out,
    with no error of their own: they were elsewhere, and the others waited for them."""
    timeouts = [t for e in hit.events if (t := int_or_none(e["_f"].get("timeout_ms"))) is not None]
    failed_at = min((ctx.order(e)[0] for e in hit.events), default=float("inf"))
    if not timeouts or failed_at == float("inf"):
        return []
    entered = failed_at - max(timeouts) / 1000
    return sorted(
        r
        for r in ctx.visible - reporters - erred
        if any(
            e["kind"] in OWN_WORK_KINDS and (at := clock(e)) is not None and entered + SAME_MOMENT_S < at <= failed_at
            for e in ctx.by_rank.get(r, [])
        )
    )


def _the_one_not_reporting(ctx: Context, hit: Hit, reporters: set[int], erred: set[int]) -> list[int]:
    """In a paste with no rank's whole output: every rank of the world but one timed out on one collective, and that
    one printed no error. A paste may have cut its line, so the finding is less sure."""
    world = ctx.job.get("world_size") or (max(reporters) + 1)
    seqs = {e["seq"] for e in hit.events}
    missing = set(range(world)) - reporters
    if len(reporters) < 2 or len(missing) != 1 or missing & erred or len(seqs) != 1:
        return []
    hit.confidence_factor *= PASTE_GUESS_FACTOR
    return sorted(missing)


def _came_back_late(ctx: Context, rank: int, hit: Hit) -> bool:
    """The rank's first error says only that a peer went away, and it came after every timeout of `hit`."""
    first = first_own_error(ctx, rank)
    if first is None or first["kind"] not in REMOTE_KINDS or not hit.events:
        return False
    # Lines of different files compare only by their clocks; lines of one file by their place in it.
    if all(ctx.order(e)[0] < float("inf") for e in hit.events if e["sid"] != first["sid"]) and (
        ctx.order(first)[0] < float("inf") or all(e["sid"] == first["sid"] for e in hit.events)
    ):
        return all(
            ctx.order(first)[0] > ctx.order(e)[0] if e["sid"] != first["sid"] else first["line"] > e["line"]
            for e in hit.events
        )
    return _worked_before(ctx, rank, first)


def _worked_before(ctx: Context, rank: int, error: Event) -> bool:
    """Without clocks to compare: after its last progress line the rank printed its own work (its script's lines: a
    checkpoint upload, an evaluation), in that file, and its error is a lost connection, not a timeout of its own:
    it was elsewhere when its peers entered the collective, and came to it after they had given up."""
    progress = [e for e in ctx.by_rank.get(rank, []) if e["kind"] in PROGRESS_KINDS]
    if not progress:
        return False
    last = max(progress, key=lambda e: (e["sid"] == error["sid"], e["line"]))
    return any(
        e["kind"] == "rank_line"
        and e["sid"] == last["sid"]
        and e["line"] > last["line"]
        and not (e["sid"] == error["sid"] and e["line"] > error["line"])
        for e in ctx.by_rank.get(rank, [])
    )


def _alive_without_timeout(ctx: Context, rank: int, erred: set[int]) -> bool:
    """The rank printed lines and none of them is an error: it was alive, busy elsewhere. NCCL's lines of a process
    whose rank no line names ("host:pid:tid [dev] NCCL INFO ...") show such a rank alive too."""
    if rank in erred:
        return False
    if rank in ctx.visible:
        return True
    ranks_of_process: dict[str, set[int | None]] = defaultdict(set)
    for e in ctx.rows:
        if (process := nccl_process(e["text"])) is not None:
            ranks_of_process[process].add(e["rank"])
    return any(ranks == {None} for ranks in ranks_of_process.values())


# Where torch's CUDA OOM message names the device: "(GPU 0; 22.20 GiB total capacity ...)", "GPU 1 has a total
# capacity of ..." (torch 2.1 printed "capacty").
_GPU_INDEX = regex.compile(r"\(GPU (\d+); |\bGPU (\d+) has a total capac")
# How much less sure a culprit read from a GPU index is than one a rank prefix names.
DEVICE_GUESS_FACTOR = 0.85


# ---------------------------------------------------------------------------------------------- findings
class _Values(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "?"


def _call_op(ctx: Context, rank: int | None) -> str | None:
    """The collective a rank was in, from its traceback's last torch.distributed frame (gloo names no op)."""
    calls = [e for e in ctx.by_kind.get("c10d_call", []) if e["rank"] == rank and e["_f"].get("api") in API_OPTYPE]
    return API_OPTYPE[calls[-1]["_f"]["api"]] if calls else None


def _numel(shape: Any) -> int | None:
    """Element count of a printed TensorShape ("64, 48" -> 3072; "" is a scalar)."""
    if shape is None:
        return None
    dims = [d for d in str(shape).replace(" ", "").split(",") if d]
    if not all(d.isdigit() for d in dims):
        return None
    count = 1
    for d in dims:
        count *= int(d)
    return count


def _describe_collective(c: dict[str, Any] | None) -> str:
    if not c:
        return "a collective"
    text = str(c["op"] or "a collective")
    if c["seq"] is not None:
        text += f" SeqNum {c['seq']}"
    extra = []
    if c["numel_in"] is not None:
        extra.append(f"{c['numel_in']} elements")
    if c["timeout_ms"] is not None:
        extra.append(f"timeout {c['timeout_ms']} ms")
    return text + (f" ({', '.join(extra)})" if extra else "")


def _collective(ctx: Context, hit: Hit) -> dict[str, Any] | None:
    rows = [e for e in hit.events if e["op"] is not None or e["seq"] is not None]
    if not rows:
        op = next((o for o in (_call_op(ctx, e["rank"]) for e in hit.events) if o), None)
        timeout = next((e["timeout_ms"] for e in hit.events if e["timeout_ms"] is not None), None)
        if op is None and timeout is None:
            return None
        return {
            "op": op,
            "seq": None,
            "numel_in": None,
            "numel_out": None,
            "dtype": None,
            "timeout_ms": timeout,
            "pg": None,
            "per_rank": [
                {"rank": e["rank"], "op": _call_op(ctx, e["rank"]), "seq": None, "numel_in": None, "numel_out": None}
                for e in hit.events
                if e["rank"] is not None
            ][:64],
        }
    first = rows[0]
    per_rank = []
    seen: set[int] = set()
    for e in rows:
        if e["rank"] is not None and e["rank"] not in seen:
            seen.add(e["rank"])
            per_rank.append(
                {
                    "rank": e["rank"],
                    "op": e["op"],
                    "seq": e["seq"],
                    "numel_in": e["numel_in"],
                    "numel_out": e["numel_out"],
                }
            )
    # DETAIL fingerprints name each rank's tensor shape: the per-rank sizes a replay --as-logged needs.
    shapes: dict[int, tuple[Any, Any]] = {}
    for e in rows:
        f = e["_f"]
        if e["kind"] == "collective_mismatch_detail":
            shapes.setdefault(int(f["rank_a"]), (f.get("op"), f.get("shape")))
            if f.get("rank_b") is not None:
                shapes.setdefault(int(f["rank_b"]), (f.get("op_b"), f.get("shape_b")))
        elif e["kind"] == "collective_fingerprint" and e["rank"] is not None:
            shapes.setdefault(e["rank"], (e["op"], f.get("shape")))
    for entry in per_rank:
        if entry["numel_in"] is None and entry["rank"] in shapes:
            entry["numel_in"] = entry["numel_out"] = _numel(shapes[entry["rank"]][1])
    for rank, (op, shape) in sorted(shapes.items()):
        if rank not in {p["rank"] for p in per_rank}:
            per_rank.append(
                {"rank": rank, "op": op, "seq": first["seq"], "numel_in": _numel(shape), "numel_out": _numel(shape)}
            )
    dtype = ctx.field(first, "dtype")
    return {
        "op": first["op"],
        "seq": first["seq"],
        "numel_in": first["numel_in"],
        "numel_out": first["numel_out"],
        "dtype": str(dtype) if dtype is not None else None,
        "timeout_ms": next((e["timeout_ms"] for e in rows if e["timeout_ms"] is not None), None),
        "pg": first["pg"],
        "per_rank": per_rank,
    }


def _ranks_text(ranks: list[int]) -> str:
    if not ranks:
        return "unknown"
    if len(ranks) > 6:
        return (
            f"{ranks[0]}–{ranks[-1]} ({len(ranks)} ranks)"
            if ranks == list(range(ranks[0], ranks[-1] + 1))
            else (", ".join(map(str, ranks[:6])) + f", … ({len(ranks)} ranks)")
        )
    return ", ".join(map(str, ranks))


def _evidence(ctx: Context, events: list[Event]) -> list[Evidence]:
    out = []
    seen: set[tuple[int, int]] = set()
    for e in events:
        key = (e["sid"], e["line"])
        if key in seen:
            continue
        seen.add(key)
        item: Evidence = {"path": e["source"], "line": e["line"], "rank": e["rank"], "text": e["text"]}
        context = ctx.aligned.contexts.get(key)
        if context:
            item["context"] = [{"line": n, "text": t} for n, t in context]
        out.append(item)
        if len(out) >= MAX_EVIDENCE:
            break
    return out


def finding(rule: Rule, ctx: Context, hit: Hit, input_path: str) -> Finding:
    culprits = culprits_for(rule, ctx, hit)
    collective = _collective(ctx, hit)
    values = _Values({k: v for k, v in (collective or {}).items() if k != "per_rank" and v is not None})
    first: Mapping[str, Any] = hit.events[0] if hit.events else {}
    for name, value in (first.get("_f") or {}).items():
        values.setdefault(name, value)
    world = ctx.job.get("world_size")
    values.update(
        {
            "collective_desc": _describe_collective(collective),
            "world_sizes": ",".join(str(w) for w in sorted({1, 2, *([world] if world else [])})),
            "ranks": _ranks_text(sorted(hit.ranks)),
            "culprits": _ranks_text(culprits),
            "world_size": ctx.job.get("world_size") or "?",
            "input": input_path,
            "text": first.get("text", ""),
        }
    )
    values.update({k: _ranks_text(v) if isinstance(v, list) else v for k, v in hit.values.items()})
    severity = hit.severity or rule.severity
    proof = ctx.completion
    # An earlier attempt failed and the elastic restart recovered (the job exited 0, or its last attempt finished):
    # a failure that happened, reported as a warning, never as something the run survived.
    recovered = ctx.restart_recovered(hit.events)
    if recovered and SEVERITY_ORDER[severity] > SEVERITY_ORDER["warning"]:
        severity = "warning"
    survived = False
    if (
        not recovered
        and proof is not None
        and proof.proven
        and (hit.category or rule.category) in SURVIVABLE
        and SEVERITY_ORDER[severity] > SEVERITY_ORDER["warning"]
    ):
        severity = "warning"  # the logs prove the run finished: this did not stop it (a caught, logged error)
        survived = True
    # A generic rule that found a failure of a known category gives that category's next step.
    step = ctx.steps.get(hit.category, rule.next_step) if hit.category not in (None, rule.category) else rule.next_step
    confidence = rule.confidence * hit.confidence_factor
    if ctx.hidden:
        confidence *= 0.85
    if not culprits and rule.culprit not in ("none",):
        confidence *= 0.85
    return {
        "rule": rule.id,
        "category": hit.category or rule.category,
        "severity": severity,
        "confidence": round(min(1.0, confidence), 2),
        "title": rule.title,
        "message": rule.message.format_map(values),
        "ranks": sorted(hit.ranks),
        "culprit_ranks": culprits,
        "collective": collective,
        "evidence": _evidence(ctx, hit.events),
        "next_step": step["id"],
        "specificity": rule.specificity,
        "survived": survived,
        "next_step_command": step.get("command", "").format_map(values) or None,
        "next_step_detail": step.get("detail", "").format_map(values) or None,
    }


def category_steps(rules: list[Rule]) -> dict[str, dict[str, Any]]:
    """Each category's usual next step: the step most of its main-stage rules give (as the least specific of them
    words it), for a generic rule that found a failure of that category."""
    by_category: dict[str, list[Rule]] = defaultdict(list)
    for rule in rules:
        if rule.stage == "main":
            by_category[rule.category].append(rule)
    steps: dict[str, dict[str, Any]] = {}
    for category, members in by_category.items():
        votes = Counter(r.next_step["id"] for r in members)
        usual = max(votes, key=lambda step_id: (votes[step_id], -int(step_id[1:])))  # a tie: the earlier step
        steps[category] = min((r for r in members if r.next_step["id"] == usual), key=lambda r: r.specificity).next_step
    return steps


def evaluate(rules: list[Rule], aligned: Aligned, input_path: str = "") -> list[Finding]:
    """Main-stage rules first; then the fallback rules, which see what the main stage found and which events it used
    (the generic failure detector takes the error lines nothing else explained; the stall rule speaks only when
    nothing failed and nothing proves the run finished)."""
    ctx = Context(aligned)
    ctx.steps = category_steps(rules)
    findings = ctx.findings
    for stage in STAGES:
        for rule in rules:
            if rule.stage != stage:
                continue
            try:
                hit = CONDITIONS[rule.condition["type"]](rule, ctx, matched(rule, ctx))
                if hit is not None:
                    findings.append(finding(rule, ctx, hit, input_path))
                    ctx.claimed.update((e["sid"], e["line"]) for e in hit.events)
            except (KeyError, ValueError, TypeError, IndexError, AttributeError) as exc:
                # Log text is untrusted and endlessly varied: a line a rule did not foresee costs that rule's
                # finding, said in a note, never the analysis.
                why = f"{type(exc).__name__}: {exc}"
                aligned.notes.append(f"rule {rule.id} could not be evaluated on this input ({why})")
    return list(findings)
