"""Flight Recorder dumps matched across ranks, and read together with the logs.

Entries are matched by process group and collective sequence id (the logs' SeqNum). For each group this finds
the first collective that did not complete on every member (the one that hung), which ranks never issued it,
the state it reached on each rank, what differs between ranks (op, sizes, dtypes, state) and its stack.

Unlike PyTorch's analyser, a member rank without a dump is a fact to explain, not an error: the logs say how it
ended (exit code, signal, a clean finish), and its peers' dumps say how far it got (a completed all_reduce needs
every member, so the last one its peers completed is one it joined).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import regex

from logscope.align.state import RankState
from logscope.ingest.flight_recorder import DumpFile, FlightDump, FlightEntry, read_dumps
from logscope.vocab import RankRow

if TYPE_CHECKING:  # the model holds a FlightReport
    from logscope.align.model import Aligned

# Ops that complete on a rank only once every member contributed: completed on one rank, joined by all. (A
# broadcast's root or a send can complete before its peers arrive.)
NEEDS_EVERY_RANK = frozenset(
    {"all_reduce", "allreduce", "all_gather", "allgather", "_allgather_base", "all_gather_into_tensor"}
    | {"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor", "all_to_all", "alltoall_base", "barrier"}
)
STATE_ORDER = {"scheduled": 0, "started": 1, "completed": 2}
LAST_ENTRIES = 8  # the per-rank table shows each rank's last entries of the group that hung


def op_name(entry: FlightEntry) -> str:
    """ "nccl:all_reduce" -> "all_reduce" (the profiling name carries the backend)."""
    return entry.op.split(":", 1)[-1]


def numel(sizes: list[Any]) -> int | None:
    total = 0
    for shape in sizes:
        dims = shape if isinstance(shape, list) else [shape]
        if any(d is None for d in dims):
            return None
        count = 1
        for d in dims:
            count *= d
        total += count
    return total


# A point-to-point op's profiling name: "nccl:send 2->0" (rank 2 sends to 0), "nccl:recv 3<-2" (3 receives from 2).
_P2P = regex.compile(r"\b(?P<kind>send|recv) (?P<a>\d+)(?:->|<-)(?P<b>\d+)")


@dataclass
class Hang:
    """The first collective of a process group that did not complete on every member."""

    pg: str
    pg_desc: str
    seq: int
    op: str
    members: list[int]
    entries: dict[int, FlightEntry]  # rank -> its entry for this collective (dumped ranks that issued it)
    never_issued: list[int]  # dumped members whose buffer ends before it
    without_dump: list[int]  # members that left no dump
    culprits: list[int]
    reason: str  # why the culprits are the culprits, in a sentence
    # The culprits went on past it into a collective of another group that its waiting members never reached: they
    # skipped it (a call on another group), rather than hung before it.
    skipped: bool = False

    @property
    def states(self) -> dict[int, str]:
        return {r: e.state for r, e in sorted(self.entries.items())}


@dataclass
class Mismatch:
    pg: str
    seq: int
    what: str  # op | input_sizes | output_sizes | dtypes
    per_rank: dict[int, str]
    entries: dict[int, FlightEntry]
    culprits: list[int]


@dataclass
class PeerMismatch:
    """Point-to-point ops still pending in the dumps whose other end no peer posted: a send no rank receives, a
    receive no rank sends to. The culprit is the rank every unmatched op involves (it sent to, or received from,
    the wrong peer)."""

    unmatched: list[tuple[int, FlightEntry]]  # (rank whose dump holds it, the pending send or recv)
    culprits: list[int]


@dataclass
class FlightReport:
    dumps: list[FlightDump]
    members: list[int]  # the default group's ranks (else every rank any group names)
    hangs: list[Hang] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    peer_mismatch: PeerMismatch | None = None
    without_dump: list[int] = field(default_factory=list)
    joined_up_to: dict[int, int] = field(default_factory=dict)  # rank without dump -> last SeqNum its peers prove
    log_view: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> what its logs say

    def dump_of(self, rank: int) -> FlightDump | None:
        return next((d for d in self.dumps if d.rank == rank), None)


def match(
    dumps: list[FlightDump],
    states: dict[int, RankState],
    rank_rows: list[RankRow],
    world_size: int | None,
) -> FlightReport | None:
    """Match the dumps across ranks and put each rank's logs beside them; None when there are no dumps."""
    if not dumps:
        return None
    groups: dict[str, list[int]] = {}
    descs: dict[str, str] = {}
    for d in dumps:
        for pg, ranks in d.pg_ranks.items():
            groups[pg] = sorted(set(groups.get(pg, [])) | set(ranks))
            descs[pg] = descs.get(pg) or d.pg_desc.get(pg, "")
        for e in d.entries:
            groups.setdefault(e.pg, [])  # a group the dump's pg_config lacks (cut off with the end of the file)
            descs[e.pg] = descs.get(e.pg) or e.pg_desc
    if world_size and not groups.get("0"):
        groups["0"] = list(range(world_size))
    members = groups.get("0") or sorted({r for ranks in groups.values() for r in ranks} | {d.rank for d in dumps})
    report = FlightReport(dumps=dumps, members=members)
    dumped = {d.rank for d in dumps}
    report.without_dump = [r for r in members if r not in dumped]
    for pg in sorted(groups, key=lambda g: (g != "0", g)):
        _match_group(report, pg, descs.get(pg, ""), groups.get(pg) or sorted(dumped))
    _follow_waits(report)
    report.peer_mismatch = _peer_mismatch(report.dumps)
    signals = {r["rank"]: r.get("signal") for r in rank_rows}
    for rank in sorted(set(members) | dumped):
        report.log_view[rank] = {**_log_view(states.get(rank)), "signal": signals.get(rank)}
    return report


def _match_group(report: FlightReport, pg: str, desc: str, members: list[int]) -> None:
    by_rank: dict[int, dict[int, FlightEntry]] = {}
    for d in report.dumps:
        if d.rank in members:
            by_rank[d.rank] = {e.seq: e for e in d.entries if e.pg == pg and e.seq is not None and e.seq > 0}
    seqs = sorted({s for entries in by_rank.values() for s in entries})
    if not seqs:
        return
    without = [r for r in members if r not in by_rank]
    for seq in seqs:
        present = {r: entries[seq] for r, entries in by_rank.items() if seq in entries}
        report.mismatches += _differences(pg, seq, present, by_rank)
    # What the dumps of the others prove about a member without one: it joined every collective they completed
    # that needs every rank.
    proven = [
        s
        for s in seqs
        if any(
            (e := entries.get(s)) is not None and e.state == "completed" and op_name(e) in NEEDS_EVERY_RANK
            for entries in by_rank.values()
        )
    ]
    if proven and pg == "0":
        report.joined_up_to.update(dict.fromkeys(without, proven[-1]))
    # A dump cut short ends where the cut fell, not where its rank stopped: it does not count for how far it got.
    cut = {d.rank for d in report.dumps if d.truncated}
    whole = {r: entries for r, entries in by_rank.items() if r not in cut} or by_rank
    hung = _hung_seq(whole)
    if hung is not None:
        present = {r: entries[hung] for r, entries in by_rank.items() if hung in entries}
        never = sorted(r for r, entries in whole.items() if max(entries, default=0) < hung)
        report.hangs.append(_hang(pg, desc, hung, members, present, never, without, by_rank))


def _peer_mismatch(dumps: list[FlightDump]) -> PeerMismatch | None:
    """Pending sends and receives (profiling names "nccl:send 2->0", "nccl:recv 3<-2") whose other end is not
    pending on the peer's dump. They pair in order per (sender, receiver): the k-th send of a to b with b's k-th
    receive from a, so the ends are counted (the ops of a batch_isend_irecv stay "scheduled" in the dumps after
    their coalesced entry completes). Only ops whose peer left a dump count: the others' ends are unknown."""
    dumped = {d.rank for d in dumps}
    ends: dict[tuple[int, int], dict[str, list[tuple[int, FlightEntry]]]] = {}
    for d in dumps:
        for e in d.entries:
            if not e.is_p2p or e.state == "completed" or (m := _P2P.search(e.op)) is None:
                continue
            a, b = int(m["a"]), int(m["b"])
            pair = (a, b) if m["kind"] == "send" else (b, a)  # (sender, receiver)
            if set(pair) <= dumped:
                ends.setdefault(pair, {"send": [], "recv": []})[m["kind"]].append((d.rank, e))
    unmatched: list[tuple[int, FlightEntry]] = []
    involved: list[set[int]] = []
    for pair, sides in sorted(ends.items()):
        sends, recvs = sides["send"], sides["recv"]
        if len(sends) != len(recvs):
            surplus = sends if len(sends) > len(recvs) else recvs
            unmatched.append(surplus[-1])
            involved.append(set(pair))
    if not unmatched:
        return None
    common = set.intersection(*involved)
    return PeerMismatch(unmatched, sorted(common) if len(common) == 1 else [])


def _follow_waits(report: FlightReport) -> None:
    """The ranks that never issued the hung collective of one group because they were waiting in a collective of
    another group: that group's hang is the first one, and its culprits, where they issued the first hang's
    collective, went on past the one their peers wait in (they skipped it)."""
    if len(report.hangs) < 2 or not report.hangs[0].never_issued:
        return
    first = report.hangs[0]
    waiting = set(first.never_issued)
    for hang in report.hangs[1:]:
        if not hang.culprits or not waiting <= set(hang.entries) or set(hang.culprits) & waiting:
            continue
        if any(hang.entries[r].state == "completed" for r in waiting):
            continue
        hang.skipped = set(hang.culprits) <= set(first.entries)
        went_on = (
            f"; they went on to {op_name(first.entries[hang.culprits[0]])} SeqNum {first.seq}" if hang.skipped else ""
        )
        hang.reason += (
            f"{went_on}, while rank(s) {', '.join(map(str, sorted(waiting)))} waited in it"
            f" and so never issued SeqNum {first.seq} of group {first.pg}"
        )
        report.hangs.remove(hang)
        report.hangs.insert(0, hang)
        return


def _hung_seq(by_rank: dict[int, dict[int, FlightEntry]]) -> int | None:
    """The collective the group stopped at: the one after the last that the furthest-behind rank issued, when the
    ranks' buffers end at different SeqNums; else the first one not completed everywhere (gloo's entries stay
    "scheduled" for good: then the last one)."""
    last = {r: max(entries) for r, entries in by_rank.items() if entries}
    if not last:
        return None
    if min(last.values()) < max(last.values()):
        return min(last.values()) + 1
    entries = [e for rank_entries in by_rank.values() for e in rank_entries.values()]
    if not any(e.state != "scheduled" for e in entries):
        return max(last.values())
    open_seqs = sorted({e.seq for e in entries if e.state != "completed" and e.seq is not None})
    return open_seqs[0] if open_seqs else None


def _hang(
    pg: str,
    desc: str,
    seq: int,
    members: list[int],
    present: dict[int, FlightEntry],
    never: list[int],
    without: list[int],
    by_rank: dict[int, dict[int, FlightEntry]],
) -> Hang:
    op = Counter(e.op for e in present.values()).most_common(1)[0][0] if present else "?"
    odd = _odd_ones(present, by_rank)
    if not present and not never:
        culprits, reason = [], "no dump holds an entry for it"
    elif odd:
        culprits, reason = odd, "issued another op or size than their peers at this SeqNum"
    elif never:
        culprits, reason = never, "never issued it (their dumps end before it)"
    elif without and present:
        culprits, reason = without, "left no dump, and every rank that dumped issued it: only they can be missing"
    else:
        lowest = min(STATE_ORDER.get(e.state, 0) for e in present.values())
        behind = sorted(r for r, e in present.items() if STATE_ORDER.get(e.state, 0) == lowest)
        # Others that went on past it (a rank's own later entries say only that it enqueued more, asynchronously).
        ahead = [r for r, entries in by_rank.items() if r not in behind and max(entries, default=0) > seq]
        if behind and (ahead or len(behind) < len(present)):
            culprits, reason = behind, "did not get past it while the others did"
        elif len(members) == 1:
            culprits, reason = list(members), "is the only member of the group"
        else:
            culprits, reason = [], "every member issued it and none got past it: the dumps cannot tell who"
    return Hang(pg, desc, seq, op, members, dict(sorted(present.items())), never, without, culprits, reason)


def _odd_ones(present: dict[int, FlightEntry], by_rank: dict[int, dict[int, FlightEntry]]) -> list[int]:
    """Ranks whose entry differs in op or sizes: the minority, or on a tie the ranks that broke their own pattern
    (another op than the last time they issued a collective on that tensor shape)."""

    def shape(e: FlightEntry) -> tuple[str, str]:
        return (op_name(e), str(e.input_sizes))

    counts = Counter(shape(e) for e in present.values()).most_common()
    if len(counts) < 2:
        return []
    if counts[0][1] > counts[1][1]:
        return sorted(r for r, e in present.items() if shape(e) != counts[0][0])
    broke = []
    for rank, e in present.items():
        earlier = [x for s, x in sorted(by_rank[rank].items()) if s < (e.seq or 0) and x.input_sizes == e.input_sizes]
        if earlier and op_name(earlier[-1]) != op_name(e):
            broke.append(rank)
    return sorted(broke)


def _differences(
    pg: str, seq: int, present: dict[int, FlightEntry], by_rank: dict[int, dict[int, FlightEntry]]
) -> list[Mismatch]:
    if len(present) < 2:
        return []
    out = []
    facets = {
        "op": lambda e: e.op,
        "input_sizes": lambda e: str(e.input_sizes),
        "output_sizes": lambda e: str(e.output_sizes),
        "dtypes": lambda e: "/".join(e.input_dtypes),
    }
    for what, of in facets.items():
        values = {r: of(e) for r, e in present.items()}
        if len(set(values.values())) > 1:
            counts = Counter(values.values()).most_common()
            if counts[0][1] > counts[1][1]:
                culprits = sorted(r for r, v in values.items() if v != counts[0][0])
            else:
                culprits = _odd_ones(present, by_rank)
            out.append(Mismatch(pg, seq, what, values, present, culprits))
            if what == "op":
                break  # different ops: their sizes differing says nothing more
    return out


def _log_view(state: RankState | None) -> dict[str, Any]:
    """What a rank's logs say about how it ended and how far it got in the default group."""
    if state is None:
        return {"status": "absent"}
    c = state.collectives.get("0")
    last = state.last_event
    return {
        "status": state.status,
        "exit_code": state.exit_code,
        "ended": state.ended,
        "log_seq_enqueued": c.enqueued if c else None,
        "log_seq_completed": c.completed if c else None,
        "log_seq": state.last_seq("0"),
        "last_line": str(last["text"])[:160] if last else None,
        "last_path": f"{last['source']}:{last['line']}" if last else None,
    }


# ---------------------------------------------------------------------------------------------- JSON
def entry_json(e: FlightEntry) -> dict[str, Any]:
    return {
        "entry": e.index,
        "pg": e.pg,
        "seq": e.seq,
        "op": e.op,
        "input_sizes": e.input_sizes,
        "output_sizes": e.output_sizes,
        "dtypes": e.input_dtypes,
        "state": e.state,
    }


def to_json(report: FlightReport) -> dict[str, Any]:
    """The diagnosis' `flight_recorder` object (docs/schema/diagnosis-v1.json)."""
    hang_pg = report.hangs[0].pg if report.hangs else "0"
    ranks = []
    for rank in sorted(set(report.members) | {d.rank for d in report.dumps}):
        dump = report.dump_of(rank)
        row: dict[str, Any] = {"rank": rank, "dump": dump.path if dump else None, "logs": report.log_view.get(rank)}
        if dump is not None:
            row["pg_status"] = dump.pg_status.get(hang_pg)
            row["last_entries"] = [entry_json(e) for e in dump.entries if e.pg == hang_pg][-LAST_ENTRIES:]
        else:
            row["joined_up_to_seq"] = report.joined_up_to.get(rank)
        ranks.append(row)
    return {
        "dumps": [
            {
                "rank": d.rank,
                "path": d.path,
                "format": d.format,
                "version": d.version,
                "comm_lib_version": d.comm_lib_version,
                "entries": len(d.entries),
                "truncated": d.truncated,
            }
            for d in report.dumps
        ],
        "members": report.members,
        "ranks_without_dump": report.without_dump,
        "hangs": [
            {
                "pg": h.pg,
                "pg_desc": h.pg_desc,
                "seq": h.seq,
                "op": h.op,
                "states": {str(r): s for r, s in h.states.items()},
                "never_issued": h.never_issued,
                "without_dump": h.without_dump,
                "culprit_ranks": h.culprits,
                "reason": h.reason,
                "stack": stack_of(h),
            }
            for h in report.hangs
        ],
        "mismatches": [
            {
                "pg": m.pg,
                "seq": m.seq,
                "what": m.what,
                "per_rank": {str(r): v for r, v in m.per_rank.items()},
                "culprit_ranks": m.culprits,
            }
            for m in report.mismatches
        ],
        "ranks": ranks,
    }


def stack_of(hang: Hang) -> list[str]:
    """The Python stack that issued the hung collective (innermost first), from the first rank that has one."""
    for e in hang.entries.values():
        if e.frames:
            return [f"{f.name} at {f.filename}:{f.line}" for f in e.frames]
    return []


def from_dumps(files: list[DumpFile], aligned: Aligned) -> FlightReport | None:
    """Read the dumps found under the input (or named with --flight-recorder) and match them beside the logs;
    what could not be read or was refused becomes a note of the analysis."""
    read = read_dumps(files)
    aligned.notes.extend(read.notes)
    return match(read.dumps, aligned.states, aligned.rank_rows(), aligned.job.get("world_size"))
