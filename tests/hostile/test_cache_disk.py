"""A cache that cannot be written: a full disk (ENOSPC) or a read-only filesystem (EROFS) is one line
with exit 1, naming the cache, and leaves no half-written object behind. Real filesystems: a tiny
tmpfs in a private mount namespace (skipped where ``unshare -m`` is not allowed)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest


def namespaces_allowed() -> bool:
    try:
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(not namespaces_allowed(), reason="needs unshare -m (mount namespaces)")


def in_namespace(cache: Path, script: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``script`` with a 1 MB tmpfs mounted at ``cache``, visible to this command only."""
    setup = f"mount -t tmpfs -o size=1m none {shlex.quote(str(cache))} && "
    return subprocess.run(["unshare", "-m", "sh", "-c", setup + script], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "MATERIALIZE_CACHE": str(cache)}, timeout=300)


def apply_cmd(series: Path, out: Path) -> str:
    return shlex.join([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--out", str(out)])


def leftovers(cache: Path) -> str:
    return f"find {shlex.quote(str(cache))} -name 'tmp_obj_*' -o -name '.tmp-*' -o -name 'tmp_pack_*'"


def test_full_cache_disk_is_one_line_and_leaves_nothing(builder, tmp_path):
    b = builder({"big.bin": os.urandom(3 << 20), "a.txt": "a\n"})  # incompressible: cannot fit in 1 MB
    series = b.write()
    cache = tmp_path / "cache"
    cache.mkdir()
    proc = in_namespace(cache, apply_cmd(series, tmp_path / "out") + "; echo rc=$?; " + leftovers(cache), tmp_path)
    assert "rc=1" in proc.stdout, proc.stdout + proc.stderr
    assert "cannot write the materialize cache" in proc.stderr and "No space left" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip().endswith("rc=1"), f"half-written files left: {proc.stdout}"


def test_read_only_cache_is_one_line(builder, tmp_path):
    b = builder({"a.txt": "a\n"})
    series = b.write()
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.txt").write_text("new content the store has not seen\n")
    series2 = tmp_path / "series2.yaml"
    series2.write_text(series.read_text().replace("path: upstream", f"path: {other}"))
    cache = tmp_path / "cache"
    cache.mkdir()
    script = (apply_cmd(series, tmp_path / "out1") + " >/dev/null && mount -o remount,ro " + shlex.quote(str(cache))
              + " && " + apply_cmd(series2, tmp_path / "out2") + "; echo rc=$?")
    proc = in_namespace(cache, script, tmp_path)
    assert proc.stdout.strip().endswith("rc=1"), proc.stdout + proc.stderr
    assert "cannot write the materialize cache" in proc.stderr and "Read-only file system" in proc.stderr
    assert "Traceback" not in proc.stderr
