"""Line normalisation: strip and record the stacked prefixes real logs carry (torch_logs.md §1.3, §7).

A physical line can carry, left to right: a CI timestamp, a viewer line number, a Ray actor tag, torchrun's tee
prefix `[default0]:`, the c10 `[rank0]:` prefix, and a logger header (c10 `[E709 17:05:38.162555850 file.cpp:N]`,
glog, Python logging, Kit). Every pattern here is anchored and free of nested quantifiers, so matching is linear.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

_CI_TS = re.compile(r"\[?(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)\]?:? ")
_VIEWER_NO = re.compile(r" {0,7}\d{1,7}(?:\t| ?[|│] ?)")
# NCCL's record prefix, which stays in a line's text: "host:pid:tid [dev] ", the process a line comes from.
NCCL_RECORD = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[\d+\] ")
_RAY = re.compile(r"\([A-Za-z_]\w* pid=(?P<pid>\d+)(?:, ip=[\w.:]+)?\) ")
_TEE = re.compile(r"\[(?!rank\d+\]:)(?P<role>[A-Za-z_][\w.-]*?)(?P<lrank>\d+)\]:")
# torchrun's --log-line-prefix-template "${role_name}${rank}|${local_rank}": "[trainer3|1]:" (global 3, local 1).
_TEE_TEMPLATE = re.compile(r"\[(?P<role>[A-Za-z_][\w.-]*?)(?P<grank>\d+)\|(?P<lrank>\d+)\]:")
_GRANK = re.compile(r"\[rank(?P<grank>\d{1,6})\]: ?")  # (a 20-digit "rank" is no rank)
_GLUED_GRANK = re.compile(r"\[rank\d+\]:")
_C10 = re.compile(
    r"\[(?P<sev>[FEWIV])(?:(?P<mmdd>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d)\.\d{6,9})? [\w.+-]+\.(?:cpp|hpp|h|cc):\d+\] "
)
_GLOG = re.compile(r"(?P<sev>[DIWEC])(?P<mmdd>\d{4}) (?P<hms>\d\d:\d\d:\d\d)\.\d{6} \d+ \S+?:\d+\] ?")
_PY_BRACKET = re.compile(r"\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),\d{3}\] [\w.]+: \[(?P<lvl>[A-Z]+)\] ")
_PY_HYDRA = re.compile(r"\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),\d{3}\]\[[^\]]+\]\[(?P<lvl>[A-Z]+)\] - ")
_PY_BASIC = re.compile(r"(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?:torch|[a-z_][\w]*)(?:\.[\w]+)*:")
# DeepSpeed's logger: "[2024-02-06 06:23:39,510] [ERROR] [launch.py:321:sigkill_handler] ..."
_PY_DEEPSPEED = re.compile(
    r"\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),\d{3}\] \[(?P<lvl>[A-Z]+)\] \[[\w.-]+:\d+:\w+\] "
)
# vLLM's logger: "ERROR 06-30 06:10:12 worker_base.py:145] ..."
_LEVEL_MMDD = re.compile(
    r"(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<mm>\d\d)-(?P<dd>\d\d) (?P<hms>\d\d:\d\d:\d\d) [\w.-]+:\d+\] "
)
# TorchX's per-replica prefix: "trainer/0 [1]:" (role, replica, local rank).
_TORCHX = re.compile(r"(?P<role>[A-Za-z_][\w-]*)/(?P<replica>\d+) \[(?P<lrank>\d+)\]:")
# OpenMPI's --tag-output: "[1,12]<stdout>:" (job id, rank, stream).
# mpirun's "[job,rank]<stderr>:" and horovodrun's (gloo) "[rank]<stderr>:"
_MPI_TAG = re.compile(r"\[(?:\d+,)?(?P<grank>\d+)\]<(?:stdout|stderr|stddiag)>: ?")
# srun --label: "0: ..." (the srun task: a node's launcher when srun starts torchrun, so not taken as a rank).
_SRUN_LABEL = re.compile(r"\d{1,5}: (?=\S)")
# pdsh (DeepSpeed's multi-node launcher) and similar fan-out tools: "trainer-2: ...", "localhost: ...". Only a
# lower-case host name with a digit (or localhost): "RuntimeError: ..." and "rank0: ..." are not hosts.
_HOST_LABEL = re.compile(r"(?!rank\d)(?:localhost|[a-z][a-z0-9-]*\d[a-z0-9-]*)(?:\.[a-z0-9-]+)*: (?=\S)")
# A paste quoted in Markdown ("> Traceback ...").
_QUOTE = re.compile(r">+ ?")
# What may stand before a Markdown quote: stamps and labels added around a process's whole output (a CI viewer's,
# a launcher's, a fan-out tool's). After a logger's prefix a ">" is the message's own.
_BEFORE_QUOTE = frozenset(
    {"ci_timestamp", "tee", "rank", "glued", "mpi_tag", "torchx", "ray", "srun_label", "host_label"}
)
_PY_19 = re.compile(r"\[(?P<lvl>[A-Z]+)\] (?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),\d{3} \w+: ")
_KIT = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)Z? \[[\d,]+ms\] "
    r"\[(?P<lvl>Warning|Error|Info|Verbose|Fatal)\] "
    r"\[[^\]]+\] "
)
_KIT_UPTIME = re.compile(r"\[\d+\.\d+s\] ")
# A bare bracketed stamp: "[2020-03-03 03:46:35] this rank = 0", "[2025-06-03 16:12:09] host:pid:tid [0] NCCL WARN".
# C's ctime(), as `mpirun --timestamp-output` prints it before its rank tag: "Wed Sep 20 23:55:19 2017[1,68]<stderr>:".
_CTIME = re.compile(
    r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) (?P<day>[ \d]\d) "
    r"(?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4}) ?"
)
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_BRACKET_TS = re.compile(r"\[(?P<date>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)(?:[,.]\d+)?\] ")
# AWS CloudWatch's console, copied: "  | 2024-08-23T22:22:51.873Z | message" (Lightning-AI/litData#340).
_CLOUDWATCH = re.compile(r" *\| (?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) \| ")
# HF transformers' logger: "[INFO|trainer.py:1516] 2023-02-09 22:55:56,474 >> ***** Running training *****".
_PY_HF = re.compile(r"\[(?P<lvl>[A-Z]+)\|[\w.-]+:\d+\] (?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d),\d{3} >> ")
# rich's logging handler: a level column, then the message (" WARNING  Sending process 14 closing signal SIGTERM
#         api.py:699"); the caller column on the right stays in the text (normalising only strips prefixes).
_RICH_LEVEL = re.compile(r" ?(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) {2,}(?=\S)")
_LEVEL_STARTS = tuple(p + w for p in ("", " ") for w in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
# Python logging with a date: "... [INFO] ", "... INFO ", "... - name - INFO - ", and "%(asctime)s %(name)s
# %(levelname)s: " (maskrcnn-benchmark's and many research codes' format: "... maskrcnn_benchmark.trainer INFO: ").
_PY_GENERIC = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)(?:[,.]\d+)? (?:\[(?P<lvl>[A-Z]+)\]|(?P<lvl2>[A-Z]{4,8})|"
    r"- [\w.]+ - (?P<lvl3>[A-Z]+) -|[\w.]+ (?P<lvl4>DEBUG|INFO|WARNING|ERROR|CRITICAL):|"
    # %(asctime)s - %(levelname)s - %(name)s - %(message)s, the format of transformers' and accelerate's examples
    r"- (?P<lvl5>DEBUG|INFO|WARNING|ERROR|CRITICAL) - [\w.]+ -) "
)
# A date and time alone, before whatever a script's format puts next ("%(asctime)s [rank%(rank)d] %(levelname)s").
_BARE_STAMP = re.compile(r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)(?:[,.]\d{1,9})? (?=\S)")

# TensorFlow's C++ logger (and absl's in TF builds): "2019-11-11 11:45:07.181990: E tensorflow/core/ring_alg.cc:279] ".
_TF_CPP = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)\.\d{6}: (?P<sev>[IWEF]) [\w./-]+\.(?:cc|cpp|h):\d+\] "
)

_SEVERITY = {"F": "error", "E": "error", "C": "error", "W": "warning", "I": "info", "V": "info", "D": "info"}
_LEVEL_WORD = {
    "DEBUG": "info",
    "INFO": "info",
    "WARNING": "warning",
    "WARN": "warning",
    "ERROR": "error",
    "CRITICAL": "error",
    "FATAL": "error",
    "Info": "info",
    "Verbose": "info",
    "Warning": "warning",
    "Error": "error",
    "Fatal": "error",
}


@dataclass(slots=True)
class Line:
    """A line with its prefixes stripped, and what they said."""

    text: str
    prefixes: tuple[str, ...] = ()
    tee_role: str | None = None
    tee_local_rank: int | None = None
    grank: int | None = None
    actor_pid: int | None = None  # the process of Ray's "(RayTrainWorker pid=25420)" prefix
    level: str | None = None
    ts_text: str | None = None
    ts: float | None = None  # epoch seconds, only when the stamp has a full date (read as UTC)


def _epoch(date: str, hms: str) -> float | None:
    try:
        year, month, day = (int(x) for x in date.split("-"))
        hour, minute, second = (int(x) for x in hms.split(":"))
        return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))
    except (ValueError, OverflowError):
        return None


def normalise(raw: str) -> Line:
    """Strip ANSI colours and every stacked prefix from one logical line (no `\\n`, no `\\r`)."""
    text = ANSI.sub("", raw) if "\x1b" in raw else raw
    if text[:1] in (" ", "\t"):
        # Pasted into an indented code block: the prefixes start after the indentation.
        stripped = text.lstrip(" \t")
        if stripped[:1] in ("[", "(") and (not stripped[1:2].isdigit() or _MPI_TAG.match(stripped)):
            text = stripped
    line = Line(text=text)
    prefixes: list[str] = []
    for _ in range(10):
        m = None
        if text.startswith("["):
            if (m := _TEE.match(text)) is not None and line.tee_local_rank is None:
                line.tee_role, line.tee_local_rank = m["role"], int(m["lrank"])
                prefixes.append("tee")
            elif (m := _TEE_TEMPLATE.match(text)) is not None and line.tee_local_rank is None:
                line.tee_role, line.tee_local_rank, line.grank = m["role"], int(m["lrank"]), int(m["grank"])
                prefixes.append("tee")
            elif (m := _GRANK.match(text)) is not None:
                line.grank = int(m["grank"])
                prefixes.append("rank")
            elif (m := _C10.match(text)) is not None:
                line.level = _SEVERITY[m["sev"]]
                if m["mmdd"]:
                    line.ts_text = f"{m['mmdd']} {m['hms']}"
                prefixes.append("c10")
            elif (
                (m := _PY_BRACKET.match(text)) is not None
                or (m := _PY_HYDRA.match(text)) is not None
                or (m := _PY_19.match(text)) is not None
                or (m := _PY_DEEPSPEED.match(text)) is not None
                or (m := _PY_HF.match(text)) is not None
            ):
                line.level = _LEVEL_WORD.get(m["lvl"], line.level)
                line.ts_text, line.ts = f"{m['date']} {m['hms']}", _epoch(m["date"], m["hms"])
                prefixes.append("logging")
            elif (m := _CI_TS.match(text)) is not None:
                line.ts_text = m["ts"]
                line.ts = _epoch(m["ts"][:10], m["ts"][11:19])
                prefixes.append("ci_timestamp")
            elif (m := _BRACKET_TS.match(text)) is not None:
                line.ts_text, line.ts = f"{m['date']} {m['hms']}", _epoch(m["date"], m["hms"])
                prefixes.append("logging")
            elif (m := _KIT_UPTIME.match(text)) is not None:
                prefixes.append("kit_uptime")
            elif (m := _MPI_TAG.match(text)) is not None:
                line.grank = int(m["grank"])
                prefixes.append("mpi_tag")
        elif text.startswith("("):
            if (m := _RAY.match(text)) is not None:
                line.actor_pid = int(m["pid"])
                prefixes.append("ray")
        elif text[:1].isdigit():
            if (m := _TF_CPP.match(text)) is not None:
                line.level = _SEVERITY[m["sev"]]
                line.ts_text, line.ts = f"{m['date']} {m['hms']}", _epoch(m["date"], m["hms"])
                prefixes.append("logging")
            elif (m := _KIT.match(text)) is not None or (m := _PY_GENERIC.match(text)) is not None:
                found = m.groupdict()
                lvl = next((found[k] for k in ("lvl", "lvl2", "lvl3", "lvl4", "lvl5") if found.get(k)), None)
                line.level = _LEVEL_WORD.get(lvl or "", line.level)
                line.ts_text, line.ts = f"{m['date']} {m['hms']}", _epoch(m["date"], m["hms"])
                prefixes.append("kit" if m.re is _KIT else "logging")
            elif (m := _CI_TS.match(text)) is not None:
                line.ts_text = m["ts"]
                line.ts = _epoch(m["ts"][:10], m["ts"][11:19])
                prefixes.append("ci_timestamp")
            elif (m := _BARE_STAMP.match(text)) is not None:
                line.ts_text, line.ts = f"{m['date']} {m['hms']}", _epoch(m["date"], m["hms"])
                prefixes.append("logging")
            elif not prefixes and (m := _SRUN_LABEL.match(text)) is not None:
                prefixes.append("srun_label")
        elif text[:1] in "DIWEC" and (m := _GLOG.match(text)) is not None:
            line.level = _SEVERITY[m["sev"]]
            line.ts_text = f"{m['mmdd']} {m['hms']}"
            prefixes.append("glog")
        elif text.startswith(_LEVEL_STARTS) and (m := _RICH_LEVEL.match(text)) is not None:
            line.level = _LEVEL_WORD[m["lvl"]]
            prefixes.append("logging")
        elif text.startswith(("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")):
            if (m := _PY_BASIC.match(text)) is not None:
                line.level = _LEVEL_WORD[m["lvl"]]
                prefixes.append("logging")
            elif (m := _LEVEL_MMDD.match(text)) is not None:
                line.level = _LEVEL_WORD[m["lvl"]]
                line.ts_text = f"{m['mm']}{m['dd']} {m['hms']}"
                prefixes.append("logging")
        elif not prefixes and text.lstrip(" ")[:2] == "| " and (m := _CLOUDWATCH.match(text)) is not None:
            line.ts_text = m["ts"]
            line.ts = _epoch(m["ts"][:10], m["ts"][11:19])
            prefixes.append("ci_timestamp")
        elif text.startswith(">") and set(prefixes) <= _BEFORE_QUOTE and (m := _QUOTE.match(text)) is not None:
            prefixes.append("quote")
        elif text[:1] == " " and (m := _VIEWER_NO.match(text)) is not None and not prefixes:
            prefixes.append("viewer_line_number")
        elif text[:1].islower() and not prefixes and (m := _HOST_LABEL.match(text)) is not None:
            prefixes.append("host_label")
        elif text[:1].isalpha() and "/" in text[:40] and (m := _TORCHX.match(text)) is not None:
            if line.tee_local_rank is None:
                line.tee_role, line.tee_local_rank = m["role"], int(m["lrank"])
            prefixes.append("torchx")
        elif text[:3] in _WEEKDAYS and (m := _CTIME.match(text)) is not None:
            date = f"{m['year']}-{_MONTHS.index(m['mon']) + 1:02d}-{int(m['day']):02d}"
            line.ts_text, line.ts = f"{date} {m['hms']}", _epoch(date, m["hms"])
            prefixes.append("ctime")
        if m is None:
            break
        text = text[m.end() :]
    if "[rank" in text:
        # A progress bar without a newline glues the next line onto it: "...40.17s/it][rank7]:[E ...] ..."; the
        # rank prefix of the glued line names its own rank, also behind an outer prefix of the launcher's.
        glued = _GLUED_GRANK.search(text)
        if glued is not None and glued.start() > 0:
            rest = normalise(text[glued.start() :])
            rest.prefixes = (*prefixes, "glued", *rest.prefixes)
            if rest.tee_local_rank is None:
                rest.tee_role, rest.tee_local_rank = line.tee_role, line.tee_local_rank
            return rest
    line.text = text
    line.prefixes = tuple(prefixes)
    return line


# Prefixes that only a logging program writes (a timestamp, a level, a rank, a launcher's tag): a line with one is a
# log record. A Markdown quote, a viewer's line number or a bare "N: " label could start any text.
_RECORD_PREFIXES = frozenset(
    {"c10", "ci_timestamp", "glog", "kit", "kit_uptime", "logging", "mpi_tag", "rank", "ray", "tee", "torchx"}
)
_FRAME = re.compile(r'^\s*File "[^"]+", line \d+')
# Records of programs that write their own prefix: NCCL ("host:pid:tid [dev] NCCL INFO ..."), a native
# debugger's frames ("#2  0x00007f... in ncclGroupEnd () at group.cc:176").
_NATIVE_RECORD = re.compile(r"^\s*(?:[\w.-]+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|ERROR|TRACE) |#\d+ +0x[0-9a-f]+ in )")
# A fan-out tool's or a paste's own label in front of every line ("stdout: ", "gpt-neox-train-dist-master: ").
_LEADING_LABEL = re.compile(r"^(?:[\w.-]{1,64}: )+")


def log_records(lines: Iterable[str]) -> int:
    """How many of `lines` are shaped like a log record (a logger's or launcher's prefix, a traceback frame, a
    program's own record prefix), also behind a label that a fan-out tool or a paste put in front of it."""
    count = 0
    for raw in lines:
        for candidate in (raw, _LEADING_LABEL.sub("", raw, count=1)):
            line = normalise(candidate)
            if (
                _RECORD_PREFIXES.intersection(line.prefixes)
                or _FRAME.match(line.text)
                or _NATIVE_RECORD.match(line.text)
            ):
                count += 1
                break
    return count


def nccl_process(text: str) -> str | None:
    """ "host:pid" of a line NCCL printed, from its record prefix; None for any other line."""
    m = NCCL_RECORD.match(text)
    return f"{m['host']}:{m['pid']}" if m is not None else None
