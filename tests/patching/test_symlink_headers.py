"""Differential test of symlinks in git-style patches against GNU patch: random sequences of
sections that create a link (``new file mode 120000``), change its target, delete it, or edit the
files beside it, on a small tree that may already hold links. Targets stay inside the tree (links
that lead out are refused on purpose: tests/patching/test_escapes.py). GNU ``patch -p1 -f -F0`` on
the tree on disk and our applier on the same tree in memory: both succeed or both fail, and on
success every file and link agrees."""

from __future__ import annotations

import os
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
FILES = ["f.c", "d/g.c"]
LINKS = ["l", "d/m", "d"]
TARGETS = {"l": ["f.c", "d/g.c", "d", "missing"], "d/m": ["../f.c", "g.c", ".", "missing"], "d": ["f.c"]}  # all inside


def content(name: str) -> bytes:
    return f"{name}\nb\n".encode()


def link_body(target: str, sign: str) -> str:
    return f"{sign}{target}\n\\ No newline at end of file\n"


@st.composite
def section(draw) -> bytes:
    kind = draw(st.sampled_from(["create", "retarget", "delete", "edit", "remove"]))
    link = draw(st.sampled_from(LINKS))
    old_t, new_t = draw(st.sampled_from(TARGETS[link])), draw(st.sampled_from(TARGETS[link]))
    if kind == "create":
        return (f"diff --git a/{link} b/{link}\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
                f"+++ b/{link}\n@@ -0,0 +1 @@\n" + link_body(new_t, "+")).encode()
    if kind == "retarget":
        return (f"diff --git a/{link} b/{link}\nindex 1111111..2222222 120000\n--- a/{link}\n+++ b/{link}\n"
                f"@@ -1 +1 @@\n" + link_body(old_t, "-") + link_body(new_t, "+")).encode()
    if kind == "delete":
        return (f"diff --git a/{link} b/{link}\ndeleted file mode 120000\nindex 1111111..0000000\n--- a/{link}\n"
                f"+++ /dev/null\n@@ -1 +0,0 @@\n" + link_body(old_t, "-")).encode()
    name = draw(st.sampled_from(FILES))
    if kind == "remove":  # a file deleted (d/g.c may be its folder's last)
        return (f"diff --git a/{name} b/{name}\ndeleted file mode 100644\nindex 1111111..0000000\n--- a/{name}\n"
                f"+++ /dev/null\n@@ -1,2 +0,0 @@\n-{name}\n-b\n").encode()
    return (f"diff --git a/{name} b/{name}\nindex 1111111..2222222 100644\n--- a/{name}\n+++ b/{name}\n"
            f"@@ -1,2 +1,2 @@\n {name}\n-b\n+c\n").encode()


def gnu(links: dict[str, str], patch: bytes) -> dict[str, tuple[str, bytes]] | None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "d").mkdir()
        for name in FILES:
            (work / name).write_bytes(content(name))
        for name, target in links.items():
            os.symlink(target, work / name)
        proc = subprocess.run([GNU_PATCH, "-p1", "-f", "-F0", "--no-backup-if-mismatch", "-r", "-", "-i", "-"],
                              input=patch, cwd=work, capture_output=True, env=dict(os.environ, LC_ALL="C"))
        if proc.returncode != 0:
            return None
        out = {}
        for path in sorted(work.rglob("*")):
            rel = path.relative_to(work).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path).encode())
            elif path.is_file():
                out[rel] = ("file", path.read_bytes())
        return out


def ours(links: dict[str, str], patch: bytes) -> dict[str, tuple[str, bytes]] | None:
    files = {name: ("100644", content(name)) for name in FILES} | {
        name: ("120000", target.encode()) for name, target in links.items()}
    view = DictView(files)
    try:
        result = apply_to_tree(view, patch, source="t.patch", strip=1)
    except MaterializeError:
        return None
    if not result.ok:
        return None
    final = dict(view.files) | dict(result.changes)
    return {path: ("link" if entry[0] == "120000" else "file", entry[1])
            for path, entry in sorted(final.items()) if entry is not None}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(links=st.fixed_dictionaries({}, optional={link: st.sampled_from(TARGETS[link]) for link in LINKS[:2]}),
       sections=st.lists(section(), min_size=1, max_size=3))
def test_symlinks_in_git_patches_match_gnu_patch(links: dict[str, str], sections: list[bytes]) -> None:
    patch = b"".join(sections)
    assert ours(links, patch) == gnu(links, patch), patch.decode()


@pytest.mark.parametrize("op", ["rename", "copy"])
@pytest.mark.parametrize("target", TARGETS["l"])
@pytest.mark.parametrize("modes", ["", "old mode 120000\nnew mode 120000\n", "old mode 100644\nnew mode 100644\n"])
def test_a_rename_or_copy_onto_a_symlink_does_what_gnu_does(op: str, target: str, modes: str) -> None:
    """`rename to longlink` over a symlink `longlink` replaced the link by the file (exit 0) where GNU says
    "Cannot rename file without two valid file names" and changes nothing (found by the hostile red
    team: renames onto links). The names are such that GNU's choose_name picks neither."""
    patch = f"diff --git a/d/g.c b/longlink\n{modes}similarity index 100%\n{op} from d/g.c\n{op} to longlink\n".encode()
    assert ours({"longlink": target}, patch) == gnu({"longlink": target}, patch)


@pytest.mark.parametrize("head", [b"--- a/l\n+++ b/l\n", b"diff --git a/l b/l\nindex 1111111..2222222 100644\n--- a/l\n+++ b/l\n"])
def test_a_section_patching_a_symlink_as_a_file_fails_that_file_as_gnu_does(tmp_path: Path, head: bytes) -> None:
    """A section that edits a symlink as if it were a file (no ``120000`` mode): GNU says "File l is not
    a regular file -- refusing to patch", skips that file, patches the others and exits 1 (fuzzer seeds
    20034, 20415). It was refused as unsafe (exit 4) for the whole patch, so ``push -f`` kept nothing
    where quilt keeps the other files; nothing is written through the link either way."""
    patch = b"--- a/f.c\n+++ b/f.c\n@@ -1,2 +1,2 @@\n f.c\n-b\n+c\n" + head + b"@@ -1,2 +1,2 @@\n f.c\n-b\n+c\n"
    (tmp_path / "f.c").write_bytes(content("f.c"))
    os.symlink("f.c", tmp_path / "l")
    proc = subprocess.run([GNU_PATCH, "-p1", "-f", "--no-backup-if-mismatch", "-r", "-"], input=patch, cwd=tmp_path,
                          capture_output=True, env=dict(os.environ, LC_ALL="C"))
    assert proc.returncode == 1 and b"File l is not a regular file -- refusing to patch" in proc.stdout
    view = DictView({"f.c": ("100644", content("f.c")), "l": ("120000", b"f.c")})
    result = apply_to_tree(view, patch, source="t.patch", strip=1, partial=True)
    assert result.error is None and not result.ok
    assert [f.error for f in result.failed] == ["File l is not a regular file -- refusing to patch"]
    assert result.changes == {"f.c": ("100644", (tmp_path / "f.c").read_bytes())}
    assert os.readlink(tmp_path / "l") == "f.c"
