"""Applier unit tests; every scenario is also checked against the real GNU patch when available."""

from __future__ import annotations

import pytest

from materialize.errors import PatchFormatError
from materialize.patching import apply_file, parse_patch
from materialize.patching.model import FileResult

from .gnu import gnu_available, run_gnu

HAVE_GNU = gnu_available()


def _apply(original: bytes | None, patch: bytes, fuzz: int = 0, *, name: str = "f") -> FileResult:
    """Apply a single-file patch with our applier and, if possible, check GNU agrees on the bytes."""
    (fp,) = parse_patch(patch, source="t.diff").files
    ours = apply_file(original, fp, max_fuzz=fuzz)
    if HAVE_GNU:
        gnu = run_gnu(original, patch, fuzz=fuzz, name=name)
        assert (gnu.returncode == 0) == ours.ok, gnu.output
        assert gnu.content == ours.content, gnu.output
    return ours


def _diff(hunks: str) -> bytes:
    return b"--- a/f\n+++ b/f\n" + hunks.encode()


BASE = b"".join(b"line%d\n" % i for i in range(1, 21))
CHANGE_5 = _diff("@@ -4,3 +4,3 @@\n line4\n-line5\n+LINE5\n line6\n")


def test_clean() -> None:
    r = _apply(BASE, CHANGE_5)
    assert r.ok and r.reject is None
    assert r.content == BASE.replace(b"line5\n", b"LINE5\n")
    (h,) = r.hunks
    assert (h.status, h.offset, h.fuzz, h.applied_at) == ("clean", 0, 0, 4)


def test_offset_is_reported_and_carried_to_the_next_hunk() -> None:
    patch = _diff(
        "@@ -4,3 +4,3 @@\n line4\n-line5\n+LINE5\n line6\n@@ -14,3 +14,3 @@\n line14\n-line15\n+LINE15\n line16\n"
    )
    r = _apply(b"new1\nnew2\n" + BASE, patch)
    assert [(h.status, h.offset, h.applied_at) for h in r.hunks] == [("offset", 2, 6), ("offset", 2, 16)]


def test_fuzz_trims_context_and_wins_the_label() -> None:
    drifted = b"x\n" + BASE.replace(b"line4\n", b"LINE4-local\n")
    assert not _apply(drifted, CHANGE_5, fuzz=0).ok
    r = _apply(drifted, CHANGE_5, fuzz=1)
    (h,) = r.hunks
    assert (h.status, h.offset, h.fuzz, h.applied_at) == ("fuzz", 1, 1, 5)
    assert b"LINE4-local\nLINE5\n" in r.content  # context comes from the file, not the patch


def test_failed_hunk_does_not_stop_later_hunks_and_is_rejected() -> None:
    patch = _diff(
        "@@ -4,3 +4,4 @@ def f():\n line4\n-line5\n+LINE5\n+extra\n line6\n"
        "@@ -14,3 +15,3 @@\n line14\n-nope\n+NOPE\n line16\n"
    )
    r = _apply(BASE, patch)
    assert not r.ok
    assert [h.status for h in r.hunks] == ["clean", "failed"]
    assert r.content is not None and b"LINE5\nextra\n" in r.content
    assert r.reject == "--- f\n+++ f\n@@ -15,3 +16,3 @@\n line14\n-nope\n+NOPE\n line16\n"


def test_never_matches_before_the_previous_hunk() -> None:
    # Both hunks' contexts exist only before hunk 1's position in the drifted file.
    original = b"a\nb\nc\nd\ne\nf\n"
    patch = _diff("@@ -3,3 +3,3 @@\n c\n-d\n+D\n e\n@@ -6,3 +6,3 @@\n a\n-b\n+B\n c\n")
    r = _apply(original, patch)
    assert [h.status for h in r.hunks] == ["clean", "failed"]


@pytest.mark.parametrize("fuzz", [0, 1, 2, 3])
def test_hunk_at_start_of_file_only_matches_the_start(fuzz: int) -> None:
    # diff -U3 at line 1 has no leading context: GNU pins such a hunk to the top of the file.
    patch = _diff("@@ -1,4 +1,4 @@\n-a\n+A\n b\n c\n d\n")
    _apply(b"x\na\nb\nc\nd\n", patch, fuzz)
    _apply(b"a\nb\nc\nd\n", patch, fuzz)


@pytest.mark.parametrize("fuzz", [0, 1, 2, 3])
def test_hunk_at_end_of_file_only_matches_the_end(fuzz: int) -> None:
    patch = _diff("@@ -2,4 +2,4 @@\n b\n c\n d\n-e\n+E\n")
    _apply(b"a\nb\nc\nd\ne\nf\n", patch, fuzz)
    _apply(b"a\nb\nc\nd\ne\n", patch, fuzz)


def test_no_newline_at_end_of_file_both_sides() -> None:
    add_nl = _diff("@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n")
    assert _apply(b"a\nb", add_nl).content == b"a\nb\n"
    drop_nl = _diff("@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n")
    assert _apply(b"a\nb\n", drop_nl).content == b"a\nb"
    # The file has a final newline but the patch says it has none: GNU refuses.
    assert not _apply(b"a\nb\n", add_nl).ok
    append = _diff("@@ -1 +1,2 @@\n-a\n\\ No newline at end of file\n+a\n+b\n\\ No newline at end of file\n")
    assert _apply(b"a", append).content == b"a\nb"


def test_crlf_file_with_crlf_patch_lines() -> None:
    original = b"one\r\ntwo\r\nthree\r\n"
    patch = _diff("@@ -1,3 +1,3 @@\n one\r\n-two\r\n+TWO\r\n three\r\n")
    r = _apply(original, patch)
    assert r.content == b"one\r\nTWO\r\nthree\r\n"


def test_crlf_mangled_patch_is_stripped_like_gnu() -> None:
    patch = _diff("@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n").replace(b"\n", b"\r\n")
    assert _apply(b"one\ntwo\nthree\n", patch).content == b"one\nTWO\nthree\n"
    assert not _apply(b"one\r\ntwo\r\nthree\r\n", patch).ok


def test_new_file() -> None:
    patch = b"--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n"
    assert _apply(None, patch).content == b"x\ny\n"
    assert _apply(b"", patch).content == b"x\ny\n"
    r = _apply(b"already here\n", patch)
    assert not r.ok and r.content == b"already here\n"


def test_delete_file() -> None:
    patch = b"--- a/f\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n"
    r = _apply(b"x\ny\n", patch)
    assert r.ok and r.content is None
    r = _apply(b"x\ny\nlocal\n", patch)
    assert not r.ok and r.error is not None and r.content == b"local\n"
    assert not _apply(b"other\n", patch).ok


def test_empty_file_and_emptying_without_delete() -> None:
    patch = _diff("@@ -0,0 +1 @@\n+first\n")
    assert _apply(b"", patch).content == b"first\n"
    assert _apply(b"old\n", patch).content == b"first\nold\n"
    empty_out = _diff("@@ -1 +0,0 @@\n-only\n")
    r = _apply(b"only\n", empty_out)
    assert r.ok and r.content == b""


def test_missing_file_for_modification() -> None:
    (fp,) = parse_patch(CHANGE_5, source="t.diff").files
    r = apply_file(None, fp)
    assert not r.ok and r.content is None and r.error is not None
    assert [h.status for h in r.hunks] == ["failed"]
    if HAVE_GNU:
        assert run_gnu(None, CHANGE_5, fuzz=0).returncode == 1


def test_zero_context_hunks() -> None:
    patch = _diff("@@ -2,0 +3,2 @@\n+ins1\n+ins2\n@@ -5 +7 @@\n-line5\n+LINE5\n")
    r = _apply(BASE, patch)
    assert r.ok
    _apply(b"x\n" + BASE, patch)


def test_insertion_past_end_of_file() -> None:
    patch = _diff("@@ -30,0 +31 @@\n+tail\n")
    assert _apply(BASE, patch).content == BASE + b"tail\n"
    assert _apply(b"a", patch).content == b"a\ntail\n"


def test_rename_without_hunks_keeps_content() -> None:
    patch = b"diff --git a/f b/g\nsimilarity index 100%\nrename from f\nrename to g\n"
    (fp,) = parse_patch(patch, source="p").files
    r = apply_file(b"data\n", fp)
    assert r.ok and r.content == b"data\n" and r.hunks == ()


def test_misordered_insertion_fails_like_gnu() -> None:
    patch = _diff("@@ -4,3 +4,3 @@\n line4\n-line5\n+LINE5\n line6\n@@ -0,0 +1 @@\n+zz\n")
    r = _apply(b"x\n" + BASE, patch)
    assert [h.status for h in r.hunks] == ["offset", "failed"]
    assert r.reject is not None and r.reject.endswith("@@ -0,0 +1 @@\n+zz\n")


def test_gnu_abort_after_incomplete_line_leaves_file_unchanged() -> None:
    # Hunk 2 is located before hunk 1, whose output ended without a newline: GNU asserts and dies.
    patch = b"--- a/f\n+++ b/f\n@@ -2,0 +2,2 @@\n+b\n+a\n\\ No newline at end of file\n@@ -1 +0,0 @@\n-b\n"
    (fp,) = parse_patch(patch, source="t.diff").files
    r = apply_file(b"b\na", fp)
    assert not r.ok and r.content == b"b\na" and r.error is not None
    if HAVE_GNU:
        gnu = run_gnu(b"b\na", patch, fuzz=0)
        assert gnu.returncode not in (0, 1) and gnu.content == b"b\na"


def test_chopped_trailing_blank_lines_and_unterminated_last_patch_line() -> None:
    # An editor removed the trailing blank context line: GNU (and we) put it back.
    assert _apply(b"a\nb\n\n", b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n").content == b"a\nB\n\n"
    # GNU drops an unterminated last patch line, then pads with a blank context line.
    assert _apply(b"a\nb\n\n\n", b"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n \n ").ok
    with pytest.raises(PatchFormatError, match=r"^t\.diff:\d+: malformed"):
        parse_patch(b"--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n a\n b\n+c", source="t.diff")


def test_search_never_starts_before_the_last_frozen_line() -> None:
    # Hunk 2's pattern "b" also occurs at lines 1 and 3, but hunk 1 froze line 3: GNU takes line 4.
    patch = _diff("@@ -3,2 +4,3 @@\n b\n+b\n b\n\\ No newline at end of file\n@@ -2 +2,2 @@\n+a\n b\n")
    r = _apply(b"b\na\nb\nb\n", patch, fuzz=1)
    assert [(h.status, h.offset, h.fuzz, h.applied_at) for h in r.hunks] == [
        ("fuzz", 0, 1, 3),
        ("offset", 2, 0, 4),
    ]
    assert r.content == b"b\na\nb\nb\na\nb\n"


def test_unterminated_no_newline_marker_at_end_of_patch() -> None:
    patch = _diff("@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file")
    assert _apply(b"a\nb\n", patch).content == b"a\nc"


def test_tab_and_equals_led_hunk_lines_are_context() -> None:
    original = b"a\n\tindented\nb\nc\n"
    patch = _diff("@@ -1,4 +1,4 @@\n a\n\tindented\n-b\n+B\n=c\n")
    assert _apply(original, patch).content == b"a\n\tindented\nB\nc\n"
