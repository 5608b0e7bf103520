"""The content-addressed store: a bare git repository in the user's cache.

Base trees and every applied prefix live here as git objects, so re-materializing after editing patch
k reuses prefixes 1..k-1, and applying a patch costs what the patch touches, not what the tree holds:
we read the touched blobs, write new blobs, and build the new tree through a temporary index
(``read-tree`` / ``update-index`` / ``write-tree``), never a checkout.

Habits from pre-commit's store: the location comes from ``MATERIALIZE_CACHE`` or the user cache dir,
the directory carries a README saying who owns it, and filling it happens under an exclusive lock.
git is driven as a subprocess with argument lists (no shell); gitpython gives us the repo handle and
its persistent ``cat-file --batch`` reader for fast blob reads.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import git
import platformdirs
from filelock import FileLock, Timeout
from gitdb import IStream

from materialize.errors import BusyError, MaterializeError

CACHE_ENV = "MATERIALIZE_CACHE"
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
REGULAR = "100644"
EXECUTABLE = "100755"
SYMLINK = "120000"
_README = """\
This directory is the cache of the `materialize` tool (patch-series materialization).
It holds a bare git repository (store.git) with the pinned upstream trees and every applied
prefix of every series materialized on this machine, plus downloaded upstream artifacts.
It is safe to delete; it will be rebuilt on demand. Override its location with MATERIALIZE_CACHE.
"""
# Deterministic commits: the same prefix always yields the same commit id on any machine.
_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "materialize",
    "GIT_AUTHOR_EMAIL": "materialize@localhost",
    "GIT_AUTHOR_DATE": "1970-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "materialize",
    "GIT_COMMITTER_EMAIL": "materialize@localhost",
    "GIT_COMMITTER_DATE": "1970-01-01T00:00:00+0000",
}


@dataclass(frozen=True)
class Entry:
    """One file in a tree: its git mode and blob id."""

    mode: str
    sha: str


def default_cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("materialize"))


class Store:
    """A bare repository plus an artifact directory, both under one cache root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.git_dir = root / "store.git"
        self.artifacts = root / "artifacts"
        self._repo: git.Repo | None = None

    @classmethod
    def open(cls, root: Path | None = None) -> Store:
        """Open (creating on first use) the store at ``root`` or the default cache directory."""
        store = cls(root or default_cache_dir())
        store._ensure()
        return store

    def _ensure(self) -> None:
        if (self.git_dir / "HEAD").exists():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with self.lock():
            if (self.git_dir / "HEAD").exists():  # another process may have done this already
                return
            tmp = Path(tempfile.mkdtemp(prefix=".store-", dir=self.root))
            subprocess.run(["git", "init", "-q", "--bare", str(tmp)], check=True)
            subprocess.run(["git", "--git-dir", str(tmp), "config", "gc.auto", "0"], check=True)
            subprocess.run(["git", "--git-dir", str(tmp), "config", "core.compression", "1"], check=True)
            os.replace(tmp, self.git_dir)
            (self.root / "README").write_text(_README)

    @contextlib.contextmanager
    def lock(self, *, wait: bool = True) -> Iterator[None]:
        """Exclusive lock for work that fills the cache; two runs at once serialize here."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.root / ".lock"))
        try:
            lock.acquire(timeout=-1 if wait else 0)
        except Timeout:
            raise BusyError(f"another materialize run holds {self.root / '.lock'}") from None
        try:
            yield
        finally:
            lock.release()

    @property
    def repo(self) -> git.Repo:
        if self._repo is None:
            self._repo = git.Repo(self.git_dir)
        return self._repo

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None

    # -- plumbing -------------------------------------------------------------------------------
    def git(self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None) -> bytes:
        """Run one git plumbing command on the store and return its stdout."""
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), *args],
            input=input,
            capture_output=True,
            env=full_env,
        )
        if proc.returncode != 0:
            raise MaterializeError(
                f"git {' '.join(args[:3])} failed in {self.git_dir}: {proc.stderr.decode(errors='replace').strip()}"
            )
        return proc.stdout

    def has_object(self, sha: str) -> bool:
        proc = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "cat-file", "-e", sha], capture_output=True
        )
        return proc.returncode == 0

    def write_blob(self, data: bytes) -> str:
        """Store a blob in-process (gitdb loose object): no subprocess per file."""
        info = self.repo.odb.store(IStream("blob", len(data), io.BytesIO(data)))
        return info.hexsha.decode() if isinstance(info.hexsha, bytes) else info.hexsha

    def read_blob_by_id(self, sha: str) -> bytes:
        return self.repo.odb.stream(bytes.fromhex(sha)).read()

    def lookup(self, tree: str, path: str) -> Entry | None:
        """The entry at ``path`` in ``tree`` (None when absent or not a file).

        Walks only the trees on the path (through gitpython's persistent cat-file reader), so the
        cost is the depth of the path, not the size of the tree.
        """
        try:
            obj = git.Tree(self.repo, bytes.fromhex(tree), path="") / path
        except (KeyError, ValueError):
            return None
        if obj.type != "blob":
            return None
        return Entry(f"{obj.mode:06o}", obj.hexsha)

    def read_blob(self, tree: str, path: str) -> bytes:
        entry = self.lookup(tree, path)
        if entry is None:
            raise KeyError(path)
        return self.read_blob_by_id(entry.sha)

    def list_tree(self, tree: str) -> dict[str, Entry]:
        """Every file of ``tree`` (recursive). Linear in the tree: used for output, not for applying."""
        out = self.git("ls-tree", "-r", "-z", "--full-tree", tree)
        entries: dict[str, Entry] = {}
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, name = record.split(b"\t", 1)
            mode, _kind, sha = meta.decode().split()
            entries[name.decode("utf-8", "surrogateescape")] = Entry(mode, sha)
        return entries

    def subtree(self, tree: str, root: str) -> str:
        """The tree id of directory ``root`` inside ``tree`` (the pin's ``root`` option)."""
        root = root.strip("/")
        if not root:
            return tree
        try:
            return self.git("rev-parse", f"{tree}:{root}").decode().strip()
        except MaterializeError:
            raise MaterializeError(f"root {root!r} does not exist in the upstream tree") from None

    def write_tree(self, base_tree: str, changes: Mapping[str, tuple[str, bytes] | None]) -> str:
        """A new tree: ``base_tree`` with ``changes`` applied (path -> (mode, content) or None to delete).

        Goes through a temporary index so only the changed blobs are hashed; read-tree/write-tree are
        git's own C loops over the index and reuse every unchanged subtree object.
        """
        lines: list[bytes] = []
        for path, change in sorted(changes.items()):
            if change is None:
                lines.append(b"0 " + b"0" * 40 + b"\t" + path.encode("utf-8", "surrogateescape") + b"\0")
            else:
                mode, content = change
                sha = self.write_blob(content)
                lines.append(f"{mode} {sha}\t".encode() + path.encode("utf-8", "surrogateescape") + b"\0")
        with tempfile.TemporaryDirectory(prefix="materialize-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.git("read-tree", base_tree, env=env)
            if lines:
                self.git("update-index", "-z", "--index-info", input=b"".join(lines), env=env)
            return self.git("write-tree", env=env).decode().strip()

    def commit(self, tree: str, parents: list[str], message: str) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        return self.git(*args, input=message.encode(), env=_COMMIT_ENV).decode().strip()

    def commit_message(self, commit: str) -> str:
        return self.git("cat-file", "commit", commit).decode().split("\n\n", 1)[1]

    def set_refs(self, refs: Mapping[str, str]) -> None:
        """Point many refs at once (one git process): keeps applied prefixes safe from gc."""
        if refs:
            script = "".join(f"update {ref} {sha}\n" for ref, sha in refs.items())
            self.git("update-ref", "--stdin", input=script.encode())

    def get_ref(self, ref: str) -> str | None:
        try:
            return self.git("rev-parse", "--verify", "-q", f"{ref}^{{commit}}").decode().strip() or None
        except MaterializeError:
            return None

    def tree_of(self, commit: str) -> str:
        return self.git("rev-parse", f"{commit}^{{tree}}").decode().strip()

    def changed_paths(self, old_tree: str, new_tree: str) -> tuple[list[str], list[str]]:
        """(changed or added, deleted) file paths between two trees; renames count as delete+add."""
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--name-status", old_tree, new_tree)
        parts = [p for p in out.split(b"\0") if p]
        changed: list[str] = []
        deleted: list[str] = []
        for status, name in zip(parts[::2], parts[1::2], strict=True):
            path = name.decode("utf-8", "surrogateescape")
            (deleted if status == b"D" else changed).append(path)
        return changed, deleted
