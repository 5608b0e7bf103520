"""Store and output costs, ours next to the reference, medians of several runs (issue 12 items 3 and 5).

  cold import   an upstream tarball into an empty store (one fast-import pack)  vs  ``tar -xf`` of it
  second output a full output of the shipped series when one already exists       vs  ``cp -al`` of it
  new disk      blocks the second output adds (``du`` counts shared inodes once)

Usage: ``python bench/bench_store.py [--tarball PATH] [--runs N]``. The tarball defaults to the glibc
source that ``make bench`` fetches with ``apt-get source``; the row is skipped when it is absent.
Prints one table: work, ours (wall, cpu), reference, ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GLIBC = Path.home() / ".cache/materialize-bench/debian/glibc/glibc_2.36.orig.tar.xz"
IMPORT = ("import sys; from pathlib import Path; from materialize.series import TarballPin;"
          "from materialize.store import Store; from materialize.upstream import resolve;"
          "resolve(TarballPin(kind='tarball', path=sys.argv[1]), Store.open(), base_dir=Path('.'))")


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall, cpu of the command and its children) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, **(env or {})}, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def du_kb(*paths: Path) -> int:
    """Blocks of ``paths`` together (``-c`` total): an inode linked from two of them counts once."""
    out = subprocess.run(["du", "-skc", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def cold_import(tarball: Path, runs: int, scratch: Path) -> tuple[list, list]:
    ours, ref = [], []
    for i in range(runs):
        cache = scratch / f"cache-{i}"
        ours.append(timed([sys.executable, "-c", IMPORT, str(tarball)], {"MATERIALIZE_CACHE": str(cache)}))
        shutil.rmtree(cache)
        dest = scratch / f"tar-{i}"
        dest.mkdir()
        ref.append(timed(["tar", "-xf", str(tarball), "-C", str(dest)]))
        shutil.rmtree(dest)
    return ours, ref


def second_output(runs: int, scratch: Path) -> tuple[list, list, int]:
    series = ROOT / "series" / "default.yaml"
    first = scratch / "out-first"
    apply = [sys.executable, "-m", "materialize", "apply", "--series", str(series), "--out"]
    subprocess.run([*apply, str(first)], check=True, capture_output=True)
    ours, ref, disk = [], [], 0
    for i in range(runs):
        out = scratch / f"out-{i}"
        ours.append(timed([*apply, str(out)]))
        disk = du_kb(first, out) - du_kb(first)
        shutil.rmtree(out)
        ref.append(timed(["cp", "-al", str(first), str(scratch / f"cpal-{i}")]))
        shutil.rmtree(scratch / f"cpal-{i}")
    return ours, ref, disk


def row(work: str, ours: list, ref: list, reference: str) -> str:
    wall = statistics.median(w for w, _c in ours)
    cpu = statistics.median(c for _w, c in ours)
    ref_wall = statistics.median(w for w, _c in ref)
    return f"| {work} | {wall:.2f} s (cpu {cpu:.2f} s) | {reference} {ref_wall:.2f} s | {wall / ref_wall:.2f}x |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tarball", type=Path, default=GLIBC)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("| work | ours | reference | ratio |\n| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
        scratch = Path(tmp)
        if args.tarball.is_file():
            ours, ref = cold_import(args.tarball, args.runs, scratch)
            print(row(f"cold import {args.tarball.name}", ours, ref, "tar -xf"))
        else:
            print(f"| cold import | skipped: {args.tarball} absent | | |")
        ours, ref, disk = second_output(args.runs, scratch)
        print(row("second full output, shipped series", ours, ref, "cp -al"))
        print(f"| new disk of that output | {disk / 1024:.1f} MB (directories only; files are links) | | target <= 10 MB |")
    print(f"\nload average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
