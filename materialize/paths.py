"""Path safety: nothing we write may land outside a target's root.

Patch files, archive members and series entries all name paths chosen by someone else. Every one
goes through ``safe_relpath`` before it touches a tree, so an absolute path, a ``..`` component or a
NUL byte is refused with a message naming where it came from, before anything is written.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from materialize.errors import UnsafePathError


def safe_relpath(path: str, *, origin: str) -> str:
    """Return ``path`` normalized as a relative POSIX path inside a root, or raise UnsafePathError."""
    if not path or "\0" in path:
        raise UnsafePathError(f"{origin}: empty or NUL-containing path {path!r}")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise UnsafePathError(f"{origin}: absolute path {path!r} escapes the target root")
    parts = [p for p in PurePosixPath(path.replace("\\", "/")).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafePathError(f"{origin}: path {path!r} uses '..' to escape the target root")
    if not parts:
        raise UnsafePathError(f"{origin}: path {path!r} names the target root itself")
    if parts[0] == ".git":
        raise UnsafePathError(f"{origin}: path {path!r} writes into a .git directory")
    return "/".join(parts)


def link_stays_inside(link_path: str, target: str) -> bool:
    """True when a symlink at ``link_path`` pointing to ``target`` resolves inside the root."""
    if target.startswith("/"):
        return False
    depth = len(PurePosixPath(link_path).parts) - 1
    for part in PurePosixPath(target).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part != ".":
            depth += 1
    return True
