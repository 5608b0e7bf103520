"""Bounded stress: rounds of 4 concurrent ``apply`` (until 6 were killed) on one store and one output folder, one of them
killed with SIGKILL at a random moment (often inside a ref update or an output publish). Every run
that is not killed exits 0 with the same id; afterwards ``git fsck`` is clean, a plain re-run succeeds,
no ref lock is left, and ``latest`` points at a complete output. About a minute on 2 cores; the kill moment adapts to how fast runs finish on this machine."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

KILLS = 6  # rounds run until this many runners were killed mid-run
MAX_ROUNDS = 24
RUNNERS = 4
PATCHES = 40


def make_project(root: Path) -> Path:
    """A tarball pin (its import takes the store lock and moves refs) and a 40-patch series."""
    src = root / "up" / "proj-1"
    files = {f"d{i % 7}/f{i}.py": "".join(f"v{j} = {j}\n" for j in range(12)) for i in range(PATCHES)}
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    with tarfile.open(root / "proj-1.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="proj-1")
    (root / "patches").mkdir()
    for i, rel in enumerate(files):
        old = files[rel].splitlines(keepends=True)
        new = list(old)
        new[5] = f"v5 = {i} * 5\n"
        body = "".join(
            [f"--- a/{rel}\n", f"+++ b/{rel}\n", "@@ -3,7 +3,7 @@\n"]
            + [" " + line for line in old[2:5]] + ["-" + old[5], "+" + new[5]] + [" " + line for line in old[6:9]]
        )
        (root / "patches" / f"{i:04d}-p.patch").write_text(body)
    return root / "proj-1.tar.gz"


def write_series(root: Path, archive: Path, round_no: int) -> Path:
    """Each round renames the patches (new prefix keys), so every round writes refs again."""
    patches = [{"patch": f"{i:04d}-p.patch", "target": "plugin"} for i in range(PATCHES)]
    for i, entry in enumerate(patches):
        link = root / "patches" / f"r{round_no}-{i:04d}-p.patch"
        if not link.exists():
            os.link(root / "patches" / entry["patch"], link)
        entry["patch"] = link.name
    doc = {"version": 1, "patches_dir": "patches",
           "targets": {"plugin": {"pin": {"kind": "tarball", "path": str(archive)}}}, "patches": patches}
    series = root / f"series-{round_no}.yaml"
    series.write_text(json.dumps(doc))
    return series


def start(series: Path, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--json"],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.timeout(600)
def test_concurrent_applies_with_kills(tmp_path, isolated_cache):
    rng = random.Random(int(os.environ.get("STRESS_SEED", "0")) or None)
    archive = make_project(tmp_path)
    work = tmp_path / "proj"
    work.mkdir()
    upper = 3.0  # the latest kill moment tried; shrinks whenever the victim finished first
    kills = 0
    round_no = 0
    while kills < KILLS:
        assert round_no < MAX_ROUNDS, f"only {kills} of {round_no} runs were still alive to be killed"
        series = write_series(tmp_path, archive, round_no)
        procs = [start(series, work) for _ in range(RUNNERS)]
        victim = rng.randrange(RUNNERS)
        delay = rng.uniform(upper / 4, upper)
        time.sleep(delay)
        if procs[victim].poll() is None:
            procs[victim].send_signal(signal.SIGKILL)
            kills += 1
        else:
            # This machine is faster (or less loaded) than the last guess: aim earlier next time,
            # so the kills keep landing inside the run whatever the machine's speed.
            upper = max(0.02, delay * 0.7)
        ids = set()
        for index, proc in enumerate(procs):
            out, err = proc.communicate(timeout=300)
            if proc.returncode == -signal.SIGKILL and index == victim:
                continue
            assert proc.returncode == 0, f"round {round_no} runner {index}: {err}"
            ids.add(json.loads(out)["id"])
        assert len(ids) == 1, f"round {round_no}: ids {ids}"
        round_no += 1
    # A plain re-run of the last round after all that: succeeds, same id, and the store is sound.
    final = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--json"],
                           cwd=work, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["id"] in ids
    git_dir = isolated_cache / "store.git"
    fsck = subprocess.run(["git", "--git-dir", str(git_dir), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert not list((git_dir / "refs").rglob("*.lock"))
    latest = work / "build" / "materialized" / "latest"
    manifest = json.loads((latest / "manifest.json").read_text())
    assert manifest["id"] in ids
    assert (latest / "plugin" / "d0" / "f0.py").read_text().count("v5 = 0 * 5") == 1
