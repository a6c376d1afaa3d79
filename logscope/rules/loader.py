"""Load rule files (one YAML rule per file), validate them against schema.json, refuse bad ones with file:line."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import regex

from logscope import cache, safeyaml
from logscope.errors import RuleError
from logscope.events.catalogue import catalogue
from logscope.rules import checks as _checks  # noqa: F401  (registers the Python checks)
from logscope.rules.api import CHECKS, Rule

if TYPE_CHECKING:
    import yaml

# A wheel ships the top-level rules/ as logscope/rulepack/ (pyproject.toml); a source checkout reads rules/ itself.
_PACKAGED_RULES = Path(__file__).resolve().parents[1] / "rulepack"
BUILTIN_RULES = _PACKAGED_RULES if _PACKAGED_RULES.is_dir() else Path(__file__).resolve().parents[2] / "rules"
WORKFLOW_STEPS = {f"W{i}" for i in range(1, 11)}


@lru_cache(maxsize=1)
def rule_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


@lru_cache(maxsize=1)
def _schema_text() -> str:
    return resources.files("logscope.rules").joinpath("schema.json").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _schema_checked() -> str:
    """The cache's name for "this text passed the schema check": the schema and the code that checks it named."""
    return f"schema-checked-{cache.text_hash(_schema_text())}-{cache.file_key(__file__)}"


def _lines(node: yaml.Node, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Line (1-based) of every key path in a YAML document, for file:line messages."""
    import yaml

    out: dict[tuple[str, ...], int] = {prefix: node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = (*prefix, str(key.value))
            out[path] = key.start_mark.line + 1
            out.update({k: v for k, v in _lines(value, path).items() if k != path})
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(_lines(item, (*prefix, str(i))))
    return out


def _check(
    value: Any, schema: dict[str, Any], path: tuple[str, ...], errors: list[tuple[tuple[str, ...], str]]
) -> None:
    """The subset of JSON Schema that schema.json uses (tests check the same files with the full validator)."""
    root = rule_schema()
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    where = ".".join(path) or "rule"
    if "const" in schema and value != schema["const"]:
        errors.append((path, f"{where}: must be {schema['const']!r}"))
    if "enum" in schema and value not in schema["enum"]:
        errors.append((path, f"{where}: {value!r} is not one of {', '.join(map(str, schema['enum']))}"))
        return
    kinds = schema.get("type")
    if kinds is not None:
        allowed = kinds if isinstance(kinds, list) else [kinds]
        py: dict[str, type | tuple[type, ...]] = {
            "object": dict,
            "array": list,
            "string": str,
            "integer": int,
            "number": (int, float),
            "boolean": bool,
            "null": type(None),
        }
        ok = any(
            isinstance(value, py[k]) and not (k in ("integer", "number") and isinstance(value, bool)) for k in allowed
        )
        if not ok:
            errors.append((path, f"{where}: expected {' or '.join(allowed)}, got {type(value).__name__}"))
            return
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                errors.append((path, f"{where}: missing required key '{key}'"))
        for key, item in value.items():
            if key in props:
                _check(item, props[key], (*path, str(key)), errors)
            elif schema.get("additionalProperties") is False:
                errors.append(((*path, str(key)), f"{where}: unknown key '{key}'"))
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append((path, f"{where}: needs at least {schema['minItems']} item(s)"))
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, schema["items"], (*path, str(i)), errors)
    if isinstance(value, str) and "pattern" in schema and not regex.search(schema["pattern"], value):
        errors.append((path, f"{where}: {value!r} does not match {schema['pattern']}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append((path, f"{where}: must be >= {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append((path, f"{where}: must be <= {schema['maximum']}"))


def parse_rule(path: Path) -> Rule:
    """Parse and validate one rule file; every problem raises RuleError('file:line: message')."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path}:1: cannot read rule file ({exc})") from None
    try:
        data = safeyaml.load_cached(text)
    except Exception as exc:
        import yaml  # only where a rule is refused: a rule pack read from the cache never imports PyYAML

        if not isinstance(exc, yaml.YAMLError):
            raise
        try:  # the pure-Python loader names the problem and its line the same way on every install
            yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = mark.line + 1 if mark is not None else 1
            reason = getattr(exc, "problem", None) or str(exc)
            raise RuleError(f"{path}:{line}: invalid YAML: {reason}") from None
        raise RuleError(f"{path}:1: invalid YAML") from None
    if not isinstance(data, dict):
        raise RuleError(f"{path}:1: a rule file must hold one mapping (id, title, category, ...)")

    def fail(keypath: tuple[str, ...], message: str) -> RuleError:
        # Line numbers are needed only to refuse a rule: the document is composed again only then.
        import yaml

        node = yaml.compose(text, Loader=safeyaml.fast_loader())
        lines = _lines(node) if node is not None else {}
        line = next((lines[keypath[:i]] for i in range(len(keypath), -1, -1) if keypath[:i] in lines), 1)
        return RuleError(f"{path}:{line}: {message}")

    def schema_checked() -> bool:
        errors: list[tuple[tuple[str, ...], str]] = []
        _check(data, rule_schema(), (), errors)
        if errors:
            raise fail(*errors[0])
        return True

    # A text that passed before, under the same schema and checking code, is not checked again (~10 ms for the
    # rule pack at every start); a refusal raises, so only passes are kept.
    cache.store().value(cache.text_key(_schema_checked(), text), schema_checked)
    known_kinds = catalogue().known_kinds()
    for i, kind in enumerate(data["match"].get("kinds", [])):
        if kind not in known_kinds:
            raise fail(("match", "kinds", str(i)), f"unknown event kind '{kind}' (see `logscope rules kinds`)")
    for i, kind in enumerate(data["condition"].get("expect", [])):
        if kind not in known_kinds:
            raise fail(("condition", "expect", str(i)), f"unknown event kind '{kind}'")
    compiled: dict[str, regex.Pattern[str]] = {}
    for i, cond in enumerate(data["match"].get("where", [])):
        for key in ("regex", "not_regex"):
            if key in cond:
                try:
                    compiled[f"{i}.{key}"] = regex.compile(cond[key])
                except regex.error as exc:
                    raise fail(("match", "where", str(i), key), f"regex does not compile: {exc}") from None
    if data["condition"]["type"] == "check":
        name = data["condition"].get("name")
        if name not in CHECKS:
            raise fail(("condition", "name"), f"unknown check '{name}' (known: {', '.join(sorted(CHECKS))})")
    try:
        data["message"].format_map(_Probe())
    except (ValueError, KeyError, AttributeError, IndexError) as exc:
        raise fail(("message",), f"message template is invalid: {exc}") from None
    return Rule(
        id=data["id"],
        name=data.get("name", ""),
        stage=data.get("stage", "main"),
        known_problems=data.get("known_problems", ""),
        title=data["title"],
        category=data["category"],
        severity=data["severity"],
        confidence=float(data["confidence"]),
        specificity=int(data.get("specificity", 50)),
        match=data["match"],
        condition=data["condition"],
        culprit=data.get("culprit", "reporters"),
        culprit_fields=tuple(data.get("culprit_fields", [])),
        message=data["message"],
        why=data["why"],
        next_step=data["next_step"],
        references=tuple(data.get("references", [])),
        tests=data["tests"],
        path=path,
        compiled=compiled,
    )


class _Probe(dict[str, Any]):
    """Accepts any plain field name; attribute and index access in templates are refused."""

    def __missing__(self, key: str) -> str:
        if not regex.fullmatch(r"[A-Za-z_]\w*", key):
            raise KeyError(f"field names are plain words, not {key!r}")
        return ""


def rule_files(dirs: list[Path]) -> list[Path]:
    files: list[Path] = []
    for directory in dirs:
        if not directory.is_dir():
            raise RuleError(f"{directory}:1: not a folder of rules")
        files.extend(sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml")))
    return files


def load_rules(extra_dirs: list[Path] | None = None, include_builtin: bool = True) -> list[Rule]:
    dirs = ([BUILTIN_RULES] if include_builtin else []) + list(extra_dirs or [])
    rules = [parse_rule(p) for p in rule_files(dirs)]
    seen: dict[str, Path] = {}
    for rule in rules:
        if rule.id in seen:
            raise RuleError(f"{rule.path}:1: rule id {rule.id} is already used by {seen[rule.id]}")
        seen[rule.id] = rule.path
    return rules
