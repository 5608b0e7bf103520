"""Empty directories of an upstream survive into full outputs, as ``tar -x`` + GNU ``patch`` leave them.

git trees cannot hold an empty directory, so the import records them beside the tree and the output
recreates them; a directory that GNU patch removes (it deletes a file's parents while they are empty)
must be gone from ours too. GNU patch on the extracted upstream is the oracle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is the oracle")

EMPTY = ["keep", "a/e", "gone", "filled", "nested/x/y", "twice/inner"]
PATCHES = {
    "0001-add.patch": (
        "--- /dev/null\n+++ b/gone/new.txt\n@@ -0,0 +1 @@\n+new\n"
        "--- /dev/null\n+++ b/filled/new.txt\n@@ -0,0 +1 @@\n+kept\n"
        "--- /dev/null\n+++ b/twice/inner/deep/t.txt\n@@ -0,0 +1 @@\n+t\n"
    ),
    "0002-delete.patch": (
        "--- a/gone/new.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-new\n"
        "--- a/twice/inner/deep/t.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-t\n"
    ),
}


def make_upstream(root: Path) -> Path:
    top = root / "up" / "proj-1"
    (top / "src").mkdir(parents=True)
    (top / "src" / "f.txt").write_text("f\n")
    for directory in EMPTY:
        (top / directory).mkdir(parents=True)
    return top


def archive(root: Path, top: Path, kind: str) -> Path:
    if kind == "tarball":
        path = root / "proj-1.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            tar.add(top, arcname="proj-1")
        return path
    path = root / "proj-1.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for dirpath, dirnames, filenames in os.walk(top):
            rel = Path("proj-1") / Path(dirpath).relative_to(top)
            zf.write(dirpath, rel.as_posix() + "/")
            for name in filenames:
                zf.write(Path(dirpath) / name, (rel / name).as_posix())
            dirnames.sort()
    return path


def dirs_and_files(root: Path) -> tuple[set[str], set[str]]:
    dirs, files = set(), set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        dirs.update((rel / d).as_posix() for d in dirnames)
        files.update((rel / f).as_posix() for f in filenames)
    return dirs, files


def gnu_patch(top: Path, work: Path) -> Path:
    shutil.copytree(top, work, symlinks=True)
    for text in PATCHES.values():
        subprocess.run(["patch", "-p1", "-s", "-F0"], input=text.encode(), cwd=work, check=True)
    return work


@pytest.mark.parametrize("kind", ["tarball", "zip", "path"])
def test_full_output_keeps_the_upstream_empty_directories_like_gnu_patch(tmp_path, kind):
    top = make_upstream(tmp_path)
    pin = {"kind": "path", "path": str(top)} if kind == "path" else {"kind": "tarball", "path": str(archive(tmp_path, top, kind))}
    (tmp_path / "patches").mkdir()
    for name, text in PATCHES.items():
        (tmp_path / "patches" / name).write_text(text)
    series = tmp_path / "series.yaml"
    series.write_text(json.dumps({"version": 1, "patches_dir": "patches", "targets": {"proj": {"pin": pin}},
                                  "patches": [{"patch": name, "target": "proj"} for name in PATCHES]}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    expected = dirs_and_files(gnu_patch(top, tmp_path / "gnu"))
    assert dirs_and_files(out / "proj") == expected
    assert "gone" not in expected[0] and "keep" in expected[0]  # the oracle really removes and keeps
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["targets"]["proj"]["empty_dirs"] == ["a/e", "filled", "keep", "nested/x/y"]
    # Up to patch 1 only: "gone" received a file and is not empty; "twice/inner" holds deep/t.txt.
    partial = tmp_path / "out1"
    subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--upto", "1",
                    "--out", str(partial)], check=True, capture_output=True)
    assert (partial / "proj" / "gone" / "new.txt").is_file()
    assert (partial / "proj" / "keep").is_dir()


@pytest.mark.parametrize("occupied", [False, True])
def test_a_file_cannot_replace_a_directory(tmp_path, occupied):
    """GNU patch: "File nested/x is not a regular file -- refusing to patch", exit 1, the directory
    stays. Before, an empty directory was unknown to the applier and a full one was silently replaced
    by the file (its contents dropped from the output)."""
    top = make_upstream(tmp_path)
    if occupied:
        (top / "nested" / "x" / "y" / "kept.txt").write_text("kept\n")
    path = archive(tmp_path, top, "tarball")
    text = "--- /dev/null\n+++ b/nested/x\n@@ -0,0 +1 @@\n+file\n"
    gnu = subprocess.run(["patch", "-p1", "-s", "-F0", "--dry-run"], input=text.encode(), cwd=top, capture_output=True)
    assert gnu.returncode == 1 and b"not a regular file" in gnu.stdout + gnu.stderr
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "0001.patch").write_text(text)
    series = tmp_path / "series.yaml"
    series.write_text(json.dumps({"version": 1, "patches_dir": "patches",
                                  "targets": {"proj": {"pin": {"kind": "tarball", "path": str(path)}}},
                                  "patches": [{"patch": "0001.patch", "target": "proj"}]}))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nested/x: File nested/x is not a regular file -- refusing to patch" in proc.stderr
    assert not out.exists()
