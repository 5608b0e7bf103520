"""Where humans and machines read our output: tables and progress on stderr/stdout for people,
``--json`` documents on stdout for scripts. One place so every command formats the same way.

Start-up matters here (``materialize --help`` and ``apply`` are typed all day): importing rich costs
~60 ms and rendering a rich table of a hundred rows ~0.4 s, so ``out``/``err`` create their rich
``Console`` only on first use, and per-patch tables are plain aligned text (``columns``), colored
only for a terminal. Rich stays for markup messages and progress bars.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import Any


class _LazyConsole:
    """A rich ``Console`` made on first attribute access, so importing this module (every command
    does) does not import rich."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Any = None

    def _get(self) -> Any:
        if self._console is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            # Off a terminal (CI logs, pipes) rich would squeeze lines into 80 columns and cut names.
            width = None if stream.isatty() else 200
            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True, width=width)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)


out: Any = _LazyConsole(stderr=False)
err: Any = _LazyConsole(stderr=True)


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def progress_wanted() -> bool:
    """Progress bars only for a person at a terminal; CI logs stay clean."""
    return sys.stderr.isatty()


def color_wanted() -> bool:
    """ANSI colors only on a terminal (and never when NO_COLOR is set, https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


_COLORS = {"red": "31", "yellow": "33", "green": "32", "bold": "1", "dim": "2"}


def paint(text: str, color: str | None) -> str:
    """``text`` in ``color`` on a terminal; unchanged elsewhere (pipes and logs get plain text)."""
    if not color or not color_wanted():
        return text
    return f"\x1b[{_COLORS[color]}m{text}\x1b[0m"


def columns(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: frozenset[int] = frozenset(),
            colors: Sequence[Sequence[str | None]] | None = None) -> str:
    """An aligned plain-text table (two spaces between columns): costs microseconds per row where a rich
    table costs milliseconds, and reads the same in a terminal, a pipe and a CI log. ``right`` holds the
    indexes of right-aligned columns; ``colors`` (one per cell, or None) applies only on a terminal."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str], tints: Sequence[str | None] | None) -> str:
        parts = []
        for i, cell in enumerate(cells):
            padded = cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            parts.append(paint(padded, tints[i]) if tints else padded)
        return "  ".join(parts).rstrip()

    lines = [line(headers, None)]
    lines += [line(row, colors[n] if colors else None) for n, row in enumerate(rows)]
    return "\n".join(lines) + "\n"


def write(text: str, *, stderr: bool = False) -> None:
    """Plain text to stdout (or stderr), without rich: the cheap path for tables and summaries."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(text if text.endswith("\n") else text + "\n")
    stream.flush()
