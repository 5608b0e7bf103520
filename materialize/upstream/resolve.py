"""Turn a pin into a base tree in the store, verified, cached, and recorded with what it resolved to.

Importing an upstream is the only step whose cost grows with the size of the tree, so its result is
cached in the store under a key made of the pin's verified identity (artifact sha256 or git SHA, plus
``root``). A second ``materialize`` on the same pins never reads the archive again.
"""


# No `from __future__ import annotations`: typing compiles a NamedTuple's string annotations, and a
# process's first compile() costs ~10M instructions (tests/test_startup.py).
import contextlib
import errno
import io
import json
import os
import re
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from materialize import digest
from materialize.atomic import atomic_write
from materialize.errors import MaterializeError, UnsafePathError, UpstreamError
from materialize.paths import check_links, link_stays_inside, safe_relpath
from materialize.series import GitPin, PathPin, PypiPin, TarballPin
from materialize.store import (
    EMPTY_TREE,
    EXECUTABLE,
    REGULAR,
    SYMLINK,
    TREE,
    PackWriter,
    Store,
    die_with_parent,
)


class ResolvedPin(NamedTuple):
    """A pin resolved to a tree in the store; ``identity`` is what the manifest records.

    ``identity["empty_dirs"]`` (present when there are any) lists the upstream's empty directories:
    a git tree cannot hold them, so they are recorded at import and outputs recreate them.
    """

    tree: str
    identity: dict[str, Any]

    @property
    def empty_dirs(self) -> tuple[str, ...]:
        return tuple(self.identity.get("empty_dirs", ()))


# Bumped when what an import records changes (2: empty directories), so older cached imports are
# redone once instead of being read without the new field (3: links judged in the rooted tree, so
# an import cached before that check is checked once; 4: no symlink named .gitmodules; 5: no empty or
# NUL-containing link target, no extended tar header over 1 MiB, no name component over NAME_MAX; 6: a
# damaged member header mid-archive is an error, not the end of the tree).
_IMPORT_FORMAT = 6


def _cache_ref(identity: dict[str, Any]) -> str:
    keyed = {**identity, "import_format": _IMPORT_FORMAT}
    key = digest.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()
    return f"refs/materialize/pins/{key}"


def empty_leaf_dirs(dirs: set[str], paths: set[str]) -> list[str]:
    """The directories of ``dirs`` that hold nothing: no file of ``paths`` and no other directory.

    Only the leaves are recorded; recreating a leaf recreates its parents.
    """
    occupied: set[str] = set()
    for path in (*paths, *dirs):
        parts = path.split("/")
        occupied.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return sorted(d for d in dirs if d not in occupied and d not in paths)


def _import_archive(store: Store, archive: Path, root: str | None, origin: str) -> tuple[str, str, list[str]]:
    """Stream an archive's members into one pack and build its tree.

    Returns (tree, the root used, the empty directories under that root). Every member is written as
    a blob as it is read (bounded memory); only the members under the chosen root go into the tree,
    which is known once every path has been seen. Anything that goes wrong before the tree is built
    leaves no pack, no ref and no pin behind.
    """
    # tarfile and zipfile load for archive pins only
    from materialize.upstream.archive import read_exact, single_top_folder, stream_archive

    with PackWriter(store) as pack:
        marks: dict[str, tuple[str, int]] = {}
        dirs: set[str] = set()
        links: dict[str, str] = {}  # symlink members -> their targets (judged again once rooted)
        for member in stream_archive(archive):
            if member.mode == TREE:
                dirs.add(member.path)
                continue
            links.pop(member.path, None)  # a member that appears again replaces the earlier one
            if member.same_as is not None:  # a tar hard link: the same blob under a second name
                marks[member.path] = marks[member.same_as]
                if member.same_as in links:
                    links[member.path] = links[member.same_as]
                continue
            reader = member.reader
            if member.mode == SYMLINK:  # a link's target is a few bytes: kept to judge it in the rooted tree
                target = read_exact(member)
                links[member.path] = target.decode("utf-8", "surrogateescape")
                reader = io.BytesIO(target)
            marks[member.path] = (member.mode, pack.add_blob(reader, member.size, f"{origin}: {member.path}",
                                                                member.mode))
        chosen = single_top_folder(list(marks)) if root is None else root.strip("/")
        prefix = f"{chosen}/" if chosen else ""
        files = {path[len(prefix):]: entry for path, entry in marks.items() if path.startswith(prefix)}
        if not files:
            raise UpstreamError(f"{origin}: nothing under root {chosen!r}")
        # stream_archive judged every link against the archive's root; the tree is rooted at ``chosen``,
        # where proj/l -> ../a (inside the archive) leads out of the tree: judge them again there.
        rooted = {path[len(prefix):]: target for path, target in links.items() if path.startswith(prefix)}
        check_links(rooted, set(files) - rooted.keys(), origin=f"{origin} (rooted at {chosen or 'the archive root'}/)")
        empty = empty_leaf_dirs({d[len(prefix):] for d in dirs if d.startswith(prefix)}, set(files))
        try:
            return pack.finish(files), chosen, empty
        except MaterializeError as exc:
            raise UpstreamError(f"{origin}: {exc}") from None


def _cached_or_import(store: Store, identity: dict[str, Any], build) -> ResolvedPin:
    ref = _cache_ref(identity)
    commit = store.get_ref(ref)
    if commit is None:
        with store.lock():
            commit = store.get_ref(ref)  # another process may have imported it meanwhile
            if commit is None:
                tree, used_root, empty_dirs = build()
                identity = {**identity, "root_used": used_root}
                if empty_dirs:
                    identity["empty_dirs"] = empty_dirs
                commit = store.commit(tree, [], "pin " + json.dumps(identity, sort_keys=True) + "\n")
                store.set_refs({ref: commit})
    tree, message = store.read_commit(commit)
    return ResolvedPin(tree, json.loads(message.split(" ", 1)[1]))


def _resolve_pypi(pin: PypiPin, store: Store, progress: bool) -> ResolvedPin:
    name, version = pin.requirement.split("==", 1)
    identity = {"kind": "pypi", "requirement": pin.requirement, "file": pin.file, "sha256": pin.sha256,
                "root": pin.root}

    def build() -> tuple[str, str]:
        from materialize.upstream import pypi  # httpx and the index client load only when fetching

        artifact = pypi.fetch(name, version, pin.file, pin.sha256, store.artifacts, index=pin.index_url,
                              progress=progress)
        return _import_archive(store, artifact, pin.root, pin.file)

    return _cached_or_import(store, identity, build)


def _resolve_tarball(pin: TarballPin, store: Store, base_dir: Path) -> ResolvedPin:
    path = (base_dir / pin.path).resolve()
    if not path.is_file():
        raise UpstreamError(f"tarball pin: {path} does not exist")
    actual, stamp = _sha256_remembered(store, path)
    if pin.sha256 and actual != pin.sha256:
        raise UpstreamError(f"{path}: sha256 mismatch: pinned {pin.sha256}, file has {actual}")
    identity = {"kind": "tarball", "path": str(path), "sha256": actual, "root": pin.root}

    def build() -> tuple[str, str, list[str]]:
        # The import reads the file again, by name, maybe long after the hash (behind the store lock
        # while another run imports): a file replaced meanwhile (`make dist`) would be cached under
        # the old sha256, for this run and every later one. Same file before and after, or nothing kept.
        imported = _import_archive(store, path, pin.root, str(path))
        if _stamp(path) != stamp:
            raise UpstreamError(f"{path}: changed while it was read (hashed as {actual}); nothing was kept, run"
                                " again")
        return imported

    return _cached_or_import(store, identity, build)


_SHA = re.compile(r"[0-9a-f]{40}")


def _stamp(path: Path) -> list[int]:
    """What any write to or replacement of ``path`` changes: device, inode, size, mtime, ctime."""
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _sha256_remembered(store: Store, path: Path) -> tuple[str, list[int]]:
    """``sha256_file(path)``, remembered against the file's identity and change times.

    Hashing an 18 MB tarball costs ~30 ms of every command on the series (a 1 GB one, seconds). As
    git's index and make do, the result is kept beside the store keyed by (device, inode, size,
    mtime, ctime): any write to the file moves its ctime, which no user call can set back.
    """
    stamp = _stamp(path)
    memo = store.root / "hashes" / digest.sha256(str(path).encode()).hexdigest()
    try:
        kept = json.loads(memo.read_text())
        if kept["stamp"] == stamp and re.fullmatch(r"[0-9a-f]{64}", kept["sha256"]):
            return kept["sha256"], stamp
    except (OSError, ValueError, KeyError, TypeError):
        pass
    hashed = sha256_file(path)
    if _stamp(path) != stamp:  # written while we hashed: the digest is of no one version of the file
        raise UpstreamError(f"{path}: changed while it was hashed; nothing was kept, run again")
    with contextlib.suppress(OSError):  # a read-only cache only costs the next run the hash again
        atomic_write(memo, json.dumps({"path": str(path), "stamp": stamp, "sha256": hashed}).encode())
    return hashed, stamp


def sha256_file(path: Path) -> str:
    import hashlib  # an artifact: OpenSSL's speed (materialize.digest is for small inputs)

    hashed = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hashed.update(chunk)
    return hashed.hexdigest()


def _walk_directory(root: Path) -> tuple[dict[str, tuple[str, bytes] | None], list[str]]:
    """Files of a local directory as tree changes, and its empty directories; links leaving the
    directory are refused.

    Every workspace command re-reads a path pin, so this walks with ``os.scandir`` and plain strings
    (one ``stat`` per entry, no ``Path`` objects): the same entries, order and refusals as ``os.walk``
    gave (``.git`` and ``__pycache__`` folders skipped, and a ``.git`` gitfile, a link to a folder recorded as a link,
    unreadable folders skipped).
    """
    changes: dict[str, tuple[str, bytes] | None] = {}
    empty: list[str] = []
    origin = str(root)
    for prefix, entries, folder in _folders(origin):
        if entries is None:  # unreadable: skipped
            continue
        if prefix and all(_skipped(e) for e in entries):
            empty.append(safe_relpath(prefix.rstrip("/"), origin=origin))
        for entry in entries:  # each read relative to its folder's descriptor, never through a path again
            if entry.is_dir(follow_symlinks=False) or _skipped(entry):
                continue
            rel = safe_relpath(prefix + entry.name, origin=origin)
            shown = f"{origin}/{prefix}{entry.name}"
            if entry.is_symlink():
                target = os.readlink(entry.name, dir_fd=folder)
                if not link_stays_inside(rel, target):
                    raise UnsafePathError(f"{shown}: symlink to {target!r} points outside {root}")
                changes[rel] = (SYMLINK, os.fsencode(target))  # bytes, as names are (surrogateescape)
            elif entry.is_file(follow_symlinks=False):
                mode = EXECUTABLE if os.access(entry.name, os.X_OK, dir_fd=folder) else REGULAR
                changes[rel] = (mode, _read_regular(entry.name, folder, shown))
            else:
                raise UnsafePathError(f"{shown}: device, fifo or special file refused")
    links = {p: c[1].decode("utf-8", "surrogateescape") for p, c in changes.items() if c and c[0] == SYMLINK}
    check_links(links, {p for p in changes if p not in links}, origin=origin)  # chains of links
    return changes, sorted(empty)


def _read_regular(name: str, folder: int, shown: str) -> bytes:
    """A file the walk saw as a regular file in the folder open as ``folder``, read only if it still is
    one when opened: a file swapped for a symlink (to /etc/shadow) or a fifo meanwhile is refused, not
    read through (O_NOFOLLOW, and O_NONBLOCK so a fifo cannot hang the open)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{shown}: became a symlink while the folder was read; refused") from None
        raise
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f"{shown}: no longer a regular file when opened (device, fifo or folder); refused")
        return handle.read()


def _directory_stamp(root: str) -> str | None:
    """What every entry of the directory ``_walk_directory`` reads looks like to ``lstat``: (name,
    device, inode, mode, size, mtime, ctime) in walk order, hashed. Any write, chmod, rename, new or
    removed entry changes it (a write moves the ctime, which no user call can set back). None when an
    entry changed in the last two seconds: a change within the same clock tick as our read would
    leave the stamp as it was (git's "racily clean" rule), so such a walk is not remembered.
    """
    import hashlib  # every entry's stat line: megabytes for a large tree, OpenSSL's speed

    stamp = hashlib.sha256()
    fresh = time.time_ns() - 2_000_000_000
    for prefix, entries, _folder in _folders(root):
        if entries is None:
            stamp.update(f"unreadable {prefix}\0".encode("utf-8", "surrogateescape"))
            continue
        for entry in entries:
            if _skipped(entry):
                stamp.update(f"skipped {prefix}{entry.name}\0".encode("utf-8", "surrogateescape"))
                continue
            st = entry.stat(follow_symlinks=False)
            if st.st_ctime_ns >= fresh or st.st_mtime_ns >= fresh:
                return None
            stamp.update(f"{prefix}{entry.name}\0{st.st_dev} {st.st_ino} {st.st_mode} {st.st_size} "
                          f"{st.st_mtime_ns} {st.st_ctime_ns}\0".encode("utf-8", "surrogateescape"))
    return stamp.hexdigest()


_SKIPPED = (".git", "__pycache__")  # folders a path pin never reads


def _skipped(entry: os.DirEntry) -> bool:
    """An entry a path pin never reads: a ``_SKIPPED`` folder, or a ``.git`` *file*, the "gitdir: ..."
    of a linked worktree or a submodule's checkout (git's own, never a file of the tree). A ``.git``
    link is not skipped: it is refused as a write into .git."""
    if entry.name not in _SKIPPED:
        return False
    return entry.is_dir(follow_symlinks=False) or (entry.name == ".git" and entry.is_file(follow_symlinks=False))


def _folders(root: str) -> Iterator[tuple[str, list[os.DirEntry] | None, int]]:
    """(path relative to ``root`` with a trailing "/", or "" for the root; its entries sorted by name,
    None when unreadable; a descriptor of the folder, open until the next folder is asked for) for
    every folder, depth-first in name order, never entering ``_SKIPPED`` folders or links to folders.
    The one walk of a path pin: the import and its stamp see the same.

    Each folder below the root is opened without following a link (O_NOFOLLOW) and must be the very
    folder (device, inode) its parent listed, and its entries are read relative to that descriptor: a
    folder, or one of its parents, swapped for a link to somewhere else while the walk ran is refused,
    never read through (the rule ``_read_regular`` applies to files).
    """
    pending: list[tuple[str, str, tuple[int, int] | None]] = [(root, "", None)]
    while pending:
        path, prefix, listed = pending.pop()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (os.O_NOFOLLOW if listed else 0))
        except OSError as exc:
            if listed and exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnsafePathError(f"{path}: became a symlink while the folder was read; refused") from None
            yield prefix, None, -1  # unreadable: skipped
            continue
        try:
            st = os.fstat(fd)
            if listed is not None and (st.st_dev, st.st_ino) != listed:
                raise UnsafePathError(f"{path}: changed while the folder was read (another folder, or one reached"
                                      " through a link, is there now); refused")
            try:
                with os.scandir(fd) as scan:
                    entries = sorted(scan, key=lambda e: e.name)
            except OSError:
                yield prefix, None, -1
                continue
            yield prefix, entries, fd
            below = []
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and entry.name not in _SKIPPED:
                    child = entry.stat(follow_symlinks=False)
                    below.append((f"{path}/{entry.name}", f"{prefix}{entry.name}/", (child.st_dev, child.st_ino)))
            pending.extend(reversed(below))
        finally:
            os.close(fd)


def _resolve_path(pin: PathPin, store: Store, base_dir: Path) -> ResolvedPin:
    """The directory as a tree. Every workspace command resolves the pin, and reading and hashing every
    file of it cost more than the rest of a `push`: the tree is remembered beside the store against
    the directory's stamp (``_directory_stamp``, one ``lstat`` per entry), as git's index does."""
    root = (base_dir / pin.path / pin.root).resolve()
    if pin.root and not root.is_relative_to((base_dir / pin.path).resolve()):  # through a symlink in the folder
        raise UnsafePathError(f"path pin {pin.path}: root {pin.root!r} leads out of it (to {root})")
    if not root.is_dir():
        raise UpstreamError(f"path pin: {root} is not a directory")
    stamp = _directory_stamp(str(root))
    memo = store.root / "hashes" / digest.sha256(f"dir\0{root}".encode()).hexdigest()
    if stamp is not None:
        try:
            kept = json.loads(memo.read_text())
            if kept["stamp"] == stamp and _SHA.fullmatch(kept["tree"]) and \
                    os.path.exists(store._loose_path(kept["tree"])):
                return _path_pin(root, kept["tree"], kept["empty_dirs"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    changes, empty_dirs = _walk_directory(root)
    tree = store.write_tree(EMPTY_TREE, changes)
    if stamp is not None:
        with contextlib.suppress(OSError):  # a read-only cache only costs the next run the walk again
            atomic_write(memo, json.dumps({"path": str(root), "stamp": stamp, "tree": tree,
                                           "empty_dirs": empty_dirs}).encode())
    return _path_pin(root, tree, empty_dirs)


def _path_pin(root: Path, tree: str, empty_dirs: list[str]) -> ResolvedPin:
    identity: dict[str, Any] = {"kind": "path", "path": str(root), "tree": tree}
    if empty_dirs:
        identity["empty_dirs"] = list(empty_dirs)
    return ResolvedPin(tree, identity)


def _fetch_quarantined(store: Store, url: str, pin: GitPin) -> str:
    """Fetch ``pin.rev`` into a quarantine object directory and keep it only if it is the pinned commit.

    git writes the fetched objects into a temporary directory (the store's objects stay readable as
    an alternate); we read the fetched commit from FETCH_HEAD, check it against ``pin.sha``, and only
    then move the objects into the store. A mismatch, a failure or a kill leaves nothing in the store:
    no objects, no ref. Called under the store lock.
    """
    from materialize.upstream.net import network_timeouts

    where = f"git pin {pin.url}@{pin.rev}"
    if ":" in pin.rev or pin.rev.startswith(("-", "+", "^")):  # GitPin refuses these; never a refspec with a destination
        raise UpstreamError(f"{where}: a rev names one ref or commit (no ':', no leading '-', '+' or '^')")
    import shutil
    import tempfile

    for leftover in store.root.glob(".incoming-*"):  # quarantines of killed runs (we hold the lock)
        shutil.rmtree(leftover, ignore_errors=True)
    quarantine = Path(tempfile.mkdtemp(prefix=".incoming-", dir=store.root))
    env = {**os.environ, "GIT_OBJECT_DIRECTORY": str(quarantine),
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(store.git_dir / "objects"), "GIT_TERMINAL_PROMPT": "0"}
    timeouts = network_timeouts()
    try:
        proc = subprocess.run(
            ["git", "--git-dir", str(store.git_dir), "-c", "fetch.unpackLimit=1", "-c", "transfer.unpackLimit=1",
             "-c", "http.lowSpeedLimit=1", "-c", f"http.lowSpeedTime={max(1, int(timeouts[1]))}",
             "fetch", "-q", "--no-tags", "--", url, pin.rev],  # never an option, whatever the series says
            capture_output=True, env=env, preexec_fn=die_with_parent,
        )
        if proc.returncode != 0:
            raise UpstreamError(f"{where}: fetch failed: {proc.stderr.decode(errors='replace').strip()}")
        head = (store.git_dir / "FETCH_HEAD").read_text().split("\t", 1)[0].strip()
        check = subprocess.run(["git", "--git-dir", str(store.git_dir), "rev-parse", "--verify", "-q",
                                f"{head}^{{commit}}"], capture_output=True, env=env)
        sha = check.stdout.decode().strip()
        if check.returncode != 0 or not _SHA.fullmatch(sha):
            raise UpstreamError(f"{where}: {pin.rev!r} is not a commit")
        if pin.sha and sha != pin.sha:
            raise UpstreamError(f"{where}: resolves to {sha}, but the series records {pin.sha}; nothing was kept")
        _publish_objects(quarantine, store.git_dir / "objects")
        store.set_refs({f"refs/materialize/git/{sha}": sha})
        return sha
    finally:
        shutil.rmtree(quarantine, ignore_errors=True)


def _publish_objects(source: Path, objects: Path) -> None:
    """Move a quarantine's loose objects and packs into the store (a pack's .idx last: it makes it live)."""
    for path in sorted(source.glob("[0-9a-f][0-9a-f]/*")):
        path_dest = objects / path.parent.name / path.name
        path_dest.parent.mkdir(exist_ok=True)
        os.replace(path, path_dest)
    (objects / "pack").mkdir(exist_ok=True)
    packs = sorted(p for p in (source / "pack").glob("pack-*") if p.suffix != ".idx")
    for path in packs + sorted((source / "pack").glob("pack-*.idx")):
        os.replace(path, objects / "pack" / path.name)


def _resolve_git(pin: GitPin, store: Store, base_dir: Path) -> ResolvedPin:
    url = pin.url
    if not re.match(r"^[a-z+]+://|^[^/]+@[^/]+:", url):
        url = str((base_dir / url).resolve())
    # A pinned commit already in the store needs no fetch; any other object of that id there (every
    # import leaves trees and blobs) is not it: fetch, and the mismatch is named.
    sha = pin.sha if pin.sha and store.has_object(pin.sha) and store.read_object(pin.sha)[0] == "commit" else None
    if sha is None:
        with store.lock():
            sha = _fetch_quarantined(store, url, pin)
    try:
        tree = store.subtree(store.tree_of(sha), pin.root)
    except MaterializeError as exc:
        raise UpstreamError(f"git pin {pin.url}@{pin.rev}: {exc}") from None
    checked = f"refs/materialize/tree-ok/{tree}"
    if store.get_ref(checked) is None:
        # Archives and directories are checked member by member as they are imported; a git tree
        # arrives whole, so its names and links are checked once per tree (chains included) and
        # remembered (links-ok/ refs of older versions checked links only).
        origin = f"git pin {pin.url}@{pin.rev}"
        store.check_tree_names(tree, origin=origin)
        store.check_tree_links(tree, origin=origin)
        store.set_refs({checked: sha})
    return ResolvedPin(tree, {"kind": "git", "url": pin.url, "rev": pin.rev, "sha": sha, "root": pin.root})


def resolve(pin: GitPin | PypiPin | PathPin | TarballPin, store: Store, *, base_dir: Path,
            progress: bool = True) -> ResolvedPin:
    """Resolve ``pin`` (relative paths against ``base_dir``, the series file's directory)."""
    if isinstance(pin, PypiPin):
        return _resolve_pypi(pin, store, progress)
    if isinstance(pin, TarballPin):
        return _resolve_tarball(pin, store, base_dir)
    if isinstance(pin, PathPin):
        return _resolve_path(pin, store, base_dir)
    return _resolve_git(pin, store, base_dir)
