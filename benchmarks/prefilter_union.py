"""The speed of the one scan every line goes through, the union of the catalogue's prefilters, on text that is no log.

    python benchmarks/prefilter_union.py [--lines 20000] [--seed 0]

Extraction runs every line through the union of the signatures' prefilters (polars, Rust regex) before any
signature's own pattern. A prefilter with an optional Unicode class can make that union's lazy DFA fall back to
a slow path on non-ASCII text (a 1000x slowdown once reached review only because the hypothesis property test
hung). This times the union on random Unicode lines and its ASCII spelling on random ASCII lines of the same
count, as extraction uses them, and prints MB/s for each: a union that stays fast on both keeps the scan's cost
independent of what the input holds. Issue 20 (scale) is where its numbers are quoted.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import polars as pl

from logscope.events.catalogue import ascii_variant, catalogue


def random_lines(rng: random.Random, count: int, alphabet: str) -> list[str]:
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(20, 160))) for _ in range(count)]


def timed_scan(lines: list[str], union: str) -> dict[str, float]:
    series = pl.Series(lines)
    started = time.perf_counter()
    passed = int(series.str.contains(union).sum())
    seconds = time.perf_counter() - started
    size_mb = sum(len(line.encode()) for line in lines) / 1e6
    return {
        "seconds": round(seconds, 4),
        "mb": round(size_mb, 2),
        "mb_per_s": round(size_mb / seconds, 1),
        "passed": passed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    union = catalogue().union_prefilter
    # Letters, digits and punctuation of several scripts, accents and CJK among them; and printable ASCII.
    unicode_alphabet = "".join(
        chr(c) for c in (*range(0x20, 0x7F), *range(0xC0, 0x250), *range(0x391, 0x3CA), *range(0x4E00, 0x4E80))
    )
    ascii_alphabet = "".join(chr(c) for c in range(0x20, 0x7F))
    report = {
        "lines": args.lines,
        "signatures": len(catalogue().signatures),
        "unicode": timed_scan(random_lines(rng, args.lines, unicode_alphabet), union),
        # Extraction scans text that is all ASCII with the union's ASCII spelling (events/extract.py).
        "ascii": timed_scan(random_lines(rng, args.lines, ascii_alphabet), ascii_variant(union)),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
