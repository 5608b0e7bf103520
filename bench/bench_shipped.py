"""The shipped series (series/default.yaml) on the real pinned trees: ours vs quilt / GNU patch.

The pins are downloaded once into the bench cache in the user cache (``MATERIALIZE_BENCH_DATA``, else
``~/.cache/materialize-bench/shipped-cache``) so `make bench` does not fetch ~150 MB every time.
The reference tools get both upstream trees unpacked on disk (not timed) and apply each target's
patches in series order; ours applies from the cached pins through the store.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_glibc_rows import DATA, MAT, QUILT_ENV, REPO, attempt, drop_prefix_cache, new_disk_mib  # noqa: E402
from common import Row, measure  # noqa: E402


def _unpack(artifact: Path, dest: Path) -> None:
    if artifact.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(artifact) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(artifact) as tar:
            tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        (top,) = list(dest.iterdir())
        for child in top.iterdir():
            child.rename(dest / child.name)
        top.rmdir()


def shipped_rows(root: Path, runs: int, *, only_status: bool = False) -> list[Row]:
    from materialize.series import load_series
    from materialize.store import Store
    from materialize.upstream import resolve

    root.mkdir(parents=True, exist_ok=True)
    cache = DATA / "shipped-cache"
    env = {"MATERIALIZE_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    series = load_series(REPO / "series" / "default.yaml")
    os.environ["MATERIALIZE_CACHE"] = str(cache)
    store = Store.open(cache)
    pristine = root / "pristine"
    for target, spec in series.targets.items():
        resolve(spec.pin, store, base_dir=series.base_dir, progress=False)
        (artifact,) = list(store.artifacts.rglob(spec.pin.file))
        _unpack(artifact, pristine / target)
        pdir = pristine / target / "patches"
        pdir.mkdir()
        entries = [p for p in series.patches if p.target == target]
        for p in entries:
            shutil.copy(p.path, pdir / p.path.name)
        (pdir / "series").write_text("".join(f"{p.path.name} -p{p.strip}\n" for p in entries))
    scratch = root / "scratch"
    out = root / "out"

    def fresh() -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        subprocess.run(["cp", "-a", "--reflink=auto", str(pristine), str(scratch)], check=True)

    def per_target(command: str, where: Path = scratch) -> list[str]:
        return ["sh", "-c", " && ".join(f"(cd {where / t} && {command})" for t in series.targets)]

    def ours(*args: str) -> list[str]:
        return [MAT, *args, "--series", str(series.path)]

    n = len(series.patches)
    rows: list[Row] = []
    subprocess.run(ours("apply", "--overlay", "--out", str(out / "overlay")), env={**os.environ, **env}, check=True,
                   capture_output=True)
    if only_status:
        pushed = root / "pushed"
        fresh()
        scratch.rename(pushed)
        subprocess.run(per_target("quilt push -a -q >/dev/null", pushed), env={**os.environ, **QUILT_ENV}, check=True)
        return _status_row(root, runs, ours, per_target, pushed, env)
    quilt_push = measure(runs, lambda: per_target("quilt push -a -q >/dev/null"), prepare=fresh, env=QUILT_ENV)
    cold, error = attempt(runs, lambda: ours("apply", "--overlay", "--out", str(out / "overlay")),
                          prepare=lambda: drop_prefix_cache(cache), env=env)
    rows.append(Row(f"shipped ({n} patches): pins cached, all re-applied, `--overlay`", cold, "`quilt push -a`",
                    quilt_push, max_ratio=1.0, error=error))

    # The last patch edited vs quilt pop + push (on a tree with quilt's stack pushed).
    pushed = root / "pushed"
    fresh()
    shutil.rmtree(pushed, ignore_errors=True)
    scratch.rename(pushed)
    subprocess.run(per_target("quilt push -a -q >/dev/null", pushed), env={**os.environ, **QUILT_ENV}, check=True)
    last_target = series.patches[-1].target
    pop_push = measure(runs, lambda: ["sh", "-c", f"cd {pushed / last_target} && quilt pop -q && quilt push -q"],
                       env=QUILT_ENV)
    last = series.patches[-1].path
    original = last.read_bytes()
    counter = iter(range(10**6))

    def edit_last() -> None:
        last.write_bytes(f"edited {next(counter)}\n".encode() + original)

    try:
        edited, error = attempt(runs, lambda: ours("apply", "--overlay", "--out", str(out / "overlay")),
                                prepare=edit_last, env=env)
    finally:
        last.write_bytes(original)
    rows.append(Row("shipped: last patch edited, `--overlay`", edited, "`quilt pop` + `quilt push`", pop_push,
                    max_ratio=1.0, error=error))

    # Everything cached: a second full output, its time and the disk it adds.
    subprocess.run(ours("apply", "--out", str(out / "full")), env={**os.environ, **env}, capture_output=True)
    second = out / "second"
    again, error = attempt(runs, lambda: ours("apply", "--out", str(second)),
                           prepare=lambda: shutil.rmtree(second, ignore_errors=True), env=env)
    disk = new_disk_mib([cache, out / "full", out / "overlay"], second) if again else None
    # The floor for any tool: a hard-linked copy of the first output (``cp -al``), on the same disk in
    # the same minute. Its 3,232 folders are each a mkdir that this disk takes 0.2-0.6 ms for.
    copy = out / "cp-al"
    cp_al = measure(runs, lambda: ["cp", "-al", str(out / "full"), str(copy)],
                    prepare=lambda: shutil.rmtree(copy, ignore_errors=True))
    shutil.rmtree(copy, ignore_errors=True)
    rows.append(Row("shipped: everything cached, a second full output", again, "`cp -al` of the first", cp_al,
                    max_seconds=1.0,
                    disk_mib=disk, max_mib=10, error=error))

    return rows + _status_row(root, runs, ours, per_target, pushed, env)


def _status_row(root: Path, runs: int, ours, per_target, pushed: Path, env: dict[str, str]) -> list[Row]:
    """`status` of the cached series  vs  `quilt applied` in quilt's pushed trees (then the scratch goes)."""
    applied = measure(runs * 2, lambda: per_target("quilt applied >/dev/null", pushed), env=QUILT_ENV)
    status, error = attempt(runs * 2, lambda: ours("status"), env=env)
    shutil.rmtree(root, ignore_errors=True)
    return [Row("shipped: `materialize status` (cached)", status, "`quilt applied`", applied, max_seconds=0.3,
                error=error)]
