"""Whether text no signature recognised is a program's output or a document.

A training script's own prints ("train for 1.99 epochs", "process 1, global_rank 1, local_rank 1, device cuda:1",
"Rank 0 tensor before allreduce: torch.Size([409600])") are a log: short lines that name the job's things (ranks,
devices, the loop) next to a value. A README, a pyproject or a shopping list is not: Markdown, configuration,
code and prose sentences, or no word of a training job at all. Only the first is analysed; the rest is refused with
exit 2. Every pattern is anchored or bounded and free of nested quantifiers, so matching stays linear.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Words a distributed job's own prints use: its ranks and devices, its loop and what the loop reports.
_JOB_WORD = re.compile(
    r"(?i)(?<![a-z])(?:rank|world[_ ]?size|local[_ ]?rank|gpus?|cuda|npu|xpu|nccl|gloo|mpi|torch|tensor|epochs?|"
    r"iter(?:ation)?s?|steps?|loss|lr|batch(?:es)?|train(?:ing)?|worker|process(?:es)?|node|device|"
    r"dist(?:ributed)?|barrier|all_?reduce|all_?gather|broadcast|reduce_?scatter|grad(?:ient)?s?|reward|"
    r"accuracy|eval\w*|checkpoint|model|optimi[sz]er)(?![a-z])"
)
_VALUE = re.compile(r"\d")
# Markdown (headings, fences, rules and table rows, list items, links, HTML tags), configuration (TOML/INI
# sections and assignments), source code.
_MARKDOWN = re.compile(
    r"^(?:#{1,6} |```|~~~|\s*\|.*\|\s*$|\|? ?:?-{3,}|\s*[-*+] \S|\s*\d+\. \S|\s*<[a-z/!][^>]*>\s*$)|\]\([^)\s]+\)"
)
_CONFIG = re.compile(r"^\s*(?:\[\[?[\w.\"-]+\]\]?\s*$|[\w.\"-]+\s*=\s*[\"'\[{\dtf])")
_CODE = re.compile(r"^\s*(?:def |class |import |from \S+ import |return |@\w)")
_WORD = re.compile(r"[A-Za-z][a-z]*[,.;:]?")
# A sentence: ten words or more, seven in ten of them plain words.
_PROSE_WORDS = 10
_PROSE_SHARE = 0.7
# Program output: at least this many lines, and this share of the text; documents below this share.
MIN_OUTPUT_LINES = 2
MIN_OUTPUT_SHARE = 0.15
MAX_DOCUMENT_SHARE = 0.2
# The lines looked at: the start of each file is enough to tell.
MAX_LINES = 2000


def _prose(line: str) -> bool:
    tokens = line.split()
    return len(tokens) >= _PROSE_WORDS and sum(bool(_WORD.fullmatch(t)) for t in tokens) >= _PROSE_SHARE * len(tokens)


def _document_line(line: str) -> bool:
    return bool(_MARKDOWN.search(line) or _CONFIG.match(line) or _CODE.match(line) or _prose(line))


def is_program_output(lines: Iterable[str]) -> bool:
    """Whether the text is a job's own prints (a log in a format nothing names), not a document or a list."""
    text = [line for line in lines if line.strip()][:MAX_LINES]
    if not text:
        return False
    documents = output = 0
    for line in text:
        if _document_line(line):
            documents += 1
        elif _JOB_WORD.search(line) and _VALUE.search(line):
            output += 1
    return (
        output >= MIN_OUTPUT_LINES
        and output >= MIN_OUTPUT_SHARE * len(text)
        and documents < MAX_DOCUMENT_SHARE * len(text)
    )
