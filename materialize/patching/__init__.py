"""Patch parsing and hunk application, byte-identical to GNU patch 2.7.6.

``parse_patch`` turns patch bytes into an immutable ``PatchSet``; ``apply_file`` applies one
``FilePatch`` to file bytes as ``patch -pN -F<fuzz> -f --no-backup-if-mismatch`` would, without
touching the filesystem. ``tests/patching`` checks this differentially against ``/usr/bin/patch``.

``apply_to_tree`` (``patching.tree``) is the one way a whole patch is applied to a tree: every
caller (engine, rebase, fold, git import/export, offline tree sources) goes through it, and so does
every path safety check.

Deliberate differences from GNU patch (callers may rely on these):

* Unified, context and normal diffs (the latter two become the unified hunks ``diff -u``/``-U0``
  would write); ed scripts raise ``PatchFormatError`` instead of running ``ed``.
* No reversed-patch guessing (like ``patch -f``): a reversed or already-applied patch fails, with
  GNU's hint "Reversed (or previously applied) patch detected" in the report; ``reverse: true``
  applies a patch as ``patch -R``.
* An empty patch, or one holding only a mail header, is an empty ``PatchSet``; other text without
  any diff is GNU's "Only garbage was found in the patch input." (exit 2).
* ``GIT binary patch`` payloads are refused with GNU 2.7's words ("git binary diffs are not
  supported"); ``Binary files … differ`` without a payload changes no content, as in GNU.
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
