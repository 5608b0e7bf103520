"""Where lines changed, as git or GNU diff decide it: the edit script behind every regenerated hunk.

Two tools can describe the same change differently: an inserted block bracketed by blank lines can
start before or after a blank line ("sliders"). Reviewers compare refreshed patches with what
``git diff`` or ``diff -u`` would write, and an edit plus its revert must give back the same bytes,
so the placement is never ours: it is the placement of git (for git-style patches: Myers with the
indent heuristic, git's default) or GNU diff (for quilt/GNU-style patches). One subprocess per call
diffs every file pair at once (``-U0``: the script does not depend on the context width).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
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


def edit_scripts(pairs: list[tuple[bytes, bytes]], engine: str = GIT, context: int = 3) -> list[list[Block]]:
    """For each (base, cur) pair of text contents, the change blocks ``engine`` finds (as it would for
    a diff with ``context`` lines), in order."""
    out: list[list[Block]] = [[] for _ in pairs]
    todo = [k for k, (base, cur) in enumerate(pairs) if base != cur]
    if not todo:
        return out
    with tempfile.TemporaryDirectory(prefix="materialize-diff-") as tmp:
        a, b = Path(tmp, "a"), Path(tmp, "b")
        a.mkdir()
        b.mkdir()
        for k in todo:
            (a / str(k)).write_bytes(pairs[k][0])
            (b / str(k)).write_bytes(pairs[k][1])
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
