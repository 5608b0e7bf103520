"""A 100k-hunk patch: our parse + apply against GNU ``patch`` on the same file (issue 10 item 8,
issue 12 item 6).

Prints one table (ours, GNU, ratio) for wall time, CPU time and peak memory, medians of several
runs. Ours is ``apply_to_tree`` in a child process (its wall and CPU time cover parsing and applying
only, not start-up); GNU's is the whole ``patch -p1 -F0`` process. Wall time on a shared machine
follows the load, CPU time much less. Peak memory is shown raw and above each side's start-up
floor (ours: the interpreter with the applier imported; GNU: ``patch --version``).
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
t, c = time.perf_counter(), time.process_time()
r = apply_to_tree(V(orig), data, source="big.patch", strip=1)
assert r.ok, r.error
sys.stdout.write(f"{time.perf_counter() - t} {time.process_time() - c}\\n")
"""
FLOOR = "import materialize.patching.tree"


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
        ours, gnu, ours_cpu, gnu_cpu, ours_mem, gnu_mem = [], [], [], [], [], []
        for _ in range(args.runs):
            # Memory per process: run each side in its own child so ru_maxrss is that child's peak.
            out, _cpu, m = _one([sys.executable, "-c", OURS, str(patch), str(original)])
            wall, cpu = map(float, out.split())
            ours.append(wall)
            ours_cpu.append(cpu)
            ours_mem.append(m)
            work = root / "gnu"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            shutil.copy(original, work / "big.txt")
            start = time.perf_counter()
            _out, cpu, m = _one(["patch", "-p1", "-F0", "--quiet", "-i", str(patch)], cwd=work)
            gnu.append(time.perf_counter() - start)
            gnu_cpu.append(cpu)
            gnu_mem.append(m)
        ours_floor = _one([sys.executable, "-c", FLOOR])[2]
        gnu_floor = _one(["patch", "--version"])[2]
        rows = [
            ("time (s)", statistics.median(ours), statistics.median(gnu)),
            ("CPU (s)", statistics.median(ours_cpu), statistics.median(gnu_cpu)),
            ("peak RSS (MiB)", statistics.median(ours_mem), statistics.median(gnu_mem)),
            ("RSS over floor", statistics.median(ours_mem) - ours_floor, statistics.median(gnu_mem) - gnu_floor),
        ]
        print(f"{'100k-hunk patch':<18}{'ours':>10}{'GNU patch':>12}{'ratio':>8}")
        for name, a, b in rows:
            print(f"{name:<18}{a:>10.2f}{b:>12.2f}{a / b:>7.1f}x")
        print(f"(start-up floor: ours {ours_floor:.1f} MiB, GNU {gnu_floor:.1f} MiB)")
    return 0


def _one(argv: list[str], cwd: Path | None = None) -> tuple[str, float, float]:
    """Stdout, CPU time (user + system) and peak RSS (MiB) of one child, as /usr/bin/time reports them.

    Not through our own wait4: Python spawns with vfork, and a child's ru_maxrss then starts from
    this process's high-water mark (the generated 1M-line file), which made GNU look like 166 MiB.
    """
    with tempfile.NamedTemporaryFile(prefix="bench-rss-") as report:
        proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", report.name, *argv], cwd=cwd,
                              capture_output=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        if proc.returncode != 0:
            raise SystemExit(f"{argv[0]} failed: {proc.stderr.decode(errors='replace')}")
        kib, user, system = (float(v) for v in Path(report.name).read_text().split()[-3:])
    return proc.stdout.decode(), user + system, kib / 1024


if __name__ == "__main__":
    raise SystemExit(main())
