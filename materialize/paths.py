"""Path safety: nothing we write may land outside a target's root, or inside a ``.git``.

Patch files, archive members and series entries all name paths chosen by someone else. Every one
goes through ``safe_relpath`` before it touches a tree, so an absolute path, a ``..`` component, a
``.git`` component (any case) or a NUL byte is refused with a message naming where it came from,
before anything is written. Names are bytes on POSIX: only ``/`` separates components and only a
leading ``/`` makes a path absolute, so ``a:b.txt`` and ``unit\\x2dname`` are ordinary names.

Symlinks are judged the way the kernel follows them (``resolve_link``): relative to the link's own
directory, through the links already in the tree, never lexically.
"""

from __future__ import annotations

from collections.abc import Callable

from materialize.errors import UnsafePathError

MAX_LINK_HOPS = 40  # the kernel's MAXSYMLINKS
MAX_LINK_TARGET = 4095  # bytes a symlink target may hold: PATH_MAX, less its NUL
NAME_MAX = 255  # bytes in one path component: no file system we write to holds a longer name


def is_git_dir_name(part: str) -> bool:
    """``.git`` in any case, and the aliases NTFS would open as ``.git`` (``.git.``, ``.git ``)."""
    return part.rstrip(". ").lower() == ".git" or part.lower() == "git~1"


def _check_lengths(path: str, origin: str) -> None:
    """Refuse a name no file system we write to holds (a component over NAME_MAX bytes, a path over
    PATH_MAX): it would fail only while publishing, in a half-built folder. Said without the name,
    which can be megabytes."""
    data = path.encode("utf-8", "surrogateescape")
    if len(data) > MAX_LINK_TARGET:
        raise UnsafePathError(f"{origin}: path longer than {MAX_LINK_TARGET} bytes ({len(data)}); refused")
    longest = max(len(part) for part in data.split(b"/"))
    if longest > NAME_MAX:
        raise UnsafePathError(f"{origin}: a path component of {longest} bytes (more than {NAME_MAX}); refused")


def safe_relpath(path: str, *, origin: str) -> str:
    """Return ``path`` normalized as a relative POSIX path inside a root, or raise UnsafePathError."""
    if not path or "\0" in path:
        raise UnsafePathError(f"{origin}: empty or NUL-containing path {path!r}")
    if len(path) > NAME_MAX // 4:  # only then can a component (or the path) be too long for any file system
        _check_lengths(path, origin)
    if path.startswith("/"):
        raise UnsafePathError(f"{origin}: absolute path {path!r} escapes the target root")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafePathError(f"{origin}: path {path!r} uses '..' to escape the target root")
    if not parts:
        raise UnsafePathError(f"{origin}: path {path!r} names the target root itself")
    if any(is_git_dir_name(p) for p in parts):
        raise UnsafePathError(f"{origin}: path {path!r} writes into a .git directory")
    return "/".join(parts)


LinkLookup = Callable[[str], "str | None | bool"]
"""``lookup(path)``: the link target (str) when ``path`` is a symlink, True when it is a file or a
directory, None when nothing is there."""


def resolve_link(link_path: str, target: str, lookup: LinkLookup) -> str | None:
    """Where the symlink ``link_path -> target`` leads inside the root, or None if it escapes.

    Follows the kernel: the target is read relative to the link's directory, each component that
    is itself a link is replaced by that link's resolution (up to 40 hops), ``..`` climbs from
    the *resolved* directory. Escaping means an absolute target, climbing above the root, a chain
    longer than 40 links, or ``..`` after a component that does not exist yet (a later link there
    could make it escape). A link whose resolution comes back to a link it is already expanding (a
    loop: ``l -> m``, ``m -> l``, ``x -> x``, or a path through one) never resolves at all, as the
    kernel's ELOOP: it leads nowhere, so it does not escape (quilt creates such links); it is
    returned as leading to itself. Changing or removing any link of the loop re-checks it.
    """
    hops = [0]
    expanding: set[str] = set()
    loop: list[str] = []  # the sentinel a walk returns when it came back to a link it is expanding

    def walk(base: list[str], text: str) -> list[str] | None:
        if text.startswith("/"):
            return None
        current = list(base)
        parts = [p for p in text.split("/") if p not in ("", ".")]
        for index, part in enumerate(parts):
            if part == "..":
                if not current:
                    return None
                current.pop()
                continue
            current.append(part)
            here = "/".join(current)
            found = lookup(here)
            if isinstance(found, str):
                if here in expanding:
                    return loop
                hops[0] += 1
                if hops[0] > MAX_LINK_HOPS:
                    return None
                expanding.add(here)
                resolved = walk(current[:-1], found)
                expanding.discard(here)
                if resolved is None or resolved is loop:
                    return resolved
                current = resolved
            elif found is None and ".." in parts[index + 1 :]:
                return None
        return current

    parent = link_path.split("/")[:-1]
    expanding.add(link_path)
    result = walk(parent, target)
    if result is loop:
        return link_path
    return None if result is None else "/".join(result)


def link_stays_inside(link_path: str, target: str, lookup: LinkLookup | None = None) -> bool:
    """True when a symlink at ``link_path`` pointing to ``target`` resolves inside the root.

    Without ``lookup`` only the link itself is judged (every other path counts as a directory);
    callers that know the tree pass its lookup, so chains of links are followed.
    """
    return resolve_link(link_path, target, lookup or (lambda _p: True)) is not None


def check_link_name(path: str, origin: str) -> None:
    """No symlink named ``.gitmodules`` (any case): git refuses one (CVE-2018-11235, a checkout would
    read submodule settings through it), and so do we, from a patch or from a pin (exit 4)."""
    if path.rsplit("/", 1)[-1].lower() == ".gitmodules":
        raise UnsafePathError(f"{origin}: {path} would be a symlink named .gitmodules; refused")


def check_link_target(path: str, target: str, origin: str) -> None:
    """A target no file system can hold is refused (exit 4) whatever pin it comes from: an empty one
    (``symlink(2)`` says ENOENT), one holding a NUL (it cannot be passed to the kernel at all) or one
    longer than PATH_MAX (ENAMETOOLONG)."""
    if not target or "\0" in target:
        raise UnsafePathError(f"{origin}: symlink {path} has an empty or NUL-containing target {target[:80]!r}")
    if len(target.encode("utf-8", "surrogateescape")) > MAX_LINK_TARGET:
        raise UnsafePathError(f"{origin}: symlink {path}: target longer than {MAX_LINK_TARGET} bytes")


def check_links(links: dict[str, str], files: set[str] | Callable[[str], bool], *, origin: str) -> None:
    """Refuse (exit 4) any link of a whole tree that escapes when chains are followed.

    ``links`` maps link paths to targets; ``files`` holds the other file paths (directories are
    every proper prefix of those), or is a function saying whether a path that is not a link
    exists (a tree in the store answers that without being listed). Used once a pin's members are
    all known, for every pin kind, so it also refuses targets no file system can hold
    (``check_link_target``).
    """
    if not links:
        return
    for path, target in links.items():
        check_link_name(path, origin)
        check_link_target(path, target, origin)
    if callable(files):
        exists = files
    else:
        dirs: set[str] = set()
        for p in (*links, *files):
            cut = p.rfind("/")
            while cut > 0 and p[:cut] not in dirs:  # parents of an already-known directory are known too
                dirs.add(p[:cut])
                cut = p.rfind("/", 0, cut)

        def exists(path: str) -> bool:
            return path in files or path in dirs

    def lookup(path: str) -> str | None | bool:
        if path in links:
            return links[path]
        return True if exists(path) else None

    for path, target in sorted(links.items()):
        if resolve_link(path, target, lookup) is None:
            raise UnsafePathError(f"{origin}: symlink {path} -> {target!r} points outside the tree")
