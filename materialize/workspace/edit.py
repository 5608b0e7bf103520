"""Editing patches in the workspace: new, add, edit, refresh, diff, fold, rename, delete, move, header.

``refresh`` is the heart: it regenerates the top patch from the files on disk with ``diffgen`` (the
header and every untouched hunk stay byte-identical, the series entry is not touched), then proves the
new patch reproduces the workspace by applying it with the engine before anything is written.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from materialize import digest
from materialize.errors import MaterializeError, PatchApplyError, SeriesError
from materialize.workspace.journal import Journal
from materialize.workspace.stack import check_stack_matches, edits_change_nothing, move_to, pushed
from materialize.workspace.state import State, Workspace
from materialize.workspace.trees import apply_one, trees_and_bases_at, trees_at

# The patch parser (patchtext), the mail header, diffgen, the applier and ruamel load inside the
# functions that use them: `add` and `edit` need none of them.
if TYPE_CHECKING:
    from materialize.patching.model import Hunk
    from materialize.series import PatchEntry, Series
    from materialize.workspace.patchtext import PatchText
    from materialize.workspace.seriesedit import SeriesDoc


class RefreshPlan:
    """What refresh would write, and what it leaves out (reported, never dropped)."""

    __slots__ = ("entry", "old", "new", "new_tree", "files", "elsewhere", "stray", "markers", "kept")

    def __init__(self, entry: PatchEntry, old: bytes, new: bytes, new_tree: str, files: list[str]) -> None:
        self.entry = entry
        self.old = old
        self.new = new
        self.new_tree = new_tree
        self.files = files
        self.elsewhere: list[str] = []  # modified files that belong to another patch
        self.stray: list[str] = []  # files on disk that belong to no patch
        self.markers: list[str] = []  # "file:line" of conflict markers the patch would add
        self.kept: Path | None = None  # the patch file as it was, when refresh --force wrote over a hand edit

    @property
    def changed(self) -> bool:
        return self.old != self.new


def top_entry(ws: Workspace, state: State) -> PatchEntry:
    """The patch on top of the stack work/ holds. Only while the series still starts with the applied
    patches on record: after a hand edit of the series the entry at the top's position is another patch
    (one taken out by hand made `header --set` rewrite the description of the next, unapplied one), so
    every command that means "the top" refuses, as refresh and pop do, with the same way out."""
    if state.position == 0:
        raise MaterializeError("no patch is applied: `materialize push` or `materialize new NAME` first")
    check_stack_matches(ws, state)
    return ws.series.patches[state.position - 1]


def _patch_files(entry: PatchEntry, data: bytes) -> list[tuple[str, str]]:
    """(source path, destination path) of every file a patch touches."""
    from materialize.workspace import patchtext

    return patchtext.touched(data, source=str(entry.path), strip=entry.strip)


def _names_as_gnu_chose(ws: Workspace, tree: str, entry: PatchEntry, data: bytes, old: PatchText) -> None:
    """Give each plain section of ``old`` whose two names differ (``diff -u x x.new``, ``x.orig`` / ``x``)
    the one file GNU patch chose in ``tree`` (``choose_name``, through the applier) as both of its names:
    GNU reads and writes that one file, and so must refresh. Read as a rename, such a section was written
    back as the creation of ``x.new`` and the deletion of all of ``x`` (the patch's change gone), or as the
    creation of an ``x`` that exists. A git section keeps its names (a rename is one); the applier runs
    only when some plain section names two files."""
    plain = [sec for sec in old.sections if sec.old_path is not None and sec.new_path is not None
             and sec.old_path != sec.new_path and not any(h.startswith(b"diff --git ") for h in sec.header)]
    if not plain:
        return
    from materialize.engine import StoreView
    from materialize.patching.tree import apply_to_tree

    applied = apply_to_tree(StoreView(ws.store, tree), data, source=str(entry.path), strip=entry.strip,
                            max_fuzz=entry.max_fuzz)
    if applied.error is not None or len(applied.files) != len(old.sections):
        return  # (the applier reads the sections otherwise: refresh's own check decides)
    for sec, outcome in zip(old.sections, applied.files, strict=True):
        if sec in plain and outcome.path in (sec.old_path, sec.new_path):
            sec.old_path = sec.new_path = outcome.path


def plan_refresh(ws: Workspace, state: State, entry: PatchEntry) -> RefreshPlan:
    """Regenerate ``entry`` from the disk and check the result applies back to exactly the disk."""
    from materialize.workspace import patchtext
    from materialize.workspace.diffgen import FileChange, regenerate

    target = entry.target
    trees, bases = trees_and_bases_at(ws.series, ws.store, entry.position - 1)
    before = trees[target]
    if target in state.bases and bases[target] != state.bases[target]:
        pin = ws.series.targets[target].pin
        raise MaterializeError(
            f"refresh {entry.name} refused: the upstream of {target} changed since work/ was written ({pin.kind} pin "
            f"{getattr(pin, 'path', None) or getattr(pin, 'url', None) or ''}, re-read on every run), so the patch "
            "would record the reverse of upstream's change as its own. Put the upstream back, or move the "
            f"workspace (`materialize pop --force` saves unrefreshed edits under {ws.meta / 'saved'}; push writes "
            "work/ from the new upstream), then redo the edits")
    # the top's tree is the one the disk was written from; a lower patch needs the engine
    after = state.trees[target] if entry.position == state.position else \
        trees_at(ws.series, ws.store, entry.position)[target]
    data = entry.read()
    old = patchtext.parse(data, source=str(entry.path), strip=entry.strip)
    if not entry.reverse:
        _names_as_gnu_chose(ws, before, entry, data, old)
    pairs = [(sec.old_path or sec.path(), sec.path()) for sec in old.sections if sec.path()]
    if entry.reverse:
        # a `reverse: true` entry (quilt's -R) is written forward, and refresh drops the flag, as quilt's
        # refresh does: its old hunks run the other way, so none is kept; its description is
        pairs = [(dest, src) for src, dest in pairs]
        old = patchtext.PatchText(old.header, [], b"")
        entry = forward(entry)
    dests = {dest for _src, dest in pairs}
    for path in state.added.get(entry.name, []):
        if path not in dests:
            pairs.append((path, path))
            dests.add(path)
    changes: list[FileChange] = []
    for src, dest in pairs:
        base = ws.tree_entry(before, src)
        prev = ws.tree_entry(after, dest)
        cur = ws.disk_entry(target, dest)
        changes.append(FileChange(
            path=dest, old_path=src if src != dest else None,
            base=base[1] if base else None, prev=prev[1] if prev else None, cur=cur[1] if cur else None,
            old_mode=base[0] if base else None, new_mode=cur[0] if cur else None,
        ))
    new = regenerate(old, changes, strip=entry.strip, source=str(entry.path))
    new_tree = apply_one(ws.store, before, entry._replace(max_fuzz=0), new)
    for ch in changes:
        got = ws.tree_entry(new_tree, ch.path)
        want = ws.disk_entry(target, ch.path)
        if got != want:
            raise MaterializeError(
                f"refresh of {entry.name} would not reproduce {target}/{ch.path}; nothing was written "
                "(please report this with the patch file)"
            )
    plan = RefreshPlan(entry, data, new, new_tree, sorted(dests))
    for ch in changes:
        plan.markers += [f"{ws.target_dir(target) / ch.path}:{n}" for n in patchtext.conflict_markers(ch.base, ch.cur)]
    all_changes = ws.changes(state)
    owners = ws.owners(state)  # whose unrefreshed edit each one is: `refresh OWNER` records it there

    def whose(t: str, p: str) -> str:
        owner = owners.get((t, p))
        return f"  (patch {owner}'s: `materialize refresh {owner}` records it there)" if owner else ""

    plan.elsewhere = [p + whose(target, p) for p in all_changes.modified.get(target, []) if p not in dests]
    for t, paths in all_changes.modified.items():
        if t != target:
            plan.elsewhere += [f"{t}:{p}" + whose(t, p) for p in paths]
    plan.stray = [f"{t}/{p}" for t, paths in all_changes.stray.items() for p in paths]
    return plan


def forward(entry: PatchEntry) -> PatchEntry:
    """``entry`` without ``reverse: true``: what refresh makes of a quilt -R entry."""
    from materialize.series import PatchSpec

    return entry._replace(spec=PatchSpec(**{**entry.spec.model_dump(), "reverse": False}))


def refresh(ws: Workspace, ref: str | None = None, *, force: bool = False) -> RefreshPlan:
    """Write the regenerated patch (top, or ``ref`` when no later applied patch shares its files);
    ``force`` also when its file was changed since it was pushed (``check_unchanged_since_push``)."""
    state = ws.load()
    check_stack_matches(ws, state)
    entry = top_entry(ws, state) if ref is None else ws.series.find(ref)
    if entry.position > state.position:
        raise MaterializeError(f"{entry.name} is not applied (top is {state.top}); push it first")
    edited = check_unchanged_since_push(ws, state, entry, force=force)
    plan = plan_refresh(ws, state, entry)
    if plan.markers:
        raise MaterializeError(
            f"refresh {entry.name} refused: conflict markers would go into the patch at "
            f"{', '.join(plan.markers[:5])}{' …' if len(plan.markers) > 5 else ''}; resolve them first"
        )
    if entry.position == state.position:
        _refuse_unrepaired_rejects(ws, state, entry)
    if entry.position < state.position:
        later = ws.series.patches[entry.position : state.position]
        for other in later:
            if other.target != entry.target:
                continue
            # the files a later patch holds are its patch file's and those added to it and not refreshed yet
            # (quilt's .pc/<patch>/ has both): an added file's edits are that patch's, never this one's
            holds = {d for _s, d in _patch_files(other, other.read())} | set(state.added.get(other.name, []))
            shared = sorted(holds & set(plan.files))
            if shared:
                raise MaterializeError(
                    f"refresh {entry.name}: later applied patch {other.name} also changes {', '.join(shared)}; "
                    f"pop to {entry.name} first"
                )
    if not plan.changed:
        return plan
    series_bytes = None
    if entry.reverse:  # written forward (see plan_refresh): the entry is no longer reversed
        doc = _series_doc(ws)
        doc.drop_field(doc.index_of(entry.spec.patch), "reverse")
        series_bytes = doc.render("refresh")  # checked before anything is written
    with Journal.run(ws.meta, "refresh", ([ref] if ref else []) + (["--force"] if force else [])) as journal:
        if edited:  # --force writes over a file changed since it was pushed: the change is kept aside
            plan.kept = ws.keep_patch(entry, time.strftime("%Y%m%dT%H%M%SZ-refresh", time.gmtime()))
        journal.write(entry.path, entry.encode(plan.new))
        if series_bytes is not None:
            journal.write(ws.series.path, series_bytes)
        ws.reload_series()
        # Through the engine even for the top: it records the new prefix, so popping and pushing the
        # refreshed patch again (quilt's daily loop) finds it cached instead of applying it again.
        trees = trees_at(ws.series, ws.store, state.position)
        if entry.position == state.position:
            trees[entry.target] = plan.new_tree  # the plan's apply, which the disk was checked against
        for target, tree in trees.items():
            state.trees[target] = tree
            tracked = state.files.setdefault(target, {})
            for path in list(tracked):
                found = ws.store.lookup(tree, path)
                tracked[path] = found.sha if found else None
            if target == entry.target:
                for path in plan.files:
                    found = ws.store.lookup(tree, path)
                    tracked[path] = found.sha if found else None
        # every file refresh looked at stays the patch's while it is applied, as in quilt's .pc/<patch>/:
        # a file whose change was undone left the patch file, and with it the patch, so the next edit of
        # it was listed as a change of no patch, not recorded, and blocked pop
        state.added[entry.name] = sorted(set(state.added.get(entry.name, [])) | set(plan.files))
        state.applied = [pushed(p) for p in ws.series.patches[: state.position]]
        ws.save(state, journal)
    return plan


def check_unchanged_since_push(ws: Workspace, state: State, entry: PatchEntry, *, force: bool = False) -> bool:
    """Refuse to regenerate ``entry`` while an applied patch file is no longer the one that was pushed
    (edited by hand, rewritten by import-git or another checkout): work/ holds what was pushed.

    ``entry`` itself: refresh would write work/ back over the edit without a word (``force``: on
    purpose, and True is returned: the caller keeps the file as it is under saved/). A patch below it: refresh diffs against the series as it is now, so ``entry`` would
    record the reverse of that edit (never forced). quilt's pop notices the same thing ("does not
    remove cleanly"); here pop keeps work/'s files as pushed under saved/ (``stack.keep_pushed_versions``),
    and pop + push applies the edit.
    """
    changed = [p for p, record in zip(ws.series.patches, state.applied, strict=False)
               if p.name == record["name"] and record.get("sha256") not in (None, p.sha256())]
    if changed and edits_change_nothing(ws, state):
        return False
    if entry in changed and not force:
        raise MaterializeError(
            f"refresh {entry.name} refused: {entry.path} was changed since it was pushed (edited by hand?), and "
            f"work/ holds the version that was pushed, so refresh would overwrite the change. `materialize pop` "
            f"then `materialize push` applies the changed file to work/ (unrefreshed edits: refresh or save them "
            f"first); `materialize refresh --force` overwrites it with what work/ holds")
    below = [p for p in changed if p.position < entry.position]
    if below:
        raise MaterializeError(
            f"refresh {entry.name} refused: {', '.join(str(p.path) for p in below)} changed since "
            f"{'it was' if len(below) == 1 else 'they were'} pushed, and work/ holds the pushed version, so "
            f"{entry.name} would record the reverse of that change. Pop to {below[0].name} and push again (that "
            f"applies the change; `pop --force` saves unrefreshed edits under {ws.meta / 'saved'}), or put the "
            "file back")
    return entry in changed


def _refuse_unrepaired_rejects(ws: Workspace, state: State, entry: PatchEntry) -> None:
    """After ``push -f`` the hunks that failed are only in the ``.rej`` files: refresh regenerates the
    patch from work/, so a hunk nobody put into the file left the patch, and the next pop removed its
    .rej, the last copy (a file missing from the tree lost its whole section). Refused while a .rej
    on disk holds a hunk that is not in its file where its context puts it (``_hunk_repaired``).
    When unsure this refuses: deleting the .rej says "drop them" (or "they are in"); quilt never
    deletes a .rej, and ours is only removed once refresh took its hunks in."""
    from materialize.patching.parse import parse_patch

    missing = []
    pushed: dict[str, bytes | None] | None = None
    for rej in state.rejects.get(entry.target, []):
        found = ws.read_path(entry.target, rej)
        if found is None or not os.path.isfile(found):
            continue  # deleted: the user dropped those hunks
        path = rej[: -len(".rej")]
        try:
            fps = parse_patch(Path(found).read_bytes(), source=found, strip=0).files
        except MaterializeError:
            continue  # edited past reading: the user took it over
        if pushed is None:
            pushed = _as_pushed_forced(ws, state, entry)
        cur = ws.disk_entry(entry.target, path)
        now = _file_lines(cur[1] if cur is not None else None)
        before = _file_lines(pushed.get(path) if path in pushed else _base_file(ws, state, entry.target, path))
        lost = sum(1 for fp in fps for hunk in fp.hunks if not _hunk_repaired(hunk, before, now))
        if lost:
            missing.append(f"{found}: {lost} hunk(s) not in {ws.target_dir(entry.target) / path}")
    if missing:
        raise MaterializeError(
            f"refresh {entry.name} refused: push -f left hunks that are in no file yet (or not where their "
            "context puts them), and refresh would drop them from the patch:\n  " + "\n  ".join(missing)
            + "\nput them into the files, or, to drop their hunks (or when they are in, in another form), delete "
            "the .rej file, then refresh"
        )


def _file_lines(data: bytes | None) -> list[bytes]:
    from materialize.patching.model import split_lines

    return [] if data is None else [line.rstrip(b"\r\n") for line in split_lines(data)]


def _base_file(ws: Workspace, state: State, target: str, path: str) -> bytes | None:
    from materialize.engine import StoreView

    got = StoreView(ws.store, state.trees[target]).get(path)
    return got[1] if got is not None else None


def _as_pushed_forced(ws: Workspace, state: State, entry: PatchEntry) -> dict[str, bytes | None]:
    """The files ``push -f`` wrote (path -> bytes, None: removed), applied again from the tree below
    ``entry``: what each file held before anyone repaired a hunk."""
    from materialize.engine import StoreView
    from materialize.patching.tree import apply_to_tree

    try:
        applied = apply_to_tree(StoreView(ws.store, state.trees[entry.target]), entry.read(), source=str(entry.path),
                                strip=entry.strip, max_fuzz=entry.max_fuzz, reverse=entry.reverse, partial=True)
    except MaterializeError:
        return {}
    if applied.error is not None:
        return {}
    return {path: (value[1] if value is not None else None) for path, value in applied.changes.items()}


def _count_block(block: list[bytes], lines: list[bytes]) -> list[int]:
    """Where ``block`` starts in ``lines`` (each index)."""
    n = len(block)
    if not n:
        return []
    return [i for i in range(len(lines) - n + 1) if lines[i] == block[0] and lines[i : i + n] == block]


def _hunk_repaired(hunk: Hunk, before: list[bytes], now: list[bytes]) -> bool:
    """Is the rejected ``hunk`` in the file now (``now``) where its context puts it? ``before``: the
    file as push -f left it. The hunk's new side, context included, is there as one block (and was not
    before: an already-there copy proves nothing); or its changed core (new side from its first to its
    last changed line) is there once more than before, next to one of the hunk's context lines (the
    context is what failed, so all of it is not asked for). A pure deletion: its removed lines are
    there once less than before, and the context lines around them are now next to each other."""
    lines = [line.rstrip(b"\r\n")[1:] for line in hunk.body_lines]
    kinds = bytes(hunk.kinds)
    new_side = [line for line, k in zip(lines, kinds, strict=False) if k != ord("-")]
    changed = [i for i, k in enumerate(kinds) if k in (ord("+"), ord("-"))]
    if not changed:
        return True
    first, last = changed[0], changed[-1]
    ctx_before = next((lines[i] for i in range(first - 1, -1, -1) if kinds[i] not in (ord("+"), ord("-"))), None)
    ctx_after = next((lines[i] for i in range(last + 1, len(lines)) if kinds[i] not in (ord("+"), ord("-"))), None)
    if ord("+") not in kinds[first : last + 1]:  # a pure deletion
        old_core = [line for line, k in zip(lines[first : last + 1], kinds[first : last + 1], strict=False)
                    if k != ord("+")]
        if len(_count_block(old_core, now)) >= len(_count_block(old_core, before)):
            return False
        joined = [x for x in (ctx_before, ctx_after) if x is not None]
        return not joined or len(joined) < 2 or len(_count_block(joined, now)) > len(_count_block(joined, before))
    if len(new_side) > (last - first + 1) and len(_count_block(new_side, now)) > len(_count_block(new_side, before)):
        return True
    core = [line for line, k in zip(lines[first : last + 1], kinds[first : last + 1], strict=False) if k != ord("-")]
    at_now = _count_block(core, now)
    if len(at_now) <= len(_count_block(core, before)):
        return False
    if ctx_before is None and ctx_after is None:
        return True
    n = len(core)
    return any((ctx_before is not None and i > 0 and now[i - 1] == ctx_before)
               or (ctx_after is not None and i + n < len(now) and now[i + n] == ctx_after) for i in at_now)


def _series_doc(ws: Workspace) -> SeriesDoc:
    from materialize.workspace.seriesedit import SeriesDoc

    return SeriesDoc.load(ws.series.path)


def _identity(root: Path) -> str:
    """The author for a new patch: GIT_AUTHOR_NAME/EMAIL, else git's user.name/user.email (both read
    by one git process), else placeholders."""
    name = os.environ.get("GIT_AUTHOR_NAME")
    mail = os.environ.get("GIT_AUTHOR_EMAIL")
    if not (name and mail):
        from materialize import spawn

        try:
            _status, out = spawn.output(["git", "-C", str(root), "config", "--get-regexp", r"^user\.(name|email)$"])
        except OSError:  # no git: the placeholders
            out = b""
        config = dict(line.partition(" ")[::2] for line in out.decode(errors="replace").splitlines())
        name = name or config.get("user.name", "").strip()
        mail = mail or config.get("user.email", "").strip()
    return f"{name or 'materialize user'} <{mail or 'user@localhost'}>"


def new_header(root: Path, subject: str, body: str = "") -> bytes:
    """A git-format-patch style header: export-git takes author, date and subject from it."""
    from materialize.workspace import mailheader

    date = mailheader.date_now(os.environ.get("SOURCE_DATE_EPOCH"))
    return mailheader.render(mailheader.Description(_identity(root), date, subject, body))


def check_new_name(name: str, op: str, given: str) -> None:
    """A name ``new`` or ``rename`` is about to write is a valid series name (``series.PATCH_NAME``: one path
    component, not a number, no control character), refused before anything is written: ``rename a/b``
    wrote t/a/b.patch and then failed to find it (exit 2 after the change, the workspace wedged),
    ``new 12`` made a patch only its file name could reach, ``rename /tmp/x`` wrote /tmp/x.patch first."""
    import re

    from materialize.series import PATCH_NAME

    if not re.match(PATCH_NAME, name) or len(name) > 200:
        raise SeriesError(f"{op}: {given!r} is not a patch name: one path component (no '/', not '.' or '..'), "
                          "not a number (that is a position), no control characters, at most 200 characters")


def new_patch(ws: Workspace, name: str, *, target: str | None, after: str | None = None,
              subject: str | None = None) -> PatchEntry:
    """Create an empty patch after ``after`` (default: the top) and push it when it lands on top."""
    state = ws.load()
    check_stack_matches(ws, state)
    pos = state.position if after is None else ws.series.position(after)
    if pos < state.position:
        raise MaterializeError(f"new {name}: {after} is below the top ({state.top}); pop to it first")
    if pos == state.position:
        _refuse_forced_top(ws, state, f"new {name}")
    if target is None:
        if pos > 0:  # the top's, or the patch it goes after
            target = ws.series.patches[pos - 1].target
        elif len(ws.series.targets) == 1:
            (target,) = ws.series.targets  # the only one there is: quilt has one tree, too
        else:
            raise MaterializeError(f"new: give --target (one of {', '.join(sorted(ws.series.targets))}): no patch"
                                   " is applied to take it from")
    if target not in ws.series.targets:
        raise SeriesError(f"new: target {target!r} has no pin in {ws.series.path}")
    stem = name[:-6] if name.endswith(".patch") else name[:-5] if name.endswith(".diff") else name
    check_new_name(stem.rsplit("/", 1)[-1], "new", name)
    if any(p.name == Path(stem).name for p in ws.series.patches):
        raise MaterializeError(f"new: a patch named {Path(stem).name} is already in the series")
    rel = f"{target}/{stem}.patch" if "/" not in stem else f"{stem}.patch"
    from materialize.series import check_patch_file

    # the series' rule before anything is written: `new ../../x` wrote ../../x.patch outside patches_dir,
    # and only the series' reload inside the journal refused it (and rolled it back)
    check_patch_file(ws.series.resolve(ws.series.spec.patches_dir), rel, f"new {name}")
    path = ws.series.resolve(ws.series.spec.patches_dir) / rel
    if path.exists():
        raise MaterializeError(f"new: {path} already exists")
    from materialize.workspace.seriesedit import with_entry

    header = new_header(ws.series.base_dir, subject or Path(stem).name)
    if subject and "\n" in subject:  # a -m text of several lines that quotes a diff: applied by the next push
        from materialize.workspace import patchtext

        patchtext.check_description(header, b"", source=str(path), strip=ws.series.spec.defaults.strip,
                                    what=f"new {name}")
    series_bytes = with_entry(ws.series.path, pos, {"patch": rel, "target": target})
    args = [name, "--target", target] + (["--after", after] if after else []) + (["-m", subject] if subject else [])
    with Journal.run(ws.meta, "new", args) as journal:
        journal.write(path, header)
        journal.write(ws.series.path, series_bytes)
        ws.reload_series()
        if pos == state.position:
            state.position += 1
            top = ws.series.patches[state.position - 1]  # the ones below are unchanged (checked above)
            state.applied = [*state.applied, pushed(top)]  # (files added to the ones below stay theirs)
        ws.save(state, journal)
    return ws.series.find(Path(stem).name)


def _refuse_forced_top(ws: Workspace, state: State, what: str) -> None:
    """A patch goes on top only while the top applies: after ``push -f`` it does not (its failed hunks are
    in .rej files) until ``refresh`` records the repair. A new patch over it made it a patch below the top
    that does not apply, which pop, push and every refresh then tripped on ('does not apply'): only ``goto
    0 --force`` got out. ``state.rejects`` is set by ``push -f`` alone (every other move clears it), so the
    engine is asked only then."""
    if not any(state.rejects.values()):
        return
    try:
        trees_at(ws.series, ws.store, state.position)
    except PatchApplyError:
        raise MaterializeError(
            f"{what} refused: {state.top} was pushed with push -f and does not apply until `materialize refresh` "
            f"records the repair (put its .rej hunks into the files, or delete a .rej to drop its hunks); or "
            f"`materialize pop --force` sets it aside") from None


def lower_changes_taken(ws: Workspace, names: list[str], cwd: Path | None = None) -> list[tuple[str, str]]:
    """(path, patch) for each of ``names`` that holds changes not refreshed into the lower applied
    patch that has it: `add` makes them the top's. quilt's `add` backs the file up as it is, so there
    they stay the lower patch's; the CLI says so, so the difference is never silent."""
    state = ws.load()
    top = top_entry(ws, state)
    return lower_changes_in(ws, state, [ws.relpath(top.target, n, cwd) for n in names])


def lower_changes_in(ws: Workspace, state: State, paths: list[str]) -> list[tuple[str, str]]:
    """``lower_changes_taken`` of paths inside the top's target (``fold`` names its files so: a folded
    diff applied over a lower patch's unrefreshed edit made that edit the top's just as ``add`` does)."""
    top = top_entry(ws, state)
    target, own = top.target, set(state.added.get(top.name, []))
    tracked, tree = state.files.get(target, {}), state.trees.get(target)
    changed = [p for p in paths if p in tracked and p not in own and tree is not None
               and not ws.holds(target, p, ws.store.lookup(tree, p))]
    if not changed:
        return []
    owners = ws.owners(state)
    return [(p, owners[(target, p)]) for p in changed if owners.get((target, p), top.name) != top.name]


def _already_in_top(ws: Workspace, state: State, entry: PatchEntry, paths: dict[str, str]) -> list[str]:
    """Those of ``paths`` (name -> path) the top patch already has: added to it, or in its patch file
    (either name of a rename). quilt's ``add`` says "File X is already in patch P" for each and exits 2,
    and scripts read that code (``quilt edit`` takes it as success)."""
    has = set(state.added.get(entry.name, []))
    tracked = state.files.get(entry.target, {})
    # a file the patch file touches is in work/ (tracked) while the patch is applied: only such a name
    # needs the patch file read (parsing it cost `add` ~7 ms of imports)
    if any(p in tracked and p not in has for p in paths.values()) and entry.path.exists():
        data = entry.read()
        if any(h in data for h in _SECTION_STARTS):  # not a bare header (`new`'s)
            has.update(path for pair in _patch_files(entry, data) for path in pair if path)
    return [name for name, path in paths.items() if path in has]


# What the lines a file section of any kind starts with hold (GNU's intuit_diff_type, indented or not): a
# patch holding none of them anywhere touches no file, and is not parsed to find that out
_SECTION_STARTS = (b"--- ", b"+++ ", b"*** ", b"diff ", b"Index:")


def add_files(ws: Workspace, names: list[str], cwd: Path | None = None) -> tuple[list[str], list[str]]:
    """Make files part of the top patch (quilt add): check them out from the store if not on disk.
    Returns their paths in work/ and the names the top patch already had (``_already_in_top``), read
    from the same state before anything is added."""
    state = ws.load()
    check_stack_matches(ws, state)
    entry = top_entry(ws, state)
    target = entry.target
    paths = [ws.relpath(target, n, cwd) for n in names]
    already = _already_in_top(ws, state, entry, dict(zip(names, paths, strict=True)))
    for name, path in zip(names, paths, strict=True):
        found = ws.read_path(target, path)
        if ws.store.is_dir(state.trees[target], path) or (found is not None and os.path.isdir(found) and not os.path.islink(found)):
            raise SeriesError(f"add: {name} is a folder ({target}/{path}); add the files in it that the patch changes")
    # recorded as absolute paths: `recover --resume` may run from another directory
    with Journal.run(ws.meta, "add", [str(ws.target_dir(target).absolute() / p) for p in paths]) as journal:
        tracked = state.files.setdefault(target, {})
        added = state.added.setdefault(entry.name, [])
        for path in paths:
            current = ws.store.lookup(state.trees[target], path)
            if path not in tracked:
                on_disk = ws.disk_entry(target, path)
                if on_disk is None and current is not None:
                    ws.write_file(journal, target, path, ws.tree_entry(state.trees[target], path))
                elif current is None:
                    _make_folder_of_new_file(ws, state, target, path)
                tracked[path] = current.sha if current else None
            if path not in added:
                added.append(path)
        ws.save(state, journal)
    return [str(ws.target_dir(target) / p) for p in paths], already


def _make_folder_of_new_file(ws: Workspace, state: State, target: str, path: str) -> None:
    """Make the folder of a new file added to the top when the tree has that folder: quilt's tree is whole,
    so `quilt edit src/new.py` saves into src/, but work/ is sparse and held no src/ until a file of it was
    added, so the editor could not save the new file (the typed text left in its buffer). A folder the
    tree lacks is not made, as quilt makes none. (An empty folder holds nothing to journal: a kill may leave
    it, and a pop of the file prunes it.)"""
    folder = path.rpartition("/")[0]
    if folder and ws.store.is_dir(state.trees[target], folder):
        Path(ws.work_path(target, path)).parent.mkdir(parents=True, exist_ok=True)


def edit_files(ws: Workspace, names: list[str], cwd: Path | None = None) -> list[str]:
    """add, then open $EDITOR (or $VISUAL) on the files when one is set."""
    files, _already = add_files(ws, names, cwd)  # edit of a file the patch has is what edit is for
    open_editor(files)
    return files


def open_editor(files: list[str]) -> None:
    """$VISUAL or $EDITOR on ``files`` (nothing when neither is set); the CLI calls it outside the
    workspace lock, so `materialize diff` works while the editor is open. An editor that cannot start,
    exits non-zero or is killed raises (exit 1): what it left may be half typed, so callers must not
    write it into a patch as if it had been saved (quilt's `header -e` is `$EDITOR "$tmp" || exit 1`,
    its `edit` exits with the editor's status; git refuses a failed editor's message)."""
    import shlex

    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not editor:
        return
    from materialize import spawn

    try:
        argv = shlex.split(editor)
    except ValueError as exc:
        raise MaterializeError(f"the editor {editor!r} cannot be read as a command: {exc}") from None
    if not argv:
        return
    try:
        status = spawn.run([*argv, *files])
    except OSError as exc:
        raise MaterializeError(f"the editor {editor!r} could not be started: {exc.strerror or exc}") from None
    if status:
        how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
        raise MaterializeError(f"the editor {editor!r} {how}")


def fold(ws: Workspace, patch_file: Path, strip: int = 1,
         taken: list[tuple[str, str]] | None = None) -> list[str]:
    """Apply another patch to the workspace files of the top patch's target and add them to the top.
    ``taken`` (when given) receives ``lower_changes_in`` of the files it adds, for the CLI's warning."""
    from materialize.engine import tree_after
    from materialize.patching.tree import apply_to_tree

    state = ws.load()
    check_stack_matches(ws, state)
    entry = top_entry(ws, state)
    target = entry.target
    data = patch_file.read_bytes()
    touched: list[str] = []
    tracked = state.files.setdefault(target, {})
    tree = state.trees[target]
    view = _FoldView(ws, target, tree, tracked)
    result = apply_to_tree(view, data, source=str(patch_file), strip=strip, max_fuzz=0)
    if result.error is not None:
        raise result.error
    tree_after(ws.store, tree, result, origin=str(patch_file))  # no older link set free
    if not result.ok:
        lines = [f"fold {patch_file}: does not apply:"]
        for outcome in result.failed:
            hunks = outcome.result.hunks if outcome.result is not None else ()
            failed = [h.hunk.header for h in hunks if h.status == "failed"]
            error = outcome.error or (outcome.result.error if outcome.result is not None else None) or ""
            lines.append(f"  {outcome.path}: {error} hunks failed: {failed}")
        raise PatchApplyError("\n".join(lines))
    if taken is not None:
        paths = {p for o in result.files for p in (o.source, o.path) if p is not None} | set(result.changes)
        taken.extend(lower_changes_in(ws, state, sorted(paths)))
    with Journal.run(ws.meta, "fold", ["-p", str(strip), str(patch_file.absolute())]) as journal:
        added = state.added.setdefault(entry.name, [])
        for outcome in result.files:
            for path in {p for p in (outcome.source, outcome.path) if p is not None}:
                if path not in tracked:
                    found = ws.store.lookup(tree, path)
                    tracked[path] = found.sha if found else None
                if path not in added:
                    added.append(path)
            if outcome.path is not None:
                touched.append(outcome.path)
        for path, content in result.changes.items():
            if path not in tracked:
                found = ws.store.lookup(tree, path)
                tracked[path] = found.sha if found else None
            ws.write_file(journal, target, path, content)
        ws.save(state, journal)
    return touched


class _FoldView:
    """The top patch's files as ``fold`` sees them: the workspace copy if tracked, else the tree."""

    def __init__(self, ws: Workspace, target: str, tree: str, tracked: dict) -> None:
        self.ws, self.target, self.tree, self.tracked = ws, target, tree, tracked

    def get(self, path: str) -> tuple[str, bytes] | None:
        found = self.ws.disk_entry(self.target, path)
        if found is None and path not in self.tracked:
            found = self.ws.tree_entry(self.tree, path)
        return found

    def is_dir(self, path: str) -> bool:
        full = Path(self.ws.read_path(self.target, path) or os.devnull)
        from materialize.engine import StoreView

        return (full.is_dir() and not full.is_symlink()) or StoreView(self.ws.store, self.tree).is_dir(path)


def rename(ws: Workspace, new_name: str, ref: str | None = None) -> PatchEntry:
    """Rename a patch: its file and its series entry (metadata kept), and the workspace records."""
    state = ws.load()
    check_stack_matches(ws, state)
    entry = top_entry(ws, state) if ref is None else ws.series.find(ref)
    stem = new_name[:-6] if new_name.endswith(".patch") else new_name
    check_new_name(stem, "rename", new_name)
    if any(p.name == stem for p in ws.series.patches):
        raise MaterializeError(f"rename: a patch named {stem} is already in the series")
    old_rel = entry.spec.patch
    suffix = entry.suffixes  # .patch.gz stays .patch.gz, and the bytes move as they are
    new_rel = str(Path(old_rel).parent / f"{stem}{suffix}") if "/" in old_rel else f"{stem}{suffix}"
    new_path = entry.path.parent / f"{stem}{suffix}"
    if new_path.exists():
        raise MaterializeError(f"rename: {new_path} already exists")
    doc = _series_doc(ws)
    doc.set_field(doc.index_of(old_rel), "patch", new_rel)
    if entry.spec.name is not None:  # an entry named apart from its file (see PatchSpec.name)
        doc.set_field(doc.index_of(new_rel), "name", stem)
    series_bytes = doc.render("rename")  # checked before anything is written
    with Journal.run(ws.meta, "rename", [new_name] + (["-P", ref] if ref else [])) as journal:
        journal.write(new_path, entry.raw())
        journal.remove(entry.path)
        journal.write(ws.series.path, series_bytes)
        ws.reload_series()
        for item in state.applied:
            if item["name"] == entry.name:
                item["name"] = stem
        if entry.name in state.added:
            state.added[stem] = state.added.pop(entry.name)
        ws.save(state, journal)
    return ws.series.find(stem)


class Deleted:
    """What ``delete`` did: the entry, where the pop (--force) saved unrefreshed changes, where -r kept
    the file. A plain class: a NamedTuple's string annotations are compiled when this module loads."""

    __slots__ = ("entry", "saved_to", "kept", "kept_pushed")

    def __init__(self, entry: PatchEntry, saved_to: str | None, kept: Path | None,
                 kept_pushed: str | None = None) -> None:
        self.kept_pushed = kept_pushed
        self.entry, self.saved_to, self.kept = entry, saved_to, kept


def delete(ws: Workspace, ref: str | None = None, *, remove_file: bool = False, force: bool = False) -> Deleted:
    """Remove a patch from the series (popping it first when it is the top); -r also removes the file,
    keeping a copy under saved/. What was kept where is returned (the CLI names it)."""
    state = ws.load()
    check_stack_matches(ws, state)
    entry = top_entry(ws, state) if ref is None else ws.series.find(ref)
    if entry.position < state.position:
        raise MaterializeError(f"delete: {entry.name} is applied below the top ({state.top}); pop to it first")
    args = [entry.name] + (["-r"] if remove_file else []) + (["--force"] if force else [])
    saved_to = kept = kept_pushed = None
    doc = _series_doc(ws)
    doc.remove(doc.index_of(entry.spec.patch))
    series_bytes = doc.render("delete")  # checked before anything (the pop too) is done
    with Journal.run(ws.meta, "delete", args) as journal:  # the pop too: a kill rolls back both
        if entry.position == state.position:
            moved = move_to(ws, state.position - 1, op="pop", args=[], force=force, journal=journal,
                            command="delete")
            saved_to, kept_pushed = moved.saved_to, moved.kept_pushed
            state = ws.load(in_journal=True)
        if remove_file and entry.path.exists():  # the file and its entry, before the series loses it
            kept = ws.keep_entry(entry, time.strftime("%Y%m%dT%H%M%SZ-delete", time.gmtime()))
        journal.write(ws.series.path, series_bytes)
        if kept is not None:
            journal.remove(entry.path)
        ws.reload_series()
        ws.save(state, journal)
    return Deleted(entry, saved_to, kept, kept_pushed)


def reordered(series: Series, moving: PatchEntry, after: int) -> Series:
    """The series with ``moving`` placed after position ``after`` (positions renumbered)."""
    rest = [p for p in series.patches if p.name != moving.name]
    index = after if after < moving.position else after - 1
    rest.insert(index, moving)
    patches = tuple(p._replace(position=i + 1) for i, p in enumerate(rest))
    return series._replace(patches=patches)


def move(ws: Workspace, ref: str, after: str) -> Series:
    """Move an unapplied patch after another; refused when any patch would then fail to apply."""
    state = ws.load()
    check_stack_matches(ws, state)
    entry = ws.series.find(ref)
    after_pos = ws.series.position(after)
    if entry.position <= state.position or after_pos < state.position:
        raise MaterializeError(f"move: only unapplied patches move; pop to position {min(entry.position, after_pos + 1) - 1} first")
    if after_pos == entry.position or after_pos == entry.position - 1:
        return ws.series
    candidate = reordered(ws.series, entry, after_pos)
    last = max(entry.position, after_pos)
    try:
        trees_at(candidate, ws.store, last)
    except PatchApplyError as exc:
        raise PatchApplyError(f"move {entry.name} after {after} refused: the series would no longer apply:\n{exc}") from None
    doc = _series_doc(ws)
    index = doc.index_of(entry.spec.patch)
    doc.move(index, after_pos if after_pos < entry.position else after_pos - 1)
    series_bytes = doc.render("move")  # checked before it is written: never a file nothing reads
    with Journal.run(ws.meta, "move", [ref, "--after", after]) as journal:
        journal.write(ws.series.path, series_bytes)
        ws.reload_series()  # inside: whatever it refuses is rolled back
    return ws.series


def header_of(data: bytes) -> bytes:
    from materialize.workspace import patchtext

    return patchtext.parse(data).header


def set_header_if_unchanged(ws: Workspace, name: str, before: bytes, text: bytes) -> PatchEntry:
    """``set_header`` of the patch called exactly ``name`` (never a prefix, a position or whatever is
    the top now), refused while its description is no longer ``before``: ``header -e`` read it before
    opening the editor, outside the lock, and another command may have changed or moved it since."""
    found = [p for p in ws.series.patches if p.name == name]
    if not found:
        raise MaterializeError(f"header -e {name}: {name} is no longer in {ws.series.path} (renamed or deleted "
                               "while the editor was open); nothing was written")
    if header_of(found[0].read()) != before:
        raise MaterializeError(f"header -e {name}: the description of {name} was changed while the editor was open "
                               f"(by another `header`, a rebase, import-git…); nothing was written, so that "
                               "change stays")
    return set_header(ws, text, found[0])


def set_header(ws: Workspace, text: bytes, ref: str | PatchEntry | None = None) -> PatchEntry:
    """Replace a patch's description; the diff part is kept byte for byte."""
    from materialize.workspace import patchtext

    state = ws.load()
    entry = top_entry(ws, state) if ref is None else ref if not isinstance(ref, str) else ws.series.find(ref)
    data = entry.read()
    parsed = patchtext.parse(data, source=str(entry.path), strip=entry.strip)
    if text and not text.endswith(b"\n"):
        text += b"\n"
    if text and parsed.sections and not text.endswith(b"\n\n"):
        text += b"\n"
    diff = parsed.render()[len(parsed.header):]
    # prose only: a quoted diff in it would be applied by the next push (GNU patch reads it as one)
    patchtext.check_description(text, diff, source=str(entry.path), strip=entry.strip, what=f"header {entry.name}")
    parsed.header = text
    # the new description is kept beside the journal until the command ends: `recover --resume` runs
    # `header --set` with it (a resume of `header NAME` only showed the old one)
    given = ws.meta / "header-input.txt"
    from materialize.atomic import atomic_write

    atomic_write(given, text)
    with Journal.run(ws.meta, "header", ["--set", str(given), entry.name]) as journal:
        journal.write(entry.path, entry.encode(parsed.render()))
        if entry.position <= state.position:
            ws.reload_series()
            # only this entry's record moves, and only when its file was the one pushed: re-recording
            # every applied patch's sha256 blessed a diff edited by hand (the next refresh dropped it)
            record = state.applied[entry.position - 1]
            if record["name"] == entry.name and record.get("sha256") == digest.sha256(data).hexdigest():
                record["sha256"] = ws.series.patches[entry.position - 1].sha256()
            ws.save(state, journal)
    given.unlink(missing_ok=True)
    return entry
