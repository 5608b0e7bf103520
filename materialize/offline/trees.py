"""Where offline tests get "target T at series position k" from.

The normal source is the engine's content-addressed store (``materialize.engine.materialize``),
which reads blobs without a checkout. ``PatchDirSource`` is the stand-alone fallback: unpacked
upstream directories plus the one applier (``materialize.patching.tree.apply_to_tree``) writing
into small overlay directories that hold only the files the series touches, so a 350 MB ttnn tree
is never copied.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

from materialize.errors import PatchApplyError, SeriesError
from materialize.patching.tree import apply_to_tree
from materialize.series import Series
from materialize.tree import DirTree, Tree


class TreeSource(Protocol):
    """Gives the tree of ``target`` after the first ``position`` series entries."""

    name: str

    def tree(self, position: int, target: str) -> Tree: ...

    def close(self) -> None: ...


class EngineSource:
    """Trees straight from the engine's store (no checkout)."""

    name = "engine"

    def __init__(self, series: Series) -> None:
        from materialize.engine import materialize  # the lead's module; imported lazily on purpose

        self._materialize = materialize
        self.series = series
        self._cache: dict[int, object] = {}

    def tree(self, position: int, target: str) -> Tree:
        m = self._cache.get(position)
        if m is None:
            m = self._cache[position] = self._materialize(self.series, upto=position, progress=False)
        return m.tree(target)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._cache.clear()


class OverlayTree:
    """A base tree with an overlay directory of patched files on top (and files the patches deleted)."""

    def __init__(self, base: Tree, overlay: Path, deleted: frozenset[str], target: str, label: str) -> None:
        self.base, self.overlay, self.deleted, self.target, self.label = base, overlay, deleted, target, label
        self._dir = DirTree(overlay)

    def read_bytes(self, path: str) -> bytes:
        if path in self.deleted:
            raise KeyError(path)
        if self._dir.exists(path):
            return self._dir.read_bytes(path)
        return self.base.read_bytes(path)

    def exists(self, path: str) -> bool:
        if path in self.deleted:
            return False
        return self._dir.exists(path) or self.base.exists(path)

    def display_path(self, path: str) -> str:
        if self._dir.exists(path) or path in self.deleted or not self.base.exists(path):
            return self._dir.display_path(path)
        return self.base.display_path(path)


class _BaseView:
    """Base tree + this source's overlay directory, as the applier's ``TreeView``."""

    def __init__(self, base: Tree, overlay: DirTree, deleted: frozenset[str]) -> None:
        self.base, self.overlay, self.deleted = base, overlay, deleted

    def get(self, path: str) -> tuple[str, bytes] | None:
        if path in self.deleted:
            return None
        for tree in (self.overlay, self.base):
            if tree.exists(path):
                return "100644", tree.read_bytes(path)
        return None

    def is_dir(self, path: str) -> bool:
        return (self.overlay.root / path).is_dir()


class PatchDirSource:
    """Base trees + the one applier into per-prefix overlay directories (touched files only).

    Bases are unpacked directories (``--tree-source dirs``); a patch that needs an offset or fuzz
    here is an error, so the offline suite only runs on series that apply exactly.
    """

    def __init__(self, series: Series, bases: dict[str, Tree | Path], work: Path | None = None, name: str = "dirs"):
        self.name = name
        self.series = series
        self.bases: dict[str, Tree] = {t: DirTree(b, t) if isinstance(b, str | Path) else b for t, b in bases.items()}
        self._own_work = work is None
        self.work = Path(tempfile.mkdtemp(prefix="materialize-offline-")) if work is None else Path(work)
        self._steps: dict[tuple[str, int], tuple[Path, frozenset[str], str]] = {}

    def _base(self, target: str) -> Tree:
        if target not in self.bases:
            raise SeriesError(f"no base tree for target {target!r}; pass --base-tree {target}=DIR")
        return self.bases[target]

    def tree(self, position: int, target: str) -> Tree:
        base = self._base(target)
        overlay, deleted, key = self._overlay(target, position)
        return OverlayTree(base, overlay, deleted, target, f"{target}@{position}:{key[:12]}")

    def _overlay(self, target: str, position: int) -> tuple[Path, frozenset[str], str]:
        entries = [p for p in self.series.patches[:position] if p.target == target]
        prev_dir: Path | None = None
        deleted: frozenset[str] = frozenset()
        key = hashlib.sha256(f"{target}:{id(self._base(target))}".encode()).hexdigest()
        for entry in entries:
            key = hashlib.sha256(f"{key}:{entry.sha256()}:{entry.strip}:{entry.max_fuzz}".encode()).hexdigest()
            cached = self._steps.get((target, entry.position))
            if cached is not None and cached[2] == key:
                prev_dir, deleted, _ = cached
                continue
            prev_dir, deleted = self._apply(entry, target, prev_dir, deleted, key)
            self._steps[(target, entry.position)] = (prev_dir, deleted, key)
        if prev_dir is None:
            prev_dir = self.work / f"{target}-empty"
            prev_dir.mkdir(parents=True, exist_ok=True)
        return prev_dir, deleted, key

    def _apply(self, entry, target: str, prev: Path | None, deleted: frozenset[str], key: str):
        out = self.work / f"{target}-{entry.position:04d}-{key[:16]}"
        if out.exists():
            shutil.rmtree(out)
        if prev is not None:
            shutil.copytree(prev, out, symlinks=True)
        else:
            out.mkdir(parents=True)
        view = _BaseView(self._base(target), DirTree(out), deleted)
        result = apply_to_tree(view, entry.read(), source=str(entry.path), strip=entry.strip,
                               max_fuzz=entry.max_fuzz, reverse=entry.reverse)
        if result.error is not None:
            raise result.error
        placed = [h for o in result.files if o.result is not None for h in o.result.hunks if h.status != "clean"]
        if not result.ok or placed:
            raise PatchApplyError(
                f"{entry.path}: does not apply cleanly to {target} at position {entry.position}: "
                + ", ".join(f"{o.path} {o.error or (o.result.error if o.result else '') or 'hunks failed'}"
                            for o in result.failed)
                + ", ".join(f"hunk {h.hunk.header} {h.status}" for h in placed)
            )
        new_deleted = set(deleted)
        for path, content in result.changes.items():
            dest = out / path  # safe: every path went through safe_relpath in apply_to_tree
            if content is None:
                new_deleted.add(path)
                if dest.is_file():
                    dest.unlink()
                continue
            new_deleted.discard(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(content[1])  # a symlink is kept as its target text: nothing is followed
        return out, frozenset(new_deleted)

    def close(self) -> None:
        if self._own_work:
            shutil.rmtree(self.work, ignore_errors=True)
