"""Workspace speed: side by side with quilt on a small daily scenario (new/add/edit/refresh/pop/push on a
20-patch series), push/pop/refresh on a large generated series, rebase of a generated series onto a
moved upstream, and rebase of the shipped series.

The quilt comparison runs the real ``materialize`` console script and the real ``quilt`` (no quiltrc)
on the same upstream tree and the very same 20 patch files (written by ``quilt refresh``), from the
top of the project like a user: median per command over --quilt-runs cycles, and materialize/quilt.
Other rows run ``python -m materialize``, median of --runs runs with the spread. A
throw-away MATERIALIZE_CACHE is used; upstream imports are warmed before timing.

    .venv/bin/python bench/bench_workspace.py [--runs 3] [--quilt-runs 7] [--files 2000] [--patches 200]
                                              [--only-quilt] [--skip-quilt] [--skip-real]
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
from common import Row, Timing, compile_package, measure, record, run_once  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from materialize.workspace.diffgen import FileChange, regenerate  # noqa: E402

PY = str(REPO / ".venv" / "bin" / "python")
console = Console(width=200)
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


def cli(project: Path, *args: str) -> list[str]:
    return [PY, "-m", "materialize", *args, "--series", str(project / "series" / "default.yaml")]


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


def run_cli(argv: list[str], cwd: Path | None = None) -> None:
    import subprocess

    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)


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
        # Serving and the report read the pinned source's names (the vLLM argparse, env readers): the
        # first plan of a materialization finds them, later ones read what it kept.
        in_repo = lambda: REPO  # noqa: E731 - the checkout's serve/profiles and series
        serve = [PY, "-m", "materialize", "serve"]
        run_cli([*serve, "check"], cwd=REPO)  # warm: materializes both profiles' prefixes
        rows.append(("shipped series: serve plan prod", measure(runs, lambda: [*serve, "plan", "prod"], cwd=in_repo)))
        rows.append(("shipped series: serve check (2 profiles)", measure(runs, lambda: [*serve, "check"], cwd=in_repo)))
        rows.append(("shipped series: report (-o a temporary folder)", measure(
            runs, lambda: [PY, "-m", "materialize", "report", "-o", str(root / "report")], cwd=in_repo)))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


MATERIALIZE = str(REPO / ".venv" / "bin" / "materialize")
QUILT_OPS = ["new", "add", "edit", "refresh", "pop", "push", "pop -a (20)", "push -a (20)"]


def _small_upstream(root: Path, n_files: int = 300, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    names = []
    for i in range(n_files):
        rel = f"pkg/m{i // 50:02d}/f{i % 50:02d}.py"
        lines = [f"def {rng.choice(WORDS)}_{k}():\n" if k % 10 == 0 else f"    x_{k} = {rng.randint(0, 999)}\n"
                 for k in range(120)]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("".join(lines))
        names.append(rel)
    return names


def _edit(path: Path, mark: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[60] = f"    edited = {mark!r}\n"
    path.write_text("".join(lines))


def quilt_rows(runs: int) -> list[tuple[str, Timing, Timing]]:
    """The same scenario through quilt and through materialize: (operation, quilt, materialize)."""
    import subprocess

    root = Path(tempfile.mkdtemp(prefix="bench-ws-quilt-"))
    try:
        upstream = root / "upstream"
        names = _small_upstream(upstream)
        qdir = root / "quilt"
        shutil.copytree(upstream, qdir)
        qenv = {"QUILT_PATCHES": "patches", "EDITOR": "true", "LC_ALL": "C"}
        rng = random.Random(3)

        def quilt(*args: str) -> list[str]:
            return ["quilt", "--quiltrc", "-", *args]

        def q(*args: str) -> None:
            subprocess.run(quilt(*args), cwd=qdir, env={**os.environ, **qenv}, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        for p in range(20):  # the series: 20 patches of 3 files each, written by quilt itself
            q("new", f"{p + 1:04d}-p.patch")
            files = rng.sample(names, 3)
            q("add", *files)
            for rel in files:
                _edit(qdir / rel, f"patch {p}")
            q("refresh")
        project = root / "proj"
        shutil.copytree(upstream, project / "upstream" / "tt-metal")
        (project / "patches" / "tt-metal").mkdir(parents=True)
        entries = []
        for patch in sorted((qdir / "patches").glob("*.patch")):
            shutil.copy(patch, project / "patches" / "tt-metal" / patch.name)
            entries.append(f"  - patch: tt-metal/{patch.name}\n    target: tt-metal\n")
        (project / "series").mkdir()
        (project / "series" / "default.yaml").write_text(
            "version: 1\npatches_dir: ../patches\ndefaults: {strip: 1, max_fuzz: 0}\ntargets:\n  tt-metal:\n"
            "    pin: {kind: path, path: ../upstream/tt-metal}\npatches:\n" + "".join(entries))
        menv = {"MATERIALIZE_CACHE": str(root / "cache"), "EDITOR": "true"}

        def mat(*args: str) -> list[str]:
            return [MATERIALIZE, *args]

        def m(*args: str) -> None:
            subprocess.run(mat(*args), cwd=project, env={**os.environ, **menv}, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        m("push", "-a")  # warm: upstream import and every prefix cached
        tools = {"quilt": (quilt, qdir, qenv, qdir, q), "materialize": (mat, project, menv,
                                                                        project / "work" / "tt-metal", m)}
        seconds: dict[tuple[str, str], list[float]] = {}
        peak: dict[tuple[str, str], float] = {}
        for i in range(runs):
            a, b = rng.sample(names, 2)
            for tool, (argv, cwd, env, tree, untimed) in tools.items():
                def timed(op: str, *args: str, tool=tool, argv=argv, cwd=cwd, env=env) -> None:
                    elapsed, rss = run_once(argv(*args), cwd=cwd, env=env)
                    seconds.setdefault((op, tool), []).append(elapsed)
                    peak[(op, tool)] = max(peak.get((op, tool), 0.0), rss)

                timed("new", "new", f"9{i:03d}-bench.patch" if tool == "quilt" else f"9{i:03d}-bench")
                timed("add", "add", a)
                timed("edit", "edit", b)
                _edit(tree / a, f"run {i}")
                _edit(tree / b, f"run {i}")
                timed("refresh", "refresh")
                timed("pop", "pop")
                timed("push", "push")
                untimed("delete", "-r")  # the bench patch goes again (untimed)
                timed("pop -a (20)", "pop", "-a")
                timed("push -a (20)", "push", "-a")
        rows = []
        for op in QUILT_OPS:
            rows.append((op, Timing(seconds[(op, "quilt")], peak[(op, "quilt")]),
                         Timing(seconds[(op, "materialize")], peak[(op, "materialize")])))
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


def print_quilt_table(rows: list[tuple[str, Timing, Timing]], runs: int) -> None:
    table = Table(title=f"materialize vs quilt, 20-patch series, same patch files (median of {runs}, CLI wall time)")
    for column in ("command", "quilt", "materialize", "ratio"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for op, quilt, ours in rows:
        table.add_row(op, quilt.cell(), ours.cell(), f"{ours.median / quilt.median:.1f}x")
    total_q = sum(q.median for _op, q, _m in rows[:6])
    total_m = sum(m.median for _op, _q, m in rows[:6])
    table.add_row("one cycle (new..push)", f"{total_q:.3f}s", f"{total_m:.3f}s", f"{total_m / total_q:.1f}x")
    console.print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--patches", type=int, default=200)
    parser.add_argument("--skip-real", action="store_true", help="skip the shipped series (needs the index)")
    parser.add_argument("--only-real", action="store_true", help="only the shipped series")
    parser.add_argument("--quilt-runs", type=int, default=7, help="cycles of the quilt comparison")
    parser.add_argument("--only-quilt", action="store_true", help="only the side-by-side with quilt")
    parser.add_argument("--skip-quilt", action="store_true", help="skip the side-by-side with quilt")
    args = parser.parse_args()
    compile_package()
    if not args.skip_quilt:
        if shutil.which("quilt") is None:
            console.print("(skipping the quilt comparison: quilt is not installed; apt-get install quilt)")
        else:
            side_by_side = quilt_rows(args.quilt_runs)
            print_quilt_table(side_by_side, args.quilt_runs)
            record([Row(f"workspace, 20-patch series: `{op}`", ours, "quilt", quilt, max_ratio=2.0)
                    for op, quilt, ours in side_by_side])  # into make bench's summary table (issue 12)
    if args.only_quilt:
        return 0
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
