"""Trees of the series at a position, through the engine (so the workspace shares its prefix cache)."""

from __future__ import annotations

from materialize.engine import apply_patch, materialize
from materialize.series import PatchEntry, Series
from materialize.store import Store
from materialize.upstream import resolve


def forget_memo(store: Store) -> None:
    """Drop the store's in-process tree memo.

    Work-around (reported to the lead): ``Store._rebuild`` updates the memoized entry dict of the
    tree it starts from in place, so after one ``write_tree`` the memo of that base tree describes
    the *new* tree, and applying another patch to the same base in the same process fails. The
    workspace applies many patches to the same bases in one process, so it forgets the memo after
    every write. Remove this once ``_rebuild`` copies the dict.
    """
    cache = getattr(store, "_tree_cache", None)
    if cache is not None:
        cache.clear()


def base_trees(series: Series, store: Store) -> dict[str, str]:
    """The pinned upstream tree of every target."""
    return {
        target: resolve(spec.pin, store, base_dir=series.base_dir, progress=False).tree
        for target, spec in sorted(series.targets.items())
    }


def trees_at(series: Series, store: Store, position: int) -> dict[str, str]:
    """Every target's tree after the first ``position`` patches (PatchApplyError names the failure)."""
    forget_memo(store)
    try:
        return dict(materialize(series, upto=position, store=store).trees)
    finally:
        forget_memo(store)


def apply_one(store: Store, tree: str, entry: PatchEntry, data: bytes) -> str:
    """The engine's apply of one patch (exact options of ``entry``), memo-safe."""
    forget_memo(store)
    try:
        return apply_patch(store, tree, entry, data)[0]
    finally:
        forget_memo(store)


def write_tree(store: Store, tree: str, changes) -> str:
    try:
        return store.write_tree(tree, changes)
    finally:
        forget_memo(store)
