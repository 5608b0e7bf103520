"""``materialize gc``: remove old outputs under build/materialized (a bisect makes one per candidate),
then the entries of the shared file cache that no output links to any more. Full outputs are hard
links into that cache, so removing an output frees only what no other output shares. The store is
left alone: any removed output can be re-published from it in seconds."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from materialize.console import out
from materialize.errors import MaterializeError
from materialize.output import DEFAULT_ROOT, MANIFEST, remove_tree, replaceable

# What our own runs leave in the folder when killed: mkdtemp's names (8 characters of [a-z0-9_]) for a
# publish (output.py: .tmp-/.old-/.upd-<output>-) or a gc (.gc-). Nothing else is swept: a `.tmp-x`
# of the user's is theirs.
_LEFTOVER = re.compile(r"\.(?:(?:tmp|old|upd)-.+-|gc-)[a-z0-9_]{8}")


def outputs(root: Path) -> list[Path]:
    """Our outputs, newest first: folders (not links) that ``write_output`` would replace, i.e. our
    manifest beside nothing but its targets' folders. A folder with someone else's manifest.json (a
    browser extension's), or one of ours beside which the user put a file, is not removed."""
    found = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / MANIFEST).is_file()
             and replaceable(p)]
    return sorted(found, key=lambda p: (p / MANIFEST).stat().st_mtime, reverse=True)


def run(keep: int, dry_run: bool, root: Path = DEFAULT_ROOT) -> int:
    if not root.is_dir():
        out.print(f"nothing to collect: {root} does not exist")
        return 0
    from materialize.locking import exclusive  # noqa: PLC0415

    # The lock every publish into this folder holds (output.write_output): an apply that reuses an
    # output and points `latest` at it, or updates one in place (its folder under .upd-* meanwhile),
    # never runs between our choice of what to remove and the removal.
    with exclusive(str(root / ".materialize-output.lock")):
        _collect_outputs(keep, dry_run, root)
    if not dry_run:
        from materialize.filecache import FileCache  # noqa: PLC0415 - the store only when collecting
        from materialize.store import Store  # noqa: PLC0415

        store = Store.open()
        files, size = FileCache(store).prune()
        out.print(f"file cache: removed {files} files no output uses ({size / 1e6:.1f} MB)")
        # The trees' link lists (Store.links_of) are memos: a tree whose list is gone is listed again.
        shutil.rmtree(store.root / "links", ignore_errors=True)
    return 0


def _collect_outputs(keep: int, dry_run: bool, root: Path) -> None:
    latest = (root / "latest").resolve() if (root / "latest").is_symlink() else None
    doomed = [p for p in outputs(root)[keep:] if p.resolve() != latest]
    for path in doomed:
        out.print(f"{'would remove' if dry_run else 'removing'} {path}")
        if not dry_run:
            # Rename first so a reader never sees a half-deleted output under its published name.
            trash = Path(tempfile.mkdtemp(prefix=".gc-", dir=root))
            os.replace(path, trash / path.name)
            if not remove_tree(trash):
                raise MaterializeError(f"{trash}: cannot remove it (the output {path.name} moved there)")
    out.print(f"kept {len(outputs(root)) if not dry_run else len(outputs(root)) - len(doomed)} outputs")
    if not dry_run:
        # Replaced outputs are deleted in the background (output._discard); finish that now, so
        # the prune sees their links gone. A .old-* is never in use, nor (under the lock) a .tmp-* or .upd-*
        # (what an in-place update killed outright left; the next publish there builds afresh), nor a
        # .gc-* (a gc killed while it removed an output).
        for leftover in os.scandir(root):
            if _LEFTOVER.fullmatch(leftover.name) and leftover.is_dir(follow_symlinks=False):
                remove_tree(leftover.path)
