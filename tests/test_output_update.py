"""An output that is already there is brought up to date in place (output._update_in_place): the
result must be exactly the fresh build's, only changed files may be linked again, anything done to
the output since it was published forces a fresh build, and an interrupted update puts the previous
output back."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from materialize.engine import materialize
from materialize.filecache import FileCache
from materialize.output import write_output
from materialize.series import load_series

BASE = {"pkg/stable.py": "S = 1\n", "pkg/mod.py": "X = 1\n", "pkg/other.py": "Y = 2\n", "bin/tool": "#!/bin/sh\n",
        "gone/only.py": "G = 1\n", "keep/a.py": "A = 1\n", "keep/b.py": "B = 1\n"}


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, permissions and content (or link target)."""
    found: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", st.st_mode & 0o7777)
            else:
                found[rel] = ("file", st.st_mode & 0o7777, path.read_bytes())
    return found


def inodes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): os.lstat(p).st_ino for p in root.rglob("*")}


@pytest.fixture
def series(builder):
    b = builder(BASE)
    (b.upstream / "empty" / "leaf").mkdir(parents=True)  # an upstream empty directory
    b.add_patch("0001-edit", {"pkg/mod.py": "X = 10\n"})
    b.add_patch("0002-move", {"gone/only.py": None, "new/deep/n.py": "N = 1\n", "bin/tool": "#!/bin/sh\necho\n"})
    b.add_patch("0003-more", {"keep/a.py": None, "keep/b.py": None, "pkg/other.py": "Y = 3\n",
                                 "empty/leaf/f.py": "F = 1\n"})
    return load_series(b.write())


@pytest.mark.parametrize("overlay", [False, True], ids=["full", "overlay"])
@pytest.mark.parametrize(("first", "then"), [(1, 3), (3, 1), (0, 3), (3, 0), (2, 3)])
def test_update_in_place_is_the_fresh_build(series, tmp_path, overlay, first, then):
    out = write_output(materialize(series, upto=first), tmp_path / "out", overlay=overlay)
    before, before_inodes = snapshot(out), inodes(out)
    write_output(materialize(series, upto=then), out, overlay=overlay)
    fresh = write_output(materialize(series, upto=then), tmp_path / "fresh", overlay=overlay)
    after = snapshot(out)
    assert after == snapshot(fresh)
    # Updated in place: the folders stay the same folders (a fresh build makes new ones).
    assert inodes(out)["plugin"] == before_inodes["plugin"]
    kept = [rel for rel, entry in before.items() if entry[0] == "dir" and after.get(rel) == entry]
    assert {rel: inodes(out)[rel] for rel in kept} == {rel: before_inodes[rel] for rel in kept}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".upd-", ".tmp-"))]


def _make_pycache(out: Path) -> None:
    (out / "plugin" / "pkg" / "__pycache__").mkdir()
    (out / "plugin" / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"stale")


def _write_through(out: Path) -> None:
    target = out / "plugin" / "keep" / "b.py"
    target.chmod(0o644)
    with open(target, "a") as handle:
        handle.write("TAMPERED = 1\n")


def _chmod(out: Path) -> None:
    (out / "plugin" / "bin" / "tool").chmod(0o755)


def _remove(out: Path) -> None:
    (out / "plugin" / "keep" / "b.py").unlink()


def _rename(out: Path) -> None:
    os.rename(out / "plugin" / "keep" / "b.py", out / "plugin" / "keep" / "c.py")


def _replace_file(out: Path) -> None:  # what an editor's "save" does: a new file renamed over the old
    path = out / "plugin" / "keep" / "b.py"
    path.with_suffix(".new").write_text("B = 99\n")
    os.replace(path.with_suffix(".new"), path)


def _edit_manifest(out: Path) -> None:
    path = out / "manifest.json"
    text = path.read_text()
    path.write_text(text.replace('"position": 1', '"position": 2'))


@pytest.mark.parametrize("tamper", [_make_pycache, _write_through, _chmod, _remove, _rename, _replace_file,
                                    _edit_manifest])
@pytest.mark.parametrize("then", [1, 3], ids=["same", "next"])
def test_anything_done_to_an_output_forces_a_fresh_build(series, tmp_path, tamper, then):
    out = write_output(materialize(series, upto=1), tmp_path / "out")
    folder = os.lstat(out / "plugin").st_ino
    tamper(out)
    write_output(materialize(series, upto=then), out)
    fresh = write_output(materialize(series, upto=then), tmp_path / "fresh")
    assert snapshot(out) == snapshot(fresh)
    assert os.lstat(out / "plugin").st_ino != folder  # built afresh, not patched up


def test_an_untouched_output_is_left_alone(series, tmp_path):
    out = write_output(materialize(series, upto=1), tmp_path / "out")
    folder = os.lstat(out / "plugin").st_ino
    write_output(materialize(series, upto=1), out)
    assert os.lstat(out / "plugin").st_ino == folder


def test_interrupted_update_puts_the_previous_output_back(series, tmp_path, monkeypatch):
    out = write_output(materialize(series, upto=1), tmp_path / "out")
    before = snapshot(out)
    real = FileCache.update_tree
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        real(self, *args, **kwargs)
        if len(calls) == 1:  # the forward step did its work, then Ctrl-C
            raise KeyboardInterrupt

    monkeypatch.setattr(FileCache, "update_tree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_output(materialize(series, upto=3), out)
    assert len(calls) == 2  # forward, then the undo
    assert snapshot(out) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".upd-")]
    monkeypatch.setattr(FileCache, "update_tree", real)
    write_output(materialize(series, upto=3), out)
    assert snapshot(out) == snapshot(write_output(materialize(series, upto=3), tmp_path / "fresh"))


KILLED_DURING_UPDATE = """
import os, sys
from pathlib import Path
from materialize.engine import materialize
from materialize.filecache import FileCache
from materialize.output import write_output
from materialize.series import load_series

real = FileCache.update_tree

def killed(self, *args, **kwargs):
    real(self, *args, **kwargs)
    os._exit(9)  # as SIGKILL: no undo, no cleanup

FileCache.update_tree = killed
write_output(materialize(load_series(sys.argv[1]), upto=3), Path(sys.argv[2]))
"""


def test_killed_update_leaves_no_half_output(series, tmp_path):
    """A run killed outright during an update leaves no output at the path (never a half-updated one
    with a manifest); the next run sweeps what it left and builds afresh."""
    out = write_output(materialize(series, upto=1), tmp_path / "out")
    child = subprocess.run([sys.executable, "-c", KILLED_DURING_UPDATE, str(series.path), str(out)])
    assert child.returncode == 9
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".upd-")]
    write_output(materialize(series, upto=3), out)
    assert snapshot(out) == snapshot(write_output(materialize(series, upto=3), tmp_path / "fresh"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".upd-")]
