"""A pin's ``root`` is a folder inside what the pin names, and no string of a series holds a NUL.

`root: ../../` made a path pin read (and publish) the folders above the pinned one, `root: /etc` read
/etc, and a root through a symlink inside the folder read where it led; a NUL in a pin's path was a
ValueError traceback (exit 1)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from materialize.errors import SeriesError, UnsafePathError
from materialize.series import load_series
from materialize.store import Store
from materialize.upstream import resolve


def series(tmp_path: Path, pin: str) -> Path:
    (tmp_path / "up" / "t" / "sub").mkdir(parents=True, exist_ok=True)
    (tmp_path / "up" / "t" / "sub" / "a.txt").write_text("a\n")
    (tmp_path / "series").mkdir(exist_ok=True)
    path = tmp_path / "series" / "default.yaml"
    path.write_text(f"version: 1\ntargets:\n  t:\n    pin: {pin}\npatches: []\n")
    return path


@pytest.mark.parametrize("kind", ["path", "tarball", "git", "pypi"])
@pytest.mark.parametrize("root", ["../../", "/etc", "sub/../..", "..", "a\\x01b"])
def test_a_root_outside_the_pin_is_refused_with_file_and_line(tmp_path: Path, kind: str, root: str) -> None:
    fields = {"path": "path: ../up/t", "tarball": "path: ../up/t.tar.gz", "git": "url: ../up/t, rev: main",
              "pypi": f"requirement: x==1, file: x-1.tar.gz, sha256: {'0' * 64}"}[kind]
    path = series(tmp_path, f'{{kind: {kind}, {fields}, root: "{root}"}}')
    with pytest.raises(SeriesError, match=r"default.yaml:4: targets.t.pin.*root: root is a folder inside"):
        load_series(path)


def test_a_root_through_a_symlink_out_of_a_path_pin_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MATERIALIZE_CACHE", str(tmp_path / "cache"))
    path = series(tmp_path, "{kind: path, path: ../up/t, root: out}")
    os.symlink(tmp_path / "series", tmp_path / "up" / "t" / "out")
    spec = load_series(path)
    with pytest.raises(UnsafePathError, match="root 'out' leads out of it"):
        resolve(spec.targets["t"].pin, Store.open(), base_dir=path.parent, progress=False)
    inside = series(tmp_path, "{kind: path, path: ../up/t, root: sub}")
    assert resolve(load_series(inside).targets["t"].pin, Store.open(), base_dir=path.parent, progress=False).tree


def test_a_nul_in_a_pin_path_is_exit_2_naming_the_line(tmp_path: Path) -> None:
    path = series(tmp_path, '{kind: path, path: "../up/t\\x00"}')
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(path)], capture_output=True,
                          text=True, cwd=tmp_path, env={**os.environ, "MATERIALIZE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2, proc.stderr
    assert "default.yaml:4: targets.t.pin.path.path: String should not contain a NUL" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_path_pin_file_swapped_for_a_link_while_read_is_refused(tmp_path, monkeypatch):
    """The walk saw a regular file; if it is a symlink (to /etc/passwd) by the time it is opened, it is
    refused, not read through into the tree."""
    import importlib

    from materialize.series import PathPin

    resolve_module = importlib.import_module("materialize.upstream.resolve")
    up = tmp_path / "up"
    up.mkdir()
    (up / "a.txt").write_text("a\n")
    real_access = os.access

    def swap_then_access(path, mode, **where):  # noqa: ANN001, ANN202 - between the walk's stat and the open
        # the walk reads a file relative to its folder's descriptor (``dir_fd``)
        if str(path).endswith("a.txt") and not stat.S_ISLNK(os.lstat(path, **where).st_mode):
            os.unlink(path, **where)
            os.symlink("/etc/passwd", path, **where)
        return real_access(path, mode, **where)

    monkeypatch.setattr(resolve_module.os, "access", swap_then_access)
    with pytest.raises(UnsafePathError, match="became a symlink"):
        resolve(PathPin(kind="path", path=str(up)), Store.open(), base_dir=tmp_path)


@pytest.mark.parametrize("swapped", ["sub", "a"])
def test_a_path_pin_folder_swapped_for_a_link_while_read_is_refused(tmp_path, monkeypatch, swapped):
    """The file rule's sibling: a folder listed as a folder, then swapped for a link to a folder outside
    (itself, or one of its parents after that parent was read) before it is opened, had the outside
    folder's files read into the tree. Each folder is opened without following a link and must be the
    very folder (device, inode) its parent listed; its files are read relative to it."""
    import importlib

    from materialize.series import PathPin

    resolve_module = importlib.import_module("materialize.upstream.resolve")
    up, outside = tmp_path / "up", tmp_path / "outside"
    (up / "a" / "sub").mkdir(parents=True)
    (up / "a" / "sub" / "ok.txt").write_text("ok\n")
    (up / "a" / "keep.txt").write_text("keep\n")
    (outside / "sub").mkdir(parents=True)
    (outside / "secret.txt").write_text("SECRET\n")
    (outside / "sub" / "secret.txt").write_text("SECRET\n")
    target = up / "a" / "sub"
    done = []

    def swap(arg) -> None:  # noqa: ANN001 - between the parent's listing and this folder's opening
        if not done and isinstance(arg, (str, os.PathLike)) and str(arg).rstrip("/").endswith("a/sub"):
            done.append(True)
            victim = up / "a" / swapped if swapped == "sub" else up / "a"
            victim.rename(tmp_path / "moved")
            victim.symlink_to(outside if swapped == "a" else outside / "sub")

    real_scandir, real_open = os.scandir, os.open
    monkeypatch.setattr(resolve_module.os, "scandir", lambda arg=".": (swap(arg), real_scandir(arg))[1])
    monkeypatch.setattr(resolve_module.os, "open", lambda arg, *a, **k: (swap(arg), real_open(arg, *a, **k))[1])
    assert target.is_dir()
    with pytest.raises(UnsafePathError, match="(became a symlink|changed) while"):
        resolve(PathPin(kind="path", path=str(up)), Store.open(), base_dir=tmp_path)
    assert done



def _apply(path: Path, cwd: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(path), *extra],
                          capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={**os.environ, "MATERIALIZE_CACHE": str(path.parent.parent / "cache")})


def _files(tmp_path: Path) -> list[Path]:
    return sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if "cache" not in p.parts)


@pytest.mark.parametrize("out", ["up/t/out", "up/t", "up/t/sub/deeper/out", "cache/out", "cache/files/out",
                                 "default"])
def test_an_output_inside_a_path_pin_or_the_cache_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                                    out: str) -> None:
    """`--out` inside a path pin's folder published the output there, and the next run read it back as
    upstream: each run nested the previous output one level deeper (up/t/out/t/out/t/...). An output
    inside the cache (files/, store.git) was published among the entries gc prunes. Both refused, exit 2,
    naming both folders, and nothing is written; so is the default output of a run whose working
    folder is inside the pin (build/materialized below the pinned checkout)."""
    path = series(tmp_path, "{kind: path, path: ../up/t}")
    assert _apply(path, tmp_path).returncode == 0  # the cache exists
    before = _files(tmp_path)
    if out == "default":
        proc = _apply(path, tmp_path / "up" / "t" / "sub")
    else:
        proc = _apply(path, tmp_path, "--out", str(tmp_path / out))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "inside" in proc.stderr, proc.stderr
    assert _files(tmp_path) == before
    assert not (tmp_path / "cache" / "out").exists() and not (tmp_path / "cache" / "files" / "out").exists()
    assert _apply(path, tmp_path, "--out", str(tmp_path / "elsewhere")).returncode == 0
