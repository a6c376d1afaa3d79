"""Blind prefilters: a cheap, sound first pass of the union scan over a line's template.

Event-dense logs (`TORCH_DISTRIBUTED_DEBUG=DETAIL`, `NCCL_DEBUG=INFO`) repeat a few line templates that differ
only in their numbers: every `CollectiveFingerPrint(SequenceNumber=N, ...)` of a stream has the same characters
once each digit is read as `0` (`MASK`). A prefilter rewritten so that it passes `mask(line)` whenever it passes
`line` (`blind`) can be run once per distinct template instead of once per line; only the lines of the templates
it passes are scanned with the real prefilter, so the result is exactly the real scan's. The rewrite is a
homomorphism argument: every atom that matches a digit in the line must match `0` in the masked line, so a
literal digit becomes `0` and a class that accepts some digit but not `0` (`[1-9]`) also takes `0`; everything
else already matches the masked line wherever it matched the line.

(Hex letters are not masked: NCCL's per-collective lines would share templates, but "failed" would read as
"00il00" and `[Aa]cc` as `(?:[Aa]|0)00`, which every masked number passes.)
"""

from __future__ import annotations

import re

# Every ASCII digit read as 0; a digit byte never occurs inside a multi-byte UTF-8 sequence, so the masked block
# is valid UTF-8 where the block is.
_MASKED = "0123456789"
MASK = bytes.maketrans(_MASKED.encode(), b"0" * len(_MASKED))
MASK_TEXT = str.maketrans(_MASKED, "0" * len(_MASKED))  # the same for text (`str.translate`)
_ZERO_WIDTH = frozenset("bBAz")
_CLASS_ESCAPES = frozenset("dDwWsS")
_CHAR_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "e": "\x1b"}


def blind(pattern: str) -> str | None:
    """A pattern that passes `line.translate(MASK)` wherever `pattern` passes `line`, or None where a construct is
    not understood (then no line may be skipped on its account)."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                return None
            e = pattern[i + 1]
            if e == "x":
                end, char = _hex_escape(pattern, i)
                if char is None:
                    return None
                out.append("0" if char in _MASKED else pattern[i:end])
                i = end
            elif e in _CLASS_ESCAPES:
                token = _class_token(pattern[i : i + 2])
                if token is None:
                    return None
                out.append(token)
                i += 2
            elif e in _ZERO_WIDTH or e in _CHAR_ESCAPES or not e.isalnum():
                out.append(pattern[i : i + 2])
                i += 2
            else:  # \p{...}, back references, octal: not needed by the catalogue, not vouched for
                return None
        elif c == "[":
            class_end = _class_end(pattern, i)
            if class_end is None:
                return None
            token = _class_token(pattern[i:class_end])
            if token is None:
                return None
            out.append(token)
            i = class_end
        elif c == "{":  # a repetition's counts are not characters of the line
            end = pattern.find("}", i)
            if end < 0:
                return None
            out.append(pattern[i : end + 1])
            i = end + 1
        elif c == "(" and pattern.startswith(("(?P<", "(?<"), i):  # a group's name is no character of the line
            end = pattern.find(">", i) + 1
            if end <= i:
                return None
            out.append(pattern[i:end])
            i = end
        elif c == "(" and pattern.startswith("(?", i):  # nor are its flags ("(?:", "(?-u:", "(?i)")
            end = _flags_end(pattern, i)
            if end <= i:
                return None
            out.append(pattern[i:end])
            i = end
        else:
            out.append("0" if c in _MASKED else c)
            i += 1
    return "".join(out)


def _hex_escape(pattern: str, i: int) -> tuple[int, str | None]:
    if pattern.startswith("\\x{", i):
        end = pattern.find("}", i)
        digits = pattern[i + 3 : end] if end > 0 else ""
        end += 1
    else:
        end = i + 4
        digits = pattern[i + 2 : end]
    try:
        return end, chr(int(digits, 16))
    except ValueError:
        return end, None


def _flags_end(pattern: str, i: int) -> int:
    """The end of a group's flag prefix: "(?:", "(?-u:", or a whole "(?i)"."""
    j = i + 2
    while j < len(pattern) and (pattern[j].isalpha() or pattern[j] == "-"):
        j += 1
    if j < len(pattern) and pattern[j] in ":)":
        return j + 1
    return i


def _class_end(pattern: str, i: int) -> int | None:
    """The index just past the bracket class that starts at `i`, or None (nested POSIX classes, set operations)."""
    j = i + 1
    for lead in ("^", "]"):  # a `]` first in a class (after any `^`) is a literal
        if pattern.startswith(lead, j):
            j += 1
    while j < len(pattern):
        c = pattern[j]
        if c == "\\":
            j += 2
            continue
        if c == "[" or pattern.startswith(("&&", "--", "~~"), j):
            return None
        if c == "]":
            return j + 1
        j += 1
    return None


def _class_token(token: str) -> str | None:
    """`token` (a class) as it must read the masked line: if it accepts a digit but not `0`, it takes `0` too."""
    try:
        compiled = re.compile(token)
    except re.error:
        return None
    accepted = [c for c in _MASKED if compiled.fullmatch(c)]
    if accepted and "0" not in accepted:
        return f"(?:{token}|0)"
    return token
