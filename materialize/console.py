"""Where humans and machines read our output: tables and progress on stderr/stdout for people,
``--json`` documents on stdout for scripts. One place so every command formats the same way."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

# Off a terminal (CI logs, pipes) rich would squeeze tables into 80 columns and cut patch names.
_WIDTH = None if sys.stdout.isatty() else 200
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 200)


def emit_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()


def progress_wanted() -> bool:
    """Progress bars only for a person at a terminal; CI logs stay clean."""
    return sys.stderr.isatty()
