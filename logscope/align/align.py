"""Align the ranks: global rank and node for every event, phases, the ChildFailedError table, per-rank facts.

Evidence for a stream's global rank, strongest first: the c10 `[rank<N>]:` prefix, the job's own identity lines
(rank=, global_rank =, skrl's Distributed (rank: ...), ProcessGroupNCCL options), torchrun's rendezvous block, and
last the local rank on a single node. Clocks are never compared across hosts; order within a rank is source order.
"""

from __future__ import annotations

import json
import signal as signal_module
from collections import Counter, defaultdict
from typing import Any, cast

import polars as pl
import regex

from logscope.align.job import job_facts
from logscope.align.model import RANK_SCHEMA, Aligned
from logscope.align.state import (
    AGENT_KINDS,
    EARLY_PHASES,
    END_KINDS,
    FORCED_EXIT,
    PROGRESS_KINDS,
    TEARDOWN_EXIT,
    build_states,
    completion,
    went_on_from,
)
from logscope.events.catalogue import catalogue, kinds
from logscope.events.extract import Extraction
from logscope.events.table import events_frame
from logscope.ingest.normalise import nccl_process
from logscope.ingest.read import SourceStats
from logscope.ingest.sources import Source
from logscope.values import int_list, int_or_none, int_ranges
from logscope.vocab import PHASE_ORDER, Event, RankRow

# ProcessGroupNCCL's own prefix on a line of the default process group (PG ID 0), whose rank is the global rank:
# "[PG ID 0 PG GUID 0(default_pg) Rank 2]" (torch >= 2.4), "[PG ID 0 PG GUID 0 Rank 2]".
_DEFAULT_PG_PREFIX = regex.compile(r"\[PG ID 0 PG GUID \w+(?:\([^()\]]{0,64}\))? Rank (\d+)\]")

# Lines that name the rank that prints them and its world size.
IDENTITY_KINDS = catalogue().tagged("identity")
WORLD_SIZE_KINDS = IDENTITY_KINDS
# The largest world whose every rank gets a row of its own (a rank number beyond it is not trusted to mean a world).
MAX_WORLD = 65536
# Lines that name the rank that prints them (rsl_rl: "Synchronizing parameters for rank 11...").
OWN_RANK_KINDS = IDENTITY_KINDS | kinds("sync_start")
# Kinds whose lines name the rank they are about, and the field that holds it (signatures.yaml `names_rank`).
NAMES_RANK = {s.kind: s.names_rank for s in catalogue().signatures if s.names_rank}
# Lines that name the local rank of the process they are about: its rank on one node (`worker_failed_ranks`).
LOCAL_RANK_KINDS = frozenset({"worker_failed", "process_exit", "signal_received"})
# A training script's rank tag at the start of its message, after any logger prefix: "[RANK 0] ...", "[rank 1] ...",
# also behind bracketed fields of its own logger and with the world size: "[10:09:59][rank1/4][INFO] ...", or behind a
# bare clock: "16:21:51 [rank0] training loop finished".
_RANK_TAG = regex.compile(
    r"(?:(?:\d{4}-\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d{1,6})? )?(?:\[[^\[\]]{1,40}\] ?){0,3}"
    r"(?:\[(?:RANK|Rank|rank)[ _]?(?P<rank>\d{1,5})(?:/\d{1,5})?\](?: |\[)"
    # The script's own "rank4: " opening its message, after the logger's prefix ("2026-12-05 21:22:54 INFO rank4:
    # step 2 loss 2.28", the stamp and level read off by normalise).
    r"|(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )?(?:RANK|Rank|rank)[ _]?(?P<rank>\d{1,5}): )"
)
# A file named for one rank ("rank0.log", "train_rank_3.txt", "rank2-stack.log").
_NAMED_RANK = regex.compile(r"(?i)(?<![a-z0-9])rank[_-]?(\d{1,5})(?![0-9])")
# A JSON-lines logger's record that carries the rank as a field of its own.
_JSON_RANK = regex.compile(r'\{[^{}]{0,300}?"(?:rank|global_rank|RANK)": ?"?(\d{1,5})"?[,}]')
# NCCL's record prefix ("node:2134736:2285781 [0] ...": host, pid, thread, device) and its proxy thread's own rank.
_PROXY_RANK = regex.compile(r"\[Proxy Service (\d+)\]")
# The device in NCCL's record prefix ("host:pid:tid [2] NCCL INFO ..."): which end of a ring hop is the printer's.
_NCCL_DEVICE = regex.compile(r"[\w.-]+:\d+:\d+ \[(\d+)\] ")
# A source and, in a console with tee prefixes, the local rank a line is prefixed with.
Stream = tuple[int, int | None]
# How far after mp.spawn's "-- Process N terminated with the following error:" its child's traceback can reach.
SPAWN_TRACEBACK_LINES = 200
# Torch's uninitialised "last completed" values (torch_logs.md §3.3) are absurd; treat them as unknown.
MAX_SANE_SEQ = 1 << 40


def signal_name(exit_code: int | None) -> str | None:
    if exit_code is None or exit_code >= 0:
        return None
    try:
        return signal_module.Signals(-exit_code).name
    except ValueError:
        return f"SIG{-exit_code}"


def _blank_rank(rank: int) -> dict[str, Any]:
    """A rank's facts before any of its events is read (hidden ranks keep these)."""
    entry: dict[str, Any] = {key: None for key in RANK_SCHEMA}
    entry.update(rank=rank, sources=set(), events=0, ended=False, failed=False, max_phase=-1)
    return entry


def _entry(per: dict[int, dict[str, Any]], rank: int) -> dict[str, Any]:
    if rank not in per:
        per[rank] = _blank_rank(rank)
    return per[rank]


def _fold_presence(entry: dict[str, Any], row: Event) -> None:
    entry["sources"].add(row["source"])
    if row["kind"] not in AGENT_KINDS:  # torchrun's report about a rank is not a line of the rank's own
        entry["events"] += 1
    if row["local_rank"] is not None and entry["local_rank"] is None:
        entry["local_rank"] = row["local_rank"]
    if row["attempt"] is not None:
        entry["attempt"] = max(entry["attempt"] or 0, row["attempt"])


def _fold_progress(entry: dict[str, Any], row: Event, in_final: bool) -> None:
    kind = row["kind"]
    if row["level"] != "benign" and kind not in ("child_failure", "worker_failed"):
        # Rows come file by file (stdout, then stderr), not in time: "last" is the latest row of the furthest
        # phase, so an init line at the top of stderr does not follow the "Training time" line.
        reached = PHASE_ORDER.get(row["phase"], -1)
        if reached >= entry.get("last_phase", -1):
            entry["last_kind"], entry["last_text"], entry["last_phase"] = kind, row["text"], reached
        if in_final:
            entry["max_phase"] = max(entry["max_phase"], reached)
    if kind == "iteration" and row["iteration"] is not None and in_final:
        entry["last_iteration"] = max(entry["last_iteration"] or -1, row["iteration"])
    if kind in END_KINDS and in_final:
        entry["ended"] = True


def _fold_collectives(entry: dict[str, Any], row: Event) -> None:
    """The last SeqNum the rank enqueued and completed on the default process group."""
    kind = row["kind"]
    if kind in ("nccl_pg_status", "nccl_dump_signal") and (row["pg"] in (None, "0")):
        enqueued = int_or_none(row["_f"].get("enqueued"))
        completed = int_or_none(row["_f"].get("completed"))
        if enqueued is not None and 0 <= enqueued < MAX_SANE_SEQ:
            entry["last_seq_enqueued"] = max(entry["last_seq_enqueued"] or -1, enqueued)
        if completed is not None and 0 <= completed < MAX_SANE_SEQ:
            entry["last_seq_completed"] = max(entry["last_seq_completed"] or -1, completed)
    if kind == "collective_fingerprint" and row["seq"] is not None:
        entry["last_seq_enqueued"] = max(entry["last_seq_enqueued"] or -1, row["seq"])


def _fold_identity(entry: dict[str, Any], row: Event) -> None:
    """Device, bus id, host and declared world size."""
    kind, f = row["kind"], row["_f"]
    if kind == "device_assigned" and f.get("device"):
        entry["device"] = str(f["device"])
    if kind == "nccl_comm_init":
        entry["bus_id"] = entry["bus_id"] or f.get("bus_id")
        entry["host"] = entry["host"] or f.get("host")
        if f.get("cuda_dev") is not None and entry["device"] is None:
            entry["device"] = f"cuda:{f['cuda_dev']}"
    if kind in WORLD_SIZE_KINDS and int_or_none(f.get("world_size")) is not None:
        entry["world_size"] = int_or_none(f.get("world_size"))
    if kind == "config_values" and f.get("host") and entry["host"] is None:
        entry["host"] = str(f["host"])


def _fold_exit(entry: dict[str, Any], row: Event, in_final: bool) -> None:
    """The exit code torchrun reports for the rank's last attempt, and whether the rank itself logged an error."""
    if not in_final:
        return
    if row["kind"] == "child_failure":
        entry["exit_code"] = row["exitcode"]
        entry["host"] = entry["host"] or row["_f"].get("host")
    if row["kind"] == "worker_failed" and entry["exit_code"] is None:
        entry["exit_code"] = row["exitcode"]
    if row["kind"] in ("child_failure", "worker_failed") and row["exitcode"] == TEARDOWN_EXIT:
        entry["stopped_by"] = row["_f"].get("stopped_by", "launcher")
    if row["level"] == "error":
        entry["failed"] = True


def _settle(entry: dict[str, Any]) -> dict[str, Any]:
    """Exit code 0 for a rank that ended cleanly, its signal, and the phase it reached ("fail" when it failed)."""
    if entry["exit_code"] is None and entry["ended"] and not entry["failed"]:
        entry["exit_code"] = 0
    entry["signal"] = signal_name(entry["exit_code"])
    if entry["failed"] or (entry["exit_code"] not in (None, 0)):
        entry["phase"] = "fail"
    elif entry["max_phase"] >= 0:
        entry["phase"] = next(p for p, i in PHASE_ORDER.items() if i == entry["max_phase"])
    return entry


def _hop_end(row: Event) -> int | None:
    """The rank of the process that printed a ring or channel hop ("2[2] -> 3[3] via P2P", "3 -> 4 [receive] via
    NET"): each rank prints its own hops, the sending end of a send and the receiving end of a receive; within a
    node, the end on the printer's device."""
    f = row["_f"]
    direction = f.get("direction")
    if direction in ("send", "receive"):
        return int_or_none(f.get("src_rank" if direction == "send" else "dst_rank"))
    m = _NCCL_DEVICE.search(row["text"])
    if m is None or f.get("src_dev") == f.get("dst_dev"):
        return None
    ends = [int_or_none(f.get(k + "_rank")) for k in ("src", "dst") if f.get(k + "_dev") == m[1]]
    return ends[0] if len(ends) == 1 else None


class _Builder:
    def __init__(self, extraction: Extraction, sources: list[Source], stats: list[SourceStats]) -> None:
        self.sources = sources
        self.stats = stats
        self.notes: list[str] = list(extraction.notes)
        self.rows: list[Event] = [row.copy() for row in extraction.rows]  # align fills in rank, phase...
        self.contexts = extraction.contexts

    # ------------------------------------------------------------------ streams and ranks
    def stream_of(self, row: Event) -> Stream:
        src = self.sources[row["sid"]]
        if src.role == "console":
            return (row["sid"], row["tee_lrank"])
        return (row["sid"], None)

    def nodes(self) -> list[str]:
        return sorted({s.node for s in self.sources if s.node is not None})

    def resolve_ranks(self) -> None:
        """Every row's global rank: its stream's (by the votes of its lines), its file's, or one its text names."""
        nodes = self.nodes()
        self.single_node = len(nodes) <= 1
        votes, self.world_votes = self._rank_votes()
        # A console without tee prefixes interleaves every rank: its lines carry their own rank or none.
        stream_rank: dict[Stream, int] = {
            s: c.most_common(1)[0][0]
            for s, c in votes.items()
            if not (self.sources[s[0]].role == "console" and s[1] is None)
        }
        # Per-rank files that produced no events still belong to a rank.
        self.file_rank = self._file_ranks(stream_rank, nodes)
        self.console_rank = self._one_rank_consoles(votes)
        for row in self.rows:
            stream = self.stream_of(row)
            row["rank"] = self._row_rank(row, stream, stream_rank, nodes)
            if row["local_rank"] is None and stream[1] is not None:
                row["local_rank"] = stream[1]

    def _rank_votes(self) -> tuple[dict[Stream, Counter[int]], Counter[int]]:
        """Per stream, the ranks its lines claim, weighted by how sure each claim is; and the world sizes declared."""
        votes: dict[Stream, Counter[int]] = defaultdict(Counter)
        world_votes: Counter[int] = Counter()
        for row in self.rows:
            stream = self.stream_of(row)
            if row["grank"] is not None:
                votes[stream][row["grank"]] += 3
            elif (m := _RANK_TAG.match(row["text"])) is not None:
                # The script's own tag on its message: with c10d rendezvous torchrun gives a node's workers
                # whichever global ranks the rendezvous hands it, not node index x local ranks.
                votes[stream][int(m["rank"])] += 1
            f = row["_f"]
            if row["kind"] in IDENTITY_KINDS:
                rank = int_or_none(f.get("rank"))
                if rank is not None:
                    votes[stream][rank] += 5
            if row["kind"] == "sync_start" and f.get("rank") is not None and stream[1] is not None:
                votes[stream][int(f["rank"])] += 2
            if row["kind"] in WORLD_SIZE_KINDS:
                ws = int_or_none(f.get("world_size"))
                if ws is not None:
                    world_votes[ws] += 1
        return votes, world_votes

    def _one_rank_consoles(self, votes: dict[Stream, Counter[int]]) -> dict[Stream, int]:
        """Consoles that each hold one process: as many untagged consoles as the world has ranks, each naming one
        rank of its own (two nodes of one GPU each, a scheduler's file per task). Their untagged progress and end
        lines are that rank's (rsl_rl's iterations on rank 0's node), which shows that its peers took part."""
        consoles = {s: c for s, c in votes.items() if self.sources[s[0]].role == "console" and s[1] is None}
        named = {s: set(c) for s, c in consoles.items() if c}
        declared = self.world_votes.most_common(1)[0][0] if self.world_votes else None
        world = declared or max((r for ranks in named.values() for r in ranks), default=-1) + 1
        one_each = all(len(ranks) == 1 for ranks in named.values())
        if len(named) < 2 or not one_each or len(named) != world or len(set().union(*named.values())) != world:
            return {}
        return {s: next(iter(ranks)) for s, ranks in named.items()}

    def _file_ranks(self, stream_rank: dict[Stream, int], nodes: list[str]) -> dict[tuple[str | None, int | None], int]:
        """The global rank of every per-rank file of a torchrun tree. Without identity lines: torchrun's rendezvous
        block (global_ranks, applied only when there is one node: a console is not tied to a node folder), else
        base(node) + local rank, as torchrun assigns it."""
        rdzv_global: list[int] = []
        for row in self.rows:
            if row["kind"] == "rdzv_field" and row["_f"].get("key") == "global_ranks":
                rdzv_global = int_list(row["_f"].get("value"))
        locals_per_node: dict[str, set[int]] = defaultdict(set)
        for src in self.sources:
            if src.node is not None and src.local_rank is not None:
                locals_per_node[src.node].add(src.local_rank)
        base: dict[str, int] = {}
        offset = 0
        for node in nodes:
            base[node] = offset
            offset += max(locals_per_node[node], default=-1) + 1
        file_rank: dict[tuple[str | None, int | None], int] = {}
        for sid, src in enumerate(self.sources):
            if src.node is None or src.local_rank is None:
                continue
            stream = (sid, None)
            if stream not in stream_rank:
                if self.single_node and rdzv_global and src.local_rank < len(rdzv_global):
                    stream_rank[stream] = rdzv_global[src.local_rank]
                else:
                    stream_rank[stream] = base[src.node] + src.local_rank
            file_rank[(src.node, src.local_rank)] = stream_rank[stream]
        return file_rank

    def _row_rank(self, row: Event, stream: Stream, stream_rank: dict[Stream, int], nodes: list[str]) -> int | None:
        rank: int | None = row["grank"]
        if rank is None:
            rank = stream_rank.get(stream)
        if rank is None and stream[1] is not None and self.single_node:
            rank = self.file_rank.get((nodes[0] if nodes else None, stream[1]), stream[1])
        if rank is None and row["kind"] in OWN_RANK_KINDS:
            rank = int_or_none(row["_f"].get("rank"))  # the line names its own rank
        if rank is None and row["kind"] in ("nccl_watchdog_timeout", "nccl_pg_status") and row["pg"] in (None, "0"):
            # Old formats carry only "[Rank N]", the rank in that PG: the global rank for the default PG.
            rank = int_or_none(row["_f"].get("pg_rank"))
        if rank is None and (m := _DEFAULT_PG_PREFIX.search(row["text"])):
            rank = int(m.group(1))  # e.g. a "what():  [PG ID 0 ... Rank 2] ..." abort line, no [rankN]: prefix
        if rank is None and (m := _RANK_TAG.match(row["text"])):
            rank = int(m["rank"])  # a script's own tag on its message: "[RANK 0] epoch 0 step 5 loss 0.66"
        if rank is None and row["text"].startswith("{") and (m := _JSON_RANK.match(row["text"])):
            rank = int(m.group(1))  # a structured logger's record: {"ts": ..., "rank": 3, "msg": ...}
        if rank is None and row["kind"] not in AGENT_KINDS:
            rank = self._named_rank(row["sid"])  # a file of its own: "rank0.log", "rank0_stack.log"
        if rank is None and (row["kind"] in PROGRESS_KINDS or row["kind"] in END_KINDS):
            rank = self.console_rank.get(stream)
        return rank

    def _named_rank(self, sid: int) -> int | None:
        """The rank a plain file's own name gives it (not its folder's: a folder may hold every rank's files)."""
        source = self.sources[sid]
        if source.role != "console" or source.local_rank is not None:
            return None
        m = _NAMED_RANK.search(source.path.rsplit("/", 1)[-1].rsplit("!", 1)[-1])
        return int(m.group(1)) if m is not None else None

    # ------------------------------------------------------------------ duplicates, attempts, phases
    def drop_tee_copies(self) -> None:
        """A line tee'd to the console and written to attempt_*/N/stdout.log counts once (the file's copy)."""
        seen = {
            (row["local_rank"], row["text"])
            for row in self.rows
            if self.sources[row["sid"]].role != "console" and row["local_rank"] is not None
        }
        if not seen:
            return
        self.rows = [
            row
            for row in self.rows
            if not (
                self.sources[row["sid"]].role == "console"
                and row["tee_lrank"] is not None
                and (row["tee_lrank"], row["text"]) in seen
            )
        ]

    def assign_attempts(self) -> None:
        current: dict[tuple[int, int | None], int] = {}
        for row in self.rows:
            if row["attempt"] is not None:
                continue
            stream = self.stream_of(row)
            restart = int_or_none(row["_f"].get("restart_count"))
            if restart is not None and row["kind"] in ("config_values", "torch_version", "rdzv_field"):
                current[stream] = restart
            row["attempt"] = current.get(stream)

    def console_attempts(self) -> None:
        """In a launcher's console of a run that restarted (the tree has attempt_1/...), the lines after a worker's
        failure belong to the next attempt: torchrun prints no restart line, its workers just start again. Without
        a tree (a console alone), a restart shows as workers printing their start-up lines again after torchrun's
        report of a failed worker: from those on, the next attempt."""
        last = max((s.attempt or 0 for s in self.sources), default=0)
        if last == 0 and not any(s.attempt is not None for s in self.sources):
            self._console_restarts()
            return
        if last == 0:
            return
        for rows in self._console_rows():
            attempt, failing = 0, False
            # torchrun stops the other workers ("Sending process N closing signal SIGTERM"), their last words come
            # through, and then it reports the failure ("failed (exitcode: ...)"): that report ends the attempt.
            ends = ("worker_failed",) if any(r["kind"] == "worker_failed" for r in rows) else ("worker_sigterm_sent",)
            for row in sorted(rows, key=lambda r: r["line"]):
                if row["kind"] in ends:
                    failing = True
                elif failing and row["kind"] not in AGENT_KINDS:
                    attempt, failing = min(attempt + 1, last), False
                if row["attempt"] is None:
                    row["attempt"] = attempt

    def _console_rows(self) -> list[list[Event]]:
        """The rows of each console, one list per file."""
        by_file: dict[int, list[Event]] = defaultdict(list)
        for row in self.rows:
            if self.sources[row["sid"]].role == "console":
                by_file[row["sid"]].append(row)
        return list(by_file.values())

    def _console_restarts(self) -> None:
        for rows in self._console_rows():
            if not any(r["kind"] == "worker_failed" for r in rows):
                continue
            attempt, failing, restarts = 0, False, []
            for row in sorted(rows, key=lambda r: r["line"]):
                if row["kind"] == "worker_failed":
                    failing = True
                elif failing and row["kind"] not in AGENT_KINDS and row["phase"] in EARLY_PHASES:
                    attempt, failing = attempt + 1, False
                restarts.append((row, attempt))
            if attempt:
                for row, n in restarts:
                    if row["attempt"] is None:
                        row["attempt"] = n

    def order(self) -> None:
        role_order = {"stdout": 0, "console": 1, "stderr": 2, "error_json": 3}
        self.rows.sort(
            key=lambda r: (
                r["rank"] if r["rank"] is not None else 1 << 30,
                r["attempt"] if r["attempt"] is not None else -1,
                role_order.get(self.sources[r["sid"]].role, 9),
                r["sid"],
                r["line"],
            )
        )

    def assign_phases(self) -> None:
        last: dict[tuple[int | None, int | None], str] = {}
        for row in self.rows:
            key = (row["rank"], row["attempt"])
            phase = row["phase"]
            if row["level"] == "benign" and phase is None:
                phase = last.get(key, "launch")
            if phase is None:
                phase = last.get(key, "init" if row["rank"] is not None else "launch")
            row["phase"] = phase
            if row["level"] != "benign":
                last[key] = phase

    # ------------------------------------------------------------------ torchrun's failure table
    def child_failures(self) -> None:
        """Assemble each ChildFailedError entry ([idx]: time/host/rank/exitcode/error_file/traceback)."""
        synthesized: list[Event] = []
        section: str | None = None
        entry: dict[str, Any] | None = None
        entry_row: Event | None = None
        last_sid = -1

        def flush() -> None:
            if entry is not None and entry_row is not None and "rank" in entry:
                f = dict(entry)
                row = entry_row.copy()
                row.update(
                    {
                        "kind": "child_failure",
                        "level": "error",
                        "phase": "fail",
                        "rank": f["rank"],
                        "local_rank": f.get("local_rank"),
                        "exitcode": f.get("exitcode"),
                        "grank": None,
                        "tee_lrank": None,
                        "_f": f,
                        "fields": json.dumps(f),
                        "text": f"[{f.get('idx')}] rank {f['rank']} (local_rank {f.get('local_rank')}) exitcode "
                        f"{f.get('exitcode')}" + (" root cause" if f.get("root_cause") else ""),
                    }
                )
                synthesized.append(row)

        for row in sorted(self.rows, key=lambda r: (r["sid"], r["line"])):
            kind = row["kind"]
            if row["sid"] != last_sid:
                flush()
                section, entry, entry_row, last_sid = None, None, None, row["sid"]
            if kind == "child_failed_section":
                flush()
                entry = None
                section = "root" if str(row["_f"].get("section", "")).startswith("Root") else "other"
            elif kind == "child_failed_entry":  # an excerpt may start below its section header
                flush()
                entry = {"idx": int_or_none(row["_f"].get("idx")), "root_cause": section == "root"}
                if section is None:
                    section = "other"
                entry_row = row
            elif kind == "child_failed_field" and (entry is not None or "entry_rank" in row["_f"]):
                f = row["_f"]
                if "entry_rank" in f and (entry is None or "rank" in entry):
                    # An excerpt cut below the "[0]:" line: "rank : N (local_rank: M)" opens the entry itself.
                    flush()
                    entry, entry_row = {"idx": None, "root_cause": False}, row
                if entry is None:
                    continue
                if "entry_rank" in f:
                    entry["rank"] = int(f["entry_rank"])
                    entry["local_rank"] = int(f["entry_local_rank"])
                if "exitcode" in f:  # also on the rank's line, where a copy glued the two
                    entry["exitcode"] = int(f["exitcode"])
                    entry["pid"] = int_or_none(f.get("pid"))
                elif f.get("key"):
                    entry[str(f["key"])] = f.get("value")
        flush()
        self.rows = [r for r in self.rows if not r["kind"].startswith("child_failed_")] + synthesized

    def propagate_process_groups(self) -> None:
        """The watchdog line names no process group; the PG status line right after it does (same rank, SeqNum).

        The group's GUID is global (the PG ID is a per-rank creation index), so it keys cross-rank comparisons.
        """
        pg_of: dict[tuple[int | None, int, int], str] = {}
        for row in self.rows:
            if row["kind"] == "nccl_pg_status" and row["seq"] is not None:
                f = row["_f"]
                pg = f.get("pg_guid") or f.get("pg")
                if pg is not None:
                    row["pg"] = str(pg)
                    pg_of[(row["rank"], row["sid"], row["seq"])] = str(pg)
        for row in self.rows:
            if row["kind"] in ("nccl_watchdog_timeout", "nccl_blocking_wait_timeout") and row["pg"] is None:
                row["pg"] = pg_of.get((row["rank"], row["sid"], row["seq"] or -1))

    def analysis_tool_tracebacks(self) -> None:
        """A traceback raised inside a tool that reads the run afterwards (PyTorch's Flight Recorder analyser,
        fr_trace, saved beside the logs) tells of that tool, not of the run: its lines are left out, with a note."""
        tool: set[int] = set()
        header: Event | None = None
        frames: list[Event] = []
        for row in sorted(self.rows, key=lambda r: (r["sid"], r["line"])):
            if row["kind"] == "traceback_start":
                header, frames = row, [row]
            elif header is not None and row["sid"] == header["sid"]:
                frames.append(row)
                if row["level"] == "error":
                    if any(f["kind"] == "analysis_tool_frame" for f in frames):
                        tool.update(id(f) for f in frames)
                        where = f"{self.sources[row['sid']].path}:{row['line']}"
                        self.notes.append(f"{where}: the Flight Recorder analyser's own error, not the run's: left out")
                    header, frames = None, []
            else:
                header, frames = None, []
        if tool:
            self.rows = [r for r in self.rows if id(r) not in tool]

    def launcher_named_ranks(self) -> None:
        """A launcher's line about a process names its rank ("process 2 terminated", "srun: error: h: task 5"): the
        line is about that rank, whichever process printed it. A line that names several ranks keeps them in its
        `ranks` field and no rank of its own."""
        for row in self.rows:
            field_name = NAMES_RANK.get(row["kind"])
            if field_name is None:
                continue
            named = int_or_none(row["_f"].get(field_name))
            ranks = int_ranges(row["_f"].get("ranks"))
            if named is None and len(ranks) == 1:
                named = ranks[0]
            if ranks and len(ranks) > 1:
                row["rank"] = None
            elif named is not None:
                row["rank"] = named

    def ray_worker_ranks(self) -> None:
        """Ray Train's worker table ties each worker's PID to its rank: a line with that worker's "(RayTrainWorker
        pid=N)" prefix, or the raylet's report that worker N died, is that rank's."""
        rank_of_pid = {
            int(row["_f"]["pid"]): int(row["_f"]["world_rank"]) for row in self.rows if row["kind"] == "ray_worker_rank"
        }
        if not rank_of_pid:
            return
        for row in self.rows:
            if row["rank"] is not None:
                continue
            pid = row.get("actor_pid")
            if row["kind"] == "process_exit" and row["_f"].get("pid") is not None:
                pid = int_or_none(row["_f"]["pid"])
            if pid in rank_of_pid:
                row["rank"] = rank_of_pid[pid]

    def spawned_tracebacks(self) -> None:
        """torch.multiprocessing.spawn re-raises a child's exception in the parent as "-- Process N terminated with the
        following error:" and the child's traceback: that traceback's unranked lines are process N's (the spawn
        index, which is the rank on one node)."""
        owner: dict[int, tuple[int, int]] = {}  # source -> (rank, header line)
        for row in self.rows:
            sid = row["sid"]
            if row["kind"] == "process_exit" and row["_f"].get("spawned") and row["rank"] is not None:
                owner[sid] = (row["rank"], row["line"])
            elif sid in owner and row["rank"] is None:
                rank, header = owner[sid]
                if row["line"] - header <= SPAWN_TRACEBACK_LINES:
                    row["rank"] = rank

    def outside_signals(self) -> None:
        """torchrun stops the workers still running after a failure and says so ("Sending process N closing signal
        SIGTERM"), then names the worker whose exit it saw first ("failed (exitcode: -15) local_rank: L (pid: P)").
        When that first exit is a SIGTERM the agent never sent, and the agent itself was not signalled, the worker
        was stopped from outside (kill, a scheduler): its own failure, not teardown. Its exit reports say so in
        `stopped_by`."""
        agent: dict[str, list[Event]] = defaultdict(list)  # the agent's lines this reads, in one pass
        forced: list[Event] = []  # exits by the SIGKILL the agent sends a worker its SIGTERM did not stop
        for row in self.rows:
            if row["kind"] in ("agent_death_signal", "worker_sigterm_sent", "worker_force_killed") or (
                row["kind"] in ("child_failure", "worker_failed") and row["exitcode"] == TEARDOWN_EXIT
            ):
                agent[row["kind"]].append(row)
            elif row["kind"] in ("child_failure", "worker_failed") and row["exitcode"] == FORCED_EXIT:
                forced.append(row)
        killed = {(row["sid"], str(row["_f"].get("pid"))) for row in agent["worker_force_killed"]}
        for row in forced:
            if (row["sid"], str(row["_f"].get("pid"))) in killed:
                row["_f"]["stopped_by"] = "launcher"
                row["fields"] = json.dumps(row["_f"])
        signalled = {row["sid"] for row in agent["agent_death_signal"]}
        sent: dict[int, set[str]] = defaultdict(set)
        for row in agent["worker_sigterm_sent"]:
            sent[row["sid"]].add(str(row["_f"].get("pid")))
        outside = {
            (row["sid"], str(row["_f"]["pid"]))
            for row in agent["worker_failed"]
            if row["_f"].get("pid") is not None
            and row["sid"] not in signalled
            and str(row["_f"]["pid"]) not in sent[row["sid"]]
        }
        for row in agent["child_failure"] + agent["worker_failed"]:
            stopped_from_outside = (row["sid"], str(row["_f"].get("pid"))) in outside
            row["_f"]["stopped_by"] = "outside" if stopped_from_outside else "launcher"
            row["fields"] = json.dumps(row["_f"])

    def worker_failed_ranks(self) -> None:
        """torchrun's `failed (exitcode: N) local_rank: L` (a legacy launcher's failed command with its
        '--local_rank=L', Lightning's "[rank: L] Received SIGTERM") names a local rank of the agent's own node: the
        only node, or the one log tree beside the console (a node's folder holding its console and its --log_dir).
        Its pid is surer where torchrun's failure table gives that pid's global rank (several nodes' consoles side by
        side)."""
        by_pid = {
            (int_or_none(r["_f"].get("pid")), r["sid"]): r["rank"]
            for r in self.rows
            if r["kind"] == "child_failure" and r["rank"] is not None
        }
        for row in self.rows:
            if row["kind"] in LOCAL_RANK_KINDS and row["rank"] is None:
                local = int_or_none(row["_f"].get("local_rank"))
                named = by_pid.get((int_or_none(row["_f"].get("pid")), row["sid"]))
                if named is not None:
                    row["rank"] = named
                    if local is not None:
                        row["local_rank"] = local
                    continue
                if local is None:
                    continue
                if self.single_node:
                    row["rank"] = self.file_rank.get((self.nodes()[0] if self.nodes() else None, local), local)
                    row["local_rank"] = local
                elif (node := self._node_beside(row["sid"])) is not None and (node, local) in self.file_rank:
                    row["rank"] = self.file_rank[(node, local)]
                    row["local_rank"] = local

    def _node_beside(self, sid: int) -> str | None:
        """The one torchrun log tree under the folder that holds a console (None when there are none or several)."""
        path = self.sources[sid].path
        folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
        if not folder:
            return None
        under = [n for n in self.nodes() if n.startswith(folder)]
        return under[0] if len(under) == 1 else None

    # ------------------------------------------------------------------ facts
    def rank_table(self, handled: set[tuple[int, int]]) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
        """Each rank's facts from its files and its rows (`_fold_*`), then settled (`_settle`); an error its rank
        went on from (`handled`) is no failure of it."""
        per: dict[int, dict[str, Any]] = {}
        self._place_files(per)
        final_attempt: dict[int, int] = {}
        for row in self.rows:
            if row["rank"] is not None and row["attempt"] is not None:
                final_attempt[row["rank"]] = max(final_attempt.get(row["rank"], 0), row["attempt"])
        for row in self.rows:
            rank = row["rank"]
            if rank is None:
                continue
            entry = _entry(per, rank)
            in_final = row["attempt"] is None or row["attempt"] >= final_attempt.get(rank, 0)
            _fold_presence(entry, row)
            if (row["sid"], row["line"]) in handled:
                continue
            _fold_progress(entry, row, in_final)
            _fold_collectives(entry, row)
            _fold_identity(entry, row)
            _fold_exit(entry, row, in_final)
        return per, [_settle(per[rank]) for rank in sorted(per)]

    def _place_files(self, per: dict[int, dict[str, Any]]) -> None:
        """Node, local rank, files, attempt and line count of every rank with files of its own in a torchrun tree."""
        for (node, local), rank in self.file_rank.items():
            entry = _entry(per, rank)
            entry["node"], entry["local_rank"] = node, local
        for sid, src in enumerate(self.sources):
            if src.node is not None and src.local_rank is not None:
                entry = _entry(per, self.file_rank[(src.node, src.local_rank)])
                entry["sources"].add(src.path)
                entry["attempt"] = max(entry["attempt"] or 0, src.attempt or 0)
                entry["lines"] = entry.get("lines", 0) + self.stats[sid].lines

    def hidden_and_silent(self, per: dict[int, dict[str, Any]], world_size: int | None) -> None:
        if world_size is not None and world_size <= MAX_WORLD:
            for rank in range(world_size):
                if rank not in per:
                    per[rank] = _blank_rank(rank)
        own_files = {s.path for s in self.sources if s.role in ("stdout", "stderr")}
        for entry in per.values():
            has_file = any(s in own_files for s in entry["sources"])
            if entry["events"] > 0 or entry.get("lines", 0) > 0:
                entry["status"] = "visible"
            elif has_file:
                entry["status"] = "silent"
            else:
                entry["status"] = "hidden"
            entry["visible"] = entry["status"] == "visible"

    def nccl_process_ranks(self) -> None:
        """NCCL prefixes its records with "host:pid:tid [dev]": every line of one process is that process's rank's.
        A process's rank comes from its lines that already have one, from its world communicator's "comm 0x.. rank
        R nranks N" line, or else from its proxy thread's "[Proxy Service R]"; its unranked lines then get it."""
        inits = (r["_f"] for r in self.rows if r["kind"] == "nccl_comm_init")
        world = max((int_or_none(f.get("nranks")) or 0 for f in inits), default=0)
        known: dict[str, set[int]] = defaultdict(set)
        proxies: dict[str, set[int]] = defaultdict(set)
        unranked: list[tuple[str, Event]] = []
        for row in self.rows:
            process = nccl_process(row["text"])
            if process is None:
                continue
            f = row["_f"]
            if row["rank"] is not None:
                known[process].add(row["rank"])
            elif row["kind"] == "nccl_comm_init" and world and int_or_none(f.get("nranks")) == world:
                known[process].add(int(f["comm_rank"]))
            else:
                if (p := _PROXY_RANK.search(row["text"])) is not None:
                    proxies[process].add(int(p[1]))
                elif row["kind"] == "nccl_transport" and (own := _hop_end(row)) is not None:
                    proxies[process].add(own)
                unranked.append((process, row))
        for process, row in unranked:
            ranks = known.get(process) or proxies.get(process) or set()
            if len(ranks) == 1:
                row["rank"] = next(iter(ranks))

    def build(self) -> Aligned:
        self.resolve_ranks()
        self.nccl_process_ranks()
        self.console_attempts()  # before the tee'd copies go: a worker's lines there mark the next attempt's start
        self.drop_tee_copies()
        self.assign_attempts()
        self.child_failures()
        self.outside_signals()
        self.worker_failed_ranks()
        self.launcher_named_ranks()
        self.spawned_tracebacks()
        self.ray_worker_ranks()
        self.propagate_process_groups()
        self.analysis_tool_tracebacks()
        self.order()
        self.assign_phases()
        handled = went_on_from(self.rows)
        per, _ = self.rank_table(handled)
        job = job_facts(self.rows, self.sources, self.world_votes, per)
        self.hidden_and_silent(per, job["world_size"])
        rank_rows = []
        for rank in sorted(per):
            entry = per[rank]
            row = cast(RankRow, {k: entry.get(k) for k in RANK_SCHEMA})
            row["sources"] = sorted(entry["sources"])
            row["events"] = entry.get("events", 0)
            rank_rows.append(row)
        ranks = pl.DataFrame(rank_rows, schema=RANK_SCHEMA) if rank_rows else pl.DataFrame(schema=RANK_SCHEMA)
        events = events_frame(self.rows)
        # A rank's whole output is here when it comes from its own file in a torchrun tree, or its lines hold the
        # start of its run (a console capture from the launch on, not a pasted cut of one).
        # A launcher's console that shows it starting its processes ("process N spawned with command") holds each
        # of its workers' output from the start too.
        spawned_in = {row["sid"] for row in self.rows if row["kind"] == "launcher_process_spawned"}
        complete = {
            row["rank"]
            for row in self.rows
            if row["rank"] is not None
            and (row["node"] is not None or row["phase"] in EARLY_PHASES or row["sid"] in spawned_in)
        }
        states = build_states(self.rows, rank_rows, complete, handled)
        return Aligned(
            events,
            self.rows,
            ranks,
            job,
            self.sources,
            self.stats,
            self.contexts,
            self.notes,
            states,
            completion(states, job, self.rows),
        )


def align(extraction: Extraction, sources: list[Source], stats: list[SourceStats]) -> Aligned:
    return _Builder(extraction, sources, stats).build()
