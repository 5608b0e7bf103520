"""Turn a pin into a base tree in the store, verified, cached, and recorded with what it resolved to.

Importing an upstream is the only step whose cost grows with the size of the tree, so its result is
cached in the store under a key made of the pin's verified identity (artifact sha256 or git SHA, plus
``root``). A second ``materialize`` on the same pins never reads the archive again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from materialize.errors import UnsafePathError, UpstreamError
from materialize.paths import link_stays_inside, safe_relpath
from materialize.series import GitPin, PathPin, PypiPin, TarballPin
from materialize.store import EMPTY_TREE, EXECUTABLE, REGULAR, SYMLINK, Store
from materialize.upstream.archive import Member, read_archive, single_top_folder


@dataclass(frozen=True)
class ResolvedPin:
    """A pin resolved to a tree in the store; ``identity`` is what the manifest records."""

    tree: str
    identity: dict[str, Any]


def _cache_ref(identity: dict[str, Any]) -> str:
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return f"refs/materialize/pins/{key}"


def _import_members(store: Store, members: list[Member], root: str | None, origin: str) -> tuple[str, str]:
    """Write archive members as one tree; returns (tree, the root that was used)."""
    chosen = single_top_folder(members) if root is None else root.strip("/")
    prefix = f"{chosen}/" if chosen else ""
    changes: dict[str, tuple[str, bytes] | None] = {}
    for member in members:
        if prefix and not member.path.startswith(prefix):
            continue
        changes[member.path[len(prefix):]] = (member.mode, member.data)
    if not changes:
        raise UpstreamError(f"{origin}: nothing under root {chosen!r}")
    return store.write_tree(EMPTY_TREE, changes), chosen


def _cached_or_import(store: Store, identity: dict[str, Any], build) -> ResolvedPin:
    ref = _cache_ref(identity)
    commit = store.get_ref(ref)
    if commit is None:
        with store.lock():
            commit = store.get_ref(ref)  # another process may have imported it meanwhile
            if commit is None:
                tree, used_root = build()
                identity = {**identity, "root_used": used_root}
                commit = store.commit(tree, [], "pin " + json.dumps(identity, sort_keys=True) + "\n")
                store.set_refs({ref: commit})
    message = store.commit_message(commit)
    recorded = json.loads(message.split(" ", 1)[1])
    return ResolvedPin(store.tree_of(commit), recorded)


def _resolve_pypi(pin: PypiPin, store: Store, progress: bool) -> ResolvedPin:
    name, version = pin.requirement.split("==", 1)
    identity = {"kind": "pypi", "requirement": pin.requirement, "file": pin.file, "sha256": pin.sha256,
                "root": pin.root}

    def build() -> tuple[str, str]:
        from materialize.upstream import pypi  # requests and the index client load only when fetching

        artifact = pypi.fetch(name, version, pin.file, pin.sha256, store.artifacts, index=pin.index_url,
                              progress=progress)
        return _import_members(store, read_archive(artifact), pin.root, pin.file)

    return _cached_or_import(store, identity, build)


def _resolve_tarball(pin: TarballPin, store: Store, base_dir: Path) -> ResolvedPin:
    path = (base_dir / pin.path).resolve()
    if not path.is_file():
        raise UpstreamError(f"tarball pin: {path} does not exist")
    actual = sha256_file(path)
    if pin.sha256 and actual != pin.sha256:
        raise UpstreamError(f"{path}: sha256 mismatch: pinned {pin.sha256}, file has {actual}")
    identity = {"kind": "tarball", "path": str(path), "sha256": actual, "root": pin.root}
    return _cached_or_import(store, identity, lambda: _import_members(store, read_archive(path), pin.root, str(path)))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _walk_directory(root: Path) -> dict[str, tuple[str, bytes] | None]:
    """Files of a local directory as tree changes; links leaving the directory are refused."""
    changes: dict[str, tuple[str, bytes] | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        linked_dirs = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__") and d not in linked_dirs)
        for name in sorted(filenames + linked_dirs):
            full = Path(dirpath) / name
            rel = safe_relpath(full.relative_to(root).as_posix(), origin=str(root))
            if full.is_symlink():
                target = os.readlink(full)
                if not link_stays_inside(rel, target):
                    raise UnsafePathError(f"{full}: symlink to {target!r} points outside {root}")
                changes[rel] = (SYMLINK, target.encode())
            elif full.is_file() and not full.is_symlink():
                mode = EXECUTABLE if os.access(full, os.X_OK) else REGULAR
                changes[rel] = (mode, full.read_bytes())
            else:
                raise UnsafePathError(f"{full}: device, fifo or special file refused")
    return changes


def _resolve_path(pin: PathPin, store: Store, base_dir: Path) -> ResolvedPin:
    root = (base_dir / pin.path / pin.root).resolve()
    if not root.is_dir():
        raise UpstreamError(f"path pin: {root} is not a directory")
    tree = store.write_tree(EMPTY_TREE, _walk_directory(root))
    return ResolvedPin(tree, {"kind": "path", "path": str(root), "tree": tree})


def _resolve_git(pin: GitPin, store: Store, base_dir: Path) -> ResolvedPin:
    url = pin.url
    if not re.match(r"^[a-z+]+://|^[^/]+@[^/]+:", url):
        url = str((base_dir / url).resolve())
    sha = pin.sha if pin.sha and store.has_object(pin.sha) else None
    if sha is None:
        with store.lock():
            proc = subprocess.run(
                ["git", "--git-dir", str(store.git_dir), "fetch", "-q", "--no-tags", url,
                 f"+{pin.rev}:refs/materialize/fetch/tmp"] if not re.fullmatch(r"[0-9a-f]{40}", pin.rev)
                else ["git", "--git-dir", str(store.git_dir), "fetch", "-q", "--no-tags", url, pin.rev],
                capture_output=True,
            )
            if proc.returncode != 0:
                raise UpstreamError(f"git pin {pin.url}@{pin.rev}: fetch failed: {proc.stderr.decode().strip()}")
            target = "refs/materialize/fetch/tmp" if not re.fullmatch(r"[0-9a-f]{40}", pin.rev) else pin.rev
            sha = store.git("rev-parse", f"{target}^{{commit}}").decode().strip()
            store.set_refs({f"refs/materialize/git/{sha}": sha})
    if pin.sha and sha != pin.sha:
        raise UpstreamError(f"git pin {pin.url}@{pin.rev}: resolves to {sha}, but the series records {pin.sha}")
    tree = store.subtree(store.tree_of(sha), pin.root)
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
