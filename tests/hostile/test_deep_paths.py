"""Names no file system holds and trees deeper than Python's recursion limit, through the real CLI.

A patch creating a path longer than PATH_MAX failed while publishing, and removing the half-built
folder then ended in a RecursionError traceback (shutil.rmtree recurses once per level): the leftover
stayed beside the output and every later run to that --out died in the same traceback. A legal tree
1,500 folders deep (3 KB of path) published fine, but `gc` and a fresh publish over it could not
remove it (RecursionError)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def project(tmp_path: Path, patch: str) -> Path:
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "a.txt").write_text("a\n")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "p.patch").write_text(patch)
    (tmp_path / "series").mkdir()
    path = tmp_path / "series" / "s.yaml"
    path.write_text("version: 1\ntargets:\n  t:\n    pin: {kind: path, path: ../up}\n"
                    "patches:\n  - {patch: p.patch, target: t}\n")
    return path


def creating(name: str) -> str:
    return f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+x\n"


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**os.environ, "MATERIALIZE_CACHE": str(tmp_path / "cache")})


@pytest.mark.parametrize(("name", "says"), [
    ("/".join(["d"] * 3000) + "/f", "path longer than 4095 bytes"),
    ("sub/" + "x" * 256, "a path component of 256 bytes (more than 255)"),
])
def test_a_patched_name_no_file_system_holds_is_exit_4_naming_the_patch(deep_tmp: Path, name: str,
                                                                        says: str) -> None:
    tmp_path = deep_tmp
    series = project(tmp_path, creating(name))
    proc = cli(tmp_path, "apply", "--series", str(series), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr and "p.patch:" in proc.stderr and says in proc.stderr, proc.stderr
    assert len(proc.stderr) < 600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "patches", "series", "up"]  # nothing left


@pytest.fixture
def deep_tmp(tmp_path: Path):
    """``tmp_path``, emptied with ``rm -rf`` after the test: pytest's own sweep of old temporary folders
    is ``shutil.rmtree`` and would die of the same RecursionError in a later session."""
    yield tmp_path
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=True)


def test_a_tree_deeper_than_the_recursion_limit_is_published_replaced_and_collected(deep_tmp: Path) -> None:
    tmp_path = deep_tmp
    deep = "/".join(["d"] * 1500)
    series = project(tmp_path, creating(deep + "/f"))
    out = tmp_path / "out"
    assert cli(tmp_path, "apply", "--series", str(series), "--out", str(out)).returncode == 0
    assert cli(tmp_path, "apply", "--series", str(series)).returncode == 0  # build/materialized/<id>
    (out / "t" / "added").write_text("x")  # touched: the next publish rebuilds it whole, removing the old
    (tmp_path / "patches" / "p.patch").write_text(creating(deep + "/g"))
    for args in (("apply", "--series", str(series), "--out", str(out)), ("apply", "--series", str(series)),
                 ("gc", "--keep", "0")):
        proc = cli(tmp_path, *args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
    assert (out / "t" / deep / "g").is_file() and not (out / "t" / deep / "f").exists()
    assert [p.name for p in (tmp_path / "build" / "materialized").iterdir() if p.name not in ("latest", ".materialize-output.lock")] == [
        os.readlink(tmp_path / "build" / "materialized" / "latest")]
    # The replaced output is removed by a background ``rm -rf`` that outlives the command (output._discard):
    # on a loaded machine it may still be running here. It must finish, not be left: wait for it, bounded.
    deadline = time.monotonic() + 120
    while (left := [p.name for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".old-", ".upd-"))]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
