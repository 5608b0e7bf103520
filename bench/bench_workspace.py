"""Workspace speed: push/pop/refresh on a large generated series, rebase of a generated series onto a
moved upstream, and rebase of the shipped series (plus a generated series on real vllm releases).

Every command runs as the real CLI (``python -m materialize.workspace.cli``, Python start-up included),
median of --runs runs with the spread. A throw-away MATERIALIZE_CACHE is used; upstream imports are
warmed before timing (the rebase target: "cost of carrying the series", not of downloading).

    .venv/bin/python bench/bench_workspace.py [--runs 3] [--files 2000] [--patches 200] [--skip-real]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Timing, measure  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from materialize.workspace.diffgen import FileChange, regenerate  # noqa: E402

PY = str(REPO / ".venv" / "bin" / "python")
console = Console(width=200)
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


def cli(project: Path, *args: str) -> list[str]:
    return [PY, "-m", "materialize.workspace.cli", *args, "--series", str(project / "series" / "default.yaml")]


def generate(project: Path, n_files: int, n_patches: int, seed: int = 7) -> dict[str, list[str]]:
    """An upstream of ``n_files`` 120-line modules and ``n_patches`` patches of 3 files x 2 hunks each."""
    rng = random.Random(seed)
    up = project / "upstream" / "tt-metal"
    files: dict[str, list[str]] = {}
    for i in range(n_files):
        rel = f"models/d{i // 100:03d}/m{i % 100:03d}.py"
        lines = [f"def {rng.choice(WORDS)}_{k}():\n" if k % 10 == 0 else f"    x_{k} = {rng.randint(0, 999)}\n"
                 for k in range(120)]
        files[rel] = lines
        (up / rel).parent.mkdir(parents=True, exist_ok=True)
        (up / rel).write_text("".join(lines))
    current = {k: list(v) for k, v in files.items()}
    names = sorted(files)
    entries = []
    (project / "patches" / "tt-metal").mkdir(parents=True)
    for p in range(n_patches):
        changes = []
        for rel in rng.sample(names, 3):
            base = "".join(current[rel]).encode()
            for line in (rng.randrange(5, 50), rng.randrange(70, 115)):
                current[rel][line] = current[rel][line].rstrip("\n") + f"  # patch {p}\n"
            changes.append(FileChange(rel, base, "".join(current[rel]).encode()))
        name = f"{p + 1:04d}-generated"
        header = f"From: Bench <bench@localhost>\nDate: Mon, 21 Sep 2026 10:00:00 +0000\nSubject: {name}\n\n"
        (project / "patches" / "tt-metal" / f"{name}.patch").write_bytes(regenerate(None, changes, header=header.encode()))
        entries.append(f"  - patch: tt-metal/{name}.patch\n    target: tt-metal\n")
    (project / "series").mkdir()
    (project / "series" / "default.yaml").write_text(
        "version: 1\npatches_dir: ../patches\ntargets:\n  tt-metal:\n    pin:\n      kind: path\n"
        "      path: ../upstream/tt-metal\npatches:\n" + "".join(entries))
    return current


def moved_upstream(project: Path, share: float, seed: int = 9) -> Path:
    """A v2 upstream: ``share`` of the modules get 5 new lines at the top (offsets for their patches)."""
    rng = random.Random(seed)
    v2 = project.parent / "v2"
    shutil.copytree(project / "upstream" / "tt-metal", v2)
    for path in sorted(v2.rglob("*.py")):
        if rng.random() < share:
            path.write_text("# v2\n" * 5 + path.read_text())
    return v2


def run_cli(argv: list[str]) -> None:
    import subprocess

    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def generated_rows(runs: int, n_files: int, n_patches: int) -> list[tuple[str, Timing]]:
    rows: list[tuple[str, Timing]] = []
    root = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    try:
        os.environ["MATERIALIZE_CACHE"] = str(root / "cache")
        project = root / "proj"
        generate(project, n_files, n_patches)
        run_cli(cli(project, "push", "-a"))  # warm: upstream import and every prefix cached
        run_cli(cli(project, "goto", "0"))
        rows.append((f"push -a ({n_patches} patches, prefixes cached)", measure(
            runs, lambda: cli(project, "push", "-a"), prepare=lambda: run_cli(cli(project, "goto", "0")))))
        rows.append((f"pop -a ({n_patches} patches)", measure(
            runs, lambda: cli(project, "pop", "-a"), prepare=lambda: run_cli(cli(project, "goto", str(n_patches))))))
        run_cli(cli(project, "push", "-a"))
        top = project / "patches" / "tt-metal" / f"{n_patches:04d}-generated.patch"
        target = next(line[6:].strip() for line in top.read_text().splitlines() if line.startswith("+++ b/"))
        work = project / "work" / "tt-metal" / target
        counter = {"n": 0}

        def edit_one_line() -> None:
            counter["n"] += 1
            lines = work.read_text().splitlines(keepends=True)
            lines[60] = f"    edited = {counter['n']}\n"
            work.write_text("".join(lines))

        rows.append((f"refresh top after a one-line edit (patch {n_patches} of {n_patches})",
                     measure(runs, lambda: cli(project, "refresh"), prepare=edit_one_line)))
        rows.append(("refresh top, nothing changed", measure(runs, lambda: cli(project, "refresh"))))
        run_cli(cli(project, "goto", "0"))
        v2 = moved_upstream(project, share=0.3)
        backup = root / "backup"
        shutil.copytree(project / "series", backup / "series")
        shutil.copytree(project / "patches", backup / "patches")

        def restore() -> None:
            for name in ("series", "patches", "work"):
                shutil.rmtree(project / name, ignore_errors=True)
            shutil.copytree(backup / "series", project / "series")
            shutil.copytree(backup / "patches", project / "patches")

        run_cli(cli(project, "rebase", "tt-metal", "--to", str(v2), "--report"))  # warm the v2 import
        rows.append((f"rebase --report ({n_patches} patches, 30% of modules moved)",
                     measure(runs, lambda: cli(project, "rebase", "tt-metal", "--to", str(v2), "--report"))))
        rows.append((f"rebase ({n_patches} patches, offsets refreshed away)",
                     measure(runs, lambda: cli(project, "rebase", "tt-metal", "--to", str(v2)), prepare=restore)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def shipped_rows(runs: int) -> list[tuple[str, Timing]]:
    """The shipped series on its real pins: rebase the plugin target onto vllm 0.32.0 (report-only and
    for real); the first, untimed run downloads and imports what the cache lacks."""
    rows: list[tuple[str, Timing]] = []
    root = Path(tempfile.mkdtemp(prefix="bench-ws-shipped-"))
    try:
        # the real artifacts live in the user's cache (or BENCH_CACHE); only the series copy is throw-away
        if os.environ.get("BENCH_CACHE"):
            os.environ["MATERIALIZE_CACHE"] = os.environ["BENCH_CACHE"]
        else:
            os.environ.pop("MATERIALIZE_CACHE", None)
        project = root / "proj"
        shutil.copytree(REPO / "series", project / "series")
        shutil.copytree(REPO / "patches", project / "patches")
        n = sum(1 for _ in (project / "patches").rglob("*.patch"))
        run_cli(cli(project, "push", "-a"))  # warm: downloads/imports what the cache lacks
        run_cli(cli(project, "goto", "0"))
        rows.append((f"shipped series ({n} patches, real pins): push -a", measure(
            runs, lambda: cli(project, "push", "-a"), prepare=lambda: run_cli(cli(project, "goto", "0")))))
        rows.append((f"shipped series ({n} patches, real pins): pop -a", measure(
            runs, lambda: cli(project, "pop", "-a"), prepare=lambda: run_cli(cli(project, "goto", str(n))))))
        run_cli(cli(project, "goto", "0"))
        run_cli(cli(project, "rebase", "plugin", "--to", "pypi:vllm==0.32.0", "--report"))  # warm: downloads
        rows.append((f"shipped series ({n} patches): rebase plugin --report to vllm 0.32.0",
                     measure(runs, lambda: cli(project, "rebase", "plugin", "--to", "pypi:vllm==0.32.0", "--report"))))

        def reset() -> None:
            shutil.rmtree(project / "series")
            shutil.rmtree(project / "work", ignore_errors=True)
            shutil.copytree(REPO / "series", project / "series")

        rows.append((f"shipped series ({n} patches): rebase plugin to vllm 0.32.0",
                     measure(runs, lambda: cli(project, "rebase", "plugin", "--to", "pypi:vllm==0.32.0"),
                             prepare=reset)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--patches", type=int, default=200)
    parser.add_argument("--skip-real", action="store_true", help="skip the shipped series (needs the index)")
    parser.add_argument("--only-real", action="store_true", help="only the shipped series")
    args = parser.parse_args()
    saved_cache = os.environ.get("MATERIALIZE_CACHE")
    rows = [] if args.only_real else generated_rows(args.runs, args.files, args.patches)
    if saved_cache is not None:
        os.environ["MATERIALIZE_CACHE"] = saved_cache
    else:
        os.environ.pop("MATERIALIZE_CACHE", None)
    if not args.skip_real:
        rows += shipped_rows(args.runs)
    table = Table(title=f"workspace (median of {args.runs}, CLI wall time incl. start-up; peak RSS)")
    table.add_column("operation")
    table.add_column("time", justify="right")
    table.add_column("peak RSS", justify="right")
    for label, timing in rows:
        table.add_row(label, timing.cell(), f"{timing.peak_rss_mib:.0f} MiB")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
