"""Symlink targets no file system can hold: an empty target or one holding a NUL is refused at import
(exit 4, naming the member) by the one link check every pin kind goes through, so nothing is cached;
a path pin's link whose target is not UTF-8 is judged like any other."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from materialize.errors import UnsafePathError
from materialize.series import GitPin, PathPin, TarballPin
from materialize.store import Store
from materialize.upstream import resolve

BAD_TARGETS = [b"f\0x", b""]


def _zip_with_link(path: Path, target: bytes) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("p/f", b"x")
        info = zipfile.ZipInfo("p/l")
        info.external_attr, info.create_system = (stat.S_IFLNK | 0o777) << 16, 3
        zf.writestr(info, target)
    return path


def _series(tmp_path: Path, archive: Path) -> Path:
    doc = {"version": 1, "targets": {"t": {"pin": {"kind": "tarball", "path": str(archive)}}}, "patches": []}
    path = tmp_path / "series.yaml"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_a_zip_link_with_an_empty_or_nul_target_is_refused_and_not_cached(tmp_path, target):
    archive = _zip_with_link(tmp_path / "l.zip", target)
    store = Store.open()
    with pytest.raises(UnsafePathError, match=r"l\.zip.*symlink p/l .*empty or NUL"):
        resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert store.read_refs("refs/materialize/pins/") == {}


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_the_cli_says_one_line_exit_4(tmp_path, target):
    archive = _zip_with_link(tmp_path / "l.zip", target)
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(_series(tmp_path, archive)),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "l.zip" in lines[0] and "p/l" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("target", ["f\0x", ""])
def test_a_tar_link_with_an_empty_or_nul_pax_linkpath_is_refused(tmp_path, target):
    archive = tmp_path / "l.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("p/f")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
        link = tarfile.TarInfo("p/l")
        link.type = tarfile.SYMTYPE
        link.pax_headers = {"linkpath": target}
        tar.addfile(link)
    store = Store.open()
    with pytest.raises(UnsafePathError, match=r"l\.tar\.gz.*symlink p/l .*empty or NUL"):
        resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert store.read_refs("refs/materialize/pins/") == {}


@pytest.mark.parametrize("target", BAD_TARGETS)
def test_a_git_link_blob_with_an_empty_or_nul_target_is_refused(tmp_path, target):
    repo = tmp_path / "up"
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}

    def git(*args: str, data: bytes | None = None) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True, check=True,
                              env=env).stdout.decode().strip()

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "f").write_text("x\n")
    git("add", "pkg/f")
    blob = git("hash-object", "-w", "--stdin", data=target)
    git("update-index", "--add", "--cacheinfo", f"120000,{blob},pkg/l")
    git("commit", "-q", "-m", "bad link")
    sha = git("rev-parse", "HEAD")
    store = Store.open()
    with pytest.raises(UnsafePathError, match=r"git pin .*symlink l .*empty or NUL") as info:
        resolve(GitPin(kind="git", url="up", rev=sha, root="pkg"), store, base_dir=tmp_path)
    assert info.value.exit_code == 4
    assert store.read_refs("refs/materialize/tree-ok/") == {}


def test_a_path_pin_link_whose_target_is_not_utf8_is_kept_byte_for_byte(tmp_path):
    """Names are bytes (surrogateescape); so are link targets: it crashed with UnicodeEncodeError."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("x\n")
    os.symlink(b"sub/\xff", os.fsencode(src / "link"))
    store = Store.open()
    pinned = resolve(PathPin(kind="path", path="src"), store, base_dir=tmp_path)
    assert store.read_blob(pinned.tree, "link") == b"sub/\xff"
    doc = {"version": 1, "targets": {"t": {"pin": {"kind": "path", "path": str(src)}}}, "patches": []}
    (tmp_path / "s.yaml").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(tmp_path / "s.yaml"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(os.fsencode(tmp_path / "out" / "t" / "link")) == b"sub/\xff"


def test_a_path_pin_link_out_whose_target_is_not_utf8_is_refused(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("x\n")
    os.symlink(b"../\xff", os.fsencode(src / "link"))
    with pytest.raises(UnsafePathError, match="points outside"):
        resolve(PathPin(kind="path", path="src"), Store.open(), base_dir=tmp_path)
