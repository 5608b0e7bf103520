"""The rows of the speed issue measured on a real, large quilt series: Debian's glibc 2.36 (109 patches
over a ~19k-file tree), fetched once with ``apt-get source`` into the user cache and imported with
``materialize import-quilt``. Ours and the reference run in the same minute, medians of several runs;
every command is a real process (interpreter start-up included), preparation steps are not timed.

Used by ``bench_materialize.py`` (``make bench``); ``bench/README.md`` says what each row means.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, Timing, measure, record  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MAT = str(REPO / ".venv" / "bin" / "materialize")
DATA = Path(os.environ.get("MATERIALIZE_BENCH_DATA", Path.home() / ".cache" / "materialize-bench"))
QUILT_ENV = {"QUILTRC": "/dev/null"}


def debian_source(package: str) -> tuple[Path, Path]:
    """(orig tarball, debian tarball) of a Debian source package, fetched once with ``apt-get source``
    (deb-src must be enabled: .ci/run shows how) and kept in the user cache."""
    where = DATA / "debian" / package
    if not any(where.glob("*.orig.tar.*")):
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "source", "--download-only", "-qq", package], cwd=where, check=True)
    (orig,) = where.glob("*.orig.tar.*")
    (debian,) = where.glob("*.debian.tar.*")
    return orig, debian


def attempt(runs: int, command: Callable[[], Sequence[str]], **kwargs) -> tuple[Timing | None, str]:
    """``measure``, but a failing command gives (None, the last line of its error) instead of raising."""
    try:
        return measure(runs, command, **kwargs), ""
    except RuntimeError as exc:
        stderr = str(exc).split(" failed: ", 1)[-1]  # run_once's message: "<argv> failed: <stderr>"
        lines = [line for line in stderr.splitlines() if line.strip()]
        return None, (lines[-1] if lines else "failed without a message")[:200]


def new_disk_mib(existing: Sequence[Path], new: Path) -> float:
    """Disk the ``new`` directory adds to ``existing`` ones: du counts a hard-linked inode once per call."""
    def kib(paths: Sequence[Path]) -> int:
        out = subprocess.run(["du", "-sk", "-c", *map(str, paths)], capture_output=True, text=True, check=True).stdout
        return int(out.strip().splitlines()[-1].split()[0])

    present = [p for p in existing if p.exists()]
    return (kib([*present, new]) - kib(present)) / 1024


def drop_prefix_cache(cache: Path) -> None:
    """Forget every applied prefix (the upstream import stays cached)."""
    git_dir = cache / "store.git"
    refs = subprocess.run(["git", "--git-dir", str(git_dir), "for-each-ref", "--format=delete %(refname)",
                           "refs/materialize/prefix/"], capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "--git-dir", str(git_dir), "update-ref", "--stdin"], input=refs, text=True, check=True)


class Glibc:
    """glibc's quilt series on disk: the imported series file, an unpacked pristine tree, a tree with
    quilt's stack pushed, and our cache."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.orig, debian = debian_source("glibc")
        self.project = root / "project"
        self.project.mkdir(parents=True)
        subprocess.run(["tar", "-xf", str(debian), "-C", str(self.project)], check=True)
        self.patches = self.project / "debian" / "patches"
        self.series = self.project / "series.yaml"
        self.cache = root / "cache"
        self.env = {"MATERIALIZE_CACHE": str(self.cache), "PYTHONDONTWRITEBYTECODE": "1"}
        subprocess.run([MAT, "import-quilt", str(self.patches), "--upstream", str(self.orig), "--target", "plugin",
                        "-o", str(self.series)], check=True, env={**os.environ, **self.env})
        self.names = [line.split()[0] for line in (self.patches / "series").read_text().splitlines()
                      if line.split() and not line.startswith("#")]
        self.pristine = root / "pristine"
        self.pristine.mkdir()
        subprocess.run(["tar", "-xf", str(self.orig), "-C", str(self.pristine)], check=True)
        (self.top,) = list(self.pristine.iterdir())
        self.scratch = root / "scratch"
        self.quilt_tree = root / "quilt-tree"
        self.out = root / "out"
        self.out.mkdir()

    def quilt_env(self) -> dict[str, str]:
        return {**QUILT_ENV, "QUILT_PATCHES": str(self.patches)}

    def fresh(self) -> None:
        """A pristine copy of the unpacked tree for a reference tool (not timed)."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        subprocess.run(["cp", "-a", "--reflink=auto", str(self.top), str(self.scratch)], check=True)

    def ours(self, *args: str) -> list[str]:
        return [MAT, *args, "--series", str(self.series)]


BINARY_SECTION = re.compile(rb"diff --git a/(\S+) b/\1\nnew file mode \d+\nindex \w+\.\.\w+\n"
                            rb"Binary files /dev/null and b/\1 differ\n")


def glibc_rows(root: Path, runs: int, cold_runs: int) -> list[Row]:
    """Rows 1-4 and the glibc `status` row of the issue, plus a second full output's disk, each recorded
    as soon as it is measured. (The workspace commands beside quilt's are bench_workspace.py's rows.)"""
    g = Glibc(root)
    rows: list[Row] = []
    n = len(g.names)
    work_env = g.env

    def add(row: Row) -> None:
        rows.append(row)
        record([row])

    # 1. cold: empty cache, full output  vs  tar -xf + quilt push -a.
    def empty_cache() -> None:
        shutil.rmtree(g.cache, ignore_errors=True)
        shutil.rmtree(g.out / "full", ignore_errors=True)

    def cold_apply() -> tuple[Timing | None, str]:
        return attempt(cold_runs, lambda: g.ours("apply", "--out", str(g.out / "full")), prepare=empty_cache,
                       env=work_env)

    cold, error = cold_apply()
    note = ""
    if cold is None and "binary patch" in error:
        # Debian's git-updates.diff adds one empty file as a git "Binary files /dev/null and b/X differ"
        # section (GNU patch creates X empty); an engine that refuses it is measured without that section,
        # and the row says so. Both sides then apply the same bytes.
        first = g.patches / g.names[0]
        first.write_bytes(BINARY_SECTION.sub(b"", first.read_bytes()))
        note = " [series without its one `Binary files … differ` section: refused by the engine]"
        cold, error = cold_apply()
    untar_push = (f"mkdir {g.scratch} && tar -xf {g.orig} -C {g.scratch} --strip-components=1 && cd {g.scratch} "
                  "&& quilt push -a -q >/dev/null")
    ref = measure(cold_runs, lambda: ["sh", "-c", untar_push], prepare=lambda: shutil.rmtree(g.scratch, True),
                  env=g.quilt_env())
    g.scratch.rename(g.quilt_tree)  # quilt's stack, all pushed: the reference of the rows below
    add(Row(f"glibc ({n} patches): cold, empty cache, full output{note}", cold, "`tar -xf` + `quilt push -a`", ref,
            max_ratio=1.0, error=error))

    # Warm the cache (upstream imported, every prefix applied) for the rows below.
    subprocess.run(g.ours("apply", "--out", str(g.out / "full")), env={**os.environ, **work_env},
                   capture_output=True)

    # 2. base cached, all patches re-applied, overlay  vs  the GNU patch loop (and quilt push -a).
    reapply, error = attempt(runs, lambda: g.ours("apply", "--overlay", "--out", str(g.out / "overlay")),
                             prepare=lambda: drop_prefix_cache(g.cache) if g.cache.exists() else None, env=work_env)
    loop = ";".join(f"patch -p1 -F0 --quiet -i {g.patches / name} || exit 1" for name in g.names)
    patch_loop = measure(runs, lambda: ["sh", "-c", f"cd {g.scratch} && {loop}"], prepare=g.fresh)
    add(Row(f"glibc: base cached, all {n} re-applied, `--overlay`", reapply, "GNU `patch -F0` loop", patch_loop,
            max_ratio=3.0, error=error))
    quilt_push = measure(runs, lambda: ["sh", "-c", f"cd {g.scratch} && quilt push -a -q >/dev/null"],
                         prepare=g.fresh, env=g.quilt_env())
    add(Row(f"glibc: base cached, all {n} re-applied, `--overlay`", reapply, "`quilt push -a`", quilt_push,
            max_ratio=1.0, error=error))
    shutil.rmtree(g.scratch, ignore_errors=True)

    # 3./4. the last patch edited  vs  quilt pop + quilt push of it.
    pop_push = measure(runs, lambda: ["sh", "-c", f"cd {g.quilt_tree} && quilt pop -q && quilt push -q >/dev/null"],
                       env=g.quilt_env())
    last = g.patches / g.names[-1]
    original = last.read_bytes()
    counter = iter(range(10**6))

    def edit_last() -> None:
        last.write_bytes(f"edited {next(counter)}: a changed description\n".encode() + original)

    subprocess.run(g.ours("apply", "--overlay", "--out", str(g.out / "overlay")), env={**os.environ, **work_env},
                   capture_output=True)
    edit_overlay, error = attempt(runs, lambda: g.ours("apply", "--overlay", "--out", str(g.out / "overlay")),
                                  prepare=edit_last, env=work_env)
    add(Row("glibc: last patch edited, `--overlay`", edit_overlay, "`quilt pop` + `quilt push`", pop_push,
            max_ratio=1.0, error=error))
    edit_full, error = attempt(runs, lambda: g.ours("apply", "--out", str(g.out / "full")), prepare=edit_last,
                               env=work_env)
    add(Row("glibc: last patch edited, full output", edit_full, "`quilt pop` + `quilt push`", pop_push,
            max_ratio=1.5, error=error))
    last.write_bytes(original)

    add(_status_row(g, runs))

    # Everything cached, a full output (the whole tree)  vs  tar -xf; and what a second output costs on disk.
    second = g.out / "second"
    again, error = attempt(runs, lambda: g.ours("apply", "--out", str(second)),
                           prepare=lambda: shutil.rmtree(second, ignore_errors=True), env=work_env)
    disk = new_disk_mib([g.cache, g.out / "full", g.out / "overlay"], second) if again else None
    untar = measure(runs, lambda: ["sh", "-c", f"mkdir {g.scratch} && tar -xf {g.orig} -C {g.scratch}"],
                    prepare=lambda: shutil.rmtree(g.scratch, True))
    add(Row("glibc: everything cached, a second full output", again, "`tar -xf`", untar,
            max_seconds=1.0, disk_mib=disk, max_mib=10, error=error))
    return rows


def _status_row(g: Glibc, runs: int) -> Row:
    """`status` of the cached series  vs  `quilt applied` (in quilt's pushed tree)."""
    subprocess.run(g.ours("apply", "--out", str(g.out / "full")), env={**os.environ, **g.env}, capture_output=True)
    status, error = attempt(runs * 2, lambda: g.ours("status"), env=g.env)
    applied = measure(runs * 2, lambda: ["sh", "-c", f"cd {g.quilt_tree} && quilt applied >/dev/null"],
                      env=g.quilt_env())
    return Row("glibc: `materialize status` (cached)", status, "`quilt applied`", applied, max_seconds=0.3,
               error=error)


def glibc_status_rows(root: Path, runs: int) -> list[Row]:
    """Only the `status` row (``bench_materialize.py --only-status``): the cache is filled and quilt's
    stack pushed untimed first."""
    g = Glibc(root)
    subprocess.run(["sh", "-c", f"mkdir -p {g.quilt_tree} && tar -xf {g.orig} -C {g.quilt_tree} "
                                f"--strip-components=1 && cd {g.quilt_tree} && quilt push -a -q >/dev/null"],
                   env={**os.environ, **g.quilt_env()}, check=True)
    row = _status_row(g, runs)
    record([row])
    return [row]


def startup_rows(runs: int) -> tuple[list[Row], str]:
    """`materialize --help` and `materialize CMD --help` against `quilt --help` (≤ 150 ms each)."""
    quilt_help = measure(runs, lambda: ["sh", "-c", "quilt --help >/dev/null || true"])
    rows = [Row("`materialize --help`", measure(runs, lambda: [MAT, "--help"]), "`quilt --help`", quilt_help,
                max_seconds=0.15)]
    commands = ["apply", "status", "check", "import-quilt", "push", "refresh", "rebase", "serve", "bisect", "runs",
                "test-offline"]
    per_command = {c: measure(runs, lambda c=c: [MAT, c, "--help"]) for c in commands}
    slowest = max(per_command, key=lambda c: per_command[c].median)
    rows.append(Row(f"`materialize CMD --help`, slowest of {len(commands)} (`{slowest}`)", per_command[slowest],
                    "`quilt --help`", quilt_help, max_seconds=0.15))
    note = "CMD --help medians: " + ", ".join(f"{c} {per_command[c].median * 1000:.0f} ms" for c in commands)
    return rows, note


def hunks_row(root: Path, runs: int, n_files: int = 100, hunks_per_file: int = 1000) -> list[Row]:
    """One patch of ``n_files * hunks_per_file`` hunks (100k): ours through the CLI (base cached, prefix
    not) against ``patch -p1 -F0`` on an unpacked copy; time and peak memory."""
    root.mkdir(parents=True)
    tree = root / "proj"
    chunks: list[str] = []
    for f in range(n_files):
        lines = [f"file {f} line {k}\n" for k in range(hunks_per_file * 8)]
        (tree / f"d{f // 10}").mkdir(parents=True, exist_ok=True)
        (tree / f"d{f // 10}" / f"f{f}.txt").write_text("".join(lines))
        chunks.append(f"--- a/d{f // 10}/f{f}.txt\n+++ b/d{f // 10}/f{f}.txt\n")
        for h in range(hunks_per_file):
            at = h * 8 + 4  # 0-based changed line; 3 lines of context each side, hunks 7 lines apart
            chunks.append(f"@@ -{at - 2},7 +{at - 2},7 @@\n")
            chunks.extend(" " + lines[k] for k in range(at - 3, at))
            chunks.append("-" + lines[at])
            chunks.append(f"+file {f} line {at} patched\n")
            chunks.extend(" " + lines[k] for k in range(at + 1, at + 4))
    (root / "patches").mkdir()
    big = root / "patches" / "0001-many-hunks.patch"
    big.write_text("".join(chunks))
    tarball = root / "proj.tar"
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(root), "proj"], check=True)
    series = root / "series.yaml"
    series.write_text(f"version: 1\npatches_dir: patches\ntargets:\n  plugin:\n    pin: {{kind: tarball, path: {tarball}}}\n"
                      "patches:\n  - {patch: 0001-many-hunks.patch, target: plugin}\n")
    cache = root / "cache"
    env = {"MATERIALIZE_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    ours_cmd = [MAT, "apply", "--series", str(series), "--overlay", "--out", str(root / "out")]
    subprocess.run([MAT, "apply", "--series", str(series), "--upto", "0", "--overlay", "--out", str(root / "out")],
                   env={**os.environ, **env}, capture_output=True)
    scratch = root / "scratch"

    def fresh() -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(tree, scratch)

    theirs = measure(runs, lambda: ["sh", "-c", f"cd {scratch} && patch -p1 -F0 --quiet -i {big}"], prepare=fresh)
    mine, error = attempt(runs, lambda: ours_cmd, prepare=lambda: drop_prefix_cache(cache), env=env)
    label = f"one patch of {n_files * hunks_per_file:,} hunks ({big.stat().st_size / 2**20:.0f} MiB)"
    rows = [Row(f"{label}: time", mine, "GNU `patch -F0`", theirs, max_ratio=5.0, error=error)]
    if mine:
        memory = Timing([mine.peak_rss_mib], mine.peak_rss_mib)
        ref_memory = Timing([theirs.peak_rss_mib], theirs.peak_rss_mib)
        rows.append(Row(f"{label}: peak memory", memory, "GNU `patch -F0`", ref_memory, max_ratio=5.0, unit="MiB"))
    shutil.rmtree(root, ignore_errors=True)
    return rows
