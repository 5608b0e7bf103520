"""Publish a materialization to disk: full trees or an overlay of touched files, plus manifest.json.

Full trees and overlays are hard links into the read-only file cache (``filecache.py``), so their
files are read-only and shared between outputs: edit in ``work/``, never in an output.

The output is built in a temporary sibling directory and published with one atomic rename, so a
killed run leaves the previous output intact and a reader never sees half a tree. Python is never
run here, so no ``__pycache__`` can appear; a stale one would be refused by ``verify_clean``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock

from materialize.engine import Materialization
from materialize.errors import MaterializeError
from materialize.filecache import FileCache

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
DEFAULT_ROOT = Path("build/materialized")
_HUNKS_SLOT = re.compile(r'^(      "hunks": )(\d+)', re.M)  # a patch entry's placeholder in manifest_text


def manifest(m: Materialization, *, overlay: bool) -> dict[str, Any]:
    """Everything a reader needs to know which code this is and how it was made."""
    targets: dict[str, Any] = {}
    for target in sorted(m.trees):
        changed, deleted = m.changed_paths(target)
        targets[target] = {
            **m.pins[target],
            "base_tree": m.base_trees[target],
            "tree": m.trees[target],
            "install_path": m.series.targets[target].install_path,
            "changed": changed,
            "deleted": deleted,
        }
        if m.empty_dirs.get(target):
            targets[target]["empty_dirs"] = m.empty_dirs[target]
    patches = []
    for report, entry in zip(m.reports, m.applied, strict=True):
        patches.append({
            "position": entry.position,
            "name": entry.name,
            "target": entry.target,
            "sha256": report.sha256,
            "flag": entry.flag,
            "banner": entry.banner,
            "status": entry.spec.status,
            "files": report.files,
            "deleted": report.deleted,
            "hunks": [{"file": h.file, "header": h.header, "status": h.status, "offset": h.offset, "fuzz": h.fuzz}
                      for h in report.hunks],
        })
    return {
        "format": MANIFEST_FORMAT,
        "id": m.id,
        "series": str(m.series.path),
        "position": m.position,
        "overlay": overlay,
        "targets": targets,
        "patches": patches,
    }


def manifest_text(doc: dict[str, Any]) -> str:
    """``doc`` as indented JSON, except that each patch's ``hunks`` list is written on one line.

    json's indenting encoder is pure Python: a patch of 100k hunks took seconds there, while the
    C encoder writes the list in a fraction of that. The document is the same JSON either way.
    """
    hunks = [patch["hunks"] for patch in doc["patches"]]
    shell = {**doc, "patches": [{**patch, "hunks": i} for i, patch in enumerate(doc["patches"])]}
    text = json.dumps(shell, indent=2, sort_keys=True)
    return _HUNKS_SLOT.sub(lambda m: m.group(1) + json.dumps(hunks[int(m.group(2))], sort_keys=True), text) + "\n"


def _checkout_full(m: Materialization, target: str, dest: Path) -> None:
    """Write a whole tree as hard links into the read-only file cache beside the store: a second full
    output costs directories and links, not bytes (see materialize/filecache.py)."""
    FileCache(m.store).materialize_tree(m.trees[target], dest, empty_dirs=m.empty_dirs.get(target, ()))


def _write_overlay(m: Materialization, target: str, dest: Path) -> None:
    """Only the files the series changed against the pin, linked from the same file cache."""
    FileCache(m.store).materialize_tree(m.trees[target], dest, paths=m.changed_paths(target)[0])


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _manifest_bytes(directory: Path) -> bytes | None:
    try:
        return (directory / MANIFEST).read_bytes()
    except OSError:
        return None


def _replaceable(directory: Path) -> bool:
    """Only an empty directory or one of our own outputs may be replaced: never a user's folder."""
    if not directory.exists():
        return True
    if directory.is_dir() and not any(directory.iterdir()):
        return True
    return _read_manifest(directory) is not None


def write_output(m: Materialization, out: Path | None = None, *, overlay: bool = False) -> Path:
    """Publish ``m`` atomically and return its directory (default build/materialized/<id>[-overlay])."""
    default = out is None
    final = (DEFAULT_ROOT / (m.id + ("-overlay" if overlay else ""))) if default else out
    final = final.absolute()
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final.parent / ".materialize-output.lock")):
        _remove_leftovers(final.parent)
        wanted = manifest_text(manifest(m, overlay=overlay))
        if _manifest_bytes(final) == wanted.encode():  # bytes, not parsed JSON: a 100k-hunk manifest is big
            _point_latest(final, default)
            m.display_root = str(final)
            return final
        if not _replaceable(final):
            raise MaterializeError(f"{final} exists and is not a materialize output; refusing to replace it")
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
        tmp.chmod(0o755)  # mkdtemp makes it private; an output is meant to be read and mounted
        try:
            for target in sorted(m.trees):
                (_write_overlay if overlay else _checkout_full)(m, target, tmp / target)
            (tmp / MANIFEST).write_text(wanted)
            if final.exists():
                trash = Path(tempfile.mkdtemp(prefix=f".old-{final.name}-", dir=final.parent))
                os.replace(final, trash / "old")
                os.replace(tmp, final)
                _discard(trash)
            else:
                os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _point_latest(final, default)
    m.display_root = str(final)
    return final


_DISCARDS: list[subprocess.Popen] = []


def _discard(trash: Path) -> None:
    """Delete a replaced output in the background: removing a 20k-file tree takes seconds that the
    user should not wait for once the new output is published. The ``rm`` outlives us (its own
    session); if it is killed, the next publish in this folder sweeps the ``.old-*`` it left."""
    _DISCARDS[:] = [proc for proc in _DISCARDS if proc.poll() is None]  # reap finished ones (no zombies)
    _DISCARDS.append(subprocess.Popen(["rm", "-rf", "--", str(trash)], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))


def settle() -> None:
    """Wait for this process's background deletions (tests, and callers about to measure disk)."""
    while _DISCARDS:
        _DISCARDS.pop().wait()


def _remove_leftovers(parent: Path) -> None:
    """Temp dirs of runs that were killed: we hold the lock, so no live run owns one."""
    for leftover in parent.glob(".tmp-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    for leftover in parent.glob(".old-*"):
        shutil.rmtree(leftover, ignore_errors=True)


def _point_latest(final: Path, default: bool) -> None:
    if not default:
        return
    link = final.parent / "latest"
    tmp_link = final.parent / f".latest-{os.getpid()}"
    tmp_link.unlink(missing_ok=True)
    os.symlink(final.name, tmp_link)
    os.replace(tmp_link, link)


def verify_clean(directory: Path) -> list[str]:
    """Paths of bytecode caches inside an output: must be empty (seed 000: a __pycache__ broke prod)."""
    return sorted(str(p) for p in directory.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc")
