"""File modes as GNU patch 2.7.6 sets them, with /usr/bin/patch as the oracle: a mode is changed only
when the patch gives an old and a new mode that differ (``old mode``/``new mode``, ``new file mode``).
The mode on a git ``index`` line says what the file was in the author's repository, not what to make
it: protobuf's Debian patches carry ``index a..b 100755`` for a file its tarball ships 0644, and
quilt leaves it 0644 (we made it executable)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from materialize.patching.tree import apply_to_tree

from .gnu import GNU_PATCH, DictView, gnu_available

pytestmark = pytest.mark.skipif(not gnu_available(), reason="GNU patch not installed")

BODY = b"--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"
NEW_FILE = b"--- /dev/null\n+++ b/n.sh\n@@ -0,0 +1 @@\n+x\n"




def gnu_modes(tmp: Path, executable: bool, patch: bytes) -> dict[str, bool]:
    work = tmp / "gnu"
    work.mkdir()
    (work / "f.py").write_bytes(b"a\nb\n")
    (work / "f.py").chmod(0o755 if executable else 0o644)
    proc = subprocess.run([GNU_PATCH, "-p1", "-f", "-F0", "--no-backup-if-mismatch", "-i", "-"], input=patch,
                          cwd=work, capture_output=True, env=dict(os.environ, LC_ALL="C"))
    assert proc.returncode == 0, proc.stdout
    return {p.name: bool(p.stat().st_mode & stat.S_IXUSR) for p in work.iterdir()}


def our_modes(executable: bool, patch: bytes) -> dict[str, bool]:
    view = DictView({"f.py": ("100755" if executable else "100644", b"a\nb\n")})
    result = apply_to_tree(view, patch, source="t.patch", strip=1)
    assert result.ok, result.error
    files = {path: entry for path, entry in view.files.items()} | result.changes
    return {path: entry[0] == "100755" for path, entry in files.items() if entry is not None}


@pytest.mark.parametrize("executable", [False, True], ids=["0644", "0755"])
@pytest.mark.parametrize("header", [
    b"index 1111111..2222222 100755\n",  # protobuf's case: the index line's mode is no instruction
    b"index 1111111..2222222 100644\n",
    b"old mode 100644\nnew mode 100755\nindex 1111111..2222222\n",
    b"old mode 100755\nnew mode 100644\nindex 1111111..2222222\n",
    b"old mode 100644\nnew mode 100755\nindex 1111111..2222222 100644\n",  # a later index mode overrides both
    b"",
], ids=["index-755", "index-644", "to-755", "to-644", "index-after-modes", "plain"])
def test_modes_change_only_when_the_patch_changes_them(tmp_path, executable, header):
    patch = b"diff --git a/f.py b/f.py\n" + header + BODY
    assert our_modes(executable, patch) == gnu_modes(tmp_path, executable, patch)


@pytest.mark.parametrize("header", [b"new file mode 100755\nindex 0000000..1111111\n",
                                    b"new file mode 100644\nindex 0000000..1111111\n",
                                    b"index 0000000..1111111 100755\n"], ids=["new-755", "new-644", "index-only"])
def test_a_new_file_gets_its_new_file_mode(tmp_path, header):
    patch = b"diff --git a/n.sh b/n.sh\n" + header + NEW_FILE
    assert our_modes(False, patch) == gnu_modes(tmp_path, False, patch)


@pytest.mark.parametrize("executable", [False, True], ids=["0644", "0755"])
@pytest.mark.parametrize("patch", [
    b"diff --git a/f.py b/f.py\nold mode 100644\nnew mode 100755\n",  # a mode change and no hunk
    b"diff --git a/f.py b/f.py\nold mode 100755\nnew mode 100644\n",
    b"diff --git a/f.py b/g.py\nsimilarity index 100%\nrename from f.py\nrename to g.py\n",
    b"diff --git a/f.py b/g.py\nold mode 100644\nnew mode 100755\nsimilarity index 100%\nrename from f.py\n"
    b"rename to g.py\n",
    b"diff --git a/f.py b/g.py\nsimilarity index 50%\nrename from f.py\nrename to g.py\nindex 1111111..2222222 "
    b"100755\n" + BODY.replace(b"a/f.py", b"a/f.py").replace(b"b/f.py", b"b/g.py"),
    b"diff --git a/f.py b/g.py\nsimilarity index 100%\ncopy from f.py\ncopy to g.py\n",
], ids=["mode-only-755", "mode-only-644", "rename", "rename-755", "rename-index-755", "copy"])
def test_modes_of_headers_without_hunks_renames_and_copies(tmp_path, executable, patch):
    assert our_modes(executable, patch) == gnu_modes(tmp_path, executable, patch)


def test_a_context_diff_names_its_files_and_applies_as_gnu_patch_does(tmp_path):
    """``diff -c`` sections (``*** old`` / ``--- new``) through the tree applier, a new file included,
    against GNU patch on the same tree (the hunks themselves: test_differential's context test)."""
    old, new = tmp_path / "a", tmp_path / "b"
    (old / "src").mkdir(parents=True)
    (new / "src").mkdir(parents=True)
    (old / "src" / "f.c").write_bytes(b"".join(b"line %d\n" % i for i in range(20)))
    (new / "src" / "f.c").write_bytes(b"".join(b"line %d\n" % i for i in range(20)).replace(b"line 9\n", b"nine\n"))
    (new / "src" / "g.c").write_bytes(b"new file\n")
    patch = subprocess.run(["diff", "-Nrc", "a", "b"], cwd=tmp_path, capture_output=True).stdout
    assert patch.startswith(b"diff -Nrc") and b"***************" in patch
    view = DictView({"src/f.c": ("100644", (old / "src" / "f.c").read_bytes())})
    result = apply_to_tree(view, patch, source="ctx.patch", strip=1)
    assert result.ok, result.error
    work = tmp_path / "gnu"
    (work / "src").mkdir(parents=True)
    (work / "src" / "f.c").write_bytes((old / "src" / "f.c").read_bytes())
    proc = subprocess.run([GNU_PATCH, "-p1", "-f", "-F0", "-i", "-"], input=patch, cwd=work, capture_output=True)
    assert proc.returncode == 0, proc.stdout
    ours = {path: entry[1] for path, entry in ({**view.files, **result.changes}).items() if entry is not None}
    assert ours == {p.relative_to(work).as_posix(): p.read_bytes() for p in work.rglob("*") if p.is_file()}
