"""The content-addressed store: a bare git repository in the user's cache.

Base trees and every applied prefix live here as git objects, so re-materializing after editing patch
k reuses prefixes 1..k-1, and applying a patch costs what the patch touches, not what the tree holds:
we read the touched blobs, write new blobs, and rewrite only the trees on the touched paths, all
in-process (objects out of packs through ``packs.PackReader``), never a checkout.

Habits from pre-commit's store: the location comes from ``MATERIALIZE_CACHE`` or the user cache dir,
the directory carries a README saying who owns it, and filling it happens under an exclusive lock.
git is driven as a subprocess with argument lists (no shell) for what is not done in-process: pin
imports (fast-import), fetches, diffs of trees, listings for outputs, and what the pack reader cannot follow.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # subprocess is imported where a process starts: a command that starts none saves ~3 ms
    import subprocess

from materialize import digest
from materialize.atomic import atomic_write
from materialize.errors import BusyError, MaterializeError
from materialize.locking import Held, exclusive
from materialize.packs import PackReader, Unsupported, write_pack
from materialize.paths import check_links, is_git_dir_name

CACHE_ENV = "MATERIALIZE_CACHE"
_counter = itertools.count()
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
REGULAR = "100644"
EXECUTABLE = "100755"
SYMLINK = "120000"
TREE = "040000"
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


# One file in a tree: its git mode and blob id. Written in NamedTuple's call form because this module's
# annotations are strings (``from __future__``), and a class form would have typing compile each one
# (ForwardRef): the first compile() of a process costs ~10M instructions (tests/test_startup.py).
Entry = NamedTuple("Entry", [("mode", str), ("sha", str)])  # noqa: UP014 - see above


# A pipeline stage (decompressor | us | git fast-import) that can only hand over 64 KiB at a time, in
# 8 KiB writes, waits on its neighbour at every step: glibc's import spent most of its wall time
# blocked in read() and write() with both cores half idle. One MiB buffers let each stage run ahead.
PIPE_BUFFER = 1 << 20


def widen_pipe(stream: Any) -> None:
    """Ask Linux for a 1 MiB pipe buffer (the unprivileged maximum); elsewhere, or refused, keep it."""
    import fcntl  # noqa: PLC0415 - POSIX only, and only for imports

    with contextlib.suppress(OSError):
        fcntl.fcntl(stream.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BUFFER)


def blob_id(data: bytes) -> str:
    """The id git gives ``data`` as a blob (hashed without copying ``data`` behind its header)."""
    hashed = digest.sha1(b"blob %d\0" % len(data), size=len(data) + 16)
    hashed.update(data)
    return hashed.hexdigest()


def _loose_bytes(kind: str, data: bytes) -> bytes:
    """An object as git hashes it and stores it loose (zlib'd): header, NUL, content."""
    return f"{kind} {len(data)}\0".encode() + data


def die_with_parent() -> None:
    """In a child process: be killed when we are. A ``kill -9`` of materialize must not leave a git
    checkout running on, writing into an output folder that the next run is about to sweep."""
    if sys.platform == "linux":
        import ctypes  # noqa: PLC0415 - only in the forked child

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL (Linux's numbers)


@functools.cache
def _setpriv(cache: Path | None) -> str | None:
    """util-linux's ``setpriv``, when it can set the parent-death signal (util-linux 2.33 and later).

    Checked by running it once; a success is remembered in ``cache`` against the binary's identity,
    so later commands skip that extra process."""
    import shutil
    import subprocess

    path = shutil.which("setpriv") if sys.platform == "linux" else None
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = f"{os.path.realpath(path)} {st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}\n"
    memo = cache / "setpriv-works" if cache is not None else None
    with contextlib.suppress(OSError):
        if memo is not None and memo.read_text() == stamp:
            return path
    if subprocess.run([path, "--pdeathsig", "KILL", "--", "true"], capture_output=True).returncode:
        return None
    if memo is not None:
        with contextlib.suppress(OSError):  # a read-only cache only costs the next command the check again
            atomic_write(memo, stamp.encode())
    return path


def dying_with_parent(argv: list[str], cache: Path | None = None) -> tuple[list[str], Callable[[], None] | None]:
    """``argv`` and the ``preexec_fn`` that make a child die with us (``die_with_parent``'s promise).

    Where ``setpriv --pdeathsig`` works, the child runs under it and needs no preexec_fn: Python then
    starts it with vfork and exec (~4 ms), where a preexec_fn forces a fork that runs Python in the
    child (~11 ms; every workspace command runs three or four git plumbing commands). The signal is
    set after we return, so a shell between setpriv and the command checks that its parent is still
    us: killed in that window, the child would otherwise never get the signal. ``cache`` (the store's
    root) remembers that setpriv works."""
    setpriv = _setpriv(cache)
    if setpriv is None:
        return argv, die_with_parent
    return [setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", 'test "$PPID" = "$0" && exec "$@"',
            str(os.getpid()), *argv], None


@contextlib.contextmanager
def cache_errors(root: Path) -> Iterator[None]:
    """A cache that cannot be written (read-only filesystem, full disk, no permission) is one line,
    exit 1, naming the cache and the way out, never a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None:
            raise
        raise MaterializeError(
            f"cannot write the materialize cache {root}: {exc.strerror or exc}"
            f" (free space, fix its permissions, or point {CACHE_ENV} at a writable directory)"
        ) from None


def default_cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser().resolve()
    import platformdirs  # only without MATERIALIZE_CACHE: ~10 ms of import every command would pay

    return Path(platformdirs.user_cache_dir("materialize"))


def _tree_records(data: bytes) -> Iterator[tuple[bytes, bytes, str]]:
    """(mode, name, object id) of each entry of a git tree object, as written (names unchecked, a
    name given twice given twice)."""
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        yield data[pos:space], data[space + 1:nul], data[nul + 1:nul + 21].hex()
        pos = nul + 21


class Store:
    """A bare repository plus an artifact directory, both under one cache root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.git_dir = root / "store.git"
        self.artifacts = root / "artifacts"
        self._cat: subprocess.Popen | None = None  # ``git cat-file --batch``: what the pack reader cannot read
        self._packs = PackReader(self.git_dir / "objects" / "pack")
        self._tree_cache: dict[str, dict[str, tuple[str, str]]] = {}
        self._listings: dict[str, dict[str, Entry]] = {}
        self._links: dict[str, dict[str, str]] = {}  # tree -> its symlinks (path -> target): ``links_of``
        self.blob_sink: Callable[[str, bytes], None] | None = None
        """Given (mode, bytes) of every file an import writes, when set (``FileCache.warming``)."""
        self._pending: dict[str, tuple[str, bytes]] | None = None  # new objects of a ``batch``, by sha
        self._pending_bytes = 0

    @classmethod
    def open(cls, root: Path | None = None) -> Store:
        """Open (creating on first use) the store at ``root`` or the default cache directory."""
        store = cls(root or default_cache_dir())
        store._ensure()
        return store

    def _ensure(self) -> None:
        if (self.git_dir / "HEAD").exists():
            return
        import subprocess

        with cache_errors(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
        with self.lock(), cache_errors(self.root):
            if (self.git_dir / "HEAD").exists():  # another process may have done this already
                return
            import shutil
            import tempfile

            tmp = Path(tempfile.mkdtemp(prefix=".store-", dir=self.root))
            try:
                for args in (["init", "-q", "--bare", str(tmp)], ["--git-dir", str(tmp), "config", "gc.auto", "0"],
                             ["--git-dir", str(tmp), "config", "core.compression", "1"]):
                    proc = subprocess.run(["git", *args], capture_output=True)
                    if proc.returncode != 0:
                        raise MaterializeError(f"cannot create the store in {self.root}: "
                                               f"{proc.stderr.decode(errors='replace').strip()}")
                os.replace(tmp, self.git_dir)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            (self.root / "README").write_text(_README)

    @contextlib.contextmanager
    def lock(self, *, wait: bool = True) -> Iterator[None]:
        """Exclusive lock for work that fills the cache or moves a ref; two runs at once serialize here.

        Re-entrant (``materialize.locking``: an flock, counted per thread), so a pin import that holds
        it can record its ref through :meth:`set_refs`, which takes it too. The kernel drops the flock
        of a killed process, so a ``kill -9`` never leaves this lock held.
        """
        with contextlib.ExitStack() as held:
            with cache_errors(self.root):
                self.root.mkdir(parents=True, exist_ok=True)
                key = str(self.root / ".lock")
                try:
                    held.enter_context(exclusive(key, wait=wait))
                except Held:
                    raise BusyError(f"another materialize run holds {key}") from None
            yield

    def _reader(self) -> subprocess.Popen:
        """One ``git cat-file --batch`` per store, started on first use, for packed objects.

        Spawning it costs a few ms where importing gitpython for its reader cost ~0.25 s of every
        command that touched a packed object (every pin import is a pack). git re-scans the pack
        directory when an object is missing, so packs written after it started are found too.
        """
        import subprocess

        if self._cat is None or self._cat.poll() is not None:
            argv, preexec = dying_with_parent(["git", "--git-dir", str(self.git_dir), "cat-file", "--batch"], self.root)
            self._cat = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=preexec)
        return self._cat

    def close(self) -> None:
        """End the packed-object reader (it also ends with this process)."""
        if self._cat is not None:
            assert self._cat.stdin is not None and self._cat.stdout is not None
            self._cat.stdin.close()
            self._cat.stdout.close()
            self._cat.wait()
            self._cat = None

    # -- plumbing -------------------------------------------------------------------------------
    def git(self, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None) -> bytes:
        """Run one git plumbing command on the store and return its stdout."""
        import subprocess

        self.flush()  # git reads the object store: what a batch holds must be there first
        full_env = {**os.environ, **(env or {})}
        argv, preexec = dying_with_parent(["git", "--git-dir", str(self.git_dir), *args], self.root)
        proc = subprocess.run(argv, input=input, capture_output=True, env=full_env, preexec_fn=preexec)
        if proc.returncode != 0:
            raise MaterializeError(
                f"git {' '.join(args[:3])} failed in {self.git_dir}: {proc.stderr.decode(errors='replace').strip()}"
            )
        return proc.stdout

    def has_object(self, sha: str) -> bool:
        if self._pending and sha in self._pending:
            return True
        import subprocess

        proc = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "cat-file", "-e", sha], capture_output=True
        )
        return proc.returncode == 0

    def write_blob(self, data: bytes) -> str:
        return self.write_object("blob", data)

    def read_blob_by_id(self, sha: str) -> bytes:
        return self.read_object(sha)[1]

    def lookup(self, tree: str, path: str) -> Entry | None:
        """The file entry at ``path`` in ``tree`` (None when absent or a directory).

        Reads only the trees on the path (memoized), so the cost is the depth of the path, not the
        size of the tree.
        """
        current: str | None = tree
        *dirs, leaf = path.split("/")
        for part in dirs:
            found = self._tree_entries(current).get(part)
            if found is None or found[0] != TREE:
                return None
            current = found[1]
        found = self._tree_entries(current).get(leaf)
        if found is None or found[0] == TREE:
            return None
        return Entry(*found)

    def is_dir(self, tree: str, path: str) -> bool:
        """Whether ``path`` is a folder of ``tree`` (:meth:`lookup` answers files only): the
        memoized trees on the path are walked, as there."""
        current = tree
        for part in path.split("/"):
            found = self._tree_entries(current).get(part)
            if found is None or found[0] != TREE:
                return False
            current = found[1]
        return True

    def read_blob(self, tree: str, path: str) -> bytes:
        entry = self.lookup(tree, path)
        if entry is None:
            raise KeyError(path)
        return self.read_blob_by_id(entry.sha)

    def list_tree(self, tree: str) -> dict[str, Entry]:
        """Every file of ``tree`` (recursive). Linear in the tree: used for output, not for applying.

        Memoized per tree id (trees never change): publishing checks the links, then links the files.
        """
        if tree in self._listings:
            return self._listings[tree]
        out = self.git("ls-tree", "-r", "-z", "--full-tree", tree)
        entries: dict[str, Entry] = {}
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, name = record.split(b"\t", 1)
            mode, _kind, sha = meta.decode().split()
            entries[name.decode("utf-8", "surrogateescape")] = Entry(mode, sha)
        self._listings[tree] = entries
        return entries

    def read_blobs(self, shas: list[str]) -> Iterator[tuple[str, bytes]]:
        """(sha, content) of many blobs through one ``git cat-file --batch`` (loose or packed alike).

        One subprocess instead of gitpython's import and reader: what publishing needs for thousands
        of files, or checking every symlink of a tree."""
        import subprocess

        argv, preexec = dying_with_parent(["git", "--git-dir", str(self.git_dir), "cat-file", "--batch"], self.root)
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=preexec)
        assert proc.stdin is not None and proc.stdout is not None

        def feed(items: Iterable[str]) -> None:
            try:
                for sha in items:
                    proc.stdin.write(f"{sha}\n".encode())  # type: ignore[union-attr]
                proc.stdin.close()  # type: ignore[union-attr]
            except BrokenPipeError:
                pass

        import threading

        writer = threading.Thread(target=feed, args=(shas,), daemon=True)
        writer.start()
        try:
            for sha in shas:
                yield sha, self._batch_answer(proc.stdout, sha)[1]
        finally:
            proc.stdout.close()
            proc.kill()
            proc.wait()
            writer.join()

    def check_tree_links(self, tree: str, *, origin: str, extra_dirs: Iterable[str] = ()) -> None:
        """Refuse (exit 4) a tree any of whose symlinks escapes it, following chains as the kernel does.

        The links come from ``links_of`` (a full listing once per tree, remembered); whether a path
        on a link's way exists is asked of the tree itself (the trees on that path, memoized), so a
        re-check after a patch costs its links, not the size of the tree. Callers run it when
        something could have changed a resolution: a git pin's first import, or a patch that
        removed something (``engine.tree_after``).
        """
        links = self.links_of(tree)
        if not links:
            return
        empty = {"/".join(parts[:i]) for parts in (d.split("/") for d in extra_dirs) for i in range(1, len(parts) + 1)}

        def exists(path: str) -> bool:
            return path in empty or self.lookup(tree, path) is not None or self.is_dir(tree, path)

        check_links(links, exists, origin=origin)

    def links_of(self, tree: str) -> dict[str, str]:
        """path -> target of every symlink of ``tree``. A tree never changes, so this is remembered in
        memory and in ``<root>/links/<tree>`` (a full listing of tt-metal or glibc costs ~0.2 s), and a
        tree made from a known one by ``write_tree`` learns its links from the changes (``derive_links``)."""
        known = self._links.get(tree)
        if known is not None:
            return known
        import json

        memo = self.root / "links" / tree
        try:
            links = json.loads(memo.read_text("utf-8", "surrogateescape"))
        except (OSError, ValueError):
            entries = self.list_tree(tree)
            link_ids = {path: entry.sha for path, entry in entries.items() if entry.mode == SYMLINK}
            targets = dict(self.read_blobs(sorted(set(link_ids.values())))) if link_ids else {}
            links = {path: targets[sha].decode("utf-8", "surrogateescape") for path, sha in link_ids.items()}
            with contextlib.suppress(OSError):
                memo.parent.mkdir(exist_ok=True)
                atomic_write(memo, json.dumps(links, ensure_ascii=False).encode("utf-8", "surrogateescape"))
        self._links[tree] = links
        return links

    def derive_links(self, old_tree: str, new_tree: str, changes: Mapping[str, tuple[str, bytes] | None]) -> None:
        """Remember ``new_tree``'s links when ``old_tree``'s are known (``new_tree`` is ``old_tree`` with
        ``changes``): the engine's loop carries them from patch to patch at the cost of the changes."""
        links = self._links.get(old_tree)
        if links is None or new_tree in self._links:
            return
        links = dict(links)
        for path, content in changes.items():
            if content is not None and content[0] == SYMLINK:
                links[path] = content[1].decode("utf-8", "surrogateescape")
            else:
                links.pop(path, None)
        self._links[new_tree] = links

    def check_tree_names(self, tree: str, *, origin: str) -> None:
        """Refuse a tree that git could hold but no checkout should write: an entry named ``..``,
        ``.``, ``.git`` (any case or alias), empty or holding a ``/``, a name twice in one folder (exit
        4), or a submodule, a commit whose files are not in this repository (exit 3).

        Archives and directories pass every member through ``safe_relpath`` as they are imported; a
        fetched git tree arrives whole (``git hash-object --literally`` writes any of these, and a
        fetch takes them), so its tree objects are read here, level by level, and judged by name.
        """
        from materialize.errors import UnsafePathError, UpstreamError

        level = [(tree, "")]
        while level:
            objects = self.read_objects(sorted({sha for sha, _ in level}))
            below: list[tuple[str, str]] = []
            for sha, folder in level:
                seen: set[bytes] = set()
                for mode, name, child in _tree_records(objects[sha][1]):
                    text = name.decode("utf-8", "surrogateescape")
                    where = f"{origin}: tree entry {folder + text!r}"
                    if name in (b"", b".", b"..") or b"/" in name or is_git_dir_name(text):
                        raise UnsafePathError(f"{where} is not a plain file name (a checkout would write it "
                                              "outside its folder or into a .git folder)")
                    if name in seen:
                        raise UnsafePathError(f"{where} appears twice in one folder")
                    seen.add(name)
                    if mode == b"160000":
                        raise UpstreamError(f"{origin}: {folder}{text} is a submodule (commit {child}): its files"
                                            " are not in this repository; pin it as its own target")
                    if mode in (b"40000", b"040000"):
                        below.append((child, f"{folder}{text}/"))
                    elif mode not in (b"100644", b"100755", b"120000", b"100664"):
                        raise UnsafePathError(f"{where} has mode {mode.decode(errors='replace')}, which is"
                                              " neither a file, a link nor a folder")
            level = below

    def subtree(self, tree: str, root: str) -> str:
        """The tree id of directory ``root`` inside ``tree`` (the pin's ``root`` option)."""
        root = root.strip("/")
        if not root:
            return tree
        # Walked here, not `git rev-parse TREE:ROOT`: that answers a blob for a file or a symlink, which
        # was then read as a tree (a ValueError traceback).
        current = tree
        for part in root.split("/"):
            found = self._tree_entries(current).get(part)
            if found is None:
                raise MaterializeError(f"root {root!r} does not exist in the upstream tree")
            if found[0] != TREE:
                raise MaterializeError(f"root {root!r} is not a folder of the upstream tree (a file or a symlink)")
            current = found[1]
        return current

    def _loose_path(self, sha: str) -> str:
        """The loose object's file name, as a string: path pins hash every file of the pin on every
        workspace command, and building a ``Path`` per object cost more than hashing it."""
        return f"{self.git_dir}/objects/{sha[:2]}/{sha[2:]}"

    def write_object(self, kind: str, data: bytes) -> str:
        """Store an object, in-process, exactly as git would: a loose file, or held for a ``batch``.

        No subprocess and no fsync per object: the hash is computed here, an object that already
        exists is not rewritten, and a loose file is published with an atomic rename so two runs at
        once can only ever write the same bytes under the same name.
        """
        raw = _loose_bytes(kind, data)
        sha = digest.sha1(raw).hexdigest()
        path = self._loose_path(sha)
        if os.path.exists(path):
            return sha
        if self._pending is not None:
            if sha not in self._pending:
                self._pending[sha] = (kind, data)
                self._pending_bytes += len(data)
                if self._pending_bytes > BATCH_BYTES:
                    self.flush()
            return sha
        self._write_loose(path, raw)
        return sha

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the objects written meanwhile in memory and store them together at the end.

        Applying glibc's 109 patches to a fresh tree makes ~2,300 new blobs, trees and commits; as
        loose files that was 2,300 file creations (~0.5 ms each on a discard-mounted disk, 1.3 s of a
        cold run), as one pack it is two files. Nothing outside sees the difference: this store reads
        held objects from memory, and every git process or ref update (``git``, ``set_refs``)
        writes them out first, so a ref never names an object that is not on disk. Re-entrant.
        """
        if self._pending is not None:
            yield
            return
        self._pending, self._pending_bytes = {}, 0
        try:
            yield
        finally:
            try:
                self.flush()  # also after an error: the prefixes that did apply keep their objects
            finally:
                self._pending = None

    def flush(self) -> None:
        """Write what a ``batch`` holds: a few objects as loose files, many as one pack."""
        pending = self._pending
        if not pending:
            return
        self._pending, self._pending_bytes = {}, 0
        if len(pending) < PACK_AT:
            for sha, (kind, data) in pending.items():
                path = self._loose_path(sha)
                if not os.path.exists(path):
                    self._write_loose(path, _loose_bytes(kind, data))
            return
        with self.lock():  # every pack writer and every sweep of partial packs runs under it
            sweep_partial_packs(self.git_dir / "objects" / "pack", self.root)
            write_pack(self.git_dir / "objects" / "pack", pending, self.root)

    def _write_loose(self, path: str, raw: bytes) -> None:
        folder = os.path.dirname(path)
        tmp = Path(folder, f"tmp_obj_{os.getpid()}_{next(_counter)}")
        with cache_errors(self.root):
            try:
                Path(folder).mkdir(exist_ok=True)
                tmp.write_bytes(zlib.compress(raw, 1))
                os.replace(tmp, path)
            except BaseException:
                tmp.unlink(missing_ok=True)  # a full disk must not leave a half-written object behind
                raise

    def _batch_answer(self, stdout: Any, sha: str) -> tuple[str, bytes]:
        """One answer of ``git cat-file --batch``: its header line, the object, the newline after it."""
        header = stdout.readline().split()
        if len(header) != 3:
            raise MaterializeError(f"store {self.git_dir}: object {sha} is missing")
        data = stdout.read(int(header[2]))
        stdout.read(1)
        return header[1].decode(), data

    def read_object(self, sha: str) -> tuple[str, bytes]:
        """(type, content) of an object (see :meth:`read_objects`)."""
        return self.read_objects([sha])[sha]

    def read_objects(self, shas: Iterable[str]) -> dict[str, tuple[str, bytes]]:
        """(type, content) of many objects, loose or packed, read in-process (``packs.PackReader``);
        only what that reader cannot follow, or cannot find, is asked of ``git cat-file --batch``,
        all at once, which also says which object is missing."""
        found: dict[str, tuple[str, bytes]] = {}
        packed: list[str] = []
        for sha in shas:
            held = self._pending.get(sha) if self._pending else None
            if held is not None:
                found[sha] = held
                continue
            try:
                with open(self._loose_path(sha), "rb") as handle:
                    raw = zlib.decompress(handle.read())
            except FileNotFoundError:
                try:
                    in_pack = self._packs.get(sha)
                except Unsupported:
                    in_pack = None
                if in_pack is None:  # missing (git says so), or in a pack git must read
                    packed.append(sha)
                else:
                    found[sha] = in_pack
                continue
            header, _, body = raw.partition(b"\0")
            found[sha] = (header.split(b" ", 1)[0].decode(), body)
        if packed:
            reader = self._reader()
            assert reader.stdin is not None and reader.stdout is not None
            for start in range(0, len(packed), 1000):  # the requests fit in the pipe: no deadlock
                chunk = packed[start:start + 1000]
                reader.stdin.write("".join(f"{sha}\n" for sha in chunk).encode())
                reader.stdin.flush()
                for sha in chunk:
                    found[sha] = self._batch_answer(reader.stdout, sha)
        return found

    def _tree_entries(self, tree: str | None) -> dict[str, tuple[str, str]]:
        """name -> (mode, sha) of one tree object (not recursive); memoized, trees never change."""
        if tree is None or tree == EMPTY_TREE:
            return {}
        cached = self._tree_cache.get(tree)
        if cached is not None:
            return cached
        _kind, data = self.read_object(tree)
        entries = {name.decode("utf-8", "surrogateescape"): (mode.decode().rjust(6, "0"), sha)
                   for mode, name, sha in _tree_records(data)}
        self._tree_cache[tree] = entries
        return entries

    def _write_tree_object(self, entries: dict[str, tuple[str, str]]) -> str:
        # git sorts tree entries by name, comparing a subtree's name as if it ended in "/".
        def key(name: str) -> bytes:
            raw = name.encode("utf-8", "surrogateescape")
            return raw + b"/" if entries[name][0] == TREE else raw

        body = b"".join(
            (entries[n][0].lstrip("0") if entries[n][0] == TREE else entries[n][0]).encode()
            + b" " + n.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(entries[n][1])
            for n in sorted(entries, key=key)
        )
        sha = self.write_object("tree", body)
        self._tree_cache[sha] = dict(entries)  # the next patch reads this tree again: skip the parse
        return sha

    def write_tree(self, base_tree: str, changes: Mapping[str, tuple[str, bytes] | None]) -> str:
        """A new tree: ``base_tree`` with ``changes`` applied (path -> (mode, content) or None to delete).

        Only the trees on the changed paths are read and rewritten, in-process; every other subtree
        object is reused by id. So the cost follows the files a patch touches (and their directories),
        not the size of the tree: no index, no checkout, no subprocess.
        """
        nested: dict[str, object] = {}
        for path, change in changes.items():
            node = nested
            *dirs, leaf = path.split("/")
            for part in dirs:
                child = node.get(part)
                if child is None:  # absent, or a file (a link, say) deleted to make room for a directory
                    child = node[part] = {}
                elif not isinstance(child, dict):
                    raise MaterializeError(f"{path}: a file and a directory would share the name {part!r}")
                node = child
            if change is None:
                if not isinstance(node.get(leaf), dict):  # a deletion never removes a directory made here
                    node[leaf] = None
            elif isinstance(node.get(leaf), dict):
                raise MaterializeError(f"{path}: a file and a directory would share the name {leaf!r}")
            else:
                node[leaf] = (change[0], self.write_blob(change[1]))
        return self._rebuild(base_tree, nested) or EMPTY_TREE

    def _rebuild(self, tree: str | None, nested: dict[str, object]) -> str | None:
        """``tree`` with the ``nested`` changes, bottom-up; None when nothing is left. An explicit stack,
        not recursion: a path may be ~2,000 folders deep (PATH_MAX), past Python's recursion limit."""
        # One frame per folder being rebuilt: its entries (a copy: the memo is shared, never mutate a
        # cached tree), the changes still to make in it, and its name in the parent folder.
        frames: list[tuple[dict[str, tuple[str, str]], Iterator[tuple[str, object]], str]] = [
            (dict(self._tree_entries(tree)), iter(nested.items()), "")]
        while True:
            entries, changes, _name = frames[-1]
            for name, change in changes:
                if isinstance(change, dict):
                    current = entries.get(name)
                    below = current[1] if current and current[0] == TREE else None
                    frames.append((dict(self._tree_entries(below)), iter(change.items()), name))
                    break
                if change is None:
                    entries.pop(name, None)
                else:
                    entries[name] = change  # type: ignore[assignment]  # (mode, blob sha)
            else:  # every change of this folder made: write it, and put it in its parent
                entries, _changes, name = frames.pop()
                sha = self._write_tree_object(entries) if entries else None
                if not frames:
                    return sha
                if sha is None:
                    frames[-1][0].pop(name, None)
                else:
                    frames[-1][0][name] = (TREE, sha)

    def commit(self, tree: str, parents: list[str], message: str) -> str:
        """A deterministic commit (fixed author and date): the same prefix is the same commit anywhere."""
        who = f"{_COMMIT_ENV['GIT_AUTHOR_NAME']} <{_COMMIT_ENV['GIT_AUTHOR_EMAIL']}> 0 +0000"
        head = f"tree {tree}\n" + "".join(f"parent {p}\n" for p in parents)
        return self.write_object("commit", f"{head}author {who}\ncommitter {who}\n\n{message}".encode())

    def commit_message(self, commit: str) -> str:
        return self.read_commit(commit)[1]

    def read_commit(self, commit: str) -> tuple[str, str]:
        """(tree, message) of a commit from one read: a cached prefix needs both."""
        return self.read_commits([commit])[commit]

    def read_commits(self, commits: Iterable[str]) -> dict[str, tuple[str, str]]:
        """(tree, message) of each commit, read together (see ``read_objects``)."""
        return {sha: (data[5:45].decode(), data.decode().split("\n\n", 1)[1])
                for sha, (_kind, data) in self.read_objects(commits).items()}

    def set_refs(self, refs: Mapping[str, str | None]) -> None:
        """Point many refs at once (None deletes): keeps applied prefixes safe from gc.

        Every ref of the store moves under the store lock, so concurrent runs never race git's
        per-ref ``.lock`` files; and a ``.lock`` file found while we hold the lock belongs to a git
        that was killed mid-update (``kill -9`` of its materialize), so it is removed first.
        """
        if not refs:
            return
        self.flush()
        with self.lock():
            self.clear_stale_ref_locks(list(refs))
            if all(sha and _SIMPLE_REF.fullmatch(ref) and _SHA.fullmatch(sha) for ref, sha in refs.items()):
                with cache_errors(self.root):
                    for ref, sha in refs.items():
                        self._write_loose_ref(ref, sha)
                return
            script = "".join(f"update {ref} {sha}\n" if sha else f"delete {ref}\n" for ref, sha in refs.items())
            self.git("update-ref", "--stdin", input=script.encode())

    def _write_loose_ref(self, ref: str, sha: str) -> None:
        """Point ``ref`` at ``sha`` as git does, without a git process: the value goes into ``REF.lock``
        (created exclusively) and is renamed over the loose ref, which takes precedence over any
        ``packed-refs`` line. The store keeps no reflogs (bare), so there is nothing else to write.
        Only names made of plain components come here (``_SIMPLE_REF``); deletions, which may have to
        rewrite ``packed-refs``, and anything else are git's (``update-ref --stdin``)."""
        path = self.git_dir / ref
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.with_name(path.name + ".lock")
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            with open(fd, "wb") as handle:
                handle.write(f"{sha}\n".encode())
            os.replace(lock, path)
        except BaseException:
            lock.unlink(missing_ok=True)
            raise

    def clear_stale_ref_locks(self, refs: list[str] | None = None) -> list[Path]:
        """Remove git ``*.lock`` files left by killed processes; call only while holding :meth:`lock`.

        With ``refs``, only those refs' locks (plus the repository-wide ones) are looked at, a few
        ``stat`` calls; without, the whole refs directory is swept.
        """
        candidates = [self.git_dir / name for name in ("packed-refs.lock", "HEAD.lock", "config.lock", "shallow.lock")]
        if refs is None:
            candidates += list((self.git_dir / "refs").rglob("*.lock"))
        else:
            candidates += [self.git_dir / f"{ref}.lock" for ref in refs]
        removed = []
        with cache_errors(self.root):
            for path in candidates:
                if path.is_file():
                    path.unlink()
                    removed.append(path)
        return removed

    def read_refs(self, prefix: str) -> dict[str, str]:
        """All refs under ``prefix`` in one git call (ref -> object id): for listing (gc, tests)."""
        out = self.git("for-each-ref", "--format=%(refname) %(objectname)", prefix).decode()
        return dict(line.split(" ", 1) for line in out.splitlines() if line)

    def lookup_refs(self, refs: Iterable[str]) -> dict[str, str]:
        """The object ids of those of ``refs`` that exist, read in-process: a loose ref file each,
        else ``packed-refs``. ``for-each-ref`` lists every prefix ever applied (they only grow) in a
        subprocess; a run needs only its own series' few."""
        found: dict[str, str] = {}
        packed: dict[str, str] | None = None
        for ref in refs:
            try:
                with open(self.git_dir / ref, "rb") as handle:
                    value = handle.read(41).strip().decode()
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                value = ""
            if len(value) != 40:  # not loose (or being written): packed-refs has it, if anything does
                if packed is None:
                    packed = self._packed_refs()
                value = packed.get(ref, "")
            if value:
                found[ref] = value
        return found

    def _packed_refs(self) -> dict[str, str]:
        try:
            text = (self.git_dir / "packed-refs").read_text()
        except FileNotFoundError:
            return {}
        return {name: sha for sha, _, name in (line.partition(" ") for line in text.splitlines())
                if len(sha) == 40 and name}

    def get_ref(self, ref: str) -> str | None:
        """The commit ``ref`` points at, or None (no such ref, or a commit the store no longer has).

        Read in-process like ``lookup_refs`` and checked by reading the commit, which the caller
        reads next anyway: ``git rev-parse --verify`` cost a process per pin on every command."""
        sha = self.lookup_refs([ref]).get(ref)
        if sha is None:
            return None
        try:
            kind, _data = self.read_object(sha)
        except (MaterializeError, zlib.error):  # missing or damaged: the caller imports again, as with no ref
            return None
        return sha if kind == "commit" else None

    def tree_of(self, commit: str) -> str:
        return self.read_commit(commit)[0]

    def changed_paths(self, old_tree: str, new_tree: str) -> tuple[list[str], list[str]]:
        """(changed or added, deleted) file paths between two trees; renames count as delete+add.
        The same tree twice (an output updated to what it holds already) costs no git process."""
        if old_tree == new_tree:
            return [], []
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--name-status", old_tree, new_tree)
        parts = [p for p in out.split(b"\0") if p]
        changed: list[str] = []
        deleted: list[str] = []
        for status, name in zip(parts[::2], parts[1::2], strict=True):
            path = name.decode("utf-8", "surrogateescape")
            (deleted if status == b"D" else changed).append(path)
        return changed, deleted


# Ref names written in-process: refs/ and components of letters, digits, '-' and '_' (never a '.',
# so no '..', '.lock' or hidden component); anything else goes through git, which checks its format.
_SIMPLE_REF = re.compile(r"refs(/[A-Za-z0-9_-]+)+")
_SHA = re.compile(r"[0-9a-f]{40}")
_PLAIN_PATH = re.compile(r'[^"\\\x00-\x1f\x7f]*')


def _fast_import_path(path: str) -> bytes:
    """A path in fast-import's C-style quoted form (any byte but NUL survives)."""
    raw = path.encode("utf-8", "surrogateescape")
    if _PLAIN_PATH.fullmatch(path):  # nearly every path: nothing to escape (bytes >= 0x80 pass as they are)
        return b'"' + raw + b'"'
    out = bytearray(b'"')
    for byte in raw:
        if byte in (0x22, 0x5C):
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte == 0x7F:
            out += f"\\{byte:03o}".encode()
        else:
            out.append(byte)
    return bytes(out + b'"')


BATCH_BYTES = 64 << 20  # a batch holding more than this is written out early (memory stays bounded)
PACK_AT = 64  # fewer objects than this are written loose: every pack is one more index each lookup reads
def sweep_partial_packs(folder: Path, root: Path) -> None:
    """Remove what a killed pack writer left: ``tmp_*`` files, and a pack renamed into place whose
    index never followed (git ignores it; only the disk saw it). Imports, fetches and batches write
    packs only under the store lock, which our caller holds, so none of these belongs to a live run."""
    with cache_errors(root):
        for leftover in folder.glob("tmp_*"):
            leftover.unlink(missing_ok=True)
        for pack in folder.glob("pack-*.pack"):
            if not pack.with_suffix(".idx").exists():
                pack.unlink(missing_ok=True)


class PackWriter:
    """Write one import's blobs and trees as a single pack through ``git fast-import``.

    A cold import of a large upstream (glibc: 22k files) would otherwise be 22k loose object files
    written one by one; fast-import streams every blob into one pack (big blobs straight through, so
    memory stays bounded) and builds the trees itself. No deltas: the pack is written once, fast,
    and ``git gc`` may repack it later. Use under :meth:`Store.lock` (it writes a temporary ref).
    """

    BIG_FILE = 16 << 20  # blobs above this are streamed by fast-import, not held in its memory

    def __init__(self, store: Store) -> None:
        import subprocess

        self.store = store
        self._marks = 0
        self._sweep()  # partial packs of imports that were killed
        with cache_errors(store.root):
            import tempfile

            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in finish/abort
            self._proc = subprocess.Popen(
                ["git", "--git-dir", str(store.git_dir), "fast-import", "--quiet", "--done", "--depth=0",
                 f"--big-file-threshold={self.BIG_FILE}"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._stderr, preexec_fn=die_with_parent,
                bufsize=PIPE_BUFFER,
            )
        assert self._proc.stdin is not None
        widen_pipe(self._proc.stdin)
        self._in = self._proc.stdin

    def _write(self, data: bytes) -> None:
        try:
            self._in.write(data)
        except BrokenPipeError:
            self._fail()

    def _fail(self) -> None:
        self._proc.kill()
        self._proc.wait()
        self._stderr.seek(0)
        detail = self._stderr.read().decode(errors="replace").strip().splitlines()
        raise MaterializeError(f"git fast-import failed in {self.store.git_dir}: {detail[-1] if detail else 'no output'}")

    def add_blob(self, reader: Any, size: int, origin: str, mode: str = "100644") -> int:
        """Stream exactly ``size`` bytes of ``reader`` into the pack; returns the blob's mark.

        With a ``blob_sink`` on the store, a file that fits in memory is read whole and handed to
        the sink too: a cold import that will be published whole writes the file cache while it
        streams (hashing included, in the sink's threads), instead of reading 20k blobs back out of
        the pack afterwards.
        """
        self._marks += 1
        self._write(f"blob\nmark :{self._marks}\ndata {size}\n".encode())
        sink = self.store.blob_sink
        whole = sink is not None and mode != SYMLINK and size <= self.BIG_FILE
        kept: list[bytes] = []
        left = size
        while left:
            chunk = reader.read(min(left, 1 << 20))
            if not chunk:
                raise MaterializeError(f"{origin}: ended after {size - left} of its {size} bytes")
            self._write(chunk)
            if whole:
                kept.append(chunk)
            left -= len(chunk)
        if reader.read(1):
            raise MaterializeError(f"{origin}: longer than the {size} bytes it declares")
        self._write(b"\n")
        if whole:
            assert sink is not None
            sink(mode, kept[0] if len(kept) == 1 else b"".join(kept))
        return self._marks

    def finish(self, files: Mapping[str, tuple[str, int]]) -> str:
        """The tree of ``files`` (path -> (mode, blob mark)); ends the import and publishes the pack."""
        dirs = {path.rsplit("/", 1)[0] for path in files if "/" in path}
        parents = {d[:i] for d in dirs for i in range(len(d) + 1) if i == len(d) or d[i] == "/"}
        clash = sorted(parents & set(files))
        if clash:
            raise MaterializeError(f"{clash[0]!r} is both a file and a directory")
        ref = f"refs/materialize/import/{os.getpid()}-{next(_counter)}"
        self._write(f"commit {ref}\ncommitter materialize <materialize@localhost> 0 +0000\ndata 0\n".encode())
        for path in sorted(files):
            mode, mark = files[path]
            self._write(f"M {mode} :{mark} ".encode() + _fast_import_path(path) + b"\n")
        self._write(b"\ndone\n")
        try:
            self._in.close()
        except BrokenPipeError:
            self._fail()
        if self._proc.wait() != 0:
            self._fail()
        self._stderr.close()
        tree = self.store.git("rev-parse", f"{ref}^{{tree}}").decode().strip()
        self.store.set_refs({ref: None})
        return tree

    def abort(self) -> None:
        """Stop without publishing: fast-import killed before ``done`` leaves no pack behind."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()
        self._sweep()

    def _sweep(self) -> None:
        sweep_partial_packs(self.store.git_dir / "objects" / "pack", self.store.root)

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(self, kind: object, *_rest: object) -> None:
        if kind is not None:
            self.abort()
