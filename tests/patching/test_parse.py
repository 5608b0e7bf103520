"""Parser unit tests with hand-written patches in the shapes real tools produce."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from materialize.errors import PatchApplyError, PatchFormatError
from materialize.patching import apply_file, parse_patch
from materialize.patching.model import HunkLine

FORMAT_PATCH = b"""\
From 3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a Mon Sep 17 00:00:00 2001
From: Jane Dev <jane@example.com>
Date: Tue, 3 Oct 2023 10:00:00 +0200
Subject: [PATCH 1/2] sampler: clamp top_k

Clamp top_k to the vocabulary size; a --- line in prose is fine.

Signed-off-by: Jane Dev <jane@example.com>
---
 vllm/sampler.py | 3 ++-
 docs/new.md     | 2 ++
 2 files changed, 4 insertions(+), 1 deletion(-)
 create mode 100644 docs/new.md

diff --git a/vllm/sampler.py b/vllm/sampler.py
index 1111111..2222222 100644
--- a/vllm/sampler.py
+++ b/vllm/sampler.py
@@ -10,4 +10,5 @@ class Sampler:
     def forward(self, x):
-        k = self.top_k
+        k = min(self.top_k,
+                self.vocab)
         return x
\x20
diff --git a/docs/new.md b/docs/new.md
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,2 @@
+# New
+text
--\x20
2.42.0

"""


def test_format_patch_header_files_and_hunks() -> None:
    ps = parse_patch(FORMAT_PATCH, source="0001-clamp.patch")
    assert ps.source == "0001-clamp.patch"
    assert ps.header.startswith("From 3f2a1b0c")
    assert ps.header.endswith(" create mode 100644 docs/new.md\n\n")
    assert [f.new_path for f in ps.files] == ["vllm/sampler.py", "docs/new.md"]
    sampler, new = ps.files
    assert sampler.patch_line == 15 and not sampler.is_new
    assert (sampler.old_mode, sampler.new_mode) == ("100644", "100644")
    (hunk,) = sampler.hunks
    assert hunk.patch_line == 19
    assert (hunk.source_start, hunk.source_length, hunk.target_start, hunk.target_length) == (10, 4, 10, 5)
    assert hunk.section_header == "class Sampler:"
    assert hunk.header == "@@ -10,4 +10,5 @@ class Sampler:"
    assert [ln.kind for ln in hunk.lines] == [" ", "-", "+", "+", " ", " "]
    assert hunk.lines[-1] == HunkLine(" ", b"", False)
    assert new.is_new and new.old_path is None and new.new_mode == "100644"
    assert new.hunks[0].lines[-1].content == b"text"
    # The "-- " signature is not part of the last hunk.
    assert len(new.hunks[0].lines) == 2


def test_git_rename_copy_mode_and_delete_without_hunks() -> None:
    patch = b"""\
diff --git a/old/name.py b/new/name.py
similarity index 100%
rename from old/name.py
rename to new/name.py
diff --git a/tool.sh b/tool.sh
old mode 100644
new mode 100755
diff --git a/a.txt b/b.txt
similarity index 90%
copy from a.txt
copy to b.txt
--- a/a.txt
+++ b/b.txt
@@ -1 +1 @@
-x
+y
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 4444444..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/empty b/empty
new file mode 100644
index 0000000..e69de29
diff --git a/link b/link
new file mode 120000
index 0000000..5555555
--- /dev/null
+++ b/link
@@ -0,0 +1 @@
+target
\\ No newline at end of file
"""
    ps = parse_patch(patch, source="p.diff")
    rename, mode, copy, gone, empty, link = ps.files
    assert rename.is_rename and (rename.old_path, rename.new_path) == ("old/name.py", "new/name.py")
    assert rename.hunks == () and rename.patch_line == 1
    assert (mode.old_mode, mode.new_mode, mode.is_rename) == ("100644", "100755", False)
    assert copy.is_copy and not copy.is_rename and len(copy.hunks) == 1
    assert gone.is_delete and gone.new_path is None and gone.old_path == "gone.txt"
    assert gone.old_mode == "100644"
    assert empty.is_new and empty.hunks == () and empty.new_path == "empty"
    assert link.new_mode == "120000" and link.hunks[0].lines[0] == HunkLine("+", b"target", True)
    assert apply_file(None, empty).content == b""
    assert apply_file(b"bye\n", gone).content is None
    assert apply_file(None, link).content == b"target"


def test_plain_diff_paths_strip_and_preamble() -> None:
    patch = b"""\
Some description.

Index: pkg/mod.c
===================================================================
--- pkg.orig/mod.c\t2023-01-01 00:00:00.000000000 +0000
+++ pkg/mod.c\t2023-01-02 00:00:00.000000000 +0000
@@ -1,2 +1,2 @@
-a
+b
 c
"""
    ps = parse_patch(patch, source="q.patch")
    (fp,) = ps.files
    assert ps.header == "Some description.\n\n"
    assert fp.patch_line == 3
    assert (fp.old_path, fp.new_path) == ("mod.c", "mod.c")
    assert fp.old_timestamp == "2023-01-01 00:00:00.000000000 +0000"
    assert parse_patch(patch, source="q", strip=0).files[0].old_path == "pkg.orig/mod.c"
    with pytest.raises(PatchFormatError, match=r"^q\.patch:5: cannot strip 2 "):
        parse_patch(patch, source="q.patch", strip=2)


def test_strip_keeps_dotdot_and_collapses_slashes() -> None:
    patch = b"--- a//x/../../etc/passwd\n+++ b//x/../../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n"
    (fp,) = parse_patch(patch, source="evil.diff").files
    assert fp.new_path == "x/../../etc/passwd"


def test_quoted_git_names() -> None:
    patch = (
        b'diff --git "a/caf\\303\\251 menu.txt" "b/caf\\303\\251 menu.txt"\n'
        b"index 1111111..2222222 100644\n"
        b'--- "a/caf\\303\\251 menu.txt"\n'
        b'+++ "b/caf\\303\\251 menu.txt"\n'
        b"@@ -1 +1 @@\n-a\n+b\n"
    )
    (fp,) = parse_patch(patch, source="p").files
    assert fp.old_path == fp.new_path == "caf\u00e9 menu.txt"


def test_diff_ruN_epoch_timestamps_mean_new_and_deleted_files() -> None:
    patch = b"""\
diff -ruN a/new.txt b/new.txt
--- a/new.txt\t1970-01-01 00:00:00.000000000 +0000
+++ b/new.txt\t2024-05-01 12:00:00.000000000 +0200
@@ -0,0 +1 @@
+hello
diff -ruN a/old.txt b/old.txt
--- a/old.txt\t2024-05-01 12:00:00.000000000 +0200
+++ b/old.txt\t1969-12-31 19:00:00.000000000 -0500
@@ -1 +0,0 @@
-bye
"""
    new, old = parse_patch(patch, source="p").files
    # Both names stay: which one a new (or deleted) file takes is GNU's choose_name, at apply time.
    assert new.is_new and (new.old_path, new.new_path) == ("new.txt", "new.txt") and new.patch_line == 1
    assert old.is_delete and (old.old_path, old.new_path) == ("old.txt", "old.txt") and old.patch_line == 6


def test_no_newline_markers_and_crlf_contents() -> None:
    patch = b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n x\r\n-y\r\n\\ No newline at end of file\n+y\r\n"
    (fp,) = parse_patch(patch, source="p").files
    assert not fp.strip_trailing_cr
    assert fp.hunks[0].lines == (
        HunkLine(" ", b"x\r", False),
        HunkLine("-", b"y\r", True),
        HunkLine("+", b"y\r", False),
    )
    mangled = patch.replace(b"\n", b"\r\n")
    assert parse_patch(mangled, source="p").files[0].strip_trailing_cr


def test_binary_payloads_parse_but_do_not_apply() -> None:
    patch = b"""\
diff --git a/img.png b/img.png
index 1111111..2222222 100644
GIT binary patch
literal 5
McmZQzWMXCj0002E00000

literal 0
HcmV?d00001

diff --git a/b.bin b/b.bin
index 1111111..2222222 100644
Binary files a/b.bin and b/b.bin differ
"""
    png, other = parse_patch(patch, source="p").files
    assert png.is_binary and png.new_path == "img.png"
    # GNU: "Binary files ... differ" without a payload changes no content (see test_gnu_rules.py).
    assert not other.is_binary and other.new_path == "b.bin" and other.hunks == ()
    with pytest.raises(PatchApplyError, match="binary"):
        apply_file(b"x", png)


@pytest.mark.parametrize(
    ("patch", "line"),
    [
        (b"--- a/f\n+++ b/f\n@@ -1,3 +1,4 @@\n a\n-b\n+c\n", 6),
        (b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n b\n", 3),
        (b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+a\n+b\n", 5),
        (b"--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n*b\n+c\n", 5),
    ],
)
def test_malformed_patches_name_file_and_line(patch: bytes, line: int) -> None:
    with pytest.raises(PatchFormatError, match=rf"^bad\.diff:{line}: "):
        parse_patch(patch, source="bad.diff")


def test_concatenated_format_patches() -> None:
    second = FORMAT_PATCH.replace(b"[PATCH 1/2]", b"[PATCH 2/2]")
    ps = parse_patch(FORMAT_PATCH + second, source="series.mbox")
    assert len(ps.files) == 4
    assert ps.files[2].patch_line > ps.files[1].patch_line


def _share_patches() -> list[Path]:
    roots = [
        Path("/usr/share"),
        *[Path(p) for p in os.environ.get("MATERIALIZE_PATCH_DIRS", "").split(":") if p],
    ]
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        proc = subprocess.run(
            ["find", str(root), "-type", "f", "(", "-name", "*.patch", "-o", "-name", "*.diff", ")"],
            capture_output=True,
            text=True,
            check=False,
        )
        found.extend(Path(p) for p in proc.stdout.splitlines())
    return sorted(found)[:2000]


def test_parses_system_patches_without_crashing() -> None:
    files = _share_patches()
    if not files:
        pytest.skip("no .patch/.diff files under /usr/share")
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        try:
            parse_patch(data, source=str(path), strip=1)
        except PatchFormatError as exc:
            assert str(exc).startswith(f"{path}:")


def test_context_diffs_parse_and_normal_diffs_after_a_header_line_too() -> None:
    context = b"*** a/f\t2020\n--- b/f\t2020\n***************\n*** 1 ****\n! a\n--- 1 ----\n! b\n"
    (fp,) = parse_patch(context, source="c.diff").files
    assert (fp.old_path, fp.new_path) == ("f", "f") and fp.hunks[0].body == b"-a\n+b\n"
    stray = b"***************\n*** 1 ****\n! a\n--- 1 ----\n! b\n"  # hunks without their file lines: garbage
    with pytest.raises(PatchFormatError, match=r"^c\.diff:1: Only garbage"):  # to GNU too (exit 2)
        parse_patch(stray, source="c.diff")
    with pytest.raises(PatchFormatError, match=r"^g\.diff:2: unsupported patch format: a context diff hunk in"):
        parse_patch(b"diff --git a/f b/f\n" + stray, source="g.diff")  # GNU applies it to f: not read
    normal = b"1c1\n< a\n---\n> b\n"  # GNU: "Only garbage" (a normal diff needs a header line before it)
    with pytest.raises(PatchFormatError, match=r"^n\.diff:1: Only garbage .*line 1: a normal diff"):
        parse_patch(normal, source="n.diff")
    (fp,) = parse_patch(b"Index: f\n" + normal, source="n.diff", strip=0).files  # as diff -U0 would write it
    assert fp.index_path == "f" and fp.normal and fp.hunks[0].body == b"-a\n+b\n"
    assert fp.hunks[0][:4] == (1, 1, 1, 1)


_VALID = FORMAT_PATCH + (
    b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.data())
def test_mangled_patches_raise_only_patch_format_error(data: st.DataObject) -> None:
    lines = _VALID.split(b"\n")
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(["drop", "dup", "prefix", "bytes"]))
        if op == "drop":
            del lines[pos]
        elif op == "dup":
            lines.insert(pos, lines[pos])
        elif op == "prefix":
            lines[pos] = (
                data.draw(st.sampled_from([b"+", b"-", b" ", b"\\", b"@@ -1 +1 @@", b"\r"])) + lines[pos]
            )
        else:
            lines[pos] = data.draw(st.binary(max_size=8))
    patch = b"\n".join(lines)
    try:
        ps = parse_patch(patch, source="m.patch")
    except PatchFormatError as exc:
        assert str(exc).startswith("m.patch:")
        return
    for fp in ps.files:
        if not fp.is_binary:
            apply_file(b"a\nb\n", fp, max_fuzz=2)
            apply_file(None, fp)


@pytest.mark.parametrize("header", ["@@ -99999999999999999999 +1 @@", "@@ -1,99999999999999999999999 +1 @@",
                                    "@@ -1 +1,99999999999999999999 @@"])
def test_a_line_number_too_large_for_gnu_is_refused_like_gnu(tmp_path, header):
    """GNU keeps line numbers in a ptrdiff_t: a larger one is "line number ... is too large" (exit 2).
    A Python int would take it and let the offset search "find" the hunk near line 1 (exit 0)."""
    patch = f"--- a/f\n+++ b/f\n{header}\n-a\n+b\n".encode()
    (tmp_path / "f").write_text("a\n")
    gnu = subprocess.run(["patch", "-p1", "--dry-run"], input=patch, cwd=tmp_path, capture_output=True)
    assert gnu.returncode == 2 and b"is too large" in gnu.stdout + gnu.stderr
    with pytest.raises(PatchFormatError, match=r"^p\.patch:3: malformed patch: line number \d+ is too large"):
        parse_patch(patch, source="p.patch")


def test_a_cached_prefix_is_keyed_by_the_rules_that_made_it(builder):
    """A prefix computed by older rules is not reused: APPLY_RULES is part of every prefix key."""
    from materialize import engine
    from materialize.series import load_series

    b = builder({"f": "a\n"})
    b.add_patch("0001", {"f": "b\n"})
    series = load_series(b.write())
    first = engine.materialize(series)
    keys = set(first.store.read_refs(engine.PREFIX_REF))
    original = engine.APPLY_RULES
    try:
        engine.APPLY_RULES = original + 1
        again = engine.materialize(series)
    finally:
        engine.APPLY_RULES = original
    assert not again.reports[0].reused and again.id == first.id
    assert len(set(again.store.read_refs(engine.PREFIX_REF)) - keys) == 1
