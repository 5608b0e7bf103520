"""Seeded sessions: random edits (diff-like lines, CRLF, no final newline, deletions, new files and
folders, mode flips) to files of the top patch, then `refresh`. Each round, the refreshed patch is exactly
what `diff` showed, pop + push gives work/ back byte for byte, and GNU patch (what quilt push runs)
applying the patch file to the upstream gives the same files: refresh never writes a patch that does
not re-apply to what the user had."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_edit import patch_file, run

UPSTREAM = ["models/tt/attention.py", "models/tt/generator.py", "scripts/run.sh"]
POOL = ["x", "", "  ", "\t", "--- a/x", "+++ b/x", "@@ -1 +1 @@", "-", "+", " ", "\\ No newline",
        "diff --git a/a b/a", "}", "def f():"]


def _lines(rnd: random.Random) -> list[bytes]:
    return [(rnd.choice(POOL) + (str(rnd.randint(0, 3)) if rnd.random() < .5 else "")).encode()
            for _ in range(rnd.randint(0, 12))]


def _mutate(rnd: random.Random, data: bytes) -> bytes | None:
    """New bytes for a file, or None: delete it."""
    if rnd.random() < .05:
        return None
    lines = data.split(b"\n")
    for _ in range(rnd.randint(1, 5)):
        i, op = rnd.randint(0, len(lines)), rnd.random()
        if op < .4:
            lines[i:i] = _lines(rnd)
        elif op < .7:
            del lines[i:i + rnd.randint(1, 4)]
        elif i < len(lines):
            lines[i] += b" changed"
    out = b"\n".join(lines)
    if rnd.random() < .05:
        out = out.replace(b"\n", b"\r\n")
    return out.rstrip(b"\n") if rnd.random() < .2 else out


def _tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {p.relative_to(root).as_posix(): (p.read_bytes(), os.access(p, os.X_OK)) for p in root.rglob("*")
            if p.is_file() and not p.name.endswith((".orig", ".rej")) and ".materialize" not in p.parts}


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is the oracle")
@pytest.mark.parametrize("seed", range(6))
def test_refresh_writes_what_diff_shows_and_what_re_applies(project: Path, tmp_path: Path, capsys,
                                                            seed: int) -> None:
    rnd = random.Random(seed)
    upstream = project / "upstream" / "tt-metal"
    work = project / "work" / "tt-metal"
    run(project, "new", "p1", "--target", "tt-metal", "-m", "p1")
    chosen = rnd.sample(UPSTREAM, rnd.randint(1, len(UPSTREAM))) + rnd.sample(["new.txt", "deep/er/n.txt"], 1)
    for _round in range(3):
        run(project, "add", *chosen)
        for name in chosen:
            path = work / name
            new = _mutate(rnd, path.read_bytes() if path.exists() else b"")
            if new is None:
                path.unlink(missing_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(new)
            if rnd.random() < .15:
                path.chmod(path.stat().st_mode ^ 0o111)
        had = _tree(work)
        capsys.readouterr()
        assert run(project, "diff") == 0
        shown = capsys.readouterr().out.encode()
        assert run(project, "refresh") == 0
        patch = patch_file(project, "p1").read_bytes()
        assert patch.partition(b"diff --git")[1:] == shown.partition(b"diff --git")[1:]
        assert run(project, "pop") == 0 and run(project, "push") == 0
        upstream_files = _tree(upstream)
        same = {k: v for k, v in _tree(work).items() if upstream_files.get(k) != v}
        assert same == {k: v for k, v in had.items() if upstream_files.get(k) != v}
        if b"diff --git" not in patch:
            continue  # nothing to apply (GNU: "Only garbage"); the round trip above still holds
        quilt_tree = tmp_path / f"gnu{_round}"
        shutil.copytree(upstream, quilt_tree)
        done = subprocess.run(["patch", "-p1", "-s", "-F0", "-N", "-i", str(patch_file(project, "p1"))],
                              cwd=quilt_tree, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        expected = {k: v for k, v in upstream_files.items() if k not in chosen} | had
        assert _tree(quilt_tree) == expected
