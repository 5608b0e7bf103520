"""The one atomic write (materialize/atomic.py): every writer of a file someone may be reading goes
through it, and a failure leaves the old file and no temporary behind."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from materialize import atomic
from materialize.atomic import TMP_PREFIX, atomic_write


def test_a_write_replaces_the_file_and_a_symlink_is_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep")
    link = tmp_path / "d" / "f.txt"
    link.parent.mkdir()
    link.symlink_to(outside)
    atomic_write(link, b"new", durable=True)
    assert not link.is_symlink() and link.read_bytes() == b"new" and outside.read_bytes() == b"keep"
    assert oct(link.stat().st_mode & 0o777) == oct(0o644)
    atomic_write(link, b"#!/bin/sh\n", executable=True)
    assert link.stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("durable", [False, True])
def test_a_failed_write_keeps_the_old_file_names_it_and_leaves_no_temporary(tmp_path: Path, monkeypatch,
                                                                              durable: bool) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old")

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "replace", full)
    with pytest.raises(OSError, match="No space left on device") as caught:
        atomic_write(target, b"new", durable=durable)
    assert caught.value.filename == str(target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_every_writer_uses_the_one_atomic_write() -> None:
    """A second copy of the mechanism (bisect state, serve's units, the report page each had one) is
    where the next half-written file hides: no module but atomic.py makes its own temporary and renames."""
    root = Path(atomic.__file__).parent
    copies = [str(path.relative_to(root)) for path in root.rglob("*.py")
              if path.name != "atomic.py" and "def atomic_write" in path.read_text()
              or "def _write_atomic" in path.read_text()]
    assert copies == []
    assert TMP_PREFIX == ".materialize-tmp-"  # recover and the stray-file check know this name


def test_a_killed_writers_temporary_is_swept_by_the_next_write(tmp_path: Path) -> None:
    """kill -9 between the write and the rename leaves the temporary; the next write into that folder
    removes it (its process is gone), and keeps a live process's and any name that is not ours."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(dead.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        left = tmp_path / f"{TMP_PREFIX}{dead_pid}-0123456789ab"
        busy = tmp_path / f"{TMP_PREFIX}{live.pid}-0123456789ab"
        other = tmp_path / f"{TMP_PREFIX}notapid"
        for path in (left, busy, other):
            path.write_bytes(b"half")
        atomic_write(tmp_path / "series.yaml", b"new")
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([busy.name, other.name, "series.yaml"])
    finally:
        live.kill()
        live.wait()
