"""The one door every workspace command goes through: find the series, take the workspace lock, and
check what the workspace's state allows before anything is read or written.

States (documented with the same table in docs/ARCHITECTURE.md, "Workspace states"):

* ``idle`` - no journal, no rebase: every command runs.
* ``interrupted`` - an operation's journal is left behind (killed, crashed): only the listing reads
  (``top``, ``series``, ``applied``, ``unapplied``) and ``recover`` run.
* ``rebase-stopped`` - a rebase stopped at a conflict; ``rebase-running`` - a rebase is carrying
  patches (or was killed between two of them): only what resolves it runs, like git during a rebase:
  the reads (plus ``diff`` and ``header``), ``add``/``edit`` (files join the stopped patch),
  ``rebase --continue/--skip/--abort`` and ``recover``. Everything else refuses with exit 1.

The lock is taken first, so a second command waiting on a live one says "busy" (exit 5) instead of
mistaking the live operation's journal for an interrupted one. Cheap to import: the CLI loads this on
every workspace command.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from materialize.errors import MaterializeError
from materialize.workspace.journal import Journal, PendingOperationError, load_record, workspace_lock

SERIES_DEFAULT = Path("series") / "default.yaml"
REBASE_FILE = Path("rebase") / "rebase.json"

LISTING = frozenset({"top", "series", "applied", "unapplied"})
DURING_REBASE = LISTING | {"diff", "header", "add", "edit", "recover",
                           "rebase --continue", "rebase --skip", "rebase --abort"}
WRITES_DURING_REBASE = frozenset({"add", "rebase"})  # the journaled operations a rebase lets through
WHILE_INTERRUPTED = LISTING | {"recover"}
REBASE_KEYS = ("target", "spec", "orig_position", "patches", "todo", "done", "current", "tree")
REBASE_WAY_OUT = ("`rebase --abort` cannot read it: move {dir} aside to forget the rebase (its backup/ folder holds "
                  "the series file and every patch file as they were before it began)")


class RebaseInProgressError(MaterializeError):
    """A rebase owns the workspace: only what resolves it may run (git's rule)."""

    exit_code = 1


class NoSeriesError(MaterializeError):
    """No series file was given and none was found upward from the current directory."""

    exit_code = 2


def find_series(given: Path | None, cwd: Path | None = None) -> Path:
    """``--series`` when given; else ``series/default.yaml`` in the current directory or the nearest
    parent that has one (quilt searches upward for ``patches/``), or the series a workspace directory
    we are inside records (``work/.materialize/state.json``)."""
    if given is not None:
        return given
    cwd = (cwd or Path.cwd()).absolute()
    for directory in (cwd, *cwd.parents):
        candidate = directory / SERIES_DEFAULT
        if candidate.is_file():
            return candidate
        state = directory / ".materialize" / "state.json"
        if state.is_file():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                from materialize.atomic import read_json
                from materialize.workspace.journal import RECORD_LIMIT

                return Path(read_json(state, RECORD_LIMIT)["series"])
    raise NoSeriesError(f"no {SERIES_DEFAULT} in {cwd} or any parent directory; give --series FILE")


def rebase_state(meta: Path) -> dict[str, Any] | None:
    """The persistent rebase record (``work/.materialize/rebase/rebase.json``), or None."""
    file = meta / REBASE_FILE
    if not file.exists():
        return None
    return load_record(file, REBASE_KEYS, REBASE_WAY_OUT.format(dir=file.parent))


def describe_rebase(data: dict[str, Any]) -> str:
    current = data.get("current")
    where = f"rebase of {data['target']} onto {data['spec']}"
    if current:
        files = ", ".join(current.get("conflicts") or []) or "its files"
        return f"a {where} is stopped at {current['name']} (conflict in {files})"
    return f"a {where} is in progress ({len(data.get('todo', []))} patches to go)"


def check(meta: Path, op: str) -> None:
    """Refuse ``op`` unless the workspace's state allows it (see the module docstring)."""
    pending = Journal.pending(meta)
    if pending is not None and op not in WHILE_INTERRUPTED:
        command = " ".join(["materialize", pending["op"], *pending["args"]])
        raise PendingOperationError(
            f"an interrupted `{command}` left a journal in {meta / 'journal'}; run "
            "`materialize recover --rollback` (restore the state before it) or "
            "`materialize recover --resume` (finish it) first"
        )
    if pending is not None:
        command = " ".join(["materialize", pending["op"], *pending["args"]])
        if op in LISTING:
            print(f"materialize: warning: an interrupted `{command}` left a journal; what follows may be "
                  "half-way: `materialize recover` first", file=sys.stderr)
    check_rebase(meta, op)


def check_rebase(meta: Path, op: str, *, writing: bool = False) -> None:
    """The rebase half of ``check``; ``Journal.run`` also calls it (``writing``), so no write slips
    past a rebase even when a library caller skips the CLI."""
    data = rebase_state(meta)
    if data is not None and op not in (WRITES_DURING_REBASE if writing else DURING_REBASE):
        raise RebaseInProgressError(
            f"`materialize {op}` refused: {describe_rebase(data)}. Only what resolves it runs now: edit the "
            "files in work/ (`materialize diff` shows the patch), then `materialize rebase --continue`, or "
            "`--skip` to drop the patch, or `--abort` to restore everything"
        )
    if data is None and op in ("rebase --continue", "rebase --skip", "rebase --abort"):
        raise MaterializeError(f"`materialize {op}`: no rebase in progress")


@contextlib.contextmanager
def guarded(meta: Path, op: str) -> Iterator[None]:
    """Hold the workspace lock while ``op`` runs, after checking the state allows it."""
    with workspace_lock(meta, f"materialize {op}"):
        check(meta, op)
        yield
