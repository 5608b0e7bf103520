"""Whole-tree differential tests: real ``git diff`` / ``diff -ruN`` patches applied by GNU patch and by us.

These exercise the parser on the exact output of the tools that produce real patch series (new,
deleted, renamed and mode-changed files, missing final newlines, CRLF files, Index/diff preambles)
and check the per-file results reproduce GNU patch's tree byte for byte.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from materialize.patching import apply_file, parse_patch

from .gnu import GNU_PATCH, gnu_available

pytestmark = pytest.mark.skipif(
    not gnu_available() or shutil.which("git") is None, reason="GNU patch and git are needed"
)

WORDS = [b"alpha\n", b"beta\n", b"gamma\n", b"delta\n", b"\n", b"x = 1\r\n", b"end"]


def _random_file(rng: random.Random) -> bytes:
    lines = [rng.choice(WORDS[:-1]) for _ in range(rng.randint(0, 12))]
    if rng.random() < 0.3:
        lines.append(WORDS[-1])
    return b"".join(lines)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, len(lines))
        if rng.random() < 0.5 and pos < len(lines):
            del lines[pos]
        else:
            lines.insert(pos, rng.choice([b"new", b"beta", b"", b"zeta"]))
    return b"\n".join(lines)


def _random_trees(rng: random.Random) -> tuple[dict[str, bytes], dict[str, bytes]]:
    old = {f"dir{i % 2}/file{i}.txt": _random_file(rng) for i in range(rng.randint(2, 6))}
    new = dict(old)
    for name in list(old):
        roll = rng.random()
        if roll < 0.15:
            del new[name]
        elif roll < 0.3:
            new[name.replace("file", "moved")] = new.pop(name)
        elif roll < 0.8:
            new[name] = _mutate(rng, old[name])
    for i in range(rng.randint(0, 2)):
        new[f"added/n{i}.txt"] = _random_file(rng)
    return old, new


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def _read(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def _git(cwd: Path, *args: str) -> bytes:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_CONFIG_SYSTEM="/dev/null",
    )
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True).stdout


def _git_patch(tmp: Path, old: dict[str, bytes], new: dict[str, bytes]) -> bytes:
    repo = tmp / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(repo, old)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "old", "--allow-empty")
    shutil.rmtree(repo / "dir0", ignore_errors=True)
    shutil.rmtree(repo / "dir1", ignore_errors=True)
    _write(repo, new)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "new: change things\n\nbody text", "--allow-empty")
    return _git(repo, "format-patch", "-M", "--stdout", "HEAD~1")


def _diff_patch(tmp: Path, old: dict[str, bytes], new: dict[str, bytes]) -> bytes:
    _write(tmp / "a", old)
    _write(tmp / "b", new)
    (tmp / "a").mkdir(exist_ok=True)
    (tmp / "b").mkdir(exist_ok=True)
    proc = subprocess.run(["diff", "-ruN", "a", "b"], cwd=tmp, capture_output=True, check=False)
    return b"Description of the change.\n\n" + proc.stdout


def _apply_ours(tree: dict[str, bytes], patch: bytes) -> tuple[dict[str, bytes], bool]:
    result = dict(tree)
    ok = True
    for fp in parse_patch(patch, source="t.patch").files:
        source = fp.old_path
        original = tree.get(source) if source is not None else None
        res = apply_file(original, fp)
        ok &= res.ok
        if fp.is_rename and source is not None:
            result.pop(source, None)  # GNU renames even when hunks fail (content then unchanged)
        if fp.is_delete and res.content is None and source is not None:
            result.pop(source, None)
        elif res.content is not None:
            # A refused deletion leaves GNU's output (the unmatched residue) in place.
            result[fp.new_path or source or ""] = res.content
    return result, ok


def _apply_gnu(tmp: Path, tree: dict[str, bytes], patch: bytes) -> tuple[dict[str, bytes], bool]:
    work = tmp / "gnu"
    work.mkdir()
    _write(work, tree)
    (tmp / "p.patch").write_bytes(patch)
    proc = subprocess.run(
        [
            GNU_PATCH,
            "-p1",
            "-F0",
            "-f",
            "--no-backup-if-mismatch",
            "--reject-file=-",
            "-i",
            str(tmp / "p.patch"),
        ],
        cwd=work,
        capture_output=True,
        check=False,
    )
    return _read(work), proc.returncode == 0


def _drift(rng: random.Random, tree: dict[str, bytes]) -> dict[str, bytes]:
    drifted = dict(tree)
    for name in list(drifted):
        if rng.random() < 0.3:
            drifted[name] = b"local header\n" + drifted[name]
    return drifted


@pytest.mark.parametrize("seed", range(int(os.environ.get("MATERIALIZE_SOAK_TREES", "12"))))
@pytest.mark.parametrize("kind", ["git", "diff"])
def test_tree_matches_gnu(tmp_path: Path, seed: int, kind: str) -> None:
    rng = random.Random(seed * 7919 + len(kind))
    old, new = _random_trees(rng)
    patch = _git_patch(tmp_path, old, new) if kind == "git" else _diff_patch(tmp_path, old, new)
    target = _drift(rng, old) if seed % 2 else old
    if not parse_patch(patch, source="t.patch").files:
        return  # GNU calls a diff-less patch "only garbage" (exit 2); quilt allows empty patches
    ours, ours_ok = _apply_ours(target, patch)
    gnu, gnu_ok = _apply_gnu(tmp_path, target, patch)
    assert ours == gnu, patch.decode("utf-8", "replace")
    assert ours_ok == gnu_ok
    if target is old and kind == "git":
        # diff -ruN cannot express creating/deleting empty files; git diffs can.
        assert ours == new
