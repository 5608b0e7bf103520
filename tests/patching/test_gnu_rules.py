"""GNU patch's rules where we used to diverge (issue 9, items 1-5), each compared with /usr/bin/patch.

Every case is a small tree plus a patch: GNU ``patch -pN -f`` runs on the tree on disk, our one
applier (``apply_to_tree``) runs on the same tree in memory, and the outcomes must agree: success
or failure, and on success every file's bytes and executable bit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from materialize.errors import PatchFormatError, UnsafePathError
from materialize.patching.tree import apply_to_tree

from .gnu import GNU_PATCH, DictView, gnu_available

pytestmark = pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")


def _tree(files: dict[str, bytes], dirs: tuple[str, ...] = ()) -> dict[str, tuple[str, bytes]]:
    return {p: ("100644", data) for p, data in files.items()}


def gnu(tmp: Path, files: dict[str, bytes], patch: bytes, strip: int, dirs: tuple[str, ...] = (), *,
        fuzz: int = 0, reverse: bool = False):
    """(exit code, resulting files) of GNU patch on ``files``."""
    work = tmp / "gnu"
    work.mkdir()
    for d in dirs:
        (work / d).mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(data)
    proc = subprocess.run(
        [GNU_PATCH, f"-p{strip}", "-f", f"-F{fuzz}", "--no-backup-if-mismatch", "-r", "-", *(["-R"] if reverse else [])],
        input=patch, cwd=work, capture_output=True, env=dict(os.environ, LC_ALL="C"), check=False,
    )
    out = {}
    for p in work.rglob("*"):
        if p.is_file() or p.is_symlink():
            out[p.relative_to(work).as_posix()] = p.read_bytes()
    return proc.returncode, out, proc.stdout.decode(errors="replace")


def ours(files: dict[str, bytes], patch: bytes, strip: int, dirs: tuple[str, ...] = (), *, fuzz: int = 0,
         reverse: bool = False):
    view = DictView(_tree(files))
    for d in dirs:
        view.files.setdefault(f"{d}/.keep-dir", ("100644", b""))
    result = apply_to_tree(view, patch, source="t.patch", strip=strip, max_fuzz=fuzz, reverse=reverse)
    out = {p: c for p, (_m, c) in view.files.items() if not p.endswith(".keep-dir")}
    if result.ok:
        for path, content in result.changes.items():
            if content is None:
                out.pop(path, None)
            else:
                out[path] = content[1]
    return result, out


def compare(tmp: Path, files: dict[str, bytes], patch: bytes, strip: int = 1, dirs: tuple[str, ...] = (), *,
            fuzz: int = 0, reverse: bool = False):
    code, gnu_files, report = gnu(tmp, files, patch, strip, dirs, fuzz=fuzz, reverse=reverse)
    result, our_files = ours(files, patch, strip, dirs, fuzz=fuzz, reverse=reverse)
    assert result.error is None, result.error
    assert result.ok == (code == 0), (code, report, [o.result for o in result.failed])
    if code == 0:
        assert our_files == gnu_files, report
    return result, our_files


# -- 1. "Binary files ... differ" -----------------------------------------------------------------


def test_git_binary_without_payload_creates_an_empty_new_file(tmp_path: Path) -> None:
    patch = b"diff --git a/X b/X\nnew file mode 100644\nindex 0000000..e69de29\nBinary files /dev/null and b/X differ\n"
    _r, files = compare(tmp_path, {"keep": b"k\n"}, patch)
    assert files["X"] == b""


def test_git_binary_without_payload_leaves_an_existing_file_alone(tmp_path: Path) -> None:
    patch = b"diff --git a/X b/X\nindex 1111111..2222222 100644\nBinary files a/X and b/X differ\n"
    _r, files = compare(tmp_path, {"X": b"\x00old\n"}, patch)
    assert files["X"] == b"\x00old\n"


def test_plain_binary_line_is_garbage_between_files(tmp_path: Path) -> None:
    patch = (
        b"diff -ruN a/img b/img\nBinary files a/img and b/img differ\n"
        b"diff -ruN a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    )
    _r, files = compare(tmp_path, {"f": b"a\n", "img": b"\x00"}, patch)
    assert files == {"f": b"b\n", "img": b"\x00"}


def test_git_binary_payload_is_refused_with_gnus_words(tmp_path: Path) -> None:
    patch = (
        b"diff --git a/X b/X\nnew file mode 100644\nindex 0000000..1111111\nGIT binary patch\n"
        b"literal 5\nMcmZQzWMXCj0002E00000\n\nliteral 0\nHcmV?d00001\n\n"
    )
    result, _ = compare(tmp_path, {}, patch)
    assert result.failed[0].error == "File X: git binary diffs are not supported."


# -- 2. names with spaces -------------------------------------------------------------------------

SPACED = {"dir/Core and Builtins/x.rst": b"a\n"}


def test_name_without_tab_ends_at_the_first_space(tmp_path: Path) -> None:
    patch = b"--- a/dir/Core and Builtins/x.rst\n+++ b/dir/Core and Builtins/x.rst\n@@ -1 +1 @@\n-a\n+b\n"
    result, files = compare(tmp_path, SPACED, patch)
    assert not result.ok and files == SPACED


def test_name_with_tab_and_timestamp_keeps_its_spaces(tmp_path: Path) -> None:
    patch = (
        b"--- a/dir/Core and Builtins/x.rst\t2020-01-01 00:00:00 +0000\n"
        b"+++ b/dir/Core and Builtins/x.rst\t2020-01-01 00:00:00 +0000\n@@ -1 +1 @@\n-a\n+b\n"
    )
    _r, files = compare(tmp_path, SPACED, patch)
    assert files["dir/Core and Builtins/x.rst"] == b"b\n"


def test_git_quoted_and_tab_terminated_names(tmp_path: Path) -> None:
    patch = (
        b'diff --git "a/sp ace/q\\"uote" "b/sp ace/q\\"uote"\n--- "a/sp ace/q\\"uote"\n+++ "b/sp ace/q\\"uote"\n'
        b"@@ -1 +1 @@\n-a\n+b\n"
        b"diff --git a/my file b/my file\n--- a/my file\t\n+++ b/my file\t\n@@ -1 +1 @@\n-a\n+c\n"
    )
    _r, files = compare(tmp_path, {'sp ace/q"uote': b"a\n", "my file": b"a\n"}, patch)
    assert files == {'sp ace/q"uote': b"b\n", "my file": b"c\n"}


@pytest.mark.parametrize("header", [b"--- a/my file\t\n", b"+++ b/my file\t\n"], ids=["only ---", "only +++"])
def test_git_section_with_spaced_names_and_one_header_line(tmp_path: Path, header: bytes) -> None:
    """The diff --git line cannot be read (unquoted spaces); GNU patches the one file the ---/+++ line
    names. We refused it ("no ---/+++ lines name the file"); found by a fuzzer against quilt."""
    patch = b"diff --git a/my file b/my file\n" + header + b"@@ -1 +1 @@\n-a\n+c\n"
    _r, files = compare(tmp_path, {"my file": b"a\n"}, patch)
    assert files == {"my file": b"c\n"}


# -- 3. backslashes and colons are ordinary bytes ----------------------------------------------


def test_backslash_and_colon_names(tmp_path: Path) -> None:
    files = {"units/system-systemd\\x2dcryptsetup.slice": b"a\n", "a:b.txt": b"a\n", "c:/x": b"a\n"}
    patch = b"".join(
        b"--- a/" + name + b"\n+++ b/" + name + b"\n@@ -1 +1 @@\n-a\n+b\n"
        for name in (b"units/system-systemd\\x2dcryptsetup.slice", b"a:b.txt", b"c:/x")
    )
    _r, out = compare(tmp_path, files, patch)
    assert set(out.values()) == {b"b\n"} and set(out) == set(files)


# -- 4. which file a plain section patches ------------------------------------------------------

HUNK = b"@@ -1 +1 @@\n-a\n+b\n"


# GNU's best_name measures names in bytes ("éé.c" is 6 bytes, 4 characters)
NON_ASCII_CHOICES = {
    "both exist, old shorter in bytes": ({"abc.c": b"a\n", "\u00e9\u00e9.c": b"a\n"},
                                         "--- a/abc.c\n+++ b/\u00e9\u00e9.c\n"),
    "both exist, new shorter in bytes": ({"abc.c": b"a\n", "\u00e9\u00e9.c": b"a\n"},
                                         "--- a/\u00e9\u00e9.c\n+++ b/abc.c\n"),
    "same bytes, the first wins": ({"moved.c": b"a\n", "caf\u00e9.c": b"a\n"},
                                   "--- a/moved.c\n+++ b/caf\u00e9.c\n"),
    "neither exists, a creation": ({"g": b"x\n"}, "--- /dev/null\n+++ b/\u00e9\u00e9.c\nIndex: abc.c\n"),
    "longer folder in bytes": ({"d\u00e9/f": b"a\n", "dxy/f": b"a\n"}, "--- a/dxy/f\n+++ b/d\u00e9/f\n"),
    # gnulib's base_len, which GNU's best_name calls on the whole name, is the name's length less its
    # trailing slashes, not the length of its last component
    "a short basename in a long folder": ({"abcdef/x.c": b"a\n", "a/yy.c": b"a\n"},
                                          "--- a/abcdef/x.c\n+++ b/a/yy.c\n"),
    "a later name with fewer components, shorter in all": ({"d/f.c": b"a\n", "sp.c": b"a\n"},
                                                          "--- a/d/f.c\n+++ b/sp.c\n"),
    "a later name with fewer components, longer in all": ({"d/f.c": b"a\n", "spxxxx.c": b"a\n"},
                                                         "--- a/d/f.c\n+++ b/spxxxx.c\n"),
}


@pytest.mark.parametrize("case", sorted(NON_ASCII_CHOICES))
def test_file_selection_measures_names_as_gnu_does(tmp_path: Path, case: str) -> None:
    """Fuzzer seed 120163: of two existing names GNU took ``moved.c`` (7 bytes, the first of a tie) and
    we ``café.c`` (6 characters, 7 bytes): another file patched, silently where the hunk fits both. And
    GNU's "basename" length is the whole name's (hypothesis, test_plain_headers): ``d/f.c`` beside
    ``sp.c`` patches ``sp.c``, where we found no file."""
    files, header = NON_ASCII_CHOICES[case]
    hunk = HUNK if "creation" not in case else b"@@ -0,0 +1 @@\n+b\n"
    compare(tmp_path, files, header.encode() + hunk)


@pytest.mark.parametrize(
    ("files", "header", "strip", "dirs"),
    [
        ({"src/f.c": b"a\n"}, b"--- src/f.c\n+++ src/f.c.new\n", 0, ()),
        ({"src/f.c.new": b"a\n"}, b"--- src/f.c\n+++ src/f.c.new\n", 0, ()),
        ({"x": b"a\n", "y": b"a\n"}, b"--- a/x\n+++ b/y\n", 1, ()),
        ({"y": b"a\n"}, b"--- a/x\n+++ b/y\n", 1, ()),
        ({"f": b"a\n"}, b"--- a/f\n+++ f\n", 1, ()),
        ({"f": b"a\n"}, b"--- f\n+++ b/f\n", 1, ()),
        ({"deep/er/f": b"a\n", "f": b"a\n"}, b"--- a/deep/er/f\n+++ b/f\n", 1, ()),
        ({"f": b"a\n"}, b"Index: f\n--- a/zz/f\n+++ b/zz/f\n", 1, ()),
    ],
)
def test_file_selection_follows_gnu(tmp_path: Path, files, header, strip, dirs) -> None:
    compare(tmp_path, files, header + HUNK, strip, dirs)


@pytest.mark.parametrize(
    ("header", "dirs"),
    [
        (b"--- a/new/x\n+++ b/new/y\n", ("new",)),
        (b"--- a/new/longname\n+++ b/new/y\n", ()),
        (b"--- a/new/longname\n+++ b/other/y\n", ("other",)),
        (b"--- a/new/longname\n+++ b/other/y\n", ("new",)),
    ],
)
def test_created_file_name_follows_gnu(tmp_path: Path, header, dirs) -> None:
    compare(tmp_path, {}, header + b"@@ -0,0 +1 @@\n+b\n", 1, dirs)


# -- 4b. a git section that creates or deletes a file: its names and sides, as GNU reads them ------

_NEW = b"diff --git a/n b/n\nnew file mode 100644\n"
_DEL = b"diff --git a/f b/f\ndeleted file mode 100644\n"
GIT_SIDES = {
    # GNU creates the best of the two names (here the diff --git line's), not the +++ line's
    "new, +++ names another file": ({}, _NEW + b"--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+X\n"),
    "new, diff --git names two": ({}, b"diff --git a/m b/n\nnew file mode 100644\n--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+X\n"),
    "new, the shorter name wins": ({}, b"diff --git a/nn b/nn\nnew file mode 100644\n--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+X\n"),
    "new, fewer new folders win": ({}, _NEW + b"--- /dev/null\n+++ b/d/m\n@@ -0,0 +1 @@\n+X\n"),
    "new, no --- line": ({}, _NEW + b"+++ b/m\n@@ -0,0 +1 @@\n+X\n"),
    "new, no hunk, +++ names another": ({}, _NEW + b"--- /dev/null\n+++ b/m\n"),
    "new over an existing file of the other name": ({"n": b"old\n"}, _NEW + b"--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+X\n"),
    # a first hunk from line 0: the --- line's time decides, not "new file mode" (a name alone: in place)
    "new, --- names a file": ({}, _NEW + b"--- a/n\n+++ b/m\n@@ -0,0 +1 @@\n+X\n"),
    "new, no ---/+++, the file exists": ({"n": b"X\n"}, _NEW + b"@@ -0,0 +1 @@\n+X\n"),
    # and the +++ line's time decides whether a file emptied by the hunk is deleted
    "deleted, +++ names the file": ({"f": b"a\n"}, _DEL + b"--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-a\n"),
    "deleted, no ---/+++": ({"f": b"a\n"}, _DEL + b"@@ -1 +0,0 @@\n-a\n"),
    "deleted, only ---": ({"f": b"a\n"}, _DEL + b"--- a/f\n@@ -1 +0,0 @@\n-a\n"),
    "deleted, only +++ /dev/null": ({"f": b"a\n"}, _DEL + b"+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"),
    "deleted, +++ names another file": ({"f": b"a\n", "g": b"a\n"}, _DEL + b"--- a/f\n+++ b/g\n@@ -1 +0,0 @@\n-a\n"),
    "deleted, --- names a missing file": ({"f": b"a\n"}, _DEL + b"--- a/g\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"),
    # a deletion of a file that is not there: GNU says so and applies it anyway (push -R of a new empty file)
    "deleted, the file is missing, no hunk": ({"g": b"a\n"}, _DEL),
    "deleted, the file is missing, a hunk": ({"g": b"a\n"}, _DEL + b"--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"),
    # the empty blob's hash on the old side: a missing file is patched as an empty one (GNU: "empty or missing")
    "a mode change of a missing empty file": ({"g": b"a\n"}, b"diff --git a/f b/f\nold mode 100644\nnew mode 100755\n"
                                                             b"index e69de29..f3a10de\nBinary files a/f and b/f differ\n"),
    "a mode change of a missing file": ({"g": b"a\n"}, b"diff --git a/f b/f\nold mode 100644\nnew mode 100755\n"),
    # the index line sets both sides, over a mode line before it
    "index over new file mode": ({"f": b"a\n"}, b"diff --git a/f b/f\nnew file mode 100644\nindex 1234567..89abcde\n"
                                                b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"),
    "index over deleted file mode": ({"f": b"a\n"}, _DEL + b"index 89abcde..1234567\n--- a/f\n+++ /dev/null\n"
                                                     b"@@ -1 +0,0 @@\n-a\n"),
}


@pytest.mark.parametrize("case", sorted(GIT_SIDES))
def test_a_git_section_creates_and_deletes_what_gnu_does(tmp_path: Path, case: str) -> None:
    """Found by a fuzzer against quilt: we created the +++ line's file where GNU created the
    ``diff --git`` line's, and deleted a file GNU only emptied."""
    files, patch = GIT_SIDES[case]
    compare(tmp_path, files, patch)


def test_a_git_creation_of_the_other_name_keeps_its_mode(tmp_path: Path) -> None:
    patch = b"diff --git a/n b/n\nnew file mode 100755\n--- /dev/null\n+++ b/m\n@@ -0,0 +1 @@\n+X\n"
    code, files, _report = gnu(tmp_path, {}, patch, 1)
    assert code == 0 and files == {"n": b"X\n"} and os.access(tmp_path / "gnu" / "n", os.X_OK)
    result, _ = ours({}, patch, 1)
    assert result.ok and result.changes == {"n": ("100755", b"X\n")}


# -- 4b'. a file's type never changes in place ----------------------------------------------------

TYPE_CHANGES = {
    "mode lines from file to link": ({"y": b"x"}, b"diff --git a/y b/y\nold mode 100644\nnew mode 120000\n"),
    "an index line says link, the tree has a file": (
        {"y": b"x"}, b"diff --git a/y b/y\nindex 1111111..2222222 120000\n--- a/y\n+++ b/y\n@@ -1 +1 @@\n-x\n"
                     b"\\ No newline at end of file\n+z\n\\ No newline at end of file\n"),
    "a link deleted where the tree has a file": (
        {"y": b"x"}, b"diff --git a/y b/y\ndeleted file mode 120000\n--- a/y\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
                     b"\\ No newline at end of file\n"),
    "a link created over an empty file": (
        {"y": b""}, b"diff --git a/y b/y\nnew file mode 120000\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+x\n"
                    b"\\ No newline at end of file\n"),
}


@pytest.mark.parametrize("case", sorted(TYPE_CHANGES))
def test_a_section_never_changes_a_files_type_in_place(tmp_path: Path, case: str) -> None:
    """We turned a file into a symlink (and read a file as a link) where GNU refuses: "can't change file
    type", "is not a symbolic link -- refusing to patch". Git writes a type change as a deletion and a
    creation, which both apply."""
    files, patch = TYPE_CHANGES[case]
    result, _ = compare(tmp_path, files, patch)
    assert not result.ok and ("can't change file type" in str(result.failed[0].error)
                              or "is not a symbolic link" in str(result.failed[0].error))


def test_a_type_change_written_as_a_deletion_and_a_creation_applies(tmp_path: Path) -> None:
    patch = (b"diff --git a/y b/y\ndeleted file mode 100644\n--- a/y\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
             b"diff --git a/y b/y\nnew file mode 120000\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+t\n"
             b"\\ No newline at end of file\n")
    result, _ = ours({"y": b"x\n"}, patch, 1)
    assert result.ok and result.changes == {"y": ("120000", b"t")}


# -- 4c. context hunks, read as GNU's another_hunk reads them ------------------------------------

_CTX = b"*** a/k\n--- b/k\n***************\n"
CONTEXT_HUNKS = {
    # diff -c leaves out the replacing side of a deletion: a blank line after it is no line of it
    "omitted new side, then a blank line": ({"k": b"x\nb\nc\nd\n"},
                                            _CTX + b"*** 1,4 ****\n  x\n  b\n- c\n  d\n--- 1,3 ----\n\n"),
    "omitted new side, a blank line, another file": (
        {"k": b"x\nb\nc\nd\n", "g": b"1\n"},
        _CTX + b"*** 1,4 ****\n  x\n  b\n- c\n  d\n--- 1,3 ----\n\n*** a/g\n--- b/g\n***************\n"
               b"*** 1 ****\n! 1\n--- 1 ----\n! 2\n"),
    "omitted new side, then the next hunk": ({"k": b"a\nb\nc\nd\n"},
                                             _CTX + b"*** 1,3 ****\n  a\n- b\n  c\n--- 1,2 ----\n***************\n"
                                                    b"*** 4 ****\n! d\n--- 3 ----\n! D\n"),
    "a context line of one space": ({"k": b"a\nb\nc\n"}, _CTX + b"*** 1,3 ****\n a\n- b\n c\n--- 1,2 ----\n"),
    "omitted old side": ({"k": b"a\nc\n"}, _CTX + b"*** 1,2 ****\n--- 1,3 ----\n  a\n+ b\n  c\n"),
    "no newline after the new side's last line": ({"k": b"1\n2"},
                                                  _CTX + b"*** 1,2 ****\n--- 1,3 ----\n  1\n+ Q\n  2\n"
                                                         b"\\ No newline at end of file\n"),
}


@pytest.mark.parametrize("case", sorted(CONTEXT_HUNKS))
def test_a_context_hunk_reads_as_in_gnu(tmp_path: Path, case: str) -> None:
    """The first was refused ("its two sides' context lines differ": the blank line was read as the
    replacing side) where quilt applies it."""
    files, patch = CONTEXT_HUNKS[case]
    compare(tmp_path, files, patch)


def test_a_no_newline_marker_inside_a_side_is_malformed_as_in_gnu(tmp_path: Path) -> None:
    """GNU reads the marker only after a side's last line; we applied this, adding the line after it."""
    patch = _CTX + b"*** 1,2 ****\n--- 1,3 ----\n  1\n  2\n\\ No newline at end of file\n+ Q\n"
    code, _files, _report = gnu(tmp_path, {"k": b"1\n2"}, patch, 1)
    assert code == 2
    result, _ = ours({"k": b"1\n2"}, patch, 1)
    assert isinstance(result.error, PatchFormatError) and "malformed patch" in str(result.error)


# Context hunks whose context GNU counts otherwise than their lines: the second '---' line of an omitted
# replacing side resets its count (a unified header, a mail signature's "-- " line after it), so GNU
# anchors the hunk as if it had no trailing context. Refused until the red-team fuzzer's seed 1639 (a
# Debian-style mail signature under a context diff), which quilt applies with fuzz.
GNU_COUNTED_CONTEXT = {
    "unified header after": (_CTX + b"*** 1,3 ****\n  x\n- b\n  b\n--- 1,2 ----\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-1\n+2\n"),
    "signature after": (_CTX + b"*** 2,4 ****\n  x\n- b\n  b\n--- 2,3 ----\n-- \n2.39.2\n\n"),
    "signature after a two-line context": (_CTX + b"*** 3,7 ****\n  z\n  x\n- b\n  b\n  z\n--- 3,6 ----\n-- \n2.39.2\n"),
}
GNU_COUNTED_FILES = {
    "top": {"k": b"x\nb\nb\nz\nz\n", "g": b"1\n"},
    "shifted": {"k": b"a\nz\nx\nb\nb\nz\n", "g": b"1\n"},
    "end": {"k": b"a\nb\nz\nx\nb\nb\n", "g": b"1\n"},
    "end and more": {"k": b"z\nx\nb\nb\nz\nx\nb\nb\n", "g": b"1\n"},
}


@pytest.mark.parametrize("fuzz", [0, 1, 2])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("files", sorted(GNU_COUNTED_FILES))
@pytest.mark.parametrize("case", sorted(GNU_COUNTED_CONTEXT))
def test_a_context_hunk_gnu_counts_otherwise_applies_where_gnu_does(tmp_path: Path, case: str, files: str,
                                                                      reverse: bool, fuzz: int) -> None:
    """An omitted new side right before a unified header: GNU counts 0 lines of context after it (the
    second '---' line resets its count) and needs fuzz 1; we applied it cleanly, then refused it. Now
    it is located with GNU's counts: the same files, and the same hunk report."""
    patch = GNU_COUNTED_CONTEXT[case]
    result, _files = compare(tmp_path, GNU_COUNTED_FILES[files], patch, fuzz=fuzz, reverse=reverse)
    (tmp_path / "again").mkdir()
    _code, _gnu_files, report = gnu(tmp_path / "again", GNU_COUNTED_FILES[files], patch, 1, fuzz=fuzz,
                                    reverse=reverse)
    first = next(o for o in result.files if o.path == "k").result.hunks[0]
    assert (f"with fuzz {first.fuzz}" in report) == bool(first.fuzz and first.status != "failed"), report


# -- 5. patches that change nothing ---------------------------------------------------------------


def test_garbage_only_patch_is_an_error_as_in_gnu(tmp_path: Path) -> None:
    code, _files, _report = gnu(tmp_path, {"f": b"a\n"}, b"Description: prose only\n\n", 1)
    assert code == 2
    result, _ = ours({"f": b"a\n"}, b"Description: prose only\n\n", 1)
    assert isinstance(result.error, PatchFormatError)
    assert "Only garbage was found in the patch input." in str(result.error)


MAIL_ABOVE_A_BROKEN_DIFF = {
    "one @ in the hunk header": b"Subject: [PATCH] fix f\n\n--- a/f\n+++ b/f\n@ -1 +1 @\n-a\n+b\n",
    "a quoted diff": b"From: a <a@b>\nSubject: fix\n\nas below:\n> --- a/f\n> +++ b/f\n> @@ -1 +1 @@\n> -a\n> +b\n",
    "a context header with no hunk": b"Date: today\nSubject: x\n\n*** a/f\n--- b/f\n",
    "a normal diff without a header line": b"Subject: x\n\n1c1\n< a\n---\n> b\n",
    "a diff line and nothing it can read": b"Subject: x\n\ndiff -u a/f b/f\n",
    "a binary files line": b"From: x\nSubject: y\n\nBinary files a/f and b/f differ\n",
    "git extended headers alone": b"Subject: y\n\nnew file mode 100644\nindex 0000000..e69de29\n",
}


@pytest.mark.parametrize("case", sorted(MAIL_ABOVE_A_BROKEN_DIFF))
def test_a_mail_header_above_a_broken_diff_is_garbage_not_an_empty_patch(tmp_path: Path, case: str) -> None:
    """A bare mail header is an empty patch (our one exception to GNU: ``materialize new`` writes
    one); one above a diff we cannot read was applied as a patch that changes nothing, and
    ``check`` called it exact, where GNU (and quilt push) say "Only garbage"."""
    patch = MAIL_ABOVE_A_BROKEN_DIFF[case]
    code, files, _report = gnu(tmp_path, {"f": b"a\n"}, patch, 1)
    assert code == 2 and files == {"f": b"a\n"}
    result, _ = ours({"f": b"a\n"}, patch, 1)
    assert isinstance(result.error, PatchFormatError) and "Only garbage" in str(result.error)


@pytest.mark.parametrize("header", [
    b"Subject: [PATCH] fix f\n\nWhy:\n- a list\n+ more\n---\n",
    b"From 0123456789012345678901234567890123456789 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\n"
    b"Date: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: [PATCH] empty\n\n---\n\n\n-- \n2.39.5\n\n",
])
def test_a_bare_mail_header_is_an_empty_patch(header: bytes) -> None:
    result, out = ours({"f": b"a\n"}, header, 1)
    assert result.ok and result.error is None and out == {"f": b"a\n"}


@pytest.mark.parametrize("text", [b"\n", b"\n\n", b"  \n \t\n", b" "])
def test_blank_only_patch_is_garbage_as_in_gnu(tmp_path: Path, text: bytes) -> None:
    """quilt skips a zero-byte patch file but runs patch on one of blank lines, which GNU refuses."""
    code, _files, _report = gnu(tmp_path, {"f": b"a\n"}, text, 1)
    assert code == 2
    result, _ = ours({"f": b"a\n"}, text, 1)
    assert isinstance(result.error, PatchFormatError) and "Only garbage" in str(result.error)


@pytest.mark.parametrize("header", [b"@@ -1,3 +1,3 @@", b"@@ -1,3 +1,3 @", b"@@ -1,3 +1,3@@", b"@@ -1,3+1,3@@",
                                    b"@@ -1,3 +1,3 @@@", b"@@ -1,3 +1,3 @@f", b"@@ -01,3 +1,3 @@ f(x)",
                                    b"@@ -1,3 +1,3", b"@@ -1,3  +1,3 @@", b"@@ -1,+3 +1,3 @@", b"@@  -1,3 +1,3 @@"])
def test_unified_hunk_headers_are_read_as_gnu_reads_them(tmp_path: Path, header: bytes) -> None:
    """GNU takes "@@ -N,M", one optional space, "+N,M", one optional space, then "@": a hand-edited
    "@@ -1,3 +1,3 @" applies (we refused it as a bad hunk header); two spaces or no "@" do not."""
    patch = b"--- a/f\n+++ b/f\n" + header + b"\n 1\n-2\n+two\n 3\n"
    code, gnu_files, _report = gnu(tmp_path, {"f": b"1\n2\n3\n"}, patch, 1)
    try:
        result, our_files = ours({"f": b"1\n2\n3\n"}, patch, 1)
    except PatchFormatError:
        assert code == 2
        return
    assert result.error is None if code == 0 else result.error is not None
    if code == 0:
        assert our_files == gnu_files == {"f": b"1\ntwo\n3\n"}


@pytest.mark.parametrize("indent", [b"  ", b"\t", b"X"])
@pytest.mark.parametrize("git", [False, True])
def test_an_indented_hunk_is_read_as_gnu_reads_it(tmp_path: Path, indent: bytes, git: bool) -> None:
    """GNU reads a hunk whose lines share its @@ line's indent, and so do we (we refused it, and before
    that skipped it as garbage beside a section that applied: a silent difference)."""
    head = b"diff --git a/f b/f\n" if git else b""
    indented = b"".join(indent + line for line in b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n".splitlines(True))
    plain = b"--- a/g\n+++ b/g\n@@ -1 +1 @@\n-g\n+G\n"
    patch = plain + head + indented
    code, gnu_files, _report = gnu(tmp_path, {"f": b"1\n2\n3\n", "g": b"g\n"}, patch, 1)
    assert code == 0 and gnu_files == {"f": b"1\ntwo\n3\n", "g": b"G\n"}
    result, files = ours({"f": b"1\n2\n3\n", "g": b"g\n"}, patch, 1)
    assert result.ok and files == gnu_files


def test_a_normal_diff_quoted_before_any_header_is_garbage_as_in_gnu(tmp_path: Path) -> None:
    """GNU reads a normal diff only after a header line: one quoted in a patch's description is prose
    (we refused the whole patch as a normal diff)."""
    patch = b"Description: x\n2c2\n< a\n---\n> b\n\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n"
    result, files = compare(tmp_path, {"f": b"1\n2\n3\n"}, patch)
    assert result.ok and files == {"f": b"1\ntwo\n3\n"}
    headed = b"--- a/f\n+++ b/f\n2c2\n< 2\n---\n> two\n"  # GNU applies this one, and so do we
    (tmp_path / "headed").mkdir()
    result, files = compare(tmp_path / "headed", {"f": b"1\n2\n3\n"}, headed)
    assert result.ok and files == {"f": b"1\ntwo\n3\n"}


@pytest.mark.parametrize("index", [b"Index: f\n", b"Index:f\n", b"Index: f \n", b"Index: f\tx\n", b"Index: f\r\n",
                                   b"Index: \"f\"\n", b"Index: sp ace\n"])
def test_an_index_name_is_read_as_gnu_reads_it(tmp_path: Path, index: bytes) -> None:
    """An Index: name is the rest of its line only when it ends the line: a trailing blank, TAB or CR
    (a CRLF patch) makes GNU drop it, and a section named by it alone finds no file (we patched f)."""
    eol = b"\r\n" if index.endswith(b"\r\n") else b"\n"
    patch = index + eol.join([b"@@ -1,3 +1,3 @@", b" 1", b"-2", b"+two", b" 3", b""])
    files = {"f": b"1\n2\n3\n", "sp ace": b"1\n2\n3\n"}
    code, gnu_files, _report = gnu(tmp_path, files, patch, 0)
    result, our_files = ours(files, patch, 0)
    assert result.ok == (code == 0), (code, result.error)
    if code == 0:
        assert our_files == gnu_files


def test_empty_patch_is_an_empty_patch() -> None:
    result, _ = ours({"f": b"a\n"}, b"", 1)
    assert result.ok and not result.files


# -- 6. exactness findings of a red team against quilt push -a -----------------------------------

_ABC = {"f": b"a\nb\nc\n"}
# A context hunk's explicit empty range "*** N,N-1 ****" says "before line N" to GNU (its "+1 for an
# empty side" is the unified format's), and "--- N,N-1 ----" likewise on the replacing side.
EMPTY_CONTEXT_RANGES = {
    f"old {r}": (_ABC, b"*** a/f\n--- b/f\n***************\n*** " + r.encode() + b" ****\n--- 2,2 ----\n+ x\n")
    for r in ("2,1", "1,0", "3,2", "4,3", "0,0")
}
EMPTY_CONTEXT_RANGES.update({
    f"new {r}": (_ABC, b"*** a/f\n--- b/f\n***************\n*** 2 ****\n- b\n--- " + r.encode() + b" ----\n")
    for r in ("2,1", "1,0", "3,2")
})
EMPTY_CONTEXT_RANGES.update({
    # the replacing side "--- 1,0 ----" of a first hunk says the file is gone (GNU: newfirst 1, no lines)
    "delete via 1,0": ({"f": b"a\n"}, b"*** a/f\tThu Jan  1 00:00:00 1970\n--- /dev/null\n***************\n"
                                       b"*** 1 ****\n- a\n--- 1,0 ----\n"),
    # "*** 1,0 ****" is no "*** 0": a missing file is not created
    "create via 1,0": ({}, b"*** /dev/null\n--- b/f\n***************\n*** 1,0 ****\n--- 1 ----\n+ x\n"),
    "create via 0": ({}, b"*** /dev/null\n--- b/f\n***************\n*** 0 ****\n--- 1 ----\n+ x\n"),
})


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("case", sorted(EMPTY_CONTEXT_RANGES))
def test_an_empty_context_range_inserts_where_gnu_does(tmp_path: Path, case: str, reverse: bool) -> None:
    """Finding 1: "*** 2,1 ****" inserted after line 2 (as a unified "-2,0" would), GNU before it: a
    silent difference."""
    files, patch = EMPTY_CONTEXT_RANGES[case]
    compare(tmp_path, files, patch, reverse=reverse)


def compare_modes(tmp: Path, files: dict[str, bytes], patch: bytes, **kwargs):
    """``compare``, and the executable bit of every file the patch left, GNU's on disk and ours."""
    result, our_files = compare(tmp, files, patch, **kwargs)
    if result.ok:
        gnu_exec = {p for p in our_files if os.access(tmp / "gnu" / p, os.X_OK)}
        our_exec = {p for p, c in result.changes.items() if c is not None and c[0] == "100755"}
        assert our_exec == gnu_exec
    return result, our_files


# GNU's fetchmode: blanks before the mode, then exactly six octal digits, then "\n" or "\r\n"; anything
# else is mode 0, no mode at all (the rest of the section applies)
_MODE_SECTION = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
GIT_MODE_TEXTS = {
    "trailing blank": b"new mode 100755 \n",
    "seven digits": b"new mode 0100755\n",
    "a letter after": b"new mode 100755x\n",
    "five digits": b"new mode 10075\n",
    "blanks before": b"new mode  \t100755\n",
    "CRLF": b"new mode 100755\r\n",
    "two CRs": b"new mode 100755\r\r\n",
    "empty": b"new mode \n",
    "zero": b"new mode 000000\n",
    "old mode with a trailing blank": b"old mode 100755 \nnew mode 100644\n",
    "index, trailing blank": b"index 1111111..2222222 100755 \nnew mode 100755\n",
    "index, a letter after": b"index 1111111..2222222 100755x\n",
    "index, a letter after the hash": b"index 1111111..2222222x 100755\n",
}


@pytest.mark.parametrize("case", sorted(GIT_MODE_TEXTS))
def test_a_git_mode_is_read_as_gnus_fetchmode_reads_it(tmp_path: Path, case: str) -> None:
    """Finding 7: "new mode 100755 " was refused ("unsupported file mode ''"); GNU reads no mode and
    applies the rest of the section."""
    patch = b"diff --git a/f b/f\nold mode 100644\n" + GIT_MODE_TEXTS[case] + _MODE_SECTION
    compare_modes(tmp_path, {"f": b"a\nb\n"}, patch)


@pytest.mark.parametrize("line", [b"new file mode 100755 \n", b"new file mode 100755\r\n"])
def test_a_new_files_mode_gnu_cannot_read_is_no_mode(tmp_path: Path, line: bytes) -> None:
    patch = b"diff --git a/n b/n\n" + line + b"--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n"
    compare_modes(tmp_path, {"f": b"a\n"}, patch)


def test_a_deleted_files_mode_gnu_cannot_read_is_no_mode(tmp_path: Path) -> None:
    patch = b"diff --git a/f b/f\ndeleted file mode 100644 \n--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
    compare_modes(tmp_path, {"f": b"a\n"}, patch)


# A context line that lost its two-space prefix and starts with a TAB: context to GNU ("assume spaces got
# eaten"), kept with its TAB and without its last byte (its newline): it matches no line but a last one
# without a newline, so a hunk needs fuzz where it is among the first or last lines
_TAB_CTX = b"*** a/f\n--- b/f\n***************\n"
TAB_CONTEXT_LINES = {
    "both sides": ({"f": b"a\n\tb\nc\n"}, _TAB_CTX + b"*** 1,3 ****\n  a\n\tb\n! c\n--- 1,3 ----\n  a\n\tb\n! C\n"),
    "both sides, in the middle": ({"f": b"a\n\tb\nc\nd\n"},
                                  _TAB_CTX + b"*** 1,4 ****\n  a\n! b\n\tb\n  d\n--- 1,4 ----\n  a\n! B\n\tb\n  d\n"),
    "the file's last line, no newline": ({"f": b"a\nb\n\tc"},
                                         _TAB_CTX + b"*** 1,3 ****\n  a\n! b\n\tc\n--- 1,3 ----\n  a\n! B\n\tc\n"),
    "omitted new side": ({"f": b"a\n\tb\nc\n"}, _TAB_CTX + b"*** 1,3 ****\n- a\n\tb\n  c\n--- 1,2 ----\n"),
    "omitted old side": ({"f": b"a\n\tb\nc\n"}, _TAB_CTX + b"*** 1,3 ****\n--- 1,4 ----\n  a\n+ x\n\tb\n  c\n"),
    "a marker after it": ({"f": b"a\nb\n\t"},
                          _TAB_CTX + b"*** 1,3 ****\n  a\n! b\n\tc\n\\ No newline at end of file\n--- 1,3 ----\n  a\n"
                                     b"! B\n\tc\n\\ No newline at end of file\n"),
}


@pytest.mark.parametrize("fuzz", [0, 2])
@pytest.mark.parametrize("case", sorted(TAB_CONTEXT_LINES))
def test_a_tab_led_context_line_is_context_as_in_gnu(tmp_path: Path, case: str, fuzz: int) -> None:
    """Finding 8: refused ("unexpected line b'\\tb\\n' in the context hunk"); GNU reads it as context."""
    files, patch = TAB_CONTEXT_LINES[case]
    compare(tmp_path, files, patch, fuzz=fuzz)


@pytest.mark.parametrize("patch", [
    # one line past the expected side: only a blank line may be that (GNU: "Overdue '---'")
    _TAB_CTX + b"*** 1,2 ****\n  a\n! b\n\tx\n--- 1,2 ----\n  a\n! B\n",
    # a marker after a context line with no text: GNU does not read it as one (no line to cut), so it is
    # a line of its own, and malformed
    _TAB_CTX + b"*** 1,2 ****\n  a\n  \n\\ No newline at end of file\n--- 1,3 ----\n  a\n+ x\n  \n",
    _TAB_CTX + b"*** 1,2 ****\n  a\n\n\\ No newline at end of file\n--- 1,3 ----\n  a\n+ x\n\n",
], ids=["tab line past the old side", "marker after an empty context line", "marker after a blank line"])
def test_context_lines_gnu_finds_malformed_are_refused(tmp_path: Path, patch: bytes) -> None:
    code, _files, report = gnu(tmp_path, {"f": b"a\n\n"}, patch, 1)
    assert code == 2, report
    result, _ = ours({"f": b"a\n\n"}, patch, 1)
    assert isinstance(result.error, PatchFormatError)


# A "\ No newline" line cut off by the end of the patch file (no newline of its own): GNU's
# incomplete_line takes it after a side's last line, but read as a line of the hunk (pget_line) it is the
# end of the patch, which pads a hunk one to three lines short with blank context lines
CUT_MARKERS = {
    "unified, hunk one line short": (b"a\nb\nc\nd\n", b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n"
                                                      b"\\ No newline at end of file"),
    "unified, a bare backslash": (b"a\nb\nc\nd\n", b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n\\"),
    "unified, hunk two lines short": (b"a\nb\n\n\nd\n", b"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n"
                                                        b"\\ No newline at end of file"),
    "unified, after the last line": (b"a\nb", b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n"
                                             b"\\ No newline at end of file\n+B\n\\ No newline at end of file"),
    "context, old side one line short": (b"a\nb\nc\nd\n", b"*** a/f\n--- b/f\n***************\n*** 1,3 ****\n  a\n"
                                                          b"! b\n\\ No newline at end of file"),
    "context, new side one line short": (b"a\nb\n\nd\n", b"*** a/f\n--- b/f\n***************\n*** 1,3 ****\n  a\n! b\n"
                                                         b"  \n--- 1,3 ----\n  a\n! B\n\\ No newline at end of file"),
}


@pytest.mark.parametrize("fuzz", [0, 1])
@pytest.mark.parametrize("case", sorted(CUT_MARKERS))
def test_a_marker_cut_off_by_the_end_of_the_patch_is_read_as_gnu_reads_it(tmp_path: Path, case: str,
                                                                          fuzz: int) -> None:
    """Finding 5: refused ("misplaced '\\ No newline' marker" at a line that does not exist)."""
    original, patch = CUT_MARKERS[case]
    code, _files, report = gnu(tmp_path, {"f": original}, patch, 1, fuzz=fuzz)
    if code == 2:  # GNU: "unexpected end of file in patch"
        result, _ = ours({"f": original}, patch, 1, fuzz=fuzz)
        assert isinstance(result.error, PatchFormatError), report
    else:
        (tmp_path / "again").mkdir()
        compare(tmp_path / "again", {"f": original}, patch, fuzz=fuzz)


# GNU ignores a name that is absolute or climbs with ".." ("Ignoring potentially dangerous file name")
# and chooses among the others; its best_name still counts the ignored name's components and lengths,
# and finds no name at all where an ignored (or a later, longer) name set the least of them
_HUNK = b"@@ -1 +1 @@\n-a\n+b\n"
_NEW_HUNK = b"@@ -0,0 +1 @@\n+b\n"
DANGEROUS_NAMES = {
    "absolute old name": ({"f": b"a\n"}, b"--- /nonexistent-rt/f\n+++ f\n" + _HUNK, 0),
    "absolute new name": ({"f": b"a\n"}, b"--- f\n+++ /nonexistent-rt/f\n" + _HUNK, 0),
    "absolute old name, a new file": ({}, b"--- /nonexistent-rt/f\t1970-01-01 00:00:00 +0000\n+++ f\n" + _NEW_HUNK, 0),
    "dotdot new name": ({"f": b"a\n"}, b"--- a/f\n+++ b/../f\n" + _HUNK, 1),
    "dotdot old name": ({"f": b"a\n"}, b"--- a/../f\n+++ b/f\n" + _HUNK, 1),
    "dotdot new name, a new file": ({}, b"--- /dev/null\n+++ b/../f\n" + _NEW_HUNK, 1),
    "dotdot inside": ({"f": b"a\n", "d/f": b"a\n"}, b"--- a/d/../f\n+++ b/f\n" + _HUNK, 1),
    "an absolute Index line": ({"f": b"a\n"}, b"Index: /nonexistent-rt/f\n--- f\n+++ f\n" + _HUNK, 0),
    "only an absolute Index line": ({"f": b"a\n"}, b"Index: /nonexistent-rt/f\n@@ -1 +1 @@\n-a\n+b\n", 0),
    "git, dotdot new name": ({"f": b"a\n"}, b"diff --git a/f b/../f\n--- a/f\n+++ b/../f\n" + _HUNK, 1),
    "git, absolute old name, a new file": (
        {}, b"diff --git a/f b/f\nnew file mode 100644\n--- /nonexistent-rt/f\n+++ f\n" + _NEW_HUNK, 0),
    "both dangerous": ({"f": b"a\n"}, b"--- /nonexistent-rt/f\n+++ ../f\n" + _HUNK, 0),
    # best_name's quirk: the old name sets the least basename, the new one the fewest components
    "a later name with fewer components and a longer basename": (
        {"x/y": b"a\n", "longname": b"a\n"}, b"--- a/x/y\n+++ b/longname\n" + _HUNK, 1),
    "double slashes count once": ({"x/y": b"a\n", "z/w": b"a\n"}, b"--- a/x//y\n+++ b/z/w\n" + _HUNK, 1),
}


@pytest.mark.parametrize("case", sorted(DANGEROUS_NAMES))
def test_a_dangerous_name_is_ignored_as_gnu_ignores_it(tmp_path: Path, case: str) -> None:
    """Finding 6: a patch naming /abs/f beside f (diff -u /tmp/orig/f f, applied at -p0) was refused as a
    whole; GNU ignores the dangerous name and patches f (and never writes the dangerous one)."""
    files, patch, strip = DANGEROUS_NAMES[case]
    result, _ = ours(files, patch, strip)
    if isinstance(result.error, UnsafePathError):  # every name dangerous: GNU finds no file, we refuse
        assert gnu(tmp_path, files, patch, strip)[0] != 0
        return
    result, _ = compare(tmp_path, files, patch, strip=strip)
    for outcome in result.files:
        assert outcome.path is None or not (outcome.path.startswith("/") or ".." in outcome.path.split("/"))


# GNU deletes files (a plain or a git section's deletion, a git rename's source) only at the end of the
# patch: until then a later section cannot write below such a file ("Invalid file name e/x -- skipping
# patch"), and a plain section after a git deletion reads the deleted file as it was (its name counts as
# missing: a creation over it fails, the same deletion again applies)
_DEL_E = b"diff --git a/e b/e\ndeleted file mode 100644\n--- a/e\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n"
_PLAIN_DEL_E = b"--- a/e\n+++ /dev/null\n@@ -1 +0,0 @@\n-y\n"
_NEW_EX = b"diff --git a/e/x b/e/x\nnew file mode 100644\n--- /dev/null\n+++ b/e/x\n@@ -0,0 +1 @@\n+x\n"
_PLAIN_NEW_EX = b"--- /dev/null\n+++ b/e/x\n@@ -0,0 +1 @@\n+x\n"
_RENAME_E = b"diff --git a/e b/g\nsimilarity index 100%\nrename from e\nrename to g\n"
DELAYED_DELETIONS = {
    "git: delete e, create e/x": _DEL_E + _NEW_EX,
    "plain: delete e, create e/x": _PLAIN_DEL_E + _PLAIN_NEW_EX,
    "git delete, plain create": _DEL_E + _PLAIN_NEW_EX,
    "plain delete, git create": _PLAIN_DEL_E + _NEW_EX,
    "delete e, create e/x/y": _DEL_E + _NEW_EX.replace(b"e/x", b"e/x/y"),
    "rename e away, create e/x": _RENAME_E + _NEW_EX,
    "delete e, create e again": _DEL_E + b"diff --git a/e b/e\nnew file mode 100644\n--- /dev/null\n+++ b/e\n"
                                        b"@@ -0,0 +1 @@\n+z\n",
    # a plain section after a git deletion of the same file
    "git delete, plain create of the same file": _DEL_E + b"--- /dev/null\n+++ b/e\n@@ -0,0 +1 @@\n+new\n",
    "git delete, the same deletion again, plain": _DEL_E + _PLAIN_DEL_E,
    "git delete, a plain edit": _DEL_E + b"--- a/e\n+++ b/e\n@@ -1 +1 @@\n-y\n+z\n",
    "plain delete, the same deletion again": _PLAIN_DEL_E + _PLAIN_DEL_E,
    "plain delete, plain create of the same file": _PLAIN_DEL_E + b"--- /dev/null\n+++ b/e\n@@ -0,0 +1 @@\n+new\n",
}


@pytest.mark.parametrize("case", sorted(DELAYED_DELETIONS))
def test_deletions_wait_for_the_end_of_the_patch_as_in_gnu(tmp_path: Path, case: str) -> None:
    """Findings 3 and 4: a file turned into a folder within one patch applied (GNU: "Invalid file name"),
    and a plain section after a git deletion read the file as gone."""
    compare(tmp_path, {"e": b"y\n", "k": b"k\n"}, DELAYED_DELETIONS[case])


# -- differential: file-name selection and garbage between files, against GNU -------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

NAMES = ["x", "y", "d/x", "d/y", "d/longname", "e/x"]
GARBAGE = [
    b"Some prose about the change.\n",
    b"Binary files a/img and b/img differ\n",
    b"diff -ruN a/x b/x\n",
    b"Index: y\n",
    b"===================================================================\n",
    b"-- \n",
    b"\n",
]


@st.composite
def _case(draw: st.DrawFn) -> tuple[dict[str, bytes], bytes, tuple[str, ...]]:
    present = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4))
    files = {p: b"a\n" for p in present if not any(q.startswith(p + "/") for q in present)}
    dirs = tuple(draw(st.lists(st.sampled_from(["d", "e"]), unique=True, max_size=2)))
    sections = []
    for _ in range(draw(st.integers(1, 3))):
        old, new = draw(st.sampled_from(NAMES)), draw(st.sampled_from(NAMES))
        old_prefix = draw(st.sampled_from(["a/", "", "a/b/"]))
        garbage = b"".join(draw(st.lists(st.sampled_from(GARBAGE), max_size=3)))
        create = draw(st.booleans())
        hunk = b"@@ -0,0 +1 @@\n+new\n" if create else b"@@ -1 +1 @@\n-a\n+b\n"
        sections.append(garbage + f"--- {old_prefix}{old}\n+++ b/{new}\n".encode() + hunk)
    return files, b"".join(sections), dirs


@pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=_case())
def test_name_selection_and_garbage_match_gnu(tmp_path_factory: pytest.TempPathFactory, case) -> None:
    files, patch, dirs = case
    tmp = tmp_path_factory.mktemp("case")
    code, gnu_files, report = gnu(tmp, files, patch, 1, dirs)
    result, ours_files = ours(files, patch, 1, dirs)
    if result.error is not None:
        # We refuse loudly where GNU would write through a file used as a directory, or similar.
        assert code != 0, (result.error, report)
        return
    assert result.ok == (code == 0), (report, patch)
    if code == 0:
        assert ours_files == gnu_files, (report, patch)


# A context hunk whose context lines differ between its two sides: GNU matches the pattern side only
# (the old side, the new side under -R) and copies context from the file, never from the patch. A
# TAB-led line (GNU keeps its TAB and drops its newline) on one side only is the common case; a
# "\ No newline" marker after one side's last context line is the other.
_TAB_HUNK = (b"*** a/f\n--- b/f\n***************\n*** 1,6 ****\n  a\n  b\n{old}\n! c\n  d\n  e\n"
             b"--- 1,6 ----\n  a\n  b\n{new}\n! C\n  d\n  e\n")
ONE_SIDED_CONTEXT = {
    "TAB-led on the new side": _TAB_HUNK.replace(b"{old}", b"  \tfoo").replace(b"{new}", b"\tfoo"),
    "TAB-led on the old side": _TAB_HUNK.replace(b"{old}", b"\tfoo").replace(b"{new}", b"  \tfoo"),
    "TAB-led last line on the new side": (b"*** a/f\n--- b/f\n***************\n*** 1,3 ****\n! a\n  b\n  \tfoo\n"
                                          b"--- 1,3 ----\n! A\n  b\n\tfoo\n"),
    "TAB-led first line on the old side": (b"*** a/f\n--- b/f\n***************\n*** 3,5 ****\n\tfoo\n  c\n! d\n"
                                           b"--- 3,5 ----\n  \tfoo\n  c\n! D\n"),
    "no newline marker on the old side's last context line": (
        b"*** a/f\n--- b/f\n***************\n*** 6,7 ****\n! e\n  \tfoo\n\\ No newline at end of file\n"
        b"--- 6,7 ----\n! E\n  \tfoo\n"),
}
_TAB_FILES = {
    "plain": b"a\nb\n\tfoo\nc\nd\ne\n",
    "patched": b"a\nb\n\tfoo\nC\nd\ne\n",
    "tail": b"a\nb\n\tfoo\nc\nd\ne\n\tfoo",
    "tail patched": b"a\nb\n\tfoo\nc\nd\nE\n\tfoo",
    "top": b"a\nb\n\tfoo\nc\nd\n",
    "first": b"\tfoo\nb\n\tfoo\n",
}


@pytest.mark.parametrize("fuzz", [0, 2])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("content", sorted(_TAB_FILES))
@pytest.mark.parametrize("case", sorted(ONE_SIDED_CONTEXT))
def test_a_context_line_on_one_side_only_applies_as_in_gnu(tmp_path: Path, case: str, content: str,
                                                             reverse: bool, fuzz: int) -> None:
    """Refused ("its two sides' context lines differ") where GNU applies the hunk, matching the
    pattern side's context (earlier fuzzer seed 1981): now the same files, forward and reversed."""
    compare(tmp_path, {"f": _TAB_FILES[content]}, ONE_SIDED_CONTEXT[case], fuzz=fuzz, reverse=reverse)


# A context hunk with no header line before it in its region is garbage to GNU (it notes a line of stars
# only after a header line), as a unified hunk there is: the rest of the patch applies.
_UNIFIED_F = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
_HEADERLESS_CONTEXT = b"***************\n*** 1 ****\n! a\n--- 1 ----\n! c\n"
HEADERLESS_CONTEXT_HUNKS = {
    "before a section": _HEADERLESS_CONTEXT + _UNIFIED_F,
    "after prose": b"prose\n" + _HEADERLESS_CONTEXT + _UNIFIED_F,
    "after a section": _UNIFIED_F + _HEADERLESS_CONTEXT,
    "after a section and a blank line": _UNIFIED_F + b"\n" + _HEADERLESS_CONTEXT,
    "alone": _HEADERLESS_CONTEXT,
}


@pytest.mark.parametrize("case", sorted(HEADERLESS_CONTEXT_HUNKS))
def test_a_context_hunk_without_a_header_is_garbage_as_in_gnu(tmp_path: Path, case: str) -> None:
    """Refused ("context diff hunk without file lines") where GNU, and so quilt, ignores the hunk and
    applies the rest; alone, it is "Only garbage" to both."""
    patch = HEADERLESS_CONTEXT_HUNKS[case]
    if case == "alone":
        assert gnu(tmp_path, {"f": b"a\n"}, patch, 1)[0] == 2
        result, _ = ours({"f": b"a\n"}, patch, 1)
        assert isinstance(result.error, PatchFormatError) and "Only garbage" in str(result.error)
        return
    compare(tmp_path, {"f": b"a\n"}, patch)


# -- a hunk whose leading context is lines an earlier hunk already passed ------------------------


@pytest.mark.parametrize(("files", "patch"), [
    # the second hunk's context line "b" is the line the first hunk changed: GNU matches against the
    # input (where it is still "b") and copies only up to its first change, so nothing is misordered
    ({"f": b"a\nb\nc\nd\n"},
     b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n"),
    # two lines of leading context reaching back over the first hunk's change, an addition only
    ({"f": b"1\n2\n3\n4\n5\n6\n"},
     b"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n 1\n 2\n-3\n+T\n 4\n@@ -2,4 +2,5 @@\n 2\n 3\n 4\n+X\n 5\n"),
    # the same in a context diff
    ({"f": b"a\nb\nc\nd\n"},
     b"*** a/f\n--- b/f\n***************\n*** 1,3 ****\n  a\n! b\n  c\n--- 1,3 ----\n  a\n! B\n  c\n"
     b"***************\n*** 2,4 ****\n  b\n! c\n  d\n--- 2,4 ----\n  b\n! C\n  d\n"),
    # and where it really is misordered (the second hunk changes a line the first consumed): both fail
    ({"f": b"a\nb\nc\nd\n"},
     b"--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -1,3 +1,3 @@\n a\n-b\n+X\n c\n"),
])
def test_leading_context_over_an_earlier_hunks_change_applies_as_gnu(tmp_path: Path, files: dict[str, bytes],
                                                                     patch: bytes) -> None:
    """Found by the exactness red team (a generator of multi-hunk patches against /usr/bin/patch: ~190
    of 20,000 cases): the fuzz-0 fast path copied the input up to the hunk's first line, where GNU's
    apply_hunk copies up to its first change, so a hunk whose leading context an earlier hunk had
    already consumed was "misordered" and failed, exit 1, where GNU and quilt apply it."""
    compare(tmp_path, files, patch)



@pytest.mark.parametrize("later", [b"", b"diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-y\n+z\n"])
@pytest.mark.parametrize("hunk", [b"", b"--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n"])
def test_a_git_copy_onto_itself_patches_the_file_in_place_as_gnu(tmp_path: Path, hunk: bytes, later: bytes) -> None:
    """`copy from a` / `copy to a` was refused ("copies a onto itself", exit 2) where GNU 2.7.6 patches a
    in place and quilt pushes it, a later section of the same patch included (found by the exactness red
    team). A rename onto itself patches in place too (test below)."""
    patch = b"diff --git a/a b/a\ncopy from a\ncopy to a\n" + hunk + (later if hunk else b"")
    _result, files = compare(tmp_path, {"a": b"x\n", "b": b"b\n"}, patch)
    assert files["a"] == (b"z\n" if hunk and later else b"y\n" if hunk else b"x\n")


def test_a_rename_after_a_mode_only_section_of_a_changed_file_reads_it_as_gnu(tmp_path: Path) -> None:
    """Found by the git-headers soak (MATERIALIZE_SOAK=3000 tests/patching/test_git_headers.py)."""
    patch = (b"diff --git a/p.py b/p.py\n--- a/p.py\n+++ b/p.py\n@@ -1,2 +1,2 @@\n p.py\n-b\n+c\n"
             b"diff --git a/q.py b/q.py\n--- a/q.py\n+++ b/q.py\n@@ -1,2 +1,2 @@\n q.py\n-b\n+c\n"
             b"diff --git a/p.py b/p.py\nold mode 100644\nnew mode 100644\n"
             b"diff --git a/p.py b/q.py\nsimilarity index 100%\nrename from p.py\nrename to q.py\n")
    _result, files = compare(tmp_path, {"p.py": b"p.py\nb\n", "q.py": b"q.py\nb\n"}, patch)
    assert files == {"q.py": b"p.py\nc\n"}


@pytest.mark.parametrize("hunk", [b"", b"--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n"])
@pytest.mark.parametrize("files", [{"a": b"x\n"}, {"a": b"x\n", "b": b"b\n"}, {"b": b"b\n"}])
def test_a_git_rename_onto_itself_patches_the_file_in_place_as_gnu(tmp_path: Path, hunk: bytes,
                                                                   files: dict[str, bytes]) -> None:
    """`rename from a` / `rename to a` was refused ("renames a onto itself", exit 2): GNU 2.7.6 patches a in
    place ("already renamed from a") and quilt pushes it; with no a, GNU's "Cannot rename file without two
    valid file names" fails it, and ours too."""
    patch = b"diff --git a/a b/a\nsimilarity index 90%\nrename from a\nrename to a\n" + hunk
    _result, out = compare(tmp_path, files, patch)
    if "a" in files:
        assert out["a"] == (b"y\n" if hunk else b"x\n")


def test_a_section_after_a_rename_onto_itself_is_refused_where_gnu_finds_no_file() -> None:
    """GNU takes a renamed onto itself as renamed away (its inode waits for deletion) until the end of the
    patch: a later section of a fails there ("can't find file to patch", exit 1); ours is refused, naming it."""
    patch = (b"diff --git a/a b/a\nrename from a\nrename to a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n"
             b"diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-y\n+z\n")
    result = apply_to_tree(DictView(_tree({"a": b"x\n"})), patch, source="t.patch", strip=1)
    assert not result.ok and "t.patch:9: a was written by an earlier section" in str(result.error)


@pytest.mark.parametrize("middle", [b"diff --git a/p.py b/p.py\nold mode 100644\nnew mode 100644\n",
                                    b"diff --git a/p.py b/p.py\nindex 1111111..2222222 100644\n"])
@pytest.mark.parametrize("first", [b"", b"diff --git a/p.py b/p.py\n--- a/p.py\n+++ b/p.py\n@@ -1,2 +1,2 @@\n p.py\n-b\n+c\n"])
@pytest.mark.parametrize("last", [b"rename", b"copy"])
def test_a_section_that_changes_nothing_still_writes_out_what_gnu_held_back(tmp_path: Path, middle: bytes,
                                                                            first: bytes, last: bytes) -> None:
    """The class of the silent difference above (the git-headers enumeration, every pair of sections):
    a git section of p.py that changes nothing makes GNU write out what it held back (p.py's inode was
    marked by the first), so the rename or copy after it reads and renames p.py as it is then; GNU's
    tree, taken from its own disk's bookkeeping (by inode), is ours."""
    patch = first + middle + (f"diff --git a/p.py b/q.py\nsimilarity index 100%\n{last.decode()} from p.py\n"
                              f"{last.decode()} to q.py\n").encode()
    for files in ({"p.py": b"p.py\nb\n"}, {"p.py": b"p.py\nb\n", "q.py": b"q.py\nb\n"}):
        sub = tmp_path / str(len(files))
        sub.mkdir()
        compare(sub, files, patch)


_PLAIN_DEL = "--- a/{0}\n+++ /dev/null\n@@ -1 +0,0 @@\n-{0}\n"
_GIT_NEW = "diff --git a/{0} b/{0}\nnew file mode 100644\n--- /dev/null\n+++ b/{0}\n@@ -0,0 +1 @@\n+n\n"
_GIT_CHANGE = "diff --git a/{0} b/{0}\n--- a/{0}\n+++ b/{0}\n@@ -1 +1 @@\n-{0}\n+c\n"


@pytest.mark.parametrize("middle", [_GIT_NEW.format("q"), _GIT_CHANGE.format("q"), _GIT_NEW.format("r")])
@pytest.mark.parametrize("direct", [True, False])
def test_a_plain_deletion_repeated_after_a_git_section_reads_the_file_as_gnu(tmp_path: Path, middle: str,
                                                                             direct: bool) -> None:
    """Found by an enumeration of plain and git sections (every triple, both directions): p deleted by a
    plain section, a git section, p deleted again. GNU deletes p at the end of the patch only, and the
    plain section right after a git one makes it stat its input again: it finds p and deletes it again,
    exit 0 (we failed the hunk, exit 1). With a plain section between, GNU finds no p and fails, as ours."""
    between = "" if direct else "--- a/k\n+++ b/k\n@@ -1 +1 @@\n-k\n+K\n"
    patch = (_PLAIN_DEL.format("p") + middle + between + _PLAIN_DEL.format("p")).encode()
    compare(tmp_path, {"p": b"p\n", "q": b"q\n", "k": b"k\n"}, patch)
