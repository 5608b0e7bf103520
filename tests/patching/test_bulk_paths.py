"""The block parser and the bulk applier (the 100k-hunk speed paths, issue 10 item 8) against GNU patch.

A file section's hunks are parsed in one block and, when every hunk matches where its header says,
applied in one bulk pass; anything else falls back to the per-hunk paths. These cases sit on the
edges between the two (a run into the next file's header, markers, garbage after the last hunk,
offsets, context between changes, missing newlines, CRLF) and must give GNU's result. The last test
counts fallbacks on a large generated patch: a deterministic check that the fast paths are taken.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.errors import PatchFormatError
from materialize.patching import apply as apply_module
from materialize.patching import parse as parse_module
from materialize.patching.model import HunkLine
from materialize.patching.parse import parse_patch

from .gnu import gnu_available
from .test_gnu_rules import compare

needs_gnu = pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")


def _lines(prefix: str, count: int) -> bytes:
    return b"".join(b"%s %d\n" % (prefix.encode(), k) for k in range(1, count + 1))


BASE = {"a.txt": _lines("a", 40), "b.txt": _lines("b", 40)}


@needs_gnu
def test_last_hunk_without_trailing_context_before_the_next_file(tmp_path: Path) -> None:
    patch = (
        b"--- a/a.txt\n+++ b/a.txt\n@@ -4,3 +4,3 @@\n a 4\n-a 5\n+A 5\n a 6\n"
        b"@@ -40 +40 @@\n-a 40\n+A 40\n"
        b"--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@\n-b 1\n+B 1\n b 2\n"
    )
    _r, files = compare(tmp_path, BASE, patch)
    assert files["a.txt"].endswith(b"A 40\n") and files["b.txt"].startswith(b"B 1\n")


@needs_gnu
def test_removed_lines_that_look_like_file_headers(tmp_path: Path) -> None:
    files = {"sig.txt": b"x\n-- \nname\n-- a/sig.txt\ny\nz\nw\n"}
    patch = (
        b"--- a/sig.txt\n+++ b/sig.txt\n@@ -1,5 +1,4 @@\n x\n--- \n name\n--- a/sig.txt\n+kept\n y\n"
        b"@@ -5,3 +4,3 @@\n y\n-z\n+Z\n w\n"
    )
    _r, out = compare(tmp_path, files, patch)
    assert out["sig.txt"] == b"x\nname\nkept\ny\nZ\nw\n"


@needs_gnu
def test_no_newline_marker_after_a_files_last_hunk(tmp_path: Path) -> None:
    files = {"a.txt": _lines("a", 10)[:-1], "b.txt": _lines("b", 10)}
    patch = (
        b"--- a/a.txt\n+++ b/a.txt\n@@ -2,3 +2,3 @@\n a 2\n-a 3\n+A 3\n a 4\n"
        b"@@ -8,3 +8,3 @@\n a 8\n a 9\n-a 10\n\\ No newline at end of file\n+A 10\n"
        b"--- a/b.txt\n+++ b/b.txt\n@@ -5,3 +5,3 @@\n b 5\n-b 6\n+B 6\n b 7\n"
    )
    _r, out = compare(tmp_path, files, patch)
    assert out["a.txt"].endswith(b"A 10\n")


@needs_gnu
def test_garbage_between_the_last_hunk_and_the_next_file(tmp_path: Path) -> None:
    patch = (
        b"--- a/a.txt\n+++ b/a.txt\n@@ -4,3 +4,3 @@\n a 4\n-a 5\n+A 5\n a 6\n"
        b" a.txt | 2 +-\n-- \n2.43.0\n"
        b"--- a/b.txt\n+++ b/b.txt\n@@ -9,3 +9,3 @@\n b 9\n-b 10\n+B 10\n b 11\n"
    )
    compare(tmp_path, BASE, patch)


@needs_gnu
@pytest.mark.parametrize("drift", [0, 1, -2])
def test_later_hunks_need_an_offset(tmp_path: Path, drift: int) -> None:
    lines = _lines("a", 60).splitlines(keepends=True)
    if drift > 0:
        lines[29:29] = [b"new\n"] * drift
    elif drift < 0:
        del lines[29 : 29 - drift]
    hunks = b"".join(
        b"@@ -%d,3 +%d,3 @@\n a %d\n-a %d\n+A %d\n a %d\n" % (at - 1, at - 1, at - 1, at, at, at + 1)
        for at in (5, 15, 40, 50)
    )
    _r, out = compare(tmp_path, {"a.txt": b"".join(lines)}, b"--- a/a.txt\n+++ b/a.txt\n" + hunks)
    assert out["a.txt"].count(b"A ") == 4


@needs_gnu
def test_context_between_two_changes_and_uneven_context(tmp_path: Path) -> None:
    patch = (
        b"--- a/a.txt\n+++ b/a.txt\n@@ -1,4 +1,4 @@\n-a 1\n+A 1\n a 2\n a 3\n a 4\n"
        b"@@ -10,5 +10,5 @@\n a 10\n-a 11\n+A 11\n a 12\n-a 13\n+A 13\n a 14\n"
        b"@@ -20,3 +20,4 @@\n a 20\n a 21\n+inserted\n a 22\n"
    )
    compare(tmp_path, BASE, patch)


@needs_gnu
def test_misordered_and_overlapping_hunks(tmp_path: Path) -> None:
    patch = (
        b"--- a/a.txt\n+++ b/a.txt\n@@ -20,3 +20,3 @@\n a 20\n-a 21\n+A 21\n a 22\n"
        b"@@ -5,3 +5,3 @@\n a 5\n-a 6\n+A 6\n a 7\n"
        b"@@ -21,3 +21,3 @@\n a 21\n-a 22\n+A 22\n a 23\n"
    )
    compare(tmp_path, BASE, patch)


@needs_gnu
def test_crlf_patch_with_many_hunks(tmp_path: Path) -> None:
    text = b"".join(b"w %d\n" % k for k in range(1, 30))  # a CRLF-mangled patch of an LF file
    patch = b"--- a/w.txt\r\n+++ b/w.txt\r\n" + b"".join(
        b"@@ -%d,3 +%d,3 @@\r\n w %d\r\n-w %d\r\n+W %d\r\n w %d\r\n" % (at - 1, at - 1, at - 1, at, at, at + 1)
        for at in (3, 10, 20)
    )
    _r, out = compare(tmp_path, {"w.txt": text}, patch)
    assert out["w.txt"].count(b"W ") == 3


@needs_gnu
def test_hunks_touching_an_unterminated_last_line(tmp_path: Path) -> None:
    files = {"a.txt": _lines("a", 12)[:-1]}
    patch = b"--- a/a.txt\n+++ b/a.txt\n@@ -2,3 +2,3 @@\n a 2\n-a 3\n+A 3\n a 4\n@@ -9,3 +9,3 @@\n a 9\n-a 10\n+A 10\n a 11\n"
    _r, out = compare(tmp_path, files, patch)
    assert not out["a.txt"].endswith(b"\n")


def _ten_hunks(odd: int | None, kind: str) -> tuple[bytes, bytes]:
    """a.txt and ten regular hunks on it (a 5, a 9, ...); hunk ``odd`` is made irregular as ``kind`` says."""
    lines = _lines("a", 50).splitlines(keepends=True)
    out = [b"--- a/a.txt\n+++ b/a.txt\n"]
    for k in range(10):
        at = 5 + 4 * k
        body = b" a %d\n-a %d\n+A %d\n a %d\n" % (at - 1, at, at, at + 1)
        start = at - 1
        if k == odd and kind == "offset":
            start += 1  # its lines sit one line above where the header says: GNU finds them at offset -1
        elif k == odd and kind == "tab":  # GNU's eaten-space context line: a TAB-led line of the file
            lines[at - 2] = b"\ta %d\n" % (at - 1)
            body = b"\ta %d\n-a %d\n+A %d\n a %d\n" % (at - 1, at, at, at + 1)
        elif k == odd and kind == "shape":  # more context after the change than before: not the bulk shape
            body = b" a %d\n-a %d\n+A %d\n a %d\n a %d\n" % (at - 1, at, at, at + 1, at + 2)
        old = body.count(b"\n") - body.count(b"\n+") - body.startswith(b"+")
        new = body.count(b"\n") - body.count(b"\n-") - body.startswith(b"-")
        out.append(b"@@ -%d,%d +%d,%d @@\n" % (start, old, start, new) + body)
    return b"".join(lines), b"".join(out)


@needs_gnu
@pytest.mark.parametrize(("odd", "kind"), [(None, ""), (7, "offset"), (4, "tab"), (5, "shape"), (0, "offset")])
def test_blocks_and_bulk_chunks_smaller_than_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: int | None, kind: str
) -> None:
    """Blocks of 3 hunks and bulk chunks of 4: every boundary falls inside the file, and one
    irregular hunk (an offset, a TAB-led context line, uneven context) sits in a later chunk."""
    original, patch = _ten_hunks(odd, kind)
    whole = parse_patch(patch, source="t.patch").files[0].hunks
    monkeypatch.setattr(parse_module, "_BLOCK_HUNKS", 3)
    monkeypatch.setattr(apply_module, "_BULK_CHUNK", 4)
    assert parse_patch(patch, source="t.patch").files[0].hunks == whole
    result, out = compare(tmp_path, {"a.txt": original}, patch)
    assert result.ok and out["a.txt"].count(b"A ") == 10


@needs_gnu
@pytest.mark.parametrize("unterminated", [False, True])
def test_bulk_reads_the_file_in_windows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unterminated: bool) -> None:
    """The bulk applier reads the file's lines a window at a time and never splits it whole (the
    100k-hunk patch's peak memory was the file's million line objects): with one line per read and
    chunks of 3 hunks, every window edge falls inside a hunk or its copied run, one hunk reaches less
    far than the one before it (three lines of context, then one), and the tail after the last hunk
    (unterminated or not) is copied as it stands. GNU patch decides the output; the per-hunk
    applier, which splits the file whole, must not be needed."""
    lines = _lines("a", 60)
    original = lines[:-1] if unterminated else lines
    hunks = [b"@@ -2,7 +2,7 @@\n a 2\n a 3\n a 4\n-a 5\n+A 5\n a 6\n a 7\n a 8\n",
             b"@@ -6,2 +6,3 @@\n a 6\n+X 6\n a 7\n"]
    hunks += [b"@@ -%d,3 +%d,3 @@\n a %d\n-a %d\n+A %d\n a %d\n" % (at - 1, at - 1, at - 1, at, at, at + 1)
              for at in range(12, 56, 4)]
    patch = b"--- a/a.txt\n+++ b/a.txt\n" + b"".join(hunks)
    monkeypatch.setattr(apply_module._LineWindow, "_BATCH", 1)
    monkeypatch.setattr(apply_module, "_BULK_CHUNK", 3)

    def no_line_by_line(*_args: object) -> None:
        raise AssertionError("the bulk path fell back to the per-hunk applier")

    monkeypatch.setattr(apply_module, "_Applier", no_line_by_line)
    result, out = compare(tmp_path, {"a.txt": original}, patch)
    assert result.ok and out["a.txt"].count(b"A ") == len(hunks) - 1 and b"a 6\nX 6\na 7\n" in out["a.txt"]
    assert out["a.txt"].endswith(b"a 60" if unterminated else b"a 60\n")


def test_block_and_walk_give_the_same_hunks() -> None:
    patch = (
        b"--- a/a.txt\n+++ b/a.txt\n@@ -4,3 +4,3 @@\n a 4\n-a 5\n+A 5\n a 6\n"
        b"@@ -9 +9 @@\n-a 9\n+A 9\n"
        b"@@ -20,2 +20,2 @@\n\ta 20\n-a 21\n+A 21\n"
        b"--- a/b.txt\n+++ b/b.txt\n@@ -1,2 +1,2 @@ section\n b 1\n-b 2\n\\ No newline at end of file\n+B 2\n"
    )
    files = parse_patch(patch, source="t.patch").files
    a, b = files
    assert [h.lines for h in a.hunks] == [
        (HunkLine(" ", b"a 4"), HunkLine("-", b"a 5"), HunkLine("+", b"A 5"), HunkLine(" ", b"a 6")),
        (HunkLine("-", b"a 9"), HunkLine("+", b"A 9")),
        (HunkLine(" ", b"\ta 20"), HunkLine("-", b"a 21"), HunkLine("+", b"A 21")),
    ]
    assert [(h.source_start, h.source_length, h.target_start, h.target_length) for h in a.hunks] == [
        (4, 3, 4, 3), (9, 1, 9, 1), (20, 2, 20, 2)]
    assert b.hunks[0].section_header == "section"
    assert b.hunks[0].lines[1] == HunkLine("-", b"b 2", True)
    assert b.hunks[0].kinds == b" -+"


def test_a_large_regular_patch_takes_the_fast_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Linearity with small constants, checked by counting: on 20 files x 200 hunks no hunk is
    parsed line by line, and none is located or applied one at a time."""
    calls = {"walk": 0, "one": 0}
    walk, one = parse_module._Parser._hunk, apply_module._apply_hunk

    def counted_walk(*args, **kwargs):
        calls["walk"] += 1
        return walk(*args, **kwargs)

    def counted_one(*args, **kwargs):
        calls["one"] += 1
        return one(*args, **kwargs)

    monkeypatch.setattr(parse_module._Parser, "_hunk", counted_walk)
    monkeypatch.setattr(apply_module, "_apply_hunk", counted_one)
    chunks, originals = [], {}
    for f in range(20):
        lines = [b"f%d line %d\n" % (f, k) for k in range(1600)]
        originals[f"f{f}.txt"] = b"".join(lines)
        chunks.append(b"diff -u a/f%d.txt b/f%d.txt\n--- a/f%d.txt\n+++ b/f%d.txt\n" % (f, f, f, f))
        for h in range(200):
            at = h * 8 + 4
            chunks.append(b"@@ -%d,7 +%d,7 @@\n" % (at - 2, at - 2))
            chunks.extend(b" " + lines[k] for k in range(at - 3, at))
            chunks.append(b"-" + lines[at])
            chunks.append(b"+patched %d\n" % at)
            chunks.extend(b" " + lines[k] for k in range(at + 1, at + 4))
    patchset = parse_patch(b"".join(chunks), source="big.patch")
    assert sum(len(fp.hunks) for fp in patchset.files) == 4000
    assert calls["walk"] == 0  # "diff -u" lines end each block: nothing reaches the walk
    for fp in patchset.files:
        result = apply_module.apply_file(originals[fp.old_path], fp)
        assert result.ok and result.content is not None and result.content.count(b"patched") == 200
    assert calls["one"] == 0


HEADER_SHAPES = [
    b"@@ -%d,2 +%d,2 @@\n", b"@@ -%d,2 +%d,2 @@ def f():\n", b"@@ -%d,2 +%d,2 @@\r\n", b"@@ -%d,2 +%d,2 @@ x\r\r\n",
    b"@@ -%d,2 +%d,2@@x\n", b"@@ -%d,2 +%d,2 @ junk\n", b"@@ -%d,2 +%d,2 @@ \n", b"@@ -%d,2 +%d,2 @@ a\rb\n",
]


@pytest.mark.parametrize("shape", HEADER_SHAPES)
@pytest.mark.parametrize("where", ["every", "middle", "last"])
def test_block_headers_read_as_one_header_is(shape: bytes, where: str) -> None:
    """The block path reads all headers of a section in one pass (``_HUNK_LINES.findall``); each hunk
    must get what the one-line reading (``_HUNK``) gives that header, whether the shape is on every
    hunk or on one of them, and a header too long for GNU's numbers stops the block where it is."""
    chunks = [b"--- a/a.txt\n+++ b/a.txt\n"]
    for h in range(5):
        at = 10 * h + 2
        plain = b"@@ -%d,2 +%d,2 @@\n" % (at, at)
        use = where == "every" or (where == "middle" and h == 2) or (where == "last" and h == 4)
        chunks.append((shape % (at, at)) if use else plain)
        chunks.append(b" a %d\n-a %d\n+A %d\n" % (at, at + 1, at + 1))
    files = parse_patch(b"".join(chunks), source="t.patch").files
    headers = [c for c in chunks if c.startswith(b"@@")]
    expected = []
    for header in headers:
        m = parse_module._HUNK.match(header)
        assert m is not None
        start, old, new_start, new, section = m.groups()
        expected.append((int(start), int(old or 1), int(new_start), int(new or 1),
                         (section or b"").decode("utf-8", "replace")))
    assert [(h.source_start, h.source_length, h.target_start, h.target_length, h.section_header)
            for h in files[0].hunks] == expected


def test_a_number_too_long_mid_block_is_named() -> None:
    patch = (b"--- a/a.txt\n+++ b/a.txt\n@@ -2,2 +2,2 @@\n a 2\n-a 3\n+A 3\n"
             b"@@ -1234567890123456789,2 +12,2 @@\n a 12\n-a 13\n+A 13\n")
    with pytest.raises(PatchFormatError, match=r"t.patch:7: .*too large"):
        parse_patch(patch, source="t.patch")
