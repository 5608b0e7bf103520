"""Differential test of traditional (non-git) file headers against GNU patch: random sequences of
``---``/``+++`` sections that modify, create and delete files, with the names a real series carries
(``a/``/``b/`` prefixes, ``.orig`` backups, ``/dev/null``, epoch timestamps for created and deleted
files, ``Index:`` lines, names under folders that may not exist). GNU ``patch -p1 -f -F0`` on the tree
on disk and our applier on the same tree in memory must both succeed or both fail, and on success
every file must agree. (Which file a plain section patches is GNU's ``choose_name``.)"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from materialize.errors import MaterializeError
from materialize.patching.tree import apply_to_tree

from .gnu import GNU_PATCH, DictView, gnu_available

pytestmark = pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")

EXAMPLES = int(os.environ.get("MATERIALIZE_SOAK", "0")) or 200
NAMES = ["f.c", "g.c", "d/f.c", "d/e/h.c", "x/f.c", "s p.c"]
STAMP = "\t2020-01-01 00:00:00.000000000 +0000"
EPOCH = "\t1970-01-01 00:00:00.000000000 +0000"


def content(name: str) -> bytes:
    return f"{name}\nb\n".encode()


@st.composite
def section(draw) -> bytes:
    kind = draw(st.sampled_from(["modify", "new", "delete"]))
    old, new = draw(st.sampled_from(NAMES)), draw(st.sampled_from(NAMES))
    old_name = draw(st.sampled_from([f"a/{old}", f"a/{old}.orig", f"{old}", "/dev/null", f'"a/{old}"']))
    new_name = draw(st.sampled_from([f"b/{new}", f"b/{new}", f"{new}", "/dev/null", f'"b/{new}"']))
    old_stamp = draw(st.sampled_from([STAMP, EPOCH, ""]))
    new_stamp = draw(st.sampled_from([STAMP, EPOCH, ""]))
    index = f"Index: {draw(st.sampled_from(NAMES))}\n" if draw(st.booleans()) else ""
    head = f"{index}--- {old_name}{old_stamp}\n+++ {new_name}{new_stamp}\n"
    if kind == "modify":
        name = draw(st.sampled_from([old, new]))
        return (head + f"@@ -1,2 +1,2 @@\n {name}\n-b\n+c\n").encode()
    if kind == "new":
        return (head + f"@@ -0,0 +1,2 @@\n+{new}\n+b\n").encode()
    return (head + f"@@ -1,2 +0,0 @@\n-{old}\n-b\n").encode()


def gnu(tree: set[str], patch: bytes, strip: int = 1, reverse: bool = False) -> dict[str, bytes] | None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in tree:
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_bytes(content(name))
        proc = subprocess.run([GNU_PATCH, f"-p{strip}", *(["-R"] if reverse else []), "-f", "-F0",
                               "--no-backup-if-mismatch", "-r", "-", "-i", "-"],
                              input=patch, cwd=work, capture_output=True, env=dict(os.environ, LC_ALL="C"))
        if proc.returncode != 0:
            return None
        return {p.relative_to(work).as_posix(): p.read_bytes() for p in work.rglob("*") if p.is_file()}


def ours(tree: set[str], patch: bytes, strip: int = 1, reverse: bool = False) -> dict[str, bytes] | None:
    view = DictView({name: ("100644", content(name)) for name in tree})
    try:
        result = apply_to_tree(view, patch, source="t.patch", strip=strip, reverse=reverse)
    except MaterializeError:
        return None
    if not result.ok:
        return None
    files = dict(view.files) | dict(result.changes)
    return {path: entry[1] for path, entry in files.items() if entry is not None}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=st.sets(st.sampled_from(NAMES), min_size=1), sections=st.lists(section(), min_size=1, max_size=3),
       strip=st.sampled_from([0, 1, 1, 2]), reverse=st.booleans())
def test_plain_headers_match_gnu_patch(tree: set[str], sections: list[bytes], strip: int, reverse: bool) -> None:
    """A series entry's strip level and ``reverse`` (quilt's ``-pN`` and ``-R``) included."""
    patch = b"".join(sections)
    assert ours(tree, patch, strip, reverse) == gnu(tree, patch, strip, reverse), patch.decode()


GARBAGE = ["garbage\n", "\n", "Prereq: 1.0\n", "diff -u a b\n", "=====\n", "Author: someone\n", "********\n"]


@st.composite
def scattered_section(draw) -> bytes:
    """A modify section whose header lines come in any order, with garbage (blank lines included)
    among them, some left out or given twice: GNU's ``intuit_diff_type`` keeps the last line of each
    kind seen since the previous section and starts the section at the first ``@@ -`` after any."""
    old, new, index = (draw(st.sampled_from(NAMES)) for _ in range(3))
    parts = [f"--- a/{old}\n", f"+++ b/{new}\n", f"Index: {index}\n", f"*** a/{new}\n",
             f"  --- a/{old}\n", f"\t+++ b/{new}\n", f"- --- a/{old}\n", f"X Index: {index}\n"]  # indented, RFC 934
    parts = draw(st.lists(st.sampled_from(parts + GARBAGE), max_size=6))
    name = draw(st.sampled_from([old, new, index]))
    return ("".join(parts) + f"@@ -1,2 +1,2 @@\n {name}\n-b\n+c\n").encode()


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=st.sets(st.sampled_from(NAMES), min_size=1),
       sections=st.lists(scattered_section(), min_size=1, max_size=3), strip=st.sampled_from([0, 1]))
@example(tree={"f.c"}, strip=1, sections=[  # "- --- a/s p.c": GNU may read "p.c" as a time; the hunks read alike
    b"@@ -1,2 +1,2 @@\n f.c\n-b\n+c\n", b"+++ b/f.c\n- --- a/s p.c\n@@ -1,2 +1,2 @@\n f.c\n-b\n+c\n"])
def test_scattered_header_lines_match_gnu_patch(tree: set[str], sections: list[bytes], strip: int) -> None:
    """A section GNU finds, we find: ``---``/``+++`` apart, reversed, alone or repeated, ``Index:``
    anywhere in the region (found: Debian-style hand-edited patches where a blank line or a note
    sat between the header lines; we read the section as garbage and skipped it silently)."""
    patch = b"".join(sections)
    assert ours(tree, patch, strip) == gnu(tree, patch, strip), patch.decode()
