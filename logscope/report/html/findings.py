"""The findings: each rule's finding with its evidence windows and links to the per-rank view that holds them."""

from __future__ import annotations

from typing import Any

import polars as pl

from logscope.report.html.lanes import LaneKey
from logscope.report.html.text import clip, rank_ranges
from logscope.vocab import Evidence, Finding

MAX_EVIDENCE_TEXT_CHARS = 2000  # one log line inside a finding's evidence window


MAX_EVIDENCE_PER_FINDING = 12


MAX_CONTEXT_LINES = 15


def finding_view(
    number: int,
    finding: Finding,
    verdict: dict[str, Any],
    cited: pl.DataFrame,
    anchors: dict[LaneKey, str],
    docs: dict[str, dict[str, Any] | None],
) -> dict[str, Any]:
    evidence = list(finding.get("evidence") or [])
    coll = finding.get("collective") or {}
    coll_facts = [
        (label, clip(str(coll[key]), 100))
        for key, label in (
            ("op", "op"),
            ("seq", "SeqNum"),
            ("numel_in", "numel in"),
            ("numel_out", "numel out"),
            ("dtype", "dtype"),
            ("timeout_ms", "timeout ms"),
            ("pg", "process group"),
        )
        if coll.get(key) is not None
    ]
    doc = docs.get(str(finding.get("rule", "")))
    is_verdict = bool(verdict.get("rule")) and finding.get("rule") == verdict.get("rule")
    # One confidence on the page: the verdict's finding shows the verdict's (the rule's, scaled by how complete
    # the logs are), as the header does; other findings show their own, named as such.
    confidence = verdict.get("confidence") if is_verdict else finding.get("confidence")
    return {
        "rule": clip(str(finding.get("rule", "")), 100),
        "category": str(finding.get("category", "")).replace("_", " "),
        "severity": finding.get("severity", "info"),
        "confidence_pct": round(100 * float(confidence or 0.0)),
        "title": clip(finding.get("title"), 300),
        "message": clip(finding.get("message"), 4000),
        "ranks": rank_ranges(finding.get("ranks") or []),
        "culprits": rank_ranges(finding.get("culprit_ranks") or []),
        "next_step": clip(finding.get("next_step"), 300) if finding.get("next_step") else None,
        "is_verdict": is_verdict,
        "collective": coll_facts,
        "doc": {k: clip(str(doc[k]), 3000) for k in ("what", "why", "example") if doc.get(k)} if doc else None,
        "anchor": f"finding-{number}",
        "evidence": [_evidence_view(e, cited, anchors) for e in evidence[:MAX_EVIDENCE_PER_FINDING]],
        "evidence_elided": max(0, len(evidence) - MAX_EVIDENCE_PER_FINDING),
    }


def cited_lines(events: pl.DataFrame, findings: list[Finding]) -> pl.DataFrame:
    """The event rows some finding cites as evidence: (source, line, lane, findings citing it)."""
    pairs = [
        (str(e.get("path")), int(e["line"]), number)
        for number, finding in enumerate(findings, 1)
        for e in (finding.get("evidence") or [])[:MAX_EVIDENCE_PER_FINDING]
        if e.get("line") is not None
    ]
    schema = {"source": pl.String(), "line": pl.Int64(), "finding": pl.Int64()}
    wanted = pl.DataFrame(pairs, schema=schema, orient="row")
    return (
        events.select("source", "line", "attempt_key", "rank_key")
        .join(wanted, on=["source", "line"], how="inner")
        .group_by("source", "line", "attempt_key", "rank_key")
        .agg(findings=pl.col("finding").unique().sort())
    )


def _evidence_view(evidence: Evidence, cited: pl.DataFrame, anchors: dict[LaneKey, str]) -> dict[str, Any]:
    line = evidence.get("line")
    context = list(evidence.get("context") or [])
    if not context:
        context = [{"line": line, "text": evidence.get("text", "")}]
    # keep the window centred on the evidence line when the context is longer than we show
    hit_index = next((i for i, c in enumerate(context) if c.get("line") == line), 0)
    start = max(0, min(hit_index - MAX_CONTEXT_LINES // 2, len(context) - MAX_CONTEXT_LINES))
    window = context[start : start + MAX_CONTEXT_LINES]
    rank = evidence.get("rank")
    return {
        "rank": rank,
        "path": clip(str(evidence.get("path", "")), 300),
        "line": line,
        "anchor": _evidence_anchor(evidence, cited, anchors),
        "context": [
            {
                "line": c.get("line"),
                "text": clip(str(c.get("text", "")), MAX_EVIDENCE_TEXT_CHARS),
                "hit": c.get("line") == line,
            }
            for c in window
        ],
        "context_elided": len(context) - len(window),
    }


def _evidence_anchor(evidence: Evidence, cited: pl.DataFrame, anchors: dict[LaneKey, str]) -> str | None:
    """The per-rank view an evidence line belongs to: by its (file, line) in the event table, else by rank."""
    hit = cited.filter((pl.col("source") == evidence.get("path")) & (pl.col("line") == evidence.get("line")))
    if hit.height:
        key = (int(hit["attempt_key"][0]), int(hit["rank_key"][0]))
        if key in anchors:
            return anchors[key]
    rank = evidence.get("rank")
    if rank is None:
        return None
    candidates = sorted(key for key in anchors if key[1] == rank)
    return anchors[candidates[-1]] if candidates else None
