"""Run the real GNU patch on (file, patch) pairs so tests can compare against it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

GNU_PATCH = shutil.which("patch") or "/usr/bin/patch"

_SUCCEEDED = re.compile(
    r"^Hunk #(\d+) succeeded at (-?\d+)(?: with fuzz (\d+))?(?: \(offset (-?\d+) lines?\))?\.$"
)
_FAILED = re.compile(r"^Hunk #(\d+) FAILED at (-?\d+)")


@dataclass(frozen=True)
class GnuHunk:
    """What GNU printed about a hunk; hunks GNU is silent about applied cleanly."""

    failed: bool
    line: int
    fuzz: int
    offset: int


@dataclass(frozen=True)
class GnuResult:
    returncode: int
    content: bytes | None
    hunks: dict[int, GnuHunk]
    output: str


def gnu_available() -> bool:
    """True when a GNU patch binary can be run."""
    try:
        out = subprocess.run([GNU_PATCH, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return False
    return "GNU patch" in out.stdout


def parse_report(output: str) -> dict[int, GnuHunk]:
    """Per-hunk reports from GNU patch's (LC_ALL=C) messages."""
    hunks: dict[int, GnuHunk] = {}
    for line in output.splitlines():
        if m := _SUCCEEDED.match(line):
            hunks[int(m.group(1))] = GnuHunk(
                False, int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0)
            )
        elif m := _FAILED.match(line):
            hunks[int(m.group(1))] = GnuHunk(True, int(m.group(2)), 0, 0)
    return hunks


def run_gnu(original: bytes | None, patch: bytes, *, fuzz: int, strip: int = 1, name: str = "f") -> GnuResult:
    """Apply ``patch`` to a file ``name`` holding ``original`` (None: absent) in a scratch dir."""
    return run_gnu_many(original, patch, fuzzes=[fuzz], strip=strip, name=name)[0]


def run_gnu_many(
    original: bytes | None, patch: bytes, *, fuzzes: list[int], strip: int = 1, name: str = "f"
) -> list[GnuResult]:
    """Like ``run_gnu`` for several fuzz factors, running the GNU processes concurrently."""
    with tempfile.TemporaryDirectory(prefix="gnu-patch-") as tmp:
        root = Path(tmp)
        patch_file = root / "p.diff"
        patch_file.write_bytes(patch)
        env = dict(os.environ, LC_ALL="C", QUOTING_STYLE="literal")
        running = []
        for i, fuzz in enumerate(fuzzes):
            work = root / f"work{i}"
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if original is not None:
                target.write_bytes(original)
            cmd = [
                GNU_PATCH,
                f"-p{strip}",
                f"-F{fuzz}",
                "-f",
                "--no-backup-if-mismatch",
                "--reject-file=-",
                "-i",
                str(patch_file),
            ]
            proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
            running.append((proc, target))
        results = []
        for proc, target in running:
            out, _ = proc.communicate(timeout=30)
            output = out.decode("utf-8", "replace")
            content = target.read_bytes() if target.exists() else None
            results.append(GnuResult(proc.returncode, content, parse_report(output), output))
        return results


class DictView:
    """A tree held in a dict (path -> (mode, bytes)): the applier's TreeView for tests that run GNU
    patch on the same tree on disk."""

    def __init__(self, files: dict[str, tuple[str, bytes]]) -> None:
        self.files = files

    def get(self, path: str) -> tuple[str, bytes] | None:
        return self.files.get(path)

    def is_dir(self, path: str) -> bool:
        return any(p.startswith(path + "/") for p in self.files)
