"""A 100k-hunk patch: our parse + apply against GNU ``patch`` on the same file (issue 10 item 8).

Prints one table (ours, GNU, ratio) for wall time and peak memory, medians of several runs.
Usage: ``.venv/bin/python bench/bench_large_patch.py [--hunks N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OURS = """
import sys, time, resource
from materialize.patching.tree import apply_to_tree
class V:
    def __init__(self, d): self.d = d
    def get(self, p): return ("100644", self.d) if p == "big.txt" else None
    def is_dir(self, p): return False
data = open(sys.argv[1], "rb").read()
orig = open(sys.argv[2], "rb").read()
t = time.perf_counter()
r = apply_to_tree(V(orig), data, source="big.patch", strip=1)
assert r.ok, r.error
sys.stdout.write(f"{time.perf_counter() - t}\\n")
"""


def make(root: Path, hunks: int) -> tuple[Path, Path]:
    """A file of 10 lines per hunk and a patch changing the middle line of each block."""
    old = b"".join(b"line %d\n" % i for i in range(hunks * 10))
    new_lines = [b"line %d\n" % i if i % 10 != 5 else b"changed %d\n" % i for i in range(hunks * 10)]
    (root / "a").mkdir()
    (root / "b").mkdir()
    (root / "a" / "big.txt").write_bytes(old)
    (root / "b" / "big.txt").write_bytes(b"".join(new_lines))
    proc = subprocess.run(["diff", "-u", "a/big.txt", "b/big.txt"], cwd=root, capture_output=True)
    patch = root / "big.patch"
    patch.write_bytes(proc.stdout)
    return root / "a" / "big.txt", patch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hunks", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-large-") as tmp:
        root = Path(tmp)
        original, patch = make(root, args.hunks)
        print(f"patch: {patch.stat().st_size / 1e6:.1f} MB, {args.hunks} hunks")
        ours, gnu, ours_mem, gnu_mem = [], [], [], []
        for _ in range(args.runs):
            # Memory per process: run each side in its own child so ru_maxrss is that child's peak.
            w, m = _one([sys.executable, "-c", OURS, str(patch), str(original)])
            ours.append(w)
            ours_mem.append(m)
            work = root / "gnu"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            shutil.copy(original, work / "big.txt")
            w, m = _one(["patch", "-p1", "-F0", "--quiet", "-i", str(patch)], cwd=work)
            gnu.append(w)
            gnu_mem.append(m)
        rows = [
            ("time (s)", statistics.median(ours), statistics.median(gnu)),
            ("peak RSS (MB)", statistics.median(ours_mem), statistics.median(gnu_mem)),
        ]
        print(f"{'100k-hunk patch':<18}{'ours':>10}{'GNU patch':>12}{'ratio':>8}")
        for name, a, b in rows:
            print(f"{name:<18}{a:>10.2f}{b:>12.2f}{a / b:>7.1f}x")
    return 0


def _one(argv: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """Wall time and peak RSS of one child, measured through /usr/bin/time-free wait4."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{argv[0]} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1024


if __name__ == "__main__":
    raise SystemExit(main())
