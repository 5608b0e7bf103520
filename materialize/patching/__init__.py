"""Patch parsing and hunk application, byte-identical to GNU patch 2.7.6.

``parse_patch`` turns patch bytes into an immutable ``PatchSet``; ``apply_file`` applies one
``FilePatch`` to file bytes as ``patch -pN -F<fuzz> -f --no-backup-if-mismatch`` would, without
touching the filesystem. ``tests/patching`` checks this differentially against ``/usr/bin/patch``.

Deliberate differences from GNU patch (callers may rely on these):

* Only unified diffs. Context, normal and ed diffs raise ``PatchFormatError`` instead of applying.
* No reversed-patch guessing (like ``patch -f``): a reversed or already-applied patch simply fails.
* Lines starting with ``#`` inside a hunk are malformed here; GNU skips them as comments.
* ``---``/``+++`` names run up to a TAB, so ``--- a/my file`` names "my file"; GNU stops at the
  space unless a timestamp follows (git quotes such names or ends them with a TAB, so both agree
  on real git output).
* A patch without any diff is an empty ``PatchSet`` (quilt allows empty patches); GNU exits 2.
* Reject texts mark a missing final newline with ``\\ No newline at end of file``; GNU 2.7.6 runs
  the unterminated line into the next hunk header.
* File modes, renames, copies and ``-E``-style removal of emptied files are reported, not performed:
  GNU renames/copies even when hunks fail, and ``FileResult.content`` is then the unchanged original.
"""

from materialize.patching.apply import apply_file
from materialize.patching.model import (
    FilePatch,
    FileResult,
    Hunk,
    HunkLine,
    HunkResult,
    PatchSet,
)
from materialize.patching.parse import parse_patch

__all__ = [
    "FilePatch",
    "FileResult",
    "Hunk",
    "HunkLine",
    "HunkResult",
    "PatchSet",
    "apply_file",
    "parse_patch",
]
