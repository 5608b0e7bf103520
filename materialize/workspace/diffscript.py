"""Where lines changed, as git or GNU diff decide it: the edit script behind every regenerated hunk.

Two tools can describe the same change differently: an inserted block bracketed by blank lines can
start before or after a blank line ("sliders"). Reviewers compare refreshed patches with what
``git diff`` or ``diff -u`` would write, and an edit plus its revert must give back the same bytes,
so the placement is never ours: it is the placement of git (for git-style patches: Myers with the
indent heuristic, git's default) or GNU diff (for quilt/GNU-style patches). One subprocess per call
diffs every file pair at once (``-U0``: the script does not depend on the context width).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from materialize.errors import MaterializeError

Block = tuple[int, int, int, int]  # (i1, i2, j1, j2): base[i1:i2] is replaced by cur[j1:j2], 0-based
GIT, GNU = "git", "gnu"

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_GIT_FILE = re.compile(rb"^diff --git \S*/(\d+) \S*/(\d+)$")
_GNU_FILE = re.compile(rb"^\+\+\+ b/(\d+)(?:\t.*)?$")


def _index(start: int, length: int) -> int:
    """0-based index of a ``-U0`` range: an empty range names the line *before* the gap."""
    return start if length == 0 else start - 1


def _command(engine: str, a: Path, b: Path, context: int) -> list[str]:
    if engine == GIT:
        return ["git", "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false", "-c", "core.quotePath=false",
                "diff", "--no-index", "--no-color", "--no-ext-diff", "--no-renames", "--no-textconv",
                "--diff-algorithm=myers", "--indent-heuristic", "--inter-hunk-context=0", "-U0", "--", str(a), str(b)]
    # GNU diff keeps ``context`` lines of the common prefix/suffix in play ("horizon"): with -U0 alone
    # it would slide blocks differently from what `diff -u` writes
    return ["diff", "-r", "-U0", f"--horizon-lines={context}", "-a", str(a), str(b)]


class ScratchError(MaterializeError):
    """A file could not be written to the temporary folder (full, read-only, over quota): one line
    naming it, exit 1; nothing of the workspace was written (the scratch files come before any)."""

    exit_code = 1


@contextlib.contextmanager
def scratch_dir(prefix: str, what: str) -> Iterator[Path]:
    """A new folder in the temporary folder ($TMPDIR) for ``what``, removed afterwards; a failure to
    make it is a ``ScratchError``."""
    try:
        tmp = tempfile.mkdtemp(prefix=prefix)
    except OSError as exc:
        raise ScratchError(f"cannot make a temporary folder for {what} in {tempfile.gettempdir()}: "
                           f"{exc.strerror or exc}; nothing was written (free space there, or set TMPDIR)") from None
    try:
        yield Path(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def scratch_write(path: Path, data: bytes | None, what: str) -> None:
    """``data`` into the scratch file ``path`` (None: make the folder ``path``); a failure (ENOSPC
    names no file) is a ``ScratchError`` naming ``what`` and ``path``."""
    try:
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
    except OSError as exc:
        raise ScratchError(f"cannot write {what} to {path}: {exc.strerror or exc}; nothing was written (free space "
                           f"in {tempfile.gettempdir()}, or set TMPDIR to a folder that has some)") from None


def edit_scripts(pairs: list[tuple[bytes, bytes]], engine: str = GIT, context: int = 3) -> list[list[Block]]:
    """For each (base, cur) pair of text contents, the change blocks ``engine`` finds (as it would for
    a diff with ``context`` lines), in order."""
    out: list[list[Block]] = [[] for _ in pairs]
    todo = [k for k, (base, cur) in enumerate(pairs) if base != cur]
    if not todo:
        return out
    with scratch_dir("materialize-diff-", "the diff's inputs") as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        scratch_write(a, None, "a diff input")
        scratch_write(b, None, "a diff input")
        for k in todo:
            scratch_write(a / str(k), pairs[k][0], "a diff input (a file's text before)")
            scratch_write(b / str(k), pairs[k][1], "a diff input (a file's text now)")
        env = {**os.environ, "LC_ALL": "C", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
        proc = subprocess.run(_command(engine, Path("a"), Path("b"), context), capture_output=True, env=env, cwd=tmp)
    if proc.returncode not in (0, 1):
        raise MaterializeError(f"{engine} diff failed: {proc.stderr.decode(errors='replace').strip()}")
    current: list[Block] | None = None
    file_re = _GIT_FILE if engine == GIT else _GNU_FILE
    for line in proc.stdout.split(b"\n"):
        found = file_re.match(line)
        if found:
            current = out[int(found.group(found.lastindex or 1))]
            continue
        m = _HUNK.match(line)
        if m and current is not None:
            old_len = 1 if m.group(2) is None else int(m.group(2))
            new_len = 1 if m.group(4) is None else int(m.group(4))
            i1, j1 = _index(int(m.group(1)), old_len), _index(int(m.group(3)), new_len)
            current.append((i1, i1 + old_len, j1, j1 + new_len))
    return out
