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
from materialize.patching.parse import parse_patch

from .gnu import gnu_available
from .test_gnu_rules import compare, gnu, ours

pytestmark = pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")

SEVEN = {"f": b"a\nb\nc\nd\ne\nf\ng\n"}
TWO_HUNKS = b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -5,3 +5,3 @@\n e\n-f\n+F\n g\n"
CONTEXT = (b"*** a/f\n--- b/f\n***************\n*** 1,3 ****\n  a\n! b\n  c\n--- 1,3 ----\n  a\n! B\n  c\n"
           b"***************\n*** 5,7 ****\n  e\n! f\n  g\n--- 5,7 ----\n  e\n! F\n  g\n")
BOTH = {"f": b"a\nB\nc\nd\ne\nF\ng\n"}


def refused(patch: bytes, files: dict[str, bytes] | None = None, strip: int = 1) -> str:
    """Our refusal of ``patch`` (a PatchFormatError's text, which must name the patch file)."""
    with pytest.raises(PatchFormatError) as info:
        parse_patch(patch, source="t.patch", strip=strip)
    result, _files = ours(files if files is not None else SEVEN, patch, strip)
    assert str(result.error) == str(info.value) and str(info.value).startswith("t.patch:"), result.error
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


# -- timestamps near the epoch -------------------------------------------------------------------

EPOCH_READ = [  # formats we read exactly: GNU's answer, whatever it is, must be ours
    "1970-01-01 00:00:00.000000000 +0000", "1969-12-31 16:00:00.000000000 -0800", "Thu Jan  1 00:00:00 1970",
    "Wed Dec 31 19:00:00 1969", "1970-01-02 01:59:59.999999999 +0000", "1970-01-02 02:00:00 +0000",
    "1969-12-30 23:00:00.000000001 +0000", "1969-12-30 23:00:00 +0000", "1970-01-01 12:00:00",
    "1970-01-01 00:00:00 UTC", "1970-01-01T00:00:00Z", "1970-01-01 00:00 +01:00", "1 Jan 1970 00:00:00 -0000",
    "1970-01-01 00:00:00.000000000 +0000 (a comment)", "(revision 1970)", "(working copy)",
    "2020-01-01 00:00:00 +0000", "1969-12-30 10:59:59", "1970-01-02 16:00:00", "1970-01-01 00:00:00 +2400",
    "Thu Jan  1 00:00:00 UTC 1970", "Thu Jan  1 00:00:00 1970 GMT", "Fri Jan  2 02:00:00 UTC 1970",
]
EPOCH_REFUSED = [  # formats parse_datetime reads that we do not, and local times whose answer needs the zone
    "1970-01-01", "Thu, 01 Jan 1970 00:00:00 +0000", "1970-01-01 00:00:00 EST", "@0", "19700101",
    "70-01-01 00:00:00", "01/01/1970", "1970-01-01 14:30:00", "Thu Jan  1 14:30:00 1970",
]


def _deletion(stamp: str) -> bytes:
    return f"--- a/f\t2020-01-01 00:00:00 +0000\n+++ b/f\t{stamp}\n@@ -1 +0,0 @@\n-x\n".encode()


def _creation(stamp: str) -> bytes:
    return f"--- a/f\t{stamp}\n+++ b/f\t2020-01-01 00:00:00 +0000\n@@ -0,0 +1 @@\n+y\n".encode()


@pytest.mark.parametrize("stamp", EPOCH_READ)
@pytest.mark.parametrize("make", [_deletion, _creation], ids=["delete", "create"])
def test_epoch_timestamps_are_read_as_gnu_reads_them(tmp_path: Path, stamp: str, make) -> None:
    """Near the epoch (-25h..+26h, exclusive) a timestamp says "no such file": a deletion removes the
    file and a creation over an existing file fails; elsewhere the file stays (empty) or is patched."""
    compare(tmp_path, {"f": b"x\n"}, make(stamp))


@pytest.mark.parametrize("stamp", EPOCH_REFUSED)
def test_epoch_timestamps_we_cannot_read_are_refused(tmp_path: Path, stamp: str) -> None:
    code, files, _report = gnu(tmp_path, {"f": b"x\n"}, _deletion(stamp), 1)
    assert code == 0 and "f" not in files  # (in UTC) GNU deletes the file
    assert refused(_deletion(stamp), {"f": b"x\n"}).startswith("t.patch:2: cannot tell whether the timestamp")


def test_a_timestamp_that_only_looks_like_a_year_elsewhere_is_no_epoch(tmp_path: Path) -> None:
    """Formats we do not read are refused only where they could mean 1969/1970."""
    compare(tmp_path, {"f": b"x\n"}, _deletion("Tue, 01 Mar 2022 10:00:00 +0100"))


# -- normal diffs after a header line; ed scripts ---------------------------------------------------

NORMAL_CASES = {
    "after ---/+++": (SEVEN, b"--- a/f\n+++ b/f\n2c2\n< b\n---\n> B\n6d5\n< f\n"),
    "after Index": (SEVEN, b"Index: a/f\n2c2\n< b\n---\n> B\n"),
    "append": (SEVEN, b"Index: a/f\n3a4,5\n> x\n> y\n"),
    "append at the top": (SEVEN, b"Index: a/f\n0a1\n> x\n"),
    "at the top of a missing file": ({}, b"--- /dev/null\n+++ b/f\n0a1\n> x\n"),
    "delete everything": ({"f": b"a\n"}, b"--- a/f\n+++ /dev/null\n1d0\n< a\n"),
    "ranges": (SEVEN, b"Index: a/f\n2,3c2\n< b\n< c\n---\n> BC\n5,6d3\n< e\n< f\n"),
    "offset": (SEVEN, b"Index: a/f\n4c4\n< b\n---\n> B\n"),
    "failing": (SEVEN, b"Index: a/f\n2c2\n< zz\n---\n> B\n"),
    "TAB after the mark": (SEVEN, b"Index: a/f\n2c2\n< b\n---\n>\tB\n"),
    "no newline, old side": ({"f": b"a\nb"}, b"Index: a/f\n2c2\n< b\n\\ No newline at end of file\n---\n> B\n"),
    "no newline, new side": ({"f": b"a\nb\n"}, b"Index: a/f\n2c2\n< b\n---\n> B\n\\ No newline at end of file\n"),
    "# lines": (SEVEN, b"Index: a/f\n2c2\n#x\n< b\n#\n---\n> B\n#\n6d5\n< f\n"),
    "indented": (SEVEN, b"  Index: a/f\n  2c2\n  < b\n  ---\n  > B\n"),
    "CRLF": (SEVEN, b"--- a/f\r\n+++ b/f\r\n2c2\r\n< b\r\n---\r\n> B\r\n"),
    "CRLF tree": ({"f": b"a\r\nb\r\n"}, b"--- a/f\n+++ b/f\n2c2\r\n< b\r\n---\r\n> B\r\n"),
    "RFC 934": (SEVEN, b"- --- a/f\t2020-01-01 00:00:00 +0000\n+++ b/f\n2c2\n< b\n- ---\n> B\n"),
    "RFC 934, no time": (SEVEN, b"- --- a/f\n+++ b/f\n2c2\n< b\n- ---\n> B\n"),
    "RFC 934, removed line": ({"f": b"a\n-b\n"}, b"- --- a/f\t2020-01-01 00:00:00 +0000\n+++ b/f\n2c2\n< -b\n---\n> B\n"),
    "git": (SEVEN, b"diff --git a/f b/f\nindex 1111111..2222222 100644\n2c2\n< b\n---\n> B\n6d5\n< f\n"),
    "git, names not swapped": ({**SEVEN, "g": b"1\n"}, b"diff --git a/g b/f\n1c1\n< 1\n---\n> one\n"),
    "git, ---/+++ names": ({**SEVEN, "g": b"1\n"}, b"diff --git a/x b/x\n--- a/f\n+++ b/g\n1c1\n< 1\n---\n> one\n"),
    "git, new file": (SEVEN, b"diff --git a/n b/n\nnew file mode 100644\nindex 0000000..1111111\n0a1\n> n\n"),
    "git, CRLF": (SEVEN, b"diff --git a/f b/f\r\n2c2\r\n< b\r\n---\r\n> B\r\n"),
    "then unified": ({**SEVEN, "g": b"1\n"},
                     b"Index: a/f\n2c2\n< b\n---\n> B\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-1\n+2\n"),
}


@pytest.mark.parametrize("case", NORMAL_CASES, ids=list(NORMAL_CASES))
def test_a_normal_diff_after_a_header_line_is_applied_as_gnu_applies_it(tmp_path: Path, case: str) -> None:
    files, patch = NORMAL_CASES[case]
    compare(tmp_path, files, patch)


REFUSED_CASES = {  # GNU applies these; we refuse them, naming the line
    "ed script": (b"Index: a/f\n2c\nB\n.\n", 2, "an ed script"),
    "ed script at the end": (b"Index: a/f\n2d\n", 2, "an ed script"),
    "ed script in a git section": (b"diff --git a/f b/f\n2d\n", 2, "an ed script"),
    "normal diff after prose GNU reads as a command": (b"--- a/f\n+++ b/f\n2c2\nprose\n< b\n---\n> B\n", 3,
                                                       "a normal diff after a line GNU patch reads as another"),
    "normal diff GNU reads from a line that is no command": (b"3d\n--- a/f\t2020-01-01 00:00:00 +0000\n! b\n> B\n",
                                                            3, "a normal diff GNU patch would read from a line"),
    "normal diff GNU finds at its '> ' line": (b"--- a/f\n+++ b/f\n2c2\n<\tb\n---\n> B\n--- a/f\n+++ b/f\n"
                                               b"@@ -1 +1 @@\n-a\n+A\n", 3, "a normal diff after a line GNU patch"),
}


@pytest.mark.parametrize("case", REFUSED_CASES, ids=list(REFUSED_CASES))
def test_ed_scripts_and_odd_normal_diffs_are_refused(tmp_path: Path, case: str) -> None:
    patch, line, words = REFUSED_CASES[case]
    code, files, _report = gnu(tmp_path, SEVEN, patch, 1)
    assert code == 0  # (GNU ran ed, or applied the normal diff, or read nothing from prose)
    assert refused(patch).startswith(f"t.patch:{line}: unsupported patch format: {words}")


def test_an_ed_script_ends_only_at_a_lone_dot(tmp_path: Path) -> None:
    """Before any hunk, the first command-like line after a header and a "." line make an ed script;
    an ed command with a hunk after it is garbage (GNU applies the hunk)."""
    compare(tmp_path, {**SEVEN, "g": b"1\n"}, b"Index: a/f\n2d\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-1\n+2\n")


# -- indented sections, RFC 934 "- " prefixes ------------------------------------------------------


def _indent(patch: bytes, prefix: bytes) -> bytes:
    return b"".join(prefix + line for line in patch.splitlines(True))


PLAIN_G = b"--- a/g\n+++ b/g\n@@ -1 +1 @@\n-1\n+2\n"
SEVEN_G = {**SEVEN, "g": b"1\n"}
INDENT_CASES = {
    "unified, 2 blanks": _indent(TWO_HUNKS, b"  ") + PLAIN_G,
    "unified, TAB": _indent(TWO_HUNKS, b"\t") + PLAIN_G,
    "unified, X and TAB": _indent(TWO_HUNKS, b"X\t") + PLAIN_G,
    "unified, after a plain one": PLAIN_G + _indent(TWO_HUNKS, b"  "),
    "unified, header lines only": b"  --- a/f\n  +++ b/f\n" + TWO_HUNKS.split(b"+++ b/f\n")[1] + PLAIN_G,
    "unified, # line": _indent(TWO_HUNKS, b"  ").replace(b"  -b\n", b"  -b\n  #x\n") + PLAIN_G,
    "unified, no newline marker indented": _indent(b"--- a/f\n+++ b/f\n@@ -6,2 +6,2 @@\n f\n-g\n+G\n"
                                                   b"\\ No newline at end of file\n", b"  ") + PLAIN_G,
    "unified, no newline marker unindented": b"  --- a/f\n  +++ b/f\n  @@ -6,2 +6,2 @@\n   f\n  -g\n  +G\n"
                                             b"\\ No newline at end of file\n" + PLAIN_G,
    "context, 2 blanks": _indent(CONTEXT, b"  ") + PLAIN_G,
    "context, TAB": _indent(CONTEXT, b"\t") + PLAIN_G,
    "context, stars indented otherwise": _indent(CONTEXT, b"  ").replace(b"  ***************\n  *** 1",
                                                                           b"***************\n  *** 1") + PLAIN_G,
    "rfc934": b"- --- a/f\t2020-01-01 00:00:00 +0000\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n- -b\n+B\n c\n" + PLAIN_G,
    "rfc934, twice": b"- - --- a/f\t2020-01-01 00:00:00 +0000\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n- - -b\n+B\n c\n" + PLAIN_G,
    "rfc934, no time: no nesting": b"- --- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n- -b\n+B\n c\n" + PLAIN_G,
    "rfc934, empty time": b"- --- a/f\t\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n- -b\n+B\n c\n" + PLAIN_G,
    "rfc934, /dev/null": b"- --- /dev/null\n+++ b/n\n@@ -0,0 +1,2 @@\n+a\n+- -b\n" + PLAIN_G,
    "rfc934, reset by a later --- line": b"- --- a/f\t2020-01-01 00:00:00 +0000\n--- a/f\t2020-01-01 00:00:00 +0000\n"
                                         b"+++ b/f\n@@ -1,3 +1,3 @@\n a\n- -b\n+B\n c\n" + PLAIN_G,
    "git, all indented": _indent(b"diff --git a/f b/f\nindex 1111111..2222222 100644\n" + TWO_HUNKS, b"  ") + PLAIN_G,
    "git, indented new file": _indent(b"diff --git a/n b/n\nnew file mode 100644\nindex 0000000..1111111\n"
                                      b"--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+n\n", b"\t") + PLAIN_G,
    "git, indented rename": _indent(b"diff --git a/g b/h\nsimilarity index 100%\nrename from g\nrename to h\n", b"  "),
    "git, indented hunks": b"diff --git a/f b/f\n" + _indent(TWO_HUNKS, b"  ") + PLAIN_G,
    "git, rfc934": b"diff --git a/f b/f\n- --- a/f\t2020-01-01 00:00:00 +0000\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n- -b\n"
                   b"+B\n c\n" + PLAIN_G,
    "git, rfc934 without a time": b"diff --git a/f b/f\n- --- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n" + PLAIN_G,
    "rfc934, context": b"*** a/f\t2020-01-01 00:00:00 +0000\n- --- b/f\t2020-01-01 00:00:00 +0000\n***************\n"
                       b"*** 1,3 ****\n  a\n! b\n  c\n- --- 1,3 ----\n  a\n! B\n  c\n" + PLAIN_G,
}


@pytest.mark.parametrize("case", INDENT_CASES, ids=list(INDENT_CASES))
def test_indented_and_forwarded_sections_are_read_as_gnu_reads_them(tmp_path: Path, case: str) -> None:
    """GNU strips the indent of a section's first hunk line (``p_indent``) and the "- " prefixes of its
    last timed ``--- `` line (``p_rfc934_nesting``) from every line of the section."""
    compare(tmp_path, SEVEN_G, INDENT_CASES[case])


@pytest.mark.parametrize("patch, line, words", [
    (b"- --- a/f\thello\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n- -b\n+B\n c\n", 1, "cannot tell whether GNU patch reads"),
    (b"+++ b/f\n- --- a/s p.c\n@@ -1,3 +1,3 @@\n a\n- -b\n+B\n c\n", 2, "cannot tell whether GNU patch reads"),
])
def test_unknown_rfc934_times_are_refused_when_the_readings_differ(patch: bytes, line: int, words: str) -> None:
    """A hunk line that begins with "- " reads one way if GNU reads the time (and strips the prefix)
    and another if not: we cannot tell which, so the patch is refused, naming the "--- " line."""
    assert refused(patch).startswith(f"t.patch:{line}: {words}")


UNKNOWN_TIME_CASES = {  # a "--- " line whose time we cannot tell GNU reads, before hunks no "- " changes
    "unified (found by hypothesis)": b"+++ b/f\n- --- a/s p.c\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n" + PLAIN_G,
    "unified, time word": b"- --- a/f\thello\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n" + PLAIN_G,
    "unified, twice": b"- - --- a/f\thello\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n" + PLAIN_G,
    "unified, after a known nesting": b"- --- a/f\t2020-01-01 00:00:00 +0000\n--- a/f\thello\n+++ b/f\n"
                                      b"@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n" + PLAIN_G,
    "git": b"diff --git a/f b/f\n- --- a/f\thello\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n" + PLAIN_G,
    "context": b"*** a/f\t2020-01-01 00:00:00 +0000\n- --- b/f\thello\n***************\n"
               b"*** 1,3 ****\n  a\n! b\n  c\n--- 1,3 ----\n  a\n! B\n  c\n" + PLAIN_G,
    "normal": b"- --- a/f\thello\n+++ b/f\n2c2\n< b\n---\n> B\n" + PLAIN_G,
}


@pytest.mark.parametrize("case", UNKNOWN_TIME_CASES, ids=list(UNKNOWN_TIME_CASES))
def test_unknown_rfc934_times_are_read_when_every_reading_agrees(tmp_path: Path, case: str) -> None:
    """The nesting only strips "- " from lines that begin so: when no line of the section does, GNU
    reads it the same whether or not it reads the time, and so do we (this was refused before)."""
    compare(tmp_path, SEVEN_G, UNKNOWN_TIME_CASES[case])


def test_a_line_less_indented_than_its_hunk_is_malformed_in_both(tmp_path: Path) -> None:
    patch = b"    --- a/f\n    +++ b/f\n    @@ -1,3 +1,3 @@\n  a\n    -b\n    +B\n    c\n" + PLAIN_G
    code, _files, report = gnu(tmp_path, SEVEN_G, patch, 1)
    assert code == 2, report  # ("malformed patch at line 4: a", on stderr)
    assert refused(patch, SEVEN_G).startswith("t.patch:4: malformed patch")


# -- which line's CR strips the section's CRs --------------------------------------------------------

CR_CASES = {  # GNU: the last of the "--- ", "+++ ", "Index:" lines and the first command-like line after a header
    "git, --- after +++": b"diff --git a/g b/g\n+++ b/g\n--- a/g\r\n@@ -1,2 +1,2 @@\r\n-1\r\n+one\r\n 2\r\n",
    "git, +++ after ---": b"diff --git a/g b/g\n--- a/g\r\n+++ b/g\n@@ -1,2 +1,2 @@\r\n-1\r\n+one\r\n 2\r\n",
    "git, Index: last": b"diff --git a/g b/g\n--- a/g\n+++ b/g\nIndex: g\r\n@@ -1,2 +1,2 @@\r\n-1\r\n+one\r\n 2\r\n",
    "git, a command before": b"2c2\r\ndiff --git a/g b/g\r\n***************\r\n@@ -1,2 +1,2 @@\r\n-1\r\n+one\r\n 2\r\n",
    "plain, an ed command": b"--- a/g\n+++ b/g\n5d\r\n@@ -1,2 +1,2 @@\r\n-1\r\n+one\r\n 2\r\n",
    "plain, a command before": b"2c2\r\n--- a/g\n+++ b/g\n***************\r\n@@ -1,2 +1,2 @@\r\n-1\r\n+one\r\n 2\r\n",
}


@pytest.mark.parametrize("case", CR_CASES, ids=list(CR_CASES))
def test_the_line_whose_cr_strips_the_sections_crs_is_gnus(tmp_path: Path, case: str) -> None:
    compare(tmp_path, {"g": b"1\n2\n3\n"}, CR_CASES[case])


# -- several header lines of one kind --------------------------------------------------------------

_H = b"@@ -1,2 +1,2 @@\n-1\n+one\n 2\n"
SLOT_CASES = {  # GNU's fetchname leaves a slot alone for a /dev/null name (but dates it) or one -p cannot strip
    "--- unstrippable after": b"--- a/f\n+++ b/g\n--- x\n" + _H,
    "--- /dev/null after": b"--- a/f\n+++ b/g\n--- /dev/null\n" + _H,
    "+++ unstrippable after": b"--- a/f\n+++ b/g\n*** x\n" + _H,
    "+++ /dev/null after": b"--- a/f\n+++ b/g\n+++ /dev/null\n" + _H,
    "Index: unstrippable after": b"Index: a/f\nIndex: x\n" + _H,
    "Index: /dev/null": b"Index: a/f\nIndex: /dev/null\n" + _H,
    "git, *** line": b"diff --git a/g b/g\n--- a/g\n+++ b/g\n*** 1,3 ****\n" + _H,
    "git, +++ unstrippable": b"diff --git a/g b/g\n--- a/g\n+++ x\n" + _H,
    "git, --- /dev/null": b"diff --git a/g b/g\n--- /dev/null\n+++ b/g\n" + _H,
    "deletion dated by a /dev/null": b"--- a/f\n+++ b/f\n+++ /dev/null\n@@ -1,3 +0,0 @@\n-1\n-2\n-3\n",
    "deletion undone by a later time": b"--- a/f\n+++ /dev/null\n+++ b/f\t2020-01-01 00:00:00 +0000\n"
                                       b"@@ -1,3 +0,0 @@\n-1\n-2\n-3\n",
}


@pytest.mark.parametrize("case", SLOT_CASES, ids=list(SLOT_CASES))
def test_several_header_lines_of_a_kind_fill_gnus_slots(tmp_path: Path, case: str) -> None:
    compare(tmp_path, {"f": b"1\n2\n3\n", "g": b"1\n2\n3\n"}, SLOT_CASES[case])
