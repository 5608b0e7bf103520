"""A read-only, content-addressed file cache beside the store, so full outputs cost (almost) no disk.

A full output of the shipped series is ~20k files and ~500 MB; most of it is byte-identical between
outputs. As pnpm and Nix do, each distinct (blob, executable bit) is written once, as a read-only file
under ``<cache>/files/``, and every output is made of hard links to those files: a second output costs
its directories and a link per file, not the bytes. Symlinks are made as symlinks.

Outputs are therefore read-only: editing a file of an output in place would edit every output that
shares it. Files are created ``0444`` (``0555`` executable) with a fixed mtime; an entry whose mtime or
permissions changed was written through some link (root ignores permissions) and is never reused: it
is rewritten under a new inode before anything links to it again. Where hard links are impossible (the
output on another filesystem than the cache, a link-count limit), the file is copied instead.

``prune`` removes entries that no output links to any more (link count 1); ``materialize gc`` calls it.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from materialize.store import EXECUTABLE, SYMLINK, Entry, Store, blob_id, cache_errors

if TYPE_CHECKING:
    from concurrent.futures import Future

FIXED_MTIME_NS = 1_000_000_000 * 86_400  # 1970-01-02: any write through a link moves it
_NO_LINK = {errno.EXDEV, errno.EMLINK, errno.EPERM, errno.EOPNOTSUPP}
_WARM_THREADS = 3  # file creation waits on the kernel; a few at once go faster, more do not help
_WARM_BYTES = 64 << 20  # file bytes handed to the writers and not yet written (bounded memory)
_WARM_BATCH, _WARM_BATCH_BYTES = 64, 4 << 20  # files handed over at a time


def _perms(mode: str) -> int:
    return 0o555 if mode == EXECUTABLE else 0o444


def _make_dirs(root: str, directory: str, made: set[str]) -> None:
    """``os.makedirs(root/directory)`` for a caller that walks paths in sorted order and remembers
    what exists (``made``): one ``mkdir`` per new folder and no ``stat`` (3k folders of a full output)."""
    cut = [i for i, char in enumerate(directory) if char == "/"] + [len(directory)]
    for i in cut:
        prefix = directory[:i]
        if prefix in made:
            continue
        try:
            os.mkdir(f"{root}/{prefix}")
        except FileExistsError:
            if not os.path.isdir(f"{root}/{prefix}"):
                raise
        made.add(prefix)


def _write_stamped(fd: int, mode: str, data: bytes) -> None:
    """All of ``data``, then the entry's permissions (whatever the umask) and, last, the fixed mtime."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fchmod(fd, _perms(mode))
    os.utime(fd, ns=(FIXED_MTIME_NS, FIXED_MTIME_NS))


class FileCache:
    """``<cache root>/files/{r,x}/<sha[:2]>/<sha[2:]>``: one read-only file per blob and executable bit."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.root = store.root / "files"
        self._parents: set[str] = set()

    def path(self, sha: str, mode: str) -> Path:
        return Path(self._path(sha, mode))

    def _path(self, sha: str, mode: str) -> str:
        # Plain strings: this runs once per file of a 20k-file tree, where pathlib costs more than the link.
        return f"{self._root}/{'x' if mode == EXECUTABLE else 'r'}/{sha[:2]}/{sha[2:]}"

    @property
    def _root(self) -> str:
        return str(self.root)

    def _intact(self, path: str, mode: str) -> bool:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        return st.st_mtime_ns == FIXED_MTIME_NS and (st.st_mode & 0o7777) == _perms(mode)

    def _store(self, path: str, mode: str, data: bytes) -> None:
        """Write one entry so that no reader ever takes half a file for a whole one.

        A new entry is created in place (``O_EXCL``) and stamped with the fixed mtime only once all
        its bytes are written: until then ``_intact`` says no, so nothing links it. That is about
        half the cost of a temporary file, ``chmod``, ``utime`` and a rename, which matters for the
        20k files of a cold import. An entry that exists but is not intact (half-written by a killed
        run, or changed through a link) is replaced atomically by a temporary file and a rename.
        """
        parent, name = path.rsplit("/", 1)
        if parent not in self._parents:  # 512 fan-out folders: one mkdir each, not one per file
            os.makedirs(parent, exist_ok=True)
            self._parents.add(parent)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _perms(mode))
        except FileExistsError:
            if self._intact(path, mode):  # another run wrote it meanwhile
                return
            self._replace(f"{parent}/.tmp-{os.getpid()}-{threading.get_ident()}-{name}", path, mode, data)
            return
        try:
            _write_stamped(fd, mode, data)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        finally:
            os.close(fd)

    @staticmethod
    def _replace(tmp: str, path: str, mode: str, data: bytes) -> None:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, _perms(mode))
            try:
                _write_stamped(fd, mode, data)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def materialize_tree(self, tree: str, dest: Path, *, paths: Iterable[str] | None = None,
                         empty_dirs: Iterable[str] = ()) -> None:
        """Write ``tree`` at ``dest`` (which must not exist) as links into the cache, plus the
        ``empty_dirs`` a git tree cannot hold (skipped where a file of the tree now sits on the path).

        With ``paths``, only those files (an overlay): looked up one by one instead of listing the
        whole tree.
        """
        entries = self.store.list_tree(tree) if paths is None else self._lookup(tree, paths)
        root = str(dest)
        os.makedirs(root)
        self._place(root, entries, {""})
        for directory in empty_dirs:
            if not self._file_on_path(directory, entries.__contains__):
                os.makedirs(f"{root}/{directory}", exist_ok=True)

    def update_tree(self, tree: str, dest: Path, *, write: Iterable[str], remove: Iterable[str],
                    empty_dirs: Iterable[str] = (), drop_dirs: Iterable[str] = ()) -> None:
        """Bring an existing output ``dest`` to ``tree`` by touching only ``write`` (files whose entry
        in ``tree`` is new or changed: linked again) and ``remove`` (files to delete).

        Directories a removal leaves empty are removed as GNU patch and a fresh output would, except
        the ``empty_dirs`` of the tree, which are (re)created; ``drop_dirs`` are empty directories
        the previous output had and this one must not. The caller has checked that ``dest`` is the
        untouched output it thinks it is (``output._untouched``).
        """
        root = str(dest)
        keep = set(empty_dirs)
        emptied: set[str] = set(drop_dirs)
        for rel in remove:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{root}/{rel}")
            emptied.add(rel.rpartition("/")[0])
        for directory in sorted(emptied, key=len, reverse=True):  # deepest first
            while directory and directory not in keep:
                try:
                    os.rmdir(f"{root}/{directory}")
                except OSError:  # not empty (or already gone): the parents are not empty either
                    break
                directory = directory.rpartition("/")[0]
        entries = self._lookup(tree, write)
        for rel in entries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{root}/{rel}")  # replaced by a new link (a changed blob, mode or link target)
        self._place(root, entries, set())
        for directory in keep:
            if not self._file_on_path(directory, lambda rel: self.store.lookup(tree, rel) is not None):
                os.makedirs(f"{root}/{directory}", exist_ok=True)

    def _lookup(self, tree: str, paths: Iterable[str]) -> dict[str, Entry]:
        found = {path: self.store.lookup(tree, path) for path in paths}
        return {path: entry for path, entry in found.items() if entry is not None}

    @staticmethod
    def _file_on_path(directory: str, is_file: Callable[[str], bool]) -> bool:
        """Whether a file of the tree sits on ``directory`` or one of its parents (then it is not made)."""
        parts = directory.split("/")
        return any(is_file("/".join(parts[:i])) for i in range(1, len(parts) + 1))

    def _place(self, root: str, entries: Mapping[str, Entry], made: set[str]) -> None:
        """Link every entry under ``root`` (parents created as needed; ``made`` are known to exist),
        writing the cache entries that are missing or were tampered with first."""
        sources = {rel: self._path(e.sha, e.mode) for rel, e in entries.items() if e.mode != SYMLINK}
        with cache_errors(self.store.root):
            missing = {(entries[rel].sha, entries[rel].mode) for rel, source in sources.items()
                       if not self._intact(source, entries[rel].mode)}
            if missing:
                shas = sorted({sha for sha, _mode in missing})
                for sha, data in self.store.read_blobs(shas):
                    for mode in ("100644", EXECUTABLE):
                        if (sha, mode) in missing:
                            self._store(self._path(sha, mode), mode, data)
        for rel in sorted(entries):
            entry = entries[rel]
            parent = rel.rpartition("/")[0]
            if parent not in made:
                _make_dirs(root, parent, made)
            out = f"{root}/{rel}"
            if entry.mode == SYMLINK:
                os.symlink(self.store.read_blob_by_id(entry.sha).decode("utf-8", "surrogateescape"), out)
            else:
                self._link(sources[rel], out, entry.sha, entry.mode)

    @contextlib.contextmanager
    def warming(self) -> Iterator[None]:
        """While active, every file a cold import streams is written to the cache as it passes
        (``Store.blob_sink``), by a few threads beside the import: a full output of that tree then
        only links. Creating 20k files is the slow part of a cold run on most disks; here it
        overlaps decompression and ``git fast-import`` instead of following them, and the blobs are
        never read back out of the pack."""
        from concurrent.futures import ThreadPoolExecutor  # only a full output of a cold import needs it

        pending: collections.deque[tuple[Future[None], int]] = collections.deque()
        held = 0
        seen: set[tuple[str, str]] = set()
        claim = threading.Lock()
        batch: list[tuple[str, bytes]] = []
        batch_bytes = 0

        def write(files: list[tuple[str, bytes]]) -> None:
            for mode, data in files:
                # Hashed here, not in the import's thread: hashlib lets go of the GIL, so the hash
                # runs beside the import instead of in its critical path.
                sha = blob_id(data)
                with claim:  # one writer per entry: a second copy of the same file is only a duplicate
                    if (sha, mode) in seen:
                        continue
                    seen.add((sha, mode))
                self._store(self._path(sha, mode), mode, data)  # O_EXCL: an intact entry is kept

        def hand_over() -> None:
            nonlocal held, batch, batch_bytes
            pending.append((pool.submit(write, batch), batch_bytes))
            held += batch_bytes
            batch, batch_bytes = [], 0
            while held > _WARM_BYTES or (pending and pending[0][0].done()):
                future, size = pending.popleft()
                held -= size
                future.result()

        def sink(mode: str, data: bytes) -> None:
            # Files go to the writers in batches: a future per file cost the import's thread more
            # than the file's own bytes (20k futures, each with its lock and condition).
            nonlocal batch_bytes
            batch.append((EXECUTABLE if mode == EXECUTABLE else "100644", data))
            batch_bytes += len(data)
            if len(batch) >= _WARM_BATCH or batch_bytes >= _WARM_BATCH_BYTES:
                hand_over()

        with cache_errors(self.store.root), ThreadPoolExecutor(_WARM_THREADS) as pool:
            self.store.blob_sink = sink
            try:
                yield
                if batch:
                    hand_over()
            finally:
                self.store.blob_sink = None
                while pending:
                    pending.popleft()[0].result()

    def _link(self, source: str, out: str, sha: str, mode: str) -> None:
        try:
            os.link(source, out)
        except FileNotFoundError:  # pruned by a concurrent gc between the check and the link
            self._store(source, mode, self.store.read_blob_by_id(sha))
            os.link(source, out)
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            shutil.copyfile(source, out)  # another filesystem, or the inode's link limit: a copy
            os.chmod(out, _perms(mode))

    def _sweep_dead_temporaries(self) -> None:
        """Remove the ``.tmp-<pid>-<thread>-<name>`` files of runs killed while ``_replace`` rewrote an
        entry (a live run's are kept: it renames its own)."""
        from materialize.atomic import alive

        for path in self.root.glob("[rx]/??/.tmp-*"):
            pid = path.name[len(".tmp-"):].partition("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
                path.unlink(missing_ok=True)

    def prune(self) -> tuple[int, int]:
        """Remove entries no output links to any more; returns (files, bytes) removed."""
        files = size = 0
        if not self.root.is_dir():
            return 0, 0
        self._sweep_dead_temporaries()
        for path in self.root.glob("[rx]/??/*"):
            if path.name.startswith("."):  # a temporary of ``_replace`` (pathlib's "*" matches it): a live
                continue  # run's is about to be renamed into place; a dead run's was swept above
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if st.st_nlink == 1:
                path.unlink(missing_ok=True)
                files += 1
                size += st.st_size
        return files, size

