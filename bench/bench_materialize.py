"""Materialize speed, the rows of the speed issue: start-up (`--help`), Debian's glibc quilt series
(cold, re-applied, last patch edited, full outputs, `status`, the workspace commands), one patch of
100k hunks, and the shipped series, each beside its reference tool (quilt, GNU patch, tar) with the
issue's target. Every row goes into `make bench`'s one summary table (run_all.py).

Same work for every tool; ours runs as the real CLI, so Python start-up is included; the reference
tools run on a fresh copy of the unpacked tree (the copy is not timed).

    .venv/bin/python bench/bench_materialize.py [--runs 5] [--cold-runs 3] [--skip-glibc] [--skip-shipped]
    .venv/bin/python bench/bench_materialize.py --only-status [--runs 5]               # the `status` rows
    .venv/bin/python bench/bench_materialize.py --generated [--sizes 1000,10000,50000]   # synthetic tables
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_glibc_rows import (  # noqa: E402
    MAT,
    drop_prefix_cache,
    glibc_rows,
    glibc_status_rows,
    hunks_row,
    startup_rows,
)
from common import Timing, compile_package, measure, record  # noqa: E402

from materialize.engine import materialize  # noqa: E402
from materialize.series import load_series  # noqa: E402
from materialize.store import Store  # noqa: E402

console = Console(width=200)


def file_text(rng: random.Random, n_lines: int) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    return [f"{rng.choice(words)}_{i} = {rng.randint(0, 999)}\n" for i in range(n_lines)]


def generate_tree(root: Path, n_files: int, seed: int = 1) -> dict[str, list[str]]:
    rng = random.Random(seed)
    files: dict[str, list[str]] = {}
    for i in range(n_files):
        rel = f"src/d{i // 100:04d}/f{i % 100:03d}.py"
        files[rel] = file_text(rng, 40)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(files[rel]))
    return files


def generate_patches(files: dict[str, list[str]], patches_dir: Path, n_patches: int, files_per_patch: int,
                     touch_pool: int, seed: int = 2) -> list[str]:
    """A series whose patches each edit ``files_per_patch`` files among the first ``touch_pool``."""
    rng = random.Random(seed)
    state = {k: list(v) for k, v in files.items()}
    pool = sorted(files)[:touch_pool]
    names = []
    patches_dir.mkdir(parents=True, exist_ok=True)
    for p in range(n_patches):
        chunks = [f"Subject: generated patch {p}\n\n"]
        for rel in sorted(rng.sample(pool, files_per_patch)):
            old = state[rel]
            new = list(old)
            for _ in range(2):
                at = rng.randrange(len(new))
                new[at] = f"patched_{p}_{at} = {rng.randint(0, 999)}\n"
            chunks.append(f"diff -u a/{rel} b/{rel}\n")
            chunks.extend(difflib.unified_diff(old, new, f"a/{rel}", f"b/{rel}", n=3))
            state[rel] = new
        name = f"{p + 1:04d}-gen.patch"
        (patches_dir / name).write_text("".join(chunks))
        names.append(name)
    (patches_dir / "series").write_text("".join(n + "\n" for n in names))
    return names


def write_series(project: Path, tarball: Path, names: list[str]) -> Path:
    lines = ["version: 1", "patches_dir: patches", "targets:", "  plugin:",
             f"    pin: {{kind: tarball, path: {tarball}}}", "patches:"]
    lines += [f"  - {{patch: {n}, target: plugin}}" for n in names]
    series = project / "series.yaml"
    series.write_text("\n".join(lines) + "\n")
    return series


class Workload:
    """A tree + series on disk, plus fresh copies for the reference tools."""

    def __init__(self, root: Path, n_files: int, n_patches: int, files_per_patch: int, touch_pool: int) -> None:
        self.root = root
        self.upstream = root / "upstream" / "proj"
        files = generate_tree(self.upstream, n_files)
        self.patches = root / "project" / "patches"
        self.names = generate_patches(files, self.patches, n_patches, files_per_patch, touch_pool)
        self.tarball = root / "proj.tar.gz"
        with tarfile.open(self.tarball, "w:gz", compresslevel=1) as tar:
            tar.add(self.upstream, arcname="proj")
        self.series = write_series(root / "project", self.tarball, self.names)
        self.cache = root / "cache"
        self.env = {"MATERIALIZE_CACHE": str(self.cache), "PYTHONDONTWRITEBYTECODE": "1"}
        self.scratch = root / "scratch"

    def fresh_copy(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.copytree(self.upstream, self.scratch, symlinks=True)
        shutil.copytree(self.patches, self.scratch / "patches")

    def ours(self) -> list[str]:
        return [MAT, "apply", "--series", str(self.series), "--overlay", "--out", str(self.root / "out")]


def bench_workload(w: Workload, runs: int, *, reference: bool = True) -> dict[str, Timing]:
    # Import the upstream once (the cold target assumes a cached upstream).
    subprocess.run(w.ours(), env={**os.environ, **w.env}, check=True, capture_output=True)
    results = {"ours cold": measure(runs, w.ours, prepare=lambda: drop_prefix_cache(w.cache), env=w.env)}
    last = w.patches / w.names[-1]
    original = last.read_bytes()
    counter = iter(range(10**6))

    def edit_last() -> None:
        last.write_bytes(original.replace(b"Subject: generated", f"Subject: edit {next(counter)}".encode(), 1))

    results["ours edit-last"] = measure(runs, w.ours, prepare=edit_last, env=w.env)
    results["engine only, cold"] = engine_in_process(w, runs, prepare=lambda: drop_prefix_cache(w.cache))
    results["engine only, edit-last"] = engine_in_process(w, runs, prepare=edit_last)
    last.write_bytes(original)
    if reference:
        quilt_env = {"QUILT_PATCHES": "patches", "QUILTRC": "/dev/null"}
        results["quilt push -a"] = measure(runs, lambda: ["quilt", "push", "-a", "-q"], prepare=w.fresh_copy,
                                           cwd=lambda: w.scratch, env=quilt_env)
        script = ";".join(f"patch -s -p1 -F0 -i patches/{n} || exit 1" for n in w.names)
        results["patch loop"] = measure(runs, lambda: ["sh", "-c", script], prepare=w.fresh_copy,
                                        cwd=lambda: w.scratch)
        script = ";".join(f"git apply -p1 patches/{n} || exit 1" for n in w.names)
        results["git apply loop"] = measure(runs, lambda: ["sh", "-c", script], prepare=w.fresh_copy,
                                            cwd=lambda: w.scratch)
    return results


def engine_in_process(w: Workload, runs: int, prepare) -> Timing:
    """The apply work alone (no interpreter start-up, no output written): what the prefix cache saves."""
    os.environ["MATERIALIZE_CACHE"] = str(w.cache)
    seconds = []
    for _ in range(runs):
        prepare()
        start = time.perf_counter()
        materialize(load_series(w.series), store=Store.open(w.cache))
        seconds.append(time.perf_counter() - start)
    return Timing(seconds, float("nan"))


def table(title: str, results: dict[str, Timing], baseline: str) -> Table:
    t = Table(title=title)
    for col in ("tool", "median (min-max)", f"ratio vs {baseline}", "peak RSS MiB"):
        t.add_column(col)
    base = results[baseline].median
    for name, timing in results.items():
        t.add_row(name, timing.cell(), f"{timing.median / base:.2f}", f"{timing.peak_rss_mib:.0f}")
    return t


def generated_tables(args: argparse.Namespace, root: Path) -> None:
    """The synthetic workloads: a 120-patch series on a 20k-file tree, and scaling in tree size."""
    # 120 patches x 13 files = ~1,500 file edits on a 20k-file tree.
    w = Workload(root / "main", args.files, args.patches, 13, 1500)
    results = bench_workload(w, args.runs)
    console.print(table(f"generated series: {args.patches} patches, ~{args.patches * 13} file edits, "
                        f"{args.files} files (median of {args.runs})", results, "quilt push -a"))
    cold = results["ours cold"].median
    console.print(f"edit-last / cold through the CLI = {results['ours edit-last'].median / cold:.1%}; "
                  f"engine only = {results['engine only, edit-last'].median / results['engine only, cold'].median:.1%}")
    scaling: dict[str, Timing] = {}
    for size in [int(s) for s in args.sizes.split(",") if s]:
        ws = Workload(root / f"scale-{size}", size, 100, 10, 1000)
        r = bench_workload(ws, max(3, args.runs // 2), reference=True)
        scaling[f"ours cold, {size} files"] = r["ours cold"]
        scaling[f"quilt push -a, {size} files"] = r["quilt push -a"]
        shutil.rmtree(ws.root)
    if scaling:
        console.print(table("scaling in tree size: 100 patches x 10 files (same patches, bigger tree)",
                            scaling, next(iter(scaling))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cold-runs", type=int, default=3, help="runs of the slow cold glibc rows")
    parser.add_argument("--skip-glibc", action="store_true", help="skip Debian's glibc series (apt-get source)")
    parser.add_argument("--skip-shipped", action="store_true", help="skip the shipped series on the real pins")
    parser.add_argument("--skip-hunks", action="store_true", help="skip the 100k-hunk patch")
    parser.add_argument("--skip-startup", action="store_true", help="skip the --help rows")
    parser.add_argument("--only-status", action="store_true",
                        help="only the `status` rows (glibc and shipped; their setup is not timed)")
    parser.add_argument("--generated", action="store_true", help="only the synthetic tables below")
    parser.add_argument("--files", type=int, default=20000, help="tree size of the main generated workload")
    parser.add_argument("--patches", type=int, default=120)
    parser.add_argument("--sizes", default="1000,10000,50000", help="tree sizes for the scaling table")
    args = parser.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory(prefix="bench-materialize-") as tmp:
        root = Path(tmp)
        if args.generated:
            generated_tables(args, root)
            return 0
        if args.only_status:
            from bench_shipped import shipped_rows

            glibc_status_rows(root / "glibc", args.runs)
            record(shipped_rows(root / "shipped", args.runs, only_status=True))
            return 0
        if not args.skip_startup:
            rows, note = startup_rows(max(args.runs, 5))
            record(rows)
            print(note, flush=True)
        if not args.skip_glibc:
            glibc_rows(root / "glibc", args.runs, args.cold_runs)  # records each row as it is measured
            shutil.rmtree(root / "glibc", ignore_errors=True)
        if not args.skip_hunks:
            record(hunks_row(root / "hunks", max(3, args.runs // 2)))
        if not args.skip_shipped:
            from bench_shipped import shipped_rows

            record(shipped_rows(root / "shipped", args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
