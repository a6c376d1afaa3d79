"""Rank the findings into one verdict, and fill the workflow's validation checklist from the logs."""

from __future__ import annotations

from typing import Any, cast

from logscope.align.model import Aligned
from logscope.verdict.calibration import calibration_for
from logscope.verdict.causes import assign_roles, first_cause, rank_key
from logscope.verdict.workflow import CHECKLIST, DEFAULT_COMMANDS, STEPS
from logscope.vocab import GUESS_BELOW, SEVERITY_ORDER, Finding

INTERNAL_KEYS = ("specificity", "next_step_command", "next_step_detail", "onset", "survived")


def _strip(f: Finding) -> Finding:
    """The contract's finding (internal ranking keys removed)."""
    return cast(Finding, {k: v for k, v in f.items() if k not in INTERNAL_KEYS})


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if ranks else "unknown"


def decide(
    findings: list[Finding], aligned: Aligned, input_path: str = ""
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The first cause wins: a mismatch explains a timeout, a crash explains its peers' errors (verdict/causes.py)."""
    assign_roles(findings, aligned.rows)
    ranked = sorted(findings, key=rank_key, reverse=True)
    checklist = _checklist(aligned, findings)
    completeness = _completeness(aligned)
    cause = first_cause(ranked)
    if cause is not None:
        ranked.remove(cause)
        ranked.insert(0, cause)
    # A failure that the finished run survived is reported, but it is not what the run's verdict is about.
    top = ranked[0] if ranked and SEVERITY_ORDER[ranked[0]["severity"]] >= 2 and not ranked[0]["survived"] else None
    if top is None:
        v2 = next(c for c in checklist if c["id"] == "V2")["status"]
        v3 = next(c for c in checklist if c["id"] == "V3")["status"]
        proof = aligned.completion
        confidence = proof.strength if proof is not None and proof.proven else 0.4
        if v2 == "pass" and v3 == "pass":
            confidence = max(confidence, 0.9)
        step = "W5"
        verdict = {
            "category": "healthy",
            "culprit_ranks": [],
            "confidence": round(confidence * completeness, 2),
            "summary": _healthy_summary(aligned, v2, v3),
            "rule": None,
            "guess": round(confidence * completeness, 2) < GUESS_BELOW,
            "calibration": calibration_for(round(confidence * completeness, 2)),
            "next_step": {
                "id": step,
                "title": "Nothing to debug: keep every rank's logs",
                "command": None,
                "detail": "No failure in these logs. Keep launching with per-rank logs (--tee 3 --log_dir) so that "
                "the next failure can be read on every rank.",
            },
        }
        findings[:] = [_strip(f) for f in findings]
        return verdict, checklist
    explained = [f for f in ranked if f is not top and SEVERITY_ORDER[f["severity"]] >= 2]
    confidence = round(top["confidence"] * completeness, 2)
    summary = top["message"]
    if explained:
        summary += (
            " This also explains: " + "; ".join(f"{f['title'].lower()} ({f['rule']})" for f in explained[:4]) + "."
        )
    # Hidden ranks that the verdict blames are its subject (they never started), not a gap in the evidence.
    hidden = [
        r["rank"] for r in aligned.rank_rows() if r["status"] == "hidden" and r["rank"] not in top["culprit_ranks"]
    ]
    if hidden:
        summary += (
            f" Ranks {_ranks(hidden)} are hidden (no lines of theirs in these logs), so the evidence is "
            "incomplete: rerun with --tee 3 --log_dir to see every rank (W5)."
        )
    step_id = top["next_step"]
    template = top.get("next_step_command") or DEFAULT_COMMANDS.get(step_id, "")
    command = template.replace("{input}", input_path) if template else None
    detail = top.get("next_step_detail")
    if hidden and step_id not in ("W5",) and len(hidden) >= max(1, len(aligned.rank_rows()) // 2):
        detail = (detail + " " if detail else "") + "First make every rank visible (W5)."
    verdict = {
        "category": top["category"],
        "culprit_ranks": top["culprit_ranks"],
        "confidence": confidence,
        "summary": summary,
        "rule": top["rule"],
        "guess": confidence < GUESS_BELOW,
        "calibration": calibration_for(confidence),
        "next_step": {
            "id": step_id,
            "title": STEPS[step_id],
            "command": command,
            **({"detail": detail} if detail else {}),
        },
    }
    findings[:] = [_strip(f) for f in ranked]
    return verdict, checklist


def _completeness(aligned: Aligned) -> float:
    factor = 1.0
    if any(st.error for st in aligned.stats) or any("truncated" in n or "corrupt" in n for n in aligned.notes):
        factor *= 0.85
    if any(st.cut_lines or st.binary or st.ends_mid_line or st.replaced_bytes for st in aligned.stats):
        factor *= 0.95
    return factor


def _healthy_summary(aligned: Aligned, v2: str, v3: str) -> str:
    ws = aligned.job.get("world_size")
    parts = [f"No failure found across {ws} rank(s)." if ws else "No failure found."]
    if v2 == "pass":
        parts.append("Every rank reached parameter synchronization.")
    if v3 == "pass":
        parts.append("The run reported a training time and exited with status 0.")
    proof = aligned.completion
    if proof is not None and proof.proven and v3 != "pass":
        parts.append(f"What shows it: {proof.how}.")  # where the checklist's own proof is missing
    elif v2 != "pass" or v3 != "pass":
        parts.append("Some evidence is missing, so this is a weaker 'healthy'.")
    return " ".join(parts)


def _checklist(aligned: Aligned, findings: list[Finding]) -> list[dict[str, Any]]:
    events = aligned.events
    ranks = aligned.rank_rows()
    job = aligned.job
    items: list[dict[str, Any]] = []

    def add(vid: str, status: str, evidence: list[str]) -> None:
        items.append({"id": vid, "title": CHECKLIST[vid], "status": status, "evidence": evidence})

    ws = job.get("world_size")
    # V1: only a single-rank run in these logs can show it.
    if ws == 1 and job.get("exit_code") == 0:
        add("V1", "pass", ["this run is a single-rank run and it finished"])
    else:
        add("V1", "unknown", ["no single-GPU run in these logs (compare one with `logscope diff`)"])
    # V2: every rank printed the framework's sync line.
    synced = (
        set(events.filter(events["kind"] == "sync_start")["rank"].drop_nulls().to_list()) if events.height else set()
    )
    visible = [r["rank"] for r in ranks if r["status"] == "visible"]
    hidden = [r["rank"] for r in ranks if r["status"] == "hidden"]
    if not synced:
        add("V2", "unknown", ["no parameter-synchronization line on any rank"])
    elif ws and all(r in synced for r in range(ws)):
        add("V2", "pass", [f"ranks {_ranks(sorted(synced))} printed the sync line"])
    elif hidden and all(r in synced for r in visible):
        add("V2", "unknown", [f"ranks {_ranks(sorted(synced))} synced; ranks {_ranks(hidden)} are hidden"])
    else:
        missing = sorted(set(visible) - synced)
        add("V2", "fail", [f"ranks {_ranks(missing)} never printed the sync line; ranks {_ranks(sorted(synced))} did"])
    # V3: training time + exit 0.
    tt = events.filter(events["kind"] == "training_time") if events.height else events
    if job.get("exit_code") == 0 and tt.height:
        add("V3", "pass", [f"'{tt['text'][0]}' and exit status 0"])
    elif job.get("exit_code") not in (None, 0):
        add("V3", "fail", [f"the job exited with status {job.get('exit_code')}"])
    elif tt.height:
        add("V3", "unknown", [f"'{tt['text'][0]}' but no exit status in these logs"])
    else:
        add("V3", "unknown" if job.get("exit_code") is None else "fail", ["no training time reported"])
    # V4: not silently one rank.
    if any(f["category"] == "single_rank" for f in findings):
        add("V4", "fail", [f["message"] for f in findings if f["category"] == "single_rank"])
    elif ws and ws > 1 and len(visible) > 1:
        add("V4", "pass", [f"{ws} ranks joined the job ({len(visible)} visible)"])
    else:
        add("V4", "unknown", ["compare throughput with a run at another world size (`logscope diff A B`)"])
    # V5: only a replay sweep can show it.
    add("V5", "unknown", ["no workaround confirmation in these logs (`logscope replay --sweep-env`)"])
    return items
