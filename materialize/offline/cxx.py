"""Structural checks on C++ kernel sources without a compiler.

Device kernels are compiled on the device host at run time, so a patch to one cannot be built in
CI. These helpers give tests a token-level view good enough to assert structure: comments blanked
(offsets and line numbers kept), brackets balanced, and "the innermost block around this
statement" -- enough to say "this ASSERT guards that division in the same block".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PAIRS = {")": "(", "]": "[", "}": "{"}


def strip_comments(source: str, *, strings: bool = False) -> str:
    """``source`` with comments (and string/char literal contents if ``strings``) replaced by spaces.

    Newlines are kept, so offsets and line numbers still point into the real file.
    """
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j < 0 else j
            out[i:j] = " " * (j - i)
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out[i:j] = [ch if ch == "\n" else " " for ch in source[i:j]]
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c:
                j += 2 if source[j] == "\\" else 1
            if strings:
                out[i + 1 : j] = [ch if ch == "\n" else " " for ch in source[i + 1 : j]]
            i = j + 1
        else:
            i += 1
    return "".join(out)


def line_of(source: str, offset: int) -> int:
    return source.count("\n", 0, offset) + 1


def unbalanced(code: str) -> list[str]:
    """Bracket problems in comment-stripped ``code`` (empty when (), [] and {} all balance)."""
    code = strip_comments(code, strings=True)
    stack: list[tuple[str, int]] = []
    problems: list[str] = []
    for offset, ch in enumerate(code):
        if ch in "([{":
            stack.append((ch, offset))
        elif ch in _PAIRS:
            if not stack or stack[-1][0] != _PAIRS[ch]:
                problems.append(f"line {line_of(code, offset)}: unmatched {ch!r}")
            else:
                stack.pop()
    problems += [f"line {line_of(code, off)}: {ch!r} never closed" for ch, off in stack]
    return problems


@dataclass(frozen=True)
class Block:
    """A ``{ ... }`` region: ``start`` is just after the brace, ``end`` at the closing brace."""

    start: int
    end: int


def enclosing_block(code: str, offset: int) -> Block:
    """The innermost brace block of comment-stripped ``code`` that contains ``offset``."""
    code = strip_comments(code, strings=True)
    depth = 0
    start = None
    for i in range(offset - 1, -1, -1):
        if code[i] == "}":
            depth += 1
        elif code[i] == "{":
            if depth == 0:
                start = i + 1
                break
            depth -= 1
    if start is None:
        raise ValueError(f"offset {offset} (line {line_of(code, offset)}) is not inside a block")
    depth = 0
    for j in range(offset, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            if depth == 0:
                return Block(start, j)
            depth -= 1
    raise ValueError(f"block opened at line {line_of(code, start)} never closes")


def find_statement(code: str, pattern: str) -> re.Match[str] | None:
    """Find a statement by regex in comment-stripped code, with any whitespace between tokens."""
    return re.search(pattern, strip_comments(code))
