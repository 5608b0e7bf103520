"""The shipped series (series/default.yaml) on the real pinned trees: ours vs quilt / patch / git apply.

The reference tools get both upstream trees unpacked on disk (not timed) and apply each target's
patches in series order; ours applies from the cached pins through the store and writes the overlay.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_materialize import MAT, REPO, drop_prefix_cache, table  # noqa: E402
from common import Timing, measure  # noqa: E402

from materialize.series import load_series  # noqa: E402
from materialize.store import Store  # noqa: E402
from materialize.upstream import resolve  # noqa: E402


def _unpack(artifact: Path, dest: Path) -> None:
    if artifact.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(artifact) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(artifact) as tar:
            tar.extractall(dest, filter="data")
        (top,) = list(dest.iterdir())
        for child in top.iterdir():
            child.rename(dest / child.name)
        top.rmdir()


def bench_shipped(root: Path, runs: int) -> Table:
    root.mkdir(parents=True, exist_ok=True)
    cache = root / "cache"
    env = {"MATERIALIZE_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    series = load_series(REPO / "series" / "default.yaml")
    os.environ["MATERIALIZE_CACHE"] = str(cache)
    store = Store.open(cache)
    pristine = root / "pristine"
    for target, spec in series.targets.items():
        resolve(spec.pin, store, base_dir=series.base_dir, progress=False)
        (artifact,) = [p for p in store.artifacts.rglob(spec.pin.file)]
        _unpack(artifact, pristine / target)
        pdir = pristine / target / "patches"
        pdir.mkdir()
        entries = [p for p in series.patches if p.target == target]
        for p in entries:
            shutil.copy(p.path, pdir / p.path.name)
        (pdir / "series").write_text("".join(f"{p.path.name} -p{p.strip}\n" for p in entries))
    scratch = root / "scratch"

    def fresh() -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        subprocess.run(["cp", "-a", "--reflink=auto", str(pristine), str(scratch)], check=True)

    def per_target(command: str) -> list[str]:
        script = " && ".join(f"(cd {scratch / t} && {command})" for t in series.targets)
        return ["sh", "-c", script]

    ours = [MAT, "apply", "--series", str(series.path), "--overlay", "--out", str(root / "out")]
    subprocess.run(ours, env={**os.environ, **env}, check=True, capture_output=True)
    results: dict[str, Timing] = {
        "ours cold (pins cached)": measure(runs, lambda: ours, prepare=lambda: drop_prefix_cache(cache), env=env),
        "ours again (all cached)": measure(runs, lambda: ours, env=env),
    }
    quilt_env = {"QUILT_PATCHES": "patches", "QUILTRC": "/dev/null"}
    results["quilt push -a"] = measure(runs, lambda: per_target("quilt push -a -q"), prepare=fresh, env=quilt_env)
    loop = "for p in $(sed 's/ .*//' patches/series); do patch -s -p1 -F0 -i patches/$p || exit 1; done"
    results["patch loop"] = measure(runs, lambda: per_target(loop), prepare=fresh)
    loop = "for p in $(sed 's/ .*//' patches/series); do git apply -p1 patches/$p || exit 1; done"
    results["git apply loop"] = measure(runs, lambda: per_target(loop), prepare=fresh)
    shutil.rmtree(scratch, ignore_errors=True)
    return table(f"shipped series: {len(series.patches)} patches on ttnn 0.81.1 + vllm 0.33.0 "
                 f"(median of {runs})", results, "quilt push -a")
