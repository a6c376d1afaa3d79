"""Rule documentation, Ruff-style (What it detects / Why it matters / Example), from the rule files themselves."""

from __future__ import annotations

from typing import Any

from logscope.rules.api import Rule
from logscope.rules.loader import load_rules


def rule_doc(rule: Rule) -> dict[str, Any]:
    """What a reporter shows of a rule: its title, What / Why / Example, category, severity, next step."""
    return {
        "id": rule.id,
        "title": rule.title,
        "what": rule.why["what"],
        "why": rule.why["why"],
        "example": rule.why["example"],
        "category": rule.category,
        "severity": rule.severity,
        "next_step": rule.next_step["id"],
        "references": list(rule.references),
    }


def rule_markdown(rule: Rule) -> str:
    refs = "\n".join(f"- <{r}>" for r in rule.references)
    return (
        f"## {rule.id} {rule.title}\n\n"
        f"`{rule.name}` · category `{rule.category}` · severity `{rule.severity}` · next step "
        f"`{rule.next_step['id']}`\n\n"
        f"**What it detects.** {rule.why['what'].strip()}\n\n"
        f"**Why it matters.** {rule.why['why'].strip()}\n\n"
        f"**Example.**\n\n```\n{rule.why['example'].rstrip()}\n```\n"
        + (f"\n*Shown, not run: {rule.why['example_note']}.*\n" if rule.why.get("example_runs") is False else "")
        + (f"\n**References.**\n\n{refs}\n" if refs else "")
    )


def rules_markdown() -> str:
    rules = load_rules()
    head = (
        "# Rules\n\n"
        "Generated from the files in `rules/` by `python -m logscope.rules.docs` — do not edit by hand.\n\n"
        "| id | category | severity | title |\n|---|---|---|---|\n"
        + "".join(
            f"| [{r.id}](#{r.id.lower()}-{r.title.lower().replace(' ', '-')}) | {r.category} | {r.severity} "
            f"| {r.title} |\n"
            for r in rules
        )
    )
    return head + "\n" + "\n".join(rule_markdown(r) for r in rules)


if __name__ == "__main__":
    print(rules_markdown(), end="")
