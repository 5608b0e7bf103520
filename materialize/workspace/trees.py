"""Trees of the series at a position, through the engine (so the workspace shares its prefix cache)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the engine and the pin resolvers load only when a tree is really computed
    from materialize.series import PatchEntry, Series
    from materialize.store import Store


def base_trees(series: Series, store: Store) -> dict[str, str]:
    """The pinned upstream tree of every target."""
    from materialize.upstream import resolve

    return {
        target: resolve(spec.pin, store, base_dir=series.base_dir, progress=False).tree
        for target, spec in sorted(series.targets.items())
    }


def trees_at(series: Series, store: Store, position: int) -> dict[str, str]:
    """Every target's tree after the first ``position`` patches (PatchApplyError names the failure)."""
    from materialize.engine import materialize

    return dict(materialize(series, upto=position, store=store).trees)


def trees_and_bases_at(series: Series, store: Store, position: int) -> tuple[dict[str, str], dict[str, str]]:
    """``trees_at`` plus the pinned trees it started from, resolved now: a path pin is re-read on every
    run, so the base the workspace was written from may no longer be the pin's (see ``Workspace``)."""
    from materialize.engine import materialize

    m = materialize(series, upto=position, store=store)
    return dict(m.trees), dict(m.base_trees)


def apply_one(store: Store, tree: str, entry: PatchEntry, data: bytes) -> str:
    """The engine's apply of one patch (exact options of ``entry``)."""
    from materialize.engine import apply_patch

    return apply_patch(store, tree, entry, data)[0]
