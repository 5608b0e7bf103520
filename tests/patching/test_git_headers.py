"""Differential test of git's extended headers against GNU patch: random sequences of file sections
(modify, mode change, rename, copy, new file, delete, each with or without ``index`` lines, mode lines
and hunks) on a small tree whose files are 0644 or 0755. GNU ``patch -p1 -f -F0`` runs on the tree on
disk, our applier on the same tree in memory: both succeed or both fail, and on success every file's
bytes and executable bit agree. (protobuf's Debian series showed the class: an ``index`` line's mode
once made files executable that GNU leaves alone.)"""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from materialize.errors import MaterializeError
from materialize.patching.tree import apply_to_tree

from .gnu import GNU_PATCH, DictView, gnu_available

pytestmark = pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")

EXAMPLES = int(os.environ.get("MATERIALIZE_SOAK", "0")) or 200
NAMES = ["p.py", "q.py", "r.py", "s p.py"]
MODES = ["100644", "100755"]


def content(name: str) -> bytes:
    return f"{name}\nb\n".encode()


def hunk(name: str) -> bytes:
    return f"@@ -1,2 +1,2 @@\n {name}\n-b\n+c\n".encode()


@st.composite
def section(draw) -> bytes:
    kind = draw(st.sampled_from(["modify", "mode", "rename", "copy", "new", "delete", "plain", "two-names",
                                 "bare"]))
    p, q = draw(st.sampled_from(NAMES)), draw(st.sampled_from(NAMES))
    m1, m2 = draw(st.sampled_from(MODES)), draw(st.sampled_from(MODES))
    modes = f"old mode {m1}\nnew mode {m2}\n" if draw(st.booleans()) else ""
    index = draw(st.sampled_from(["", "index 1111111..2222222\n", f"index 1111111..2222222 {m1}\n"]))
    if kind == "plain":  # not git-style: GNU writes out what git sections held back before it
        return f"--- a/{p}\n+++ b/{p}\n".encode() + hunk(p)
    if kind == "two-names":  # old and new names differ, no rename or copy line
        return f"diff --git a/{p} b/{q}\n{index}--- a/{p}\n+++ b/{q}\n".encode() + hunk(p)
    if kind == "bare":  # hunks without ---/+++: GNU swaps the diff --git line's names (q first)
        return f"diff --git a/{p} b/{q}\n{index}".encode() + hunk(draw(st.sampled_from([p, q])))
    if kind == "modify":
        return f"diff --git a/{p} b/{p}\n{modes}{index}--- a/{p}\n+++ b/{p}\n".encode() + hunk(p)
    if kind == "mode":
        return f"diff --git a/{p} b/{p}\nold mode {m1}\nnew mode {m2}\n{index}".encode()
    if kind in ("rename", "copy"):
        with_hunk = draw(st.booleans())
        head = (f"diff --git a/{p} b/{q}\n{modes}similarity index {'90' if with_hunk else '100'}%\n"
                f"{kind} from {p}\n{kind} to {q}\n")
        if not with_hunk:
            return head.encode()
        return f"{head}{index}--- a/{p}\n+++ b/{q}\n".encode() + hunk(p)
    if kind == "new":
        mode = draw(st.sampled_from(["", f"new file mode {m2}\n"]))
        return f"diff --git a/{q} b/{q}\n{mode}index 0000000..1111111\n--- /dev/null\n+++ b/{q}\n@@ -0,0 +1,2 @@\n+{q}\n+b\n".encode()
    return (f"diff --git a/{p} b/{p}\ndeleted file mode {m1}\nindex 1111111..0000000\n--- a/{p}\n+++ /dev/null\n"
            f"@@ -1,2 +0,0 @@\n-{p}\n-b\n").encode()




def gnu(tree: dict[str, str], patch: bytes, reverse: bool = False, *,
        quilt: bool = False) -> dict[str, tuple[bool, bytes]] | None:
    """GNU patch's tree; ``quilt``: with the backup options ``quilt push`` gives it (``--backup --prefix``),
    under which GNU keeps every file it replaces (as a backup), so that its bookkeeping by inode never
    meets an inode number the file system gave again to a later file (without them, on ext4, a file
    deleted later can take another file with it)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, mode in tree.items():
            (work / name).write_bytes(content(name))
            (work / name).chmod(0o755 if mode == "100755" else 0o644)
        backup = ["--backup", "--prefix=.pc/t/"] if quilt else ["--no-backup-if-mismatch"]
        proc = subprocess.run([GNU_PATCH, "-p1", *(["-R"] if reverse else []), "-f", "-F0", *backup,
                               "-r", "-", "-i", "-"],
                              input=patch, cwd=work, capture_output=True, env=dict(os.environ, LC_ALL="C"))
        if proc.returncode != 0:
            return None
        return {p.name: (bool(p.stat().st_mode & stat.S_IXUSR), p.read_bytes()) for p in work.iterdir()
                if p.name != ".pc"}


def ours(tree: dict[str, str], patch: bytes, reverse: bool = False) -> dict[str, tuple[bool, bytes]] | str | None:
    view = DictView({name: (mode, content(name)) for name, mode in tree.items()})
    try:
        result = apply_to_tree(view, patch, source="t.patch", strip=1, reverse=reverse)
    except MaterializeError:
        return None
    if result.error is not None and any(why in str(result.error) for why in ("was written by an earlier section",
                                                                             "onto itself")):
        return "refused"
    if not result.ok:
        return None
    files = dict(view.files) | dict(result.changes)
    return {path: (entry[0] == "100755", entry[1]) for path, entry in files.items() if entry is not None}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(MODES), min_size=1),
       sections=st.lists(section(), min_size=1, max_size=4), reverse=st.sampled_from([False, False, True]))
def test_git_headers_match_gnu_patch(tree: dict[str, str], sections: list[bytes], reverse: bool) -> None:
    patch = b"".join(sections)
    mine = ours(tree, patch, reverse)
    if mine == "refused":  # GNU reads a file as it was before the patch where git reads it as edited
        return
    assert mine == gnu(tree, patch, reverse, quilt=True), patch.decode()


def git_apply(tree: dict[str, str], patch: bytes) -> dict[str, tuple[bool, bytes]] | None:
    """What ``git apply`` makes of ``patch`` on ``tree`` (None: it refuses)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(["git", "init", "-q"], cwd=work, check=True)
        for name, mode in tree.items():
            (work / name).write_bytes(content(name))
            (work / name).chmod(0o755 if mode == "100755" else 0o644)
        proc = subprocess.run(["git", "apply", "-"], input=patch, cwd=work, capture_output=True)
        if proc.returncode != 0:
            return None
        return {p.name: (bool(p.stat().st_mode & stat.S_IXUSR), p.read_bytes()) for p in work.iterdir()
                if p.name != ".git"}


RENAME = b"diff --git a/p.py b/q.py\nsimilarity index 100%\nrename from p.py\nrename to q.py\n"


@pytest.mark.parametrize(("first", "names"), [
    (b"diff --git a/p.py b/p.py\n--- a/p.py\n+++ b/p.py\n" + hunk("p.py"), ["p.py"]),  # edited, then renamed
    (b"diff --git a/p.py b/p.py\nold mode 100644\nnew mode 100755\n", ["p.py"]),  # a mode change, then renamed
    (b"diff --git a/q.py b/p.py\nsimilarity index 100%\nrename from q.py\nrename to p.py\n", ["p.py", "q.py"]),
])
def test_a_rename_of_a_file_an_earlier_section_changed_reads_it_as_it_was(first: bytes, names: list[str]) -> None:
    """A git patch that changes p.py, then renames p.py (``git diff -M`` of a swap of two names, or an
    edited patch): GNU renames the file on its disk, the one before the patch, and writes the held-back
    change to p.py after the last section; ``git apply`` gives the same tree. Refused as "written by an
    earlier section" until then (quilt pushes it)."""
    tree = dict.fromkeys(names, "100644")
    patch = first + RENAME
    expected = gnu(tree, patch)
    assert expected is not None and expected == git_apply(tree, patch)
    assert ours(tree, patch) == expected


def test_a_rename_of_a_file_a_rename_wrote_is_still_refused() -> None:
    """p.py renamed to q.py, then q.py renamed on: GNU has no q.py on its disk yet, git renames the first
    rename's result; the patch is refused, naming the section."""
    patch = RENAME + b"diff --git a/q.py b/r.py\nsimilarity index 100%\nrename from q.py\nrename to r.py\n"
    view = DictView({"p.py": ("100644", content("p.py"))})
    result = apply_to_tree(view, patch, source="t.patch", strip=1)
    assert not result.ok and "t.patch:5: q.py was written by an earlier section" in str(result.error)


@pytest.mark.parametrize("kind", ["rename", "copy"])
def test_a_rename_or_copy_already_done_patches_the_destination_as_gnu_does(tmp_path, kind):
    """Source gone, destination there: GNU says "(already renamed from q.py)" and patches p.py, so
    quilt pushes such a patch onto an upstream that did the rename itself."""
    patch = (f"diff --git a/q.py b/p.py\nsimilarity index 90%\n{kind} from q.py\n{kind} to p.py\n"
             "--- a/q.py\n+++ b/p.py\n").encode() + hunk("p.py")
    assert ours({"p.py": "100644"}, patch) == gnu({"p.py": "100644"}, patch) == {"p.py": (False, b"p.py\nc\n")}


@pytest.mark.parametrize("copy_modes", ["old mode 100644\nnew mode 100755\n", "old mode 100755\nnew mode 100644\n"])
@pytest.mark.parametrize("first", ["old mode 100644\nnew mode 100755\n", "old mode 100755\nnew mode 100644\n"])
def test_a_copy_of_a_file_whose_mode_an_earlier_section_changed_applies_as_gnu_does(first, copy_modes):
    """``git diff -C`` of a commit that makes p.py executable and copies it (fuzzer seed 133): GNU copies
    the bytes on its disk, which a mode change does not touch, and gives the copy the section's own
    mode, so quilt pushes it. Refused as "written by an earlier section" until then."""
    patch = (f"diff --git a/p.py b/p.py\n{first}diff --git a/p.py b/q.py\n{copy_modes}"
             "similarity index 100%\ncopy from p.py\ncopy to q.py\n").encode()
    tree = {"p.py": "100644"}
    expected = gnu(tree, patch)
    assert expected is not None
    assert ours(tree, patch) == expected


@pytest.mark.parametrize("copy_head", ["", "old mode 100644\nnew mode 100755\n"])
@pytest.mark.parametrize("first", ["old mode 100644\nnew mode 100755\n", "--- a/p.py\n+++ b/p.py\n" + hunk("p.py").decode(),
                                   "old mode 100644\nnew mode 100755\n--- a/p.py\n+++ b/p.py\n" + hunk("p.py").decode()])
@pytest.mark.parametrize("copy_hunk", [False, True])
def test_a_copy_of_a_file_an_earlier_section_changed_reads_it_as_it_was(first, copy_head, copy_hunk):
    """``git diff -C`` of a commit that edits a file and copies it (fuzzer seed 5153): the copy's hunks
    are against the file before the commit, and GNU copies the file on its disk, the one before the
    patch (``git apply`` agrees), with that file's mode unless the copy sets one. Refused as "written
    by an earlier section" until then."""
    copy = (f"diff --git a/p.py b/q.py\n{copy_head}similarity index 90%\ncopy from p.py\ncopy to q.py\n"
            + ("--- a/p.py\n+++ b/q.py\n" + hunk("p.py").decode().replace("+c", "+d") if copy_hunk else ""))
    patch = f"diff --git a/p.py b/p.py\n{first}{copy}".encode()
    tree = {"p.py": "100644"}
    expected = gnu(tree, patch)
    assert expected is not None and "q.py" in expected
    assert ours(tree, patch) == expected


GIT_GARBAGE = [b"\n", b"garbage\n", b"similarity index 50%\n", b"  a note\n", b"Author: x\n"]


@st.composite
def garbled_section(draw) -> bytes:
    """A section with garbage lines (a blank one included) anywhere between its ``diff --git`` line and
    its first hunk: GNU reads extended headers and ``---``/``+++`` anywhere in that region."""
    lines = draw(section()).splitlines(keepends=True)
    head = next((k for k, line in enumerate(lines) if line.startswith(b"@@ -")), len(lines))
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(1 if lines[0].startswith(b"diff --git ") else 0, head))
        lines.insert(at, draw(st.sampled_from(GIT_GARBAGE)))
        head += 1
    return b"".join(lines)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=st.dictionaries(st.sampled_from(NAMES), st.sampled_from(MODES), min_size=1),
       sections=st.lists(garbled_section(), min_size=1, max_size=3), reverse=st.sampled_from([False, False, True]))
def test_git_regions_with_garbage_match_gnu_patch(tree: dict[str, str], sections: list[bytes], reverse: bool) -> None:
    """Found: ``diff --git``, ``index``, a blank line, then the hunk: GNU patches the file, we skipped
    the hunk as garbage after a section that ended at the blank line (silently, the patch applied)."""
    patch = b"".join(sections)
    mine = ours(tree, patch, reverse)
    if mine == "refused":
        return
    assert mine == gnu(tree, patch, reverse, quilt=True), patch.decode()


def _kinds(p: str, q: str) -> list[bytes]:
    """Every kind of git section on the names p and q (rename and copy with and without a hunk)."""
    return [
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n".encode() + hunk(p),  # change
        f"diff --git a/{p} b/{p}\nold mode 100644\nnew mode 100644\n".encode(),  # mode-only, no change
        f"diff --git a/{p} b/{p}\nold mode 100644\nnew mode 100755\n".encode(),  # mode-only, a change
        f"diff --git a/{p} b/{q}\nsimilarity index 100%\nrename from {p}\nrename to {q}\n".encode(),
        (f"diff --git a/{p} b/{q}\nsimilarity index 90%\nrename from {p}\nrename to {q}\n--- a/{p}\n+++ b/{q}\n"
         ).encode() + hunk(p),
        f"diff --git a/{p} b/{q}\nsimilarity index 100%\ncopy from {p}\ncopy to {q}\n".encode(),
        (f"diff --git a/{p} b/{q}\nsimilarity index 90%\ncopy from {p}\ncopy to {q}\n--- a/{p}\n+++ b/{q}\n"
         ).encode() + hunk(p),
        (f"diff --git a/{p} b/{p}\ndeleted file mode 100644\n--- a/{p}\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-{p}\n-b\n"
         ).encode(),
        (f"diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1,2 @@\n+{p}\n+b\n"
         ).encode(),
        f"diff --git a/{p} b/{p}\nsimilarity index 100%\nrename from {p}\nrename to {p}\n".encode(),  # onto itself
        (f"diff --git a/{p} b/{p}\nsimilarity index 90%\nrename from {p}\nrename to {p}\n--- a/{p}\n+++ b/{p}\n"
         ).encode() + hunk(p),
        f"--- a/{p}\n+++ b/{p}\n".encode() + hunk(p),  # a plain section: GNU writes out what it held back
    ]


SECTIONS = [k for p, q in (("p.py", "q.py"), ("q.py", "p.py")) for k in _kinds(p, q)]
TREES = [{"p.py": "100644"}, {"q.py": "100644"}, {"p.py": "100644", "q.py": "100644"}]


def _enumerated(length: int) -> list[tuple[int, ...]]:
    import itertools
    return list(itertools.product(range(len(SECTIONS)), repeat=length))


@pytest.mark.parametrize("tree", range(len(TREES)))
def test_every_pair_and_triple_of_git_sections_matches_gnu_or_is_refused(tree: int) -> None:
    """Every sequence of two git sections (three with MATERIALIZE_SOAK) of every kind on two names,
    in both directions, on each tree: ours equals GNU patch's tree (with quilt's backup options), or
    fails where GNU fails, or is refused naming the section. (The class of the silent difference a mode-only section between a
    change and a rename made: GNU writes out held-back changes then, by inode.)"""
    length = 3 if os.environ.get("MATERIALIZE_SOAK") else 2
    bad = []
    for combo in _enumerated(length):
        patch = b"".join(SECTIONS[k] for k in combo)
        mine = ours(TREES[tree], patch)
        if mine == "refused":
            continue
        theirs = gnu(TREES[tree], patch, quilt=True)
        if mine != theirs:
            bad.append((combo, patch.decode(), mine, theirs))
    assert not bad, bad[:3]


@pytest.mark.parametrize(("first", "second"), [
    (0, 17),  # p changed, then q copied onto p
    (0, 15),  # p changed, then q renamed onto p
    (2, 15),  # p made executable, then q renamed onto p
    (12, 3),  # q changed, then p renamed onto q
    (1, 17),  # a mode-only section of p that changes nothing, then q copied onto p
])
def test_git_sections_gnu_reorders_apply_as_gnu_does(first: int, second: int) -> None:
    """Refused as "written by an earlier section" until GNU's own disk was followed (``_GnuDisk``): each
    reads what GNU reads, and GNU's order of writes gives the tree."""
    tree = {"p.py": "100644", "q.py": "100644"}
    patch = SECTIONS[first] + SECTIONS[second]
    expected = gnu(tree, patch)
    assert expected is not None
    assert ours(tree, patch) == expected


@pytest.mark.parametrize("combo", [(10, 23, 15), (22, 11, 3)])
def test_a_deletion_gnu_remembers_by_inode_follows_quilts_backups(combo: tuple[int, ...]) -> None:
    """Found by the triples enumeration: p renamed onto itself (its inode waits for deletion), a plain
    section of q (GNU writes p out, freeing that inode, and writes q), then q renamed onto p. Plain GNU
    on ext4 deletes both files: q's new inode took the freed number, and the deletion remembered for p
    matches it. ``quilt push`` backs every replaced file up, so no number is freed, and quilt leaves p
    (q's content): ours is quilt's."""
    tree = {"p.py": "100644", "q.py": "100644"}
    patch = b"".join(SECTIONS[k] for k in combo)
    assert ours(tree, patch) == gnu(tree, patch, quilt=True) != {}


def _creations_and_deletions(p: str) -> list[bytes]:
    return [f"--- a/{p}\n+++ b/{p}\n".encode() + hunk(p),
            f"--- a/{p}\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-{p}\n-b\n".encode(),
            f"--- /dev/null\n+++ b/{p}\n@@ -0,0 +1,2 @@\n+{p}\n+b\n".encode(),
            f"--- a/{p}\n+++ b/{p}\n@@ -1,2 +1,2 @@\n {p}\n-c\n+b\n".encode(),  # the change undone
            (f"diff --git a/{p} b/{p}\ndeleted file mode 100644\n--- a/{p}\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-{p}\n"
             "-b\n").encode(),
            (f"diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1,2 @@\n+{p}\n"
             "+b\n").encode(),
            f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n".encode() + hunk(p)]


MIXED = _creations_and_deletions("p.py") + _creations_and_deletions("q.py")


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("tree", range(len(TREES)))
def test_every_pair_and_triple_of_plain_and_git_creations_and_deletions_matches_gnu(tree: int,
                                                                                     reverse: bool) -> None:
    """Plain and git creations, deletions and changes of two names, every pair (every triple with
    MATERIALIZE_SOAK), both directions: GNU deletes at the end of the patch and stats its input again
    after a git section; ours equals quilt's GNU, fails where it fails, or is refused."""
    import itertools
    length = 3 if os.environ.get("MATERIALIZE_SOAK") else 2
    bad = []
    for combo in itertools.product(range(len(MIXED)), repeat=length):
        patch = b"".join(MIXED[k] for k in combo)
        mine = ours(TREES[tree], patch, reverse)
        if mine != "refused" and mine != gnu(TREES[tree], patch, reverse, quilt=True):
            bad.append((combo, patch.decode()))
    assert not bad, bad[:3]
