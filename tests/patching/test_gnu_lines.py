"""How GNU patch 2.7.6 reads the lines of a patch, compared with /usr/bin/patch on the same input.

* ``#`` lines: GNU's ``pget_line`` drops every line that starts with ``#`` (past a hunk's indent)
  everywhere but in an ed script: between header lines, between hunks and inside a hunk's body.
* Header timestamps near the epoch (``fetchname``): any time strictly within -25h..+26h of
  1970-01-01 00:00 UTC, in any of ``parse_datetime``'s formats, says "no such file".
* Indented diffs and RFC 934 ``- `` prefixes, normal diffs after a header line, ed scripts.

Each case runs GNU ``patch -p1 -f`` on a tree on disk and our applier on the same tree in memory;
the outcomes must agree, or ours must be a clear refusal naming the patch file and line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.errors import PatchFormatError

from .gnu import gnu_available
from .test_gnu_rules import compare, ours

pytestmark = pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")

SEVEN = {"f": b"a\nb\nc\nd\ne\nf\ng\n"}
TWO_HUNKS = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -5,3 +5,3 @@\n e\n-f\n+F\n g\n"
CONTEXT = (b"*** a/f\n--- b/f\n***************\n*** 1,3 ****\n  a\n! b\n  c\n--- 1,3 ----\n  a\n! B\n  c\n"
           b"***************\n*** 5,7 ****\n  e\n! f\n  g\n--- 5,7 ----\n  e\n! F\n  g\n")
BOTH = {"f": b"a\nB\nc\nd\ne\nF\ng\n"}


def refused(patch: bytes, files: dict[str, bytes] | None = None, strip: int = 1) -> str:
    """Our refusal of ``patch`` (a PatchFormatError's text, which must name the patch file)."""
    with pytest.raises(PatchFormatError) as info:
        ours(files if files is not None else SEVEN, patch, strip)
    assert str(info.value).startswith("t.patch:"), str(info.value)
    return str(info.value)


# -- "#" lines ----------------------------------------------------------------------------------


@pytest.mark.parametrize("patch", [
    TWO_HUNKS.replace(b"@@ -5", b"# a comment between hunks\n@@ -5"),
    TWO_HUNKS.replace(b"@@ -5", b"#\n#x\n@@ -5"),
    TWO_HUNKS.replace(b"-b\n", b"-b\n#inside a hunk\n"),
    TWO_HUNKS.replace(b" a\n", b"# first\n a\n"),
    TWO_HUNKS.replace(b" g\n", b"#\n g\n"),
    TWO_HUNKS.replace(b"+++", b"# between header lines\n+++"),
    CONTEXT.replace(b"***************\n*** 5", b"#x\n***************\n*** 5"),
    CONTEXT.replace(b"--- 1,3 ----", b"#x\n--- 1,3 ----"),
    CONTEXT.replace(b"*** 1,3 ****", b"#x\n*** 1,3 ****"),
    CONTEXT.replace(b"! B\n", b"#x\n! B\n"),
    b"diff --git a/f b/f\nindex 1111111..2222222 100644\n" + TWO_HUNKS.replace(b"@@ -5", b"#\n@@ -5"),
], ids=["between-hunks", "two-between", "in-body", "body-start", "body-end", "headers",
        "context-between", "context-new-side", "context-stars", "context-body", "git"])
def test_hash_lines_are_dropped_as_gnu_drops_them(tmp_path: Path, patch: bytes) -> None:
    result, files = compare(tmp_path, SEVEN, patch)
    assert result.ok and files == BOTH
