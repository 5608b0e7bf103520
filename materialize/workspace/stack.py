"""Moving the workspace along the series: push, pop, goto, and the read-only views quilt users know.

Every move goes through the engine (so it shares the prefix cache), refuses while the workspace holds
changes that are in no patch (``--force`` first copies them under ``work/.materialize/saved/``), and
runs inside a journal so an interrupted move can be rolled back or finished.
"""


# No `from __future__ import annotations`: typing compiles a NamedTuple's string annotations, and a
# process's first compile() costs ~10M instructions, 5% of `materialize new` (tests/test_startup.py).
import contextlib
import os
from pathlib import Path
from typing import NamedTuple

from materialize.errors import MaterializeError, PatchApplyError
from materialize.series import PatchEntry  # (loaded by workspace.state already)
from materialize.workspace.journal import Journal
from materialize.workspace.state import DirtyWorkspaceError, State, Workspace
from materialize.workspace.trees import trees_and_bases_at


class MoveResult(NamedTuple):
    position: int
    top: str | None
    saved_to: str | None = None
    stopped: str | None = None  # the error that stopped a push short of its goal
    kept_pushed: str | None = None  # where a popped patch's files were kept, its file changed since its push


def guard_clean(ws: Workspace, state: State, op: str, force: bool, journal: Journal, *,
                command: str | None = None) -> str | None:
    """Refuse (or with force, save first) when the workspace holds work no patch records yet. ``command``:
    the one the user ran, when it is not ``op`` (``delete`` pops): the refusal names it and its --force."""
    changes = ws.changes(state)
    if not changes.any():
        return None
    if not force:
        raise DirtyWorkspaceError(
            f"`{command or op}` refused: work/ holds changes no patch records yet:\n{changes.describe(ws.owners(state))}\n"
            "`materialize refresh` records the top patch's files (`materialize refresh PATCH` a lower patch's, "
            "named above), `materialize add FILE` puts a file of no "
            f"patch into the top patch, or `materialize {command or op} --force` saves them under {ws.meta / 'saved'} and "
            "discards them"
        )
    saved = ws.save_changes(state, changes, op, journal)
    for target, paths in changes.stray.items():
        for path in paths:
            journal.remove(Path(ws.work_path(target, path)))
    return str(saved)


def applied_entries(ws: Workspace, state: State) -> list[PatchEntry]:
    return list(ws.series.patches[: state.position])


HOW = ("target", "strip", "reverse")  # how an applied patch went in, beside its bytes (a record's keys)


def pushed(entry: PatchEntry) -> dict:
    """What ``state.json`` records of an applied patch: its bytes, and how they were applied. A hand edit of
    the entry's ``strip`` made refresh read the top's files under other names and write the patch without
    its change; ``reverse`` made it drop the new field (see ``check_stack_matches``)."""
    return {"name": entry.name, "sha256": entry.sha256(), "target": entry.target, "strip": entry.strip,
            "reverse": entry.reverse}


def check_stack_matches(ws: Workspace, state: State, keep: int | None = None) -> None:
    """The applied patches on record must still be the series' first ``position`` entries, and the first
    ``keep`` of them (default: all; a move: those that stay applied) still applied as their entries say:
    work/ holds them applied the way they were pushed, so what regenerates or builds on one (refresh, diff,
    a move that keeps it) would misread it. Records written before ``HOW`` was kept are not compared."""
    names = [p.name for p in ws.series.patches[: state.position]]
    recorded = [a["name"] for a in state.applied]
    if names != recorded:
        raise MaterializeError(
            f"the series changed under the workspace: applied {recorded}, but the series now starts {names}; "
            "`materialize goto 0 --force` resets the workspace"
        )
    for entry, record in zip(ws.series.patches[: state.position if keep is None else keep], state.applied,
                             strict=False):
        differs = [key for key in HOW if key in record and record[key] != getattr(entry, key)]
        if differs:
            def said(value: object) -> str:
                return str(value).lower() if isinstance(value, bool) else str(value)

            below = ws.series.patches[entry.position - 2].name if entry.position > 1 else "0"
            raise MaterializeError(
                f"the series entry changed under the workspace: {entry.name} was pushed with "
                + ", ".join(f"{k} {said(record[k])}" for k in differs) + f", its entry ({entry.where}) now says "
                + ", ".join(f"{k} {said(getattr(entry, k))}" for k in differs)
                + f", and work/ holds it as it was pushed. Pop it (`materialize goto {below}`; `--force` saves "
                "unrefreshed edits) and push it again as the entry says, or put the entry back"
            )


def move_to(ws: Workspace, position: int, *, op: str, args: list[str], force: bool = False,
            journal: Journal | None = None, command: str | None = None) -> MoveResult:
    """Bring the workspace to ``position`` (0 = upstream alone), the one primitive behind push/pop/goto.

    Inside ``journal`` when given (``delete`` pops the patch it removes in its own journal, so a kill
    between the two is rolled back to before both), else in a journal of its own.
    """
    state = ws.load(follow_pins=force and op == "goto", in_journal=journal is not None)
    if position == state.position and not force:
        return MoveResult(position, state.top)
    if op != "goto" or not force:
        check_stack_matches(ws, state, keep=min(position, state.position))
    stopped = None
    forced: PatchEntry | None = None
    with contextlib.nullcontext(journal) if journal is not None else Journal.run(ws.meta, op, args) as journal:
        saved = guard_clean(ws, state, op, force, journal, command=command)
        try:
            trees, bases = trees_and_bases_at(ws.series, ws.store, position)
        except PatchApplyError as exc:
            entry = getattr(exc, "entry", None)
            if entry is not None and force and op == "push" and entry.position > state.position:
                forced = entry  # quilt's push -f: what applies goes in, the rest into .rej files
            elif entry is None or entry.position - 1 <= state.position:
                if op == "push" and entry is not None and entry.position <= state.position:
                    # the applied top itself, pushed with -f: `push -f` again cannot help (quilt: "needs to be
                    # refreshed first"); the hint below sent the user round in that circle
                    raise MaterializeError(
                        f"{exc}\n{entry.name} is applied but was pushed with push -f, and does not apply until "
                        "`materialize refresh` records the repair; nothing above it can go on before") from None
                if op == "push" and entry is not None:
                    hint = PatchApplyError(f"{exc}\n{entry.name} does not apply (enforce with `materialize push -f`: "
                                           "what applies goes in, the rest into .rej files)")
                    hint.entry = entry  # type: ignore[attr-defined]
                    raise hint from None
                raise
            stopped = str(exc)
            position = entry.position - 1
            trees, bases = trees_and_bases_at(ws.series, ws.store, position)
        kept_pushed = keep_pushed_versions(ws, state, position, trees, op)
        top = ws.series.patches[position - 1].name if position else None
        added = still_added(ws, state, position)
        keep: dict[str, set[str]] = {}
        for entry in ws.series.patches[:position]:
            keep.setdefault(entry.target, set()).update(added.get(entry.name, []))
        # the files to hold are those the trees change against the upstream as it is now (a path pin
        # re-read after `git pull` there), not against the one work/ was first written from
        state.bases.update(bases)
        ws.sync(state, trees, keep, journal)
        state.position = position
        state.applied = [pushed(p) for p in ws.series.patches[:position]]
        state.added = added
        state.pins = ws.pins()
        if forced is not None:
            stopped = _force_apply(ws, state, forced, journal)
            position, top = forced.position, forced.name
        ws.save(state, journal)
    return MoveResult(position, top, saved, stopped, kept_pushed)


def edits_change_nothing(ws: Workspace, state: State) -> bool:
    """Whether the applied patch files, as they are now, still give exactly the trees work/ was written
    from (``state.trees``): then whatever was edited in them by hand (a description fixed in the file, as
    quilt users do) changes no file, refresh keeps it (it regenerates below the file's own header) and
    nothing it would write or record is the reverse of anything. Refusing that sent the user to pop, which
    the unrefreshed edits block. After ``push -f`` the recorded tree is the one below the forced patch, so
    this is False there, as it is whenever the series no longer applies (or an edited file no longer parses)."""
    from materialize.workspace.trees import trees_at

    try:
        trees = trees_at(ws.series, ws.store, state.position)
    except MaterializeError:
        return False
    return all(trees.get(target) == tree for target, tree in state.trees.items())


def keep_pushed_versions(ws: Workspace, state: State, position: int, trees: dict, op: str) -> str | None:
    """Before a move pops applied patches: when one's file was changed since it was pushed (edited by hand,
    emptied by a tool) in a way that changes files, work/ holds the last copy a user can reach of what was
    pushed (the store has the tree, no command shows it). quilt's pop refuses such a patch ("does not
    remove cleanly"); ours applies the edit on the next push, as documented, and first copies the files
    the move rewrites, as work/ holds them, under ``saved/<time>-<op>/`` (the folder, or None)."""
    if position >= state.position:
        return None
    def sha256(entry: PatchEntry) -> str | None:
        try:
            return entry.sha256()
        except MaterializeError:  # (removed, unreadable: changed)
            return None

    changed = [p for p, record in zip(ws.series.patches[position:state.position], state.applied[position:],
                                      strict=False)
               if p.name == record.get("name") and record.get("sha256") not in (None, sha256(p))]
    if not changed or edits_change_nothing(ws, state):  # (a description edited: nothing to keep)
        return None
    import shutil

    dest = None
    listing = []
    for target in sorted({p.target for p in changed}):
        old, new = state.trees.get(target), trees.get(target)
        if old is None or new is None or old == new:
            continue
        paths, deleted = ws.store.changed_paths(new, old)
        for path in sorted(set(paths) | set(deleted)):
            found = ws.read_path(target, path)
            if found is None or not (os.path.isfile(found) or os.path.islink(found)):
                continue
            dest = dest or ws.saved_dir(op)
            out = dest / target / path
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, out, follow_symlinks=False)
            listing.append(f"as-pushed\t{target}/{path}")
    if dest is None:
        return None
    names = ", ".join(f"{p.name} ({p.path})" for p in changed)
    (dest / "SAVED.txt").write_text(
        f"Saved by materialize ({op}) before popping {names}: changed since it was pushed, so work/ held the only "
        "copy of the version that was pushed. To get it back: push the patch, copy these files into "
        "work/<target>/, then `materialize refresh --force` (the file as edited is kept too).\n\n"
        + "\n".join(listing) + "\n")
    return str(dest)


def still_added(ws: Workspace, state: State, position: int) -> dict[str, list[str]]:
    """The files added (``add``, ``edit``, ``fold``) to each patch that stays applied at ``position``, which
    stay on disk and that patch's own until it is refreshed or popped, as quilt's ``.pc/<patch>/`` keeps
    them: forgetting a lower patch's once another went on top (``new``) left its unrefreshed edit owned by
    no patch, pop refused it, and ``add`` (the way out offered) made it the new top's. A popped patch's go
    with it (their unrefreshed edits were refused or saved before)."""
    staying = {p.name for p in ws.series.patches[:position]}
    return {name: files for name, files in state.added.items() if name in staying}


def _force_apply(ws: Workspace, state: State, entry: PatchEntry, journal: Journal) -> str:
    """Apply what applies of ``entry`` onto the disk, each failed hunk into ``<file>.rej`` (GNU patch's
    reject format), and make it the top patch with its files unrefreshed: ``refresh`` records the
    repair; until then pop/push refuse (``--force`` saves the half-applied files aside)."""
    from materialize.engine import StoreView, tree_after
    from materialize.patching.tree import apply_to_tree

    target = entry.target
    applied = apply_to_tree(StoreView(ws.store, state.trees[target]), entry.read(), source=str(entry.path),
                            strip=entry.strip, max_fuzz=entry.max_fuzz, reverse=entry.reverse, partial=True)
    if applied.error is not None:
        raise applied.error  # a refusal (unsafe path or link, bad mode, garbage): nothing is written
    tree_after(ws.store, state.trees[target], applied, origin=f"{entry.path} (patch {entry.name})")  # links, chains
    rejects: list[str] = []
    for outcome in applied.failed:
        rej = f"{outcome.path}.rej"
        text = (outcome.result.reject if outcome.result is not None else None) or f"{outcome.error}\n"
        journal.write(Path(ws.work_path(target, rej)), text.encode("utf-8", "surrogateescape"))
        rejects.append(rej)
    written = applied.changes
    files = list(written)
    tracked = state.files.setdefault(target, {})
    for path, value in written.items():
        if path not in tracked:
            found = ws.store.lookup(state.trees[target], path)
            tracked[path] = found.sha if found else None
        ws.write_file(journal, target, path, value)
    state.position = entry.position
    state.applied = [pushed(p) for p in ws.series.patches[: entry.position]]
    state.added[entry.name] = sorted(set(files))
    state.rejects = {target: sorted(rejects)}
    return (f"Applied patch {entry.name} (forced; needs refresh): "
            + (f"rejects in {', '.join(str(ws.target_dir(target) / r) for r in rejects)}" if rejects else "no rejects"))


def resolve_position(ws: Workspace, ref: str | None, *, default: int) -> int:
    if ref is None:
        return default
    return ws.series.position(ref)


def _nothing_to_do(message: str) -> MaterializeError:
    """Exit 2, as quilt's push and pop ("File series fully applied", "No patch removed"): scripts tell
    "nothing to do" from "a patch failed" (1) by the code alone (Debian: `quilt push -a || test $? = 2`)."""
    error = MaterializeError(message)
    error.exit_code = 2
    return error


def push(ws: Workspace, ref: str | None = None, *, all_: bool = False, force: bool = False) -> MoveResult:
    """Apply the next patch, up to and including ``ref``, or all (-a)."""
    state = ws.load()
    n = len(ws.series.patches)
    if state.position >= n:
        raise _nothing_to_do("the whole series is applied; nothing to push")
    goal = n if all_ else resolve_position(ws, ref, default=state.position + 1)
    if goal <= state.position:
        raise MaterializeError(f"{ref} is already applied (top is {state.top})")
    return move_to(ws, goal, op="push", args=_args(ref, all_, force), force=force)


def pop(ws: Workspace, ref: str | None = None, *, all_: bool = False, force: bool = False) -> MoveResult:
    """Remove the top patch, patches until ``ref`` is on top, or all (-a)."""
    state = ws.load()
    if state.position == 0:
        raise _nothing_to_do("no patch is applied; nothing to pop")
    goal = 0 if all_ else resolve_position(ws, ref, default=state.position - 1)
    if goal > state.position:
        raise MaterializeError(f"{ref} is not applied (top is {state.top})")
    return move_to(ws, goal, op="pop", args=_args(ref, all_, force), force=force)


def goto(ws: Workspace, ref: str, *, force: bool = False) -> MoveResult:
    """Push or pop until ``ref`` is on top (``0``/``base``: nothing applied)."""
    return move_to(ws, ws.series.position(ref), op="goto", args=_args(ref, False, force), force=force)


def _args(ref: str | None, all_: bool, force: bool) -> list[str]:
    return ([ref] if ref else []) + (["-a"] if all_ else []) + (["--force"] if force else [])


def listing(ws: Workspace) -> dict[str, list[PatchEntry]]:
    state = ws.load(allow_pending=True)
    applied = applied_names(ws, state)
    return {"applied": [p for p in ws.series.patches if p.name in applied],
            "unapplied": [p for p in ws.series.patches if p.name not in applied]}


def applied_names(ws: Workspace, state: State) -> list[str]:
    """The patches work/ holds applied: the series' first ``position`` entries, or, when the series
    changed under the workspace (edited by hand, a checkout), the ones on record, with a warning on
    stderr, so that ``applied`` and ``series -v`` never call an unapplied patch applied."""
    names = [p.name for p in ws.series.patches[: state.position]]
    recorded = [a["name"] for a in state.applied]
    if names != recorded:
        import sys

        print(f"materialize: warning: the series changed under the workspace: work/ holds {recorded} applied, "
              f"but the series now starts {names}; `materialize goto 0 --force` resets the workspace",
              file=sys.stderr)
        return recorded
    return names
