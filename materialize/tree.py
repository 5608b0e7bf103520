"""Read-only views of one target's source tree, whether it lives in the store or on disk.

Offline tests, serve and bisect all need "the files of target T at series position k". They read
through this protocol so they never care whether the tree was checked out: a ``StoreTree`` reads blobs
straight from the content-addressed store, a ``DirTree`` reads a directory (a materialized output or
an unpacked upstream).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class Tree(Protocol):
    """The files of one target at one position of the series."""

    target: str

    def read_bytes(self, path: str) -> bytes:
        """Return the content of ``path`` (POSIX, relative to the target root); KeyError if absent."""
        ...

    def exists(self, path: str) -> bool: ...

    def display_path(self, path: str) -> str:
        """The file name to show in tracebacks and messages for ``path``."""
        ...


def read_text(tree: Tree, path: str) -> str:
    """Decode a tree file as UTF-8, the encoding of every source file we test."""
    return tree.read_bytes(path).decode("utf-8")


class DirTree:
    """A tree that is a directory on disk (a materialized output or an unpacked upstream)."""

    def __init__(self, root: str | Path, target: str = "") -> None:
        self.root = Path(root).resolve()
        self.target = target

    def _resolve(self, path: str) -> Path:
        full = (self.root / path).resolve()
        if full != self.root and self.root not in full.parents:
            raise KeyError(f"{path} escapes {self.root}")
        return full

    def read_bytes(self, path: str) -> bytes:
        full = self._resolve(path)
        if not full.is_file():
            raise KeyError(path)
        return full.read_bytes()

    def exists(self, path: str) -> bool:
        try:
            return self._resolve(path).is_file()
        except KeyError:
            return False

    def display_path(self, path: str) -> str:
        return str(self.root / path)
