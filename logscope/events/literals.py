"""The literal strings a regex cannot match without: a set such that every match contains one of them.

`Factor sets` in the sense of grep's and RE2's prefilters, worked out from Python's parse of the pattern (the
prefilters use the syntax that Python's `re` and Rust's `regex` share). A pattern this cannot vouch for, such as
one with a case-insensitive flag, has no set (None): it may match anywhere.
"""

from __future__ import annotations

from typing import Any

try:  # Python 3.11 renamed the parser's modules
    import re._constants as sre_constants
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants
    import sre_parse

Literals = frozenset[str]
MAX_STRINGS = 64  # an alternation's strings joined with what is around them, up to this many

_UNSOUND_FLAGS = sre_constants.SRE_FLAG_IGNORECASE | sre_constants.SRE_FLAG_VERBOSE
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None))


def required_literals(pattern: str) -> Literals | None:
    """Strings one of which every match of `pattern` contains, or None."""
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # a pattern Python does not parse (Rust-only syntax): nothing to vouch for
        return None
    if parsed.state.flags & _UNSOUND_FLAGS:
        return None
    return _sequence(list(parsed))


def _better(a: Literals | None, b: Literals | None) -> Literals | None:
    """Of two sets that both hold, the one whose shortest string is longer (it is rarer in text)."""
    if a is None or b is None:
        return a if b is None else b
    return a if min(map(len, a)) >= min(map(len, b)) else b


def _concat(a: Literals, b: Literals) -> Literals | None:
    if len(a) * len(b) > MAX_STRINGS:
        return None
    return frozenset(x + y for x in a for y in b)


def _exact(op: Any, arg: Any) -> Literals | None:
    """Every string one item matches, when that is a few literal strings (a literal, an alternation of literal
    strings, an optional one), else None."""
    if op is sre_constants.LITERAL:
        return frozenset([chr(arg)])
    if op is sre_constants.SUBPATTERN:
        _group, add_flags, _del_flags, sub = arg
        return None if add_flags & _UNSOUND_FLAGS else _exact_sequence(list(sub))
    if op is sre_constants.BRANCH:
        branches = [_exact_sequence(list(branch)) for branch in arg[1]]
        if any(branch is None for branch in branches):
            return None
        return frozenset().union(*branches)  # type: ignore[arg-type]
    if op in _REPEATS:
        low, high, sub = arg
        body = _exact_sequence(list(sub))
        if body is not None and (low, high) == (0, 1):
            return body | {""}
    return None


def _exact_sequence(items: list[tuple[Any, Any]]) -> Literals | None:
    strings: Literals | None = frozenset([""])
    for op, arg in items:
        exact = _exact(op, arg)
        if exact is None or strings is None:
            return None
        strings = _concat(strings, exact)
    return strings


def _sequence(items: list[tuple[Any, Any]]) -> Literals | None:
    """Every item of a sequence is matched: the best set that a run of exact items together, or any other one
    item, requires."""
    best: Literals | None = None
    run: Literals = frozenset([""])  # the strings the current run of exact items matches

    def close() -> None:
        nonlocal best, run
        if "" not in run:
            best = _better(best, run)
        run = frozenset([""])

    for op, arg in items:
        exact = _exact(op, arg)
        if exact is not None:
            joined = _concat(run, exact)
            if joined is None:  # too many strings: the run so far stands alone
                close()
                joined = exact
            run = joined
            continue
        close()
        if op is sre_constants.SUBPATTERN:
            _group, add_flags, _del_flags, sub = arg
            if not add_flags & _UNSOUND_FLAGS:
                best = _better(best, _sequence(list(sub)))
        elif op is sre_constants.BRANCH:
            branches = [_sequence(list(branch)) for branch in arg[1]]
            if all(branch is not None for branch in branches):
                best = _better(best, frozenset().union(*branches))  # type: ignore[arg-type]
        elif op in _REPEATS:
            low, _high, sub = arg
            if low >= 1:
                best = _better(best, _sequence(list(sub)))
        # Anything else (a class, `.`, an anchor, a lookaround, a back reference) requires no literal and ends
        # the run (around a zero-width one that only shortens the strings, which are still required).
    close()
    return best
