"""Move a target's pin to another upstream and carry the series across, the way ``git rebase`` does.

For each patch of the target, in series order, on the new base: *clean* (kept byte for byte),
*offset* / *fuzz* (applied, then regenerated with ``diffgen`` so the series is exact again, untouched
hunks keeping their bytes), *already-upstream* (the patch reverse-applies or changes nothing: dropped
from the series, like git drops an empty commit), *merged* (hunks failed but a 3-way merge with the
patch's old base from the store is clean) or *conflict*. A conflict stops the rebase with conflict
markers in ``work/<target>/`` and the patch on top of the workspace stack; ``--continue`` regenerates
it from the resolved files, ``--skip`` drops it, ``--abort`` restores the series file, every patch file
and the workspace position byte for byte. ``--report`` classifies every patch without writing.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from materialize.engine import StoreView, tree_after
from materialize.errors import MaterializeError, UpstreamError
from materialize.patching.tree import apply_to_tree
from materialize.series import PatchEntry
from materialize.store import SYMLINK, Store
from materialize.upstream import parse_spec, resolve
from materialize.workspace import patchtext
from materialize.workspace.diffgen import FileChange, regenerate
from materialize.workspace.journal import Journal
from materialize.workspace.seriesedit import SeriesDoc
from materialize.workspace.session import REBASE_FILE
from materialize.workspace.stack import keep_pushed_versions, move_to, pushed
from materialize.workspace.state import Changes, DirtyWorkspaceError, PinMovedError, State, Workspace
from materialize.workspace.trees import apply_one, trees_at

MAX_FUZZ = 3


class RebaseConflict(MaterializeError):
    """The rebase stopped at a conflict; the workspace holds the markers."""

    exit_code = 1


@dataclass
class Outcome:
    """One patch's fate on the new base."""

    name: str
    position: int
    status: str  # clean | offset | fuzz | merged | conflict | already-upstream | skipped
    hunks: dict[str, int] = field(default_factory=dict)  # status -> count
    files: list[str] = field(default_factory=list)
    detail: str = ""
    conflicts: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Attempt:
    """Applying one patch to a tree without raising: results per file, the merged content if any."""

    contents: dict[str, tuple[str, bytes] | None]
    statuses: list[tuple[str, str, str]]  # (file, hunk header, status)
    failed: list[str]  # files with failed hunks or file-level errors
    placed: list[tuple[str, Any]] = field(default_factory=list)  # (file, HunkResult) of offset/fuzz hunks
    noop: bool = False
    reverse_applies: bool = False
    upstream_has: list[str] = field(default_factory=list)  # failed files whose change reverse-applies


def attempt(store: Store, tree: str, entry: PatchEntry, data: bytes, max_fuzz: int = MAX_FUZZ) -> Attempt:
    """Apply ``data`` to ``tree`` through the one applier (``apply_to_tree``), reporting failed files.

    Only a refusal (malformed patch, unsafe path) raises; failed hunks are reported.
    """
    result = apply_to_tree(StoreView(store, tree), data, source=str(entry.path), strip=entry.strip,
                           max_fuzz=max_fuzz, reverse=entry.reverse)
    if result.error is not None:
        raise result.error
    tree_after(store, tree, result, origin=f"{entry.path} (patch {entry.name})")  # no link set free
    statuses: list[tuple[str, str, str]] = []
    failed: list[str] = []
    placed: list[tuple[str, Any]] = []
    for outcome in result.files:
        dest = outcome.path or "?"
        hunks = outcome.result.hunks if outcome.result is not None else ()
        for h in hunks:
            statuses.append((dest, h.hunk.header, h.status))
            if h.status in ("offset", "fuzz"):
                placed.append((dest, h))
        if not outcome.ok:
            failed.append(dest)
            if not hunks:
                statuses.append((dest, "(file)", "failed"))
    contents = result.changes
    reverse_ok = all(o.reverse_applies for o in result.failed)
    noop = bool(contents) and not failed and all(current_in_tree(store, tree, p) == c for p, c in contents.items())
    # the whole patch is upstream's only when what applied forward changes nothing either: a file that
    # still applies is a change upstream did not take (it dropped the patch, that change and all)
    forward_noop = all(current_in_tree(store, tree, p) == c for p, c in contents.items() if p not in failed)
    upstream_has = [o.path for o in result.failed if o.reverse_applies and o.path is not None]
    return Attempt(contents, statuses, failed, placed, noop=noop,
                   reverse_applies=bool(failed) and reverse_ok and forward_noop, upstream_has=upstream_has)


def graft(old_base: bytes, old_result: bytes, new_base: bytes) -> bytes | None:
    """Carry the patch's changes (old_base -> old_result) onto new_base where upstream left the changed
    lines alone; None when upstream touched any of them. Unlike ``git merge-file`` this does not
    object to upstream changes on *neighbouring* lines, which is exactly the case fuzz exists for."""
    a, mine, b = (x.splitlines(keepends=True) for x in (old_base, old_result, new_base))
    where: dict[int, int] = {}
    for tag, i1, i2, j1, _j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                where[i1 + k] = j1 + k
    edits: list[tuple[int, int, list[bytes]]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, mine, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            mapped = [where.get(i) for i in range(i1, i2)]
            if None in mapped or mapped != list(range(mapped[0], mapped[0] + len(mapped))):  # type: ignore[arg-type]
                return None
            edits.append((mapped[0], mapped[-1] + 1, mine[j1:j2]))  # type: ignore[operator]
        elif i1 in where:
            edits.append((where[i1], where[i1], mine[j1:j2]))
        elif i1 - 1 in where:
            edits.append((where[i1 - 1] + 1, where[i1 - 1] + 1, mine[j1:j2]))
        elif i1 == len(a) and not a:
            edits.append((len(b), len(b), mine[j1:j2]))
        else:
            return None
    for s0, s1, lines in sorted(edits, reverse=True):
        b[s0:s1] = lines
    return b"".join(b)


def current_in_tree(store: Store, tree: str, path: str) -> tuple[str, bytes] | None:
    found = store.lookup(tree, path)
    return (found.mode, store.read_blob_by_id(found.sha)) if found else None


def merge3(ours: bytes, base: bytes, theirs: bytes, labels: tuple[str, str, str]) -> tuple[bytes, bool]:
    """``git merge-file``: (result, clean?) merging base→theirs into ours."""
    from materialize.workspace.diffscript import scratch_dir, scratch_write

    with scratch_dir("materialize-merge-", "a three-way merge") as tmp:
        paths = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            p = tmp / name
            scratch_write(p, data, f"the {name} side of a three-way merge")
            paths.append(str(p))
        proc = subprocess.run(
            ["git", "merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2], *paths],
            capture_output=True,
        )
    if proc.returncode < 0 or proc.returncode > 127:
        raise MaterializeError(f"git merge-file failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout, proc.returncode == 0


def _counts(statuses: list[tuple[str, str, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for _f, _h, status in statuses:
        out[status] = out.get(status, 0) + 1
    return out


def _regenerate(store: Store, tree: str, entry: PatchEntry, data: bytes,
                contents: dict[str, tuple[str, bytes] | None]) -> bytes:
    """The patch rewritten to apply exactly on ``tree`` and produce ``contents``; a ``reverse: true``
    entry is written forward (``_write_patch`` drops the flag), as refresh does (``edit.forward``)."""
    old = patchtext.parse(data, source=str(entry.path), strip=entry.strip)
    renames = {s.new_path: s.old_path for s in old.sections if s.rename and s.new_path and s.old_path}
    if entry.reverse:  # its hunks run the other way: none is kept, and its renames go back
        from materialize.workspace.edit import forward

        renames = {src: dest for dest, src in renames.items()}
        old = patchtext.PatchText(old.header, [], b"")
        entry = forward(entry)
    changes = []
    for path, cur in contents.items():
        if path in renames.values() and cur is None:
            continue
        src = renames.get(path, path)
        base = current_in_tree(store, tree, src)
        changes.append(FileChange(path=path, old_path=src if src != path else None,
                                  base=base[1] if base else None, cur=cur[1] if cur else None,
                                  prev=cur[1] if cur else None,
                                  old_mode=base[0] if base else None, new_mode=cur[0] if cur else None))
    new = regenerate(old, changes, strip=entry.strip, source=str(entry.path))
    check_tree = apply_one(store, tree, entry._replace(max_fuzz=0), new)
    for path, cur in contents.items():
        if current_in_tree(store, check_tree, path) != cur:
            raise MaterializeError(f"rebase: regenerated {entry.name} does not reproduce {path}; stopped")
    return new


# -- the persistent rebase --------------------------------------------------------------------------
class Rebase:
    """State of a rebase in progress, in ``work/.materialize/rebase/``."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.file = ws.meta / REBASE_FILE
        self.dir = self.file.parent
        self.data: dict[str, Any] = {}

    def active(self) -> bool:
        return self.file.exists()

    def load(self) -> None:
        if not self.active():
            raise MaterializeError("no rebase in progress")
        from materialize.workspace.session import rebase_state

        self.data = rebase_state(self.ws.meta) or {}

    def save(self, journal: Journal) -> None:
        journal.write(self.file, json.dumps(self.data, indent=1).encode())

    def write(self, journal: Journal, path: Path, data: bytes) -> None:
        """Write a patch file or the series file, remembering what was written (``--abort`` keeps a copy
        of a file whose bytes are neither the backup's nor ours: edited by hand during the rebase)."""
        from materialize import digest

        journal.write(path, data)
        self.data.setdefault("wrote", {})[str(path)] = digest.sha256(data).hexdigest()


def _old_chain(ws: Workspace, target: str) -> dict[str, tuple[str, str]]:
    """Per patch of ``target``: (tree before, tree after) on the current pin, i.e. each patch's old base.

    Only this target's pin is resolved (a plugin rebase never needs the tt-metal wheel); each patch is
    applied by the engine's own ``apply_patch`` with the entry's options.
    """
    tree = resolve(ws.series.targets[target].pin, ws.store, base_dir=ws.series.base_dir, progress=False).tree
    chain: dict[str, tuple[str, str]] = {}
    for entry in [p for p in ws.series.patches if p.target == target]:
        after = apply_one(ws.store, tree, entry, entry.read())
        chain[entry.name] = (tree, after)
        tree = after
    return chain


def pin_for(ws: Workspace, target: str, spec: str):  # noqa: ANN201 - one of the series' pin models
    """The pin ``--to SPEC`` means for ``target``.

    ``pypi:NAME==VERSION:FILE`` names the file. Without ``:FILE`` the file is picked the way the
    current pin was: a target pinned to a wheel gets the new version's wheel with the same tags
    (python, ABI, platform: ``ttnn-0.81.1-cp312-cp312-manylinux_2_34_x86_64.whl`` ->
    ``ttnn-0.82.0-cp312-cp312-manylinux_2_34_x86_64.whl``), any other target the sdist; the current
    pin's index is used. When that file is not on the index the error lists the version's files.
    """
    current = ws.series.targets[target].pin if target in ws.series.targets else None
    index = getattr(current, "index_url", None)
    if not spec.startswith("pypi:") or spec.count(":") != 1:
        return parse_spec(spec, index=index if spec.startswith("pypi:") else None)
    name, _, version = spec[len("pypi:"):].partition("==")
    wheel = getattr(current, "file", "") or ""
    if wheel.endswith(".whl") and version:
        tags = "-".join(wheel[: -len(".whl")].split("-")[-3:])
        wanted = f"{wheel.split('-')[0]}-{version}-{tags}.whl"
        what = f"{target} is pinned to a {tags} wheel"
        spec = f"{spec}:{wanted}"
    else:
        what = f"{target} is pinned to {'an sdist' if wheel else 'a non-PyPI pin'}, so the sdist is picked"
    try:
        return parse_spec(spec, index=index)
    except UpstreamError as exc:
        raise UpstreamError(f"{exc}. ({what}; name the file with `--to pypi:{name}=={version}:FILE`)") from None


def _pin_fields(pin: Any, base_dir: Path) -> dict[str, Any]:
    """The new pin as the series file should say it: fields left at their default (``root: ''``) are
    left out, and a folder or archive in or beside the series' project (at most one level above the
    series file's folder, as the default ``../patches`` is) is written relative to that folder, as a
    shared series needs it (``--to up2`` was written as ``/home/me/proj/up2``). The rule looks at the
    path, not at how it was typed, so ``recover --resume`` (which runs it with an absolute path)
    writes the same series."""
    defaults = {f.name: f.default for f in type(pin)._fields}
    fields = {k: v for k, v in pin.model_dump(exclude_none=True).items() if k == "kind" or v != defaults.get(k)}
    path = fields.get("path")
    if isinstance(path, str) and os.path.isabs(path):
        relative = os.path.relpath(path, base_dir.resolve())
        if not relative.startswith(("../../", "..\\..")) and relative != os.path.join("..", ".."):
            fields["path"] = relative
    return fields


def report(ws: Workspace, target: str, spec: str) -> list[Outcome]:
    """Classify every patch of ``target`` on the new pin; writes nothing."""
    pin = pin_for(ws, target, spec)
    new_base = resolve(pin, ws.store, base_dir=ws.series.base_dir, progress=False).tree
    chain = _old_chain(ws, target)
    tree = new_base
    outcomes = []
    for entry in [p for p in ws.series.patches if p.target == target]:
        outcome, contents = _classify(ws.store, tree, entry, entry.read(), chain[entry.name])
        outcomes.append(outcome)
        if contents is not None and outcome.status not in ("conflict", "already-upstream"):
            tree = ws.store.write_tree(tree, contents)
    return outcomes


def _classify(store: Store, tree: str, entry: PatchEntry, data: bytes, old: tuple[str, str]):
    """(outcome, resulting contents or None); merged contents may carry conflict markers."""
    att = attempt(store, tree, entry, data)
    outcome = Outcome(entry.name, entry.position, "clean", _counts(att.statuses), sorted(att.contents))
    if att.noop:
        outcome.status = "already-upstream"
        outcome.detail = "applies but changes nothing"
        return outcome, None
    if not att.failed:
        kinds = {s for _f, _h, s in att.statuses}
        outcome.status = "fuzz" if "fuzz" in kinds else "offset" if "offset" in kinds else "clean"
        return _cross_check(store, tree, entry, old, outcome, dict(att.contents), att.placed)
    if att.reverse_applies:
        outcome.status = "already-upstream"
        outcome.detail = "reverse-applies: upstream already has it"
        return outcome, None
    contents = dict(att.contents)
    conflicted = []
    sources = _rename_sources(entry, data)
    for path in att.failed:
        ours = current_in_tree(store, tree, path)
        if path in att.upstream_has:  # upstream took this file's change: it stays upstream's (git: a no-op)
            contents[path] = ours
            continue
        src = sources.get(path, path)
        if ours is None and src != path:
            # a renamed file: merged from its source, as upstream has it now and as the old base had it (the
            # new name is on neither side: a merge against nothing dropped upstream's change to the file)
            ours = current_in_tree(store, tree, src)
        base = current_in_tree(store, old[0], src)
        theirs = current_in_tree(store, old[1], path)
        if ours is None or base is None or theirs is None:
            if ours is not None and theirs is not None and ours == theirs:
                contents[path] = theirs  # both added the same file: nothing to resolve
                continue
            conflicted.append(path)
            links = any(side is not None and side[0] == SYMLINK for side in (ours, theirs))
            contents[path] = theirs if links else _whole_file_conflict(ours, theirs, entry.name)
            continue
        merged, clean = merge3(ours[1], base[1], theirs[1], ("upstream (new pin)", "old base", f"patch {entry.name}"))
        contents[path] = (theirs[0], merged)
        if not clean:
            conflicted.append(path)
    outcome.files = sorted(contents)
    outcome.status = "conflict" if conflicted else "merged"
    outcome.conflicts = conflicted
    outcome.detail = ", ".join(conflicted)
    if att.upstream_has:
        outcome.detail = ((outcome.detail + "; ") if outcome.detail else "") + \
            "upstream already has its change to " + ", ".join(att.upstream_has)
    return outcome, contents


def _rename_sources(entry: PatchEntry, data: bytes) -> dict[str, str]:
    """New name -> old name of each file the patch renames, in the direction it is applied."""
    try:
        sections = patchtext.parse(data, source=str(entry.path), strip=entry.strip).sections
    except MaterializeError:
        return {}
    pairs = [(s.new_path, s.old_path) for s in sections if s.rename and s.new_path and s.old_path]
    return {old: new for new, old in pairs} if entry.reverse else dict(pairs)


def _whole_file_conflict(ours: tuple[str, bytes] | None, theirs: tuple[str, bytes] | None,
                         name: str) -> tuple[str, bytes]:
    """Both sides of a conflict that no three-way merge can write (upstream deleted a file the patch
    changes, added one the patch creates, or changed one the patch deletes), between git's markers, so the
    stop is resolved the way any other is: remove the markers and keep what should stay, or delete the
    file. It was the patch's side alone (or nothing), which `rebase --continue` took as resolved: the
    patch silently became the creation of a whole file upstream had deleted, replaced upstream's new
    file with its own, or deleted upstream's changed one."""
    def side(entry: tuple[str, bytes] | None) -> bytes:
        if entry is None:
            return b""
        return entry[1] if entry[1].endswith(b"\n") or not entry[1] else entry[1] + b"\n"

    mode = (theirs or ours)[0]  # type: ignore[index]  (one side exists: a file is in conflict)
    gone = " (deleted)"
    text = (b"<<<<<<< upstream (new pin)" + (gone.encode() if ours is None else b"") + b"\n" + side(ours)
            + b"=======\n" + side(theirs) + f">>>>>>> patch {name}".encode()
            + (b" (deletes the file)" if theirs is None else b"") + b"\n")
    return mode, text


def _cross_check(store: Store, tree: str, entry: PatchEntry, old: tuple[str, str], outcome: Outcome,
                 contents: dict[str, tuple[str, bytes] | None], placed: list[tuple[str, Any]]):
    """Offsets and fuzz can place a hunk at the wrong copy of a repeated line (seen between vllm
    0.32.0 and 0.33.0, where fuzz found an identical import line elsewhere). A 3-way merge with the
    patch's real old base decides: same result, keep it; a different clean result, take the merge
    ("merged"). When the merge conflicts (git also conflicts on changes to *adjacent* lines) the
    offset/fuzz result stands only if ``graft`` - upstream left every patched line alone - agrees
    with it; otherwise the patch stops as a conflict with the merge's markers."""
    conflicted, differed = [], []
    for path in sorted({p for p, _h in placed}):
        ours = current_in_tree(store, tree, path)
        base = current_in_tree(store, old[0], path)
        theirs = current_in_tree(store, old[1], path)
        mine = contents.get(path)
        if ours is None or base is None or theirs is None or mine is None:
            continue
        merged, clean = merge3(ours[1], base[1], theirs[1], ("upstream (new pin)", "old base", f"patch {entry.name}"))
        if clean and merged == mine[1]:
            continue
        if clean:
            contents[path] = (mine[0], merged)
            differed.append(path)
            continue
        if graft(base[1], theirs[1], ours[1]) == mine[1]:
            continue  # upstream only changed neighbouring lines: the fuzz result is the right one
        contents[path] = (mine[0], merged)
        conflicted.append(path)
    if conflicted:
        outcome.detail = f"{outcome.status} would apply, but upstream changed the patched lines in " + \
            ", ".join(conflicted)
        outcome.status, outcome.conflicts = "conflict", conflicted
    elif differed:
        outcome.status = "merged"
        outcome.detail = "3-way merge differs from the offset/fuzz result in " + ", ".join(differed)
    return outcome, contents


def start(ws: Workspace, target: str, spec: str) -> list[Outcome]:
    """Begin a rebase of ``target`` onto ``spec``; runs until done or the first conflict."""
    rb = Rebase(ws)
    if rb.active():
        raise MaterializeError("a rebase is already in progress: `materialize rebase --continue`, --skip or --abort")
    if target not in ws.series.targets:
        raise MaterializeError(f"rebase: no target {target!r} in {ws.series.path}")
    state = ws.load()
    orig_position = state.position
    changes = ws.changes(state)
    if changes.any():
        raise DirtyWorkspaceError(
            f"rebase refused: work/ holds changes no patch records yet:\n{changes.describe(ws.owners(state))}\n"
            "refresh them (or `materialize pop -a --force` to save them aside) first"
        )
    pin = pin_for(ws, target, spec)
    new_base = resolve(pin, ws.store, base_dir=ws.series.base_dir, progress=False).tree
    chain = _old_chain(ws, target)
    entries = [p for p in ws.series.patches if p.target == target]
    recorded = str(Path(spec).absolute()) if Path(spec).exists() else spec  # resumed from any directory
    with Journal.run(ws.meta, "rebase", [target, "--to", recorded]) as journal:
        # the workspace goes to position 0 inside this journal, so a rollback restores the position too;
        # an applied patch file changed since its push (emptied by hand) is carried as it is now: work/'s
        # files as pushed, their last copy, are kept first, as pop keeps them
        kept = keep_pushed_versions(ws, state, 0, dict(state.bases), "rebase")
        if kept is not None:
            from materialize.console import write

            write(f"a patch was changed since it was pushed and is carried as it is now: its files as pushed "
                  f"(work/ before the rebase) are kept in {kept}", stderr=True)
        ws.sync(state, dict(state.bases), {}, journal)
        added = state.added  # (--abort gives each patch its added files back: stack.still_added)
        state.position, state.applied, state.added = 0, [], {}
        backup = rb.dir / "backup"
        if backup.exists():
            shutil.rmtree(backup)
        backup.mkdir(parents=True)
        files = {"series": ws.series.path.read_bytes()}
        (backup / "series").write_bytes(files["series"])
        for e in entries:
            (backup / f"{e.name}.patch").write_bytes(e.raw())  # as kept: --abort restores it byte for byte
        rb.data = {
            "target": target, "spec": spec, "orig_position": orig_position,
            "patches": {e.name: str(e.path) for e in entries}, "old": {k: list(v) for k, v in chain.items()},
            "todo": [e.name for e in entries], "done": [], "current": None,
            "tree": new_base,  # the target's tree after the patches carried so far (other targets don't touch it)
            "added": added,
        }
        doc = SeriesDoc.load(ws.series.path)
        doc.set_pin(target, _pin_fields(pin, ws.series.base_dir))
        rb.write(journal, ws.series.path, doc.render("rebase"))
        ws.reload_series()
        state.bases[target] = state.trees[target] = new_base  # at position 0 the tree is the (new) base
        state.pins = ws.pins()
        ws.save(state, journal)
        rb.save(journal)
    ws.reload_series()
    return _run(rb)


def _run(rb: Rebase) -> list[Outcome]:
    """Carry on with the todo list until it is empty or a patch conflicts."""
    ws = rb.ws
    rb.load()
    while rb.data["todo"]:
        name = rb.data["todo"][0]
        entry = next((p for p in ws.series.patches if p.name == name), None)  # (a name, never a prefix)
        if entry is None:  # taken out of the series by hand meanwhile: left out, as git's edited todo list
            with Journal.run(ws.meta, "rebase", ["--continue"]) as journal:
                rb.data["todo"].pop(0)
                rb.data["done"].append(Outcome(name, 0, "removed", detail=(
                    f"taken out of {ws.series.path} by hand during the rebase: left out (its file is as it "
                    f"was, {rb.data['patches'].get(name, '?')})")).to_json())
                rb.save(journal)
            continue
        before = rb.data["tree"]
        data = entry.read()
        outcome, contents = _classify(ws.store, before, entry, data, tuple(rb.data["old"][name]))
        with Journal.run(ws.meta, "rebase", ["--continue"]) as journal:
            if outcome.status == "conflict":
                assert contents is not None
                _stop_at(ws, rb, entry, contents, journal)
                rb.data["current"] = outcome.to_json()
                rb.save(journal)
            else:
                if outcome.status == "already-upstream":
                    outcome.detail += f"; file kept in {_drop(rb, entry, journal)}"
                else:
                    assert contents is not None
                    if outcome.status != "clean":
                        _write_patch(rb, entry, _regenerate(ws.store, before, entry, data, contents), journal)
                    rb.data["tree"] = ws.store.write_tree(before, contents)
                rb.data["todo"].pop(0)
                rb.data["done"].append(outcome.to_json())
                rb.save(journal)
        ws.reload_series()
        if outcome.status == "conflict":
            raise RebaseConflict(_conflict_message(ws, outcome))
    return _finish(rb)


def _conflict_message(ws: Workspace, outcome: Outcome) -> str:
    files = "\n".join(f"  {ws.root / ws.series.find(outcome.name).target / f}" for f in outcome.conflicts)
    return (f"rebase stopped: {outcome.name} (#{outcome.position}) conflicts with the new upstream in:\n{files}\n"
            "resolve the conflict markers, then `materialize rebase --continue` "
            "(or --skip to drop this patch, --abort to restore everything)")


def _stop_at(ws: Workspace, rb: Rebase, entry: PatchEntry, contents, journal: Journal) -> None:
    """Workspace at the patch before ``entry``, with ``entry`` on top and its files (markers and all) on disk."""
    state = ws.load(in_journal=True)
    trees = trees_at(ws.series, ws.store, entry.position - 1)
    files = sorted(contents)
    ws.sync(state, trees, {entry.target: set(files)}, journal)
    for path, value in contents.items():
        ws.write_file(journal, entry.target, path, value)
    state.position = entry.position
    state.applied = [pushed(p) for p in ws.series.patches[: entry.position]]
    state.added = {entry.name: files}
    ws.save(state, journal)


def _write_patch(rb: Rebase, entry: PatchEntry, new: bytes, journal: Journal) -> None:
    """Write a regenerated patch as its file is kept; a reversed entry, now written forward, loses
    ``reverse: true`` (it died here: the forward diff was checked by applying it reversed, and the
    rebase stopped half-way with no conflict to resolve)."""
    rb.write(journal, entry.path, entry.encode(new))
    if entry.reverse:
        doc = SeriesDoc.load(rb.ws.series.path)
        doc.drop_field(doc.index_of(entry.spec.patch), "reverse")
        rb.write(journal, rb.ws.series.path, doc.render("rebase"))


def _drop(rb: Rebase, entry: PatchEntry, journal: Journal) -> Path:
    """Take a patch out of the series (git drops such commits); its file and its series entry are kept
    under saved/ (the file's copy returned)."""
    kept = rb.ws.keep_entry(entry, "rebase-dropped")  # (before the series loses the entry)
    doc = SeriesDoc.load(rb.ws.series.path)
    doc.remove(doc.index_of(entry.spec.patch))
    rb.write(journal, rb.ws.series.path, doc.render("rebase"))
    journal.remove(entry.path)
    return kept


def _finish(rb: Rebase) -> list[Outcome]:
    """End the rebase and take the workspace back to where the user was, in one journal: a kill between
    the two left the rebase over with the workspace at the last patch carried, and nothing to recover."""
    ws = rb.ws
    done = [Outcome(**o) for o in rb.data["done"]]
    goal = min(rb.data["orig_position"], len(ws.series.patches))
    with Journal.run(ws.meta, "rebase", ["--continue"]) as journal:
        journal.remove(rb.file)
        _goto_inside(ws, goal, journal)
    shutil.rmtree(rb.dir, ignore_errors=True)
    return done


def _goto_inside(ws: Workspace, goal: int, journal: Journal) -> str | None:
    """``goto goal`` inside the rebase's own journal; when it refuses before writing anything (a patch of
    the series no longer applies, the stack changed), the workspace stays where it is (the reason is
    returned). A failure half-way is raised: the journal puts everything back."""
    before = journal.changes
    try:
        move_to(ws, goal, op="goto", args=[str(goal)], journal=journal)
    except MaterializeError as exc:  # (PatchApplyError is one)
        if journal.changes != before:
            raise
        return str(exc)
    return None


def _refuse_edits_elsewhere(ws: Workspace, state: State, changes: Changes, entry: PatchEntry | None,
                            step: str) -> None:
    """``--continue`` and ``--skip`` take the stopped patch's files (``add`` joins a file to them) and
    move the workspace on, which writes every other file back as the series has it. An edit anywhere
    else (a file of a lower patch, of no patch, of another target) would be dropped without a word, so
    both refuse. (git's --continue commits what was staged and leaves other edits in the tree, its --skip
    resets them away; here the tree is work/, which the next step rewrites.)"""
    own = set(state.added.get(entry.name, [])) if entry is not None else set()
    outside = Changes()
    for kind in ("modified", "stray"):
        for target, paths in getattr(changes, kind).items():
            rest = [p for p in paths if entry is None or target != entry.target or p not in own]
            if rest:
                getattr(outside, kind)[target] = rest
    if not outside.any():
        return
    where = f"the files of the stopped patch {entry.name}" if entry is not None else "the patches"
    target = entry.target if entry is not None else "its target"
    raise DirtyWorkspaceError(
        f"rebase {step} refused: work/ holds edits outside {where}, which {step} would write back as the "
        f"series has them (lost):\n{outside.describe(ws.owners(state))}\n"
        f"`materialize add FILE` puts a file of {target} into the stopped patch (as `git add` before "
        "`git rebase --continue`); otherwise move the edit out of work/ and run it again, or "
        f"`materialize rebase --abort` (it saves them under {ws.meta / 'saved'} and restores everything)")


def proceed(ws: Workspace, *, skip: bool = False) -> list[Outcome]:
    """``--continue`` (regenerate the stopped patch from the resolved workspace) or ``--skip`` (drop it).

    Both refuse while work/ holds edits outside the stopped patch's files (``_refuse_edits_elsewhere``);
    ``--continue`` refuses while the stopped patch's file was edited by hand (it would regenerate it over
    the edit); ``--skip`` keeps the patch file and its files as work/ held them under saved/ (named in
    the outcome's detail)."""
    ws.check_no_pending()
    rb = Rebase(ws)
    rb.load()
    step = "--skip" if skip else "--continue"
    current = rb.data.get("current")
    try:
        state = ws.load()
    except PinMovedError:
        raise MaterializeError(
            f"rebase {step} refused: {ws.series.path} no longer pins {rb.data['target']} as the rebase wrote it "
            f"(edited by hand?), and work/ was written from that pin: put the pin back as the rebase wrote it, or "
            "`materialize rebase --abort` (it restores the series file as it was before the rebase and keeps the "
            f"edited one under {ws.meta / 'saved'})") from None
    entry = None
    if current is not None:
        # the recorded name exactly, never a prefix of another patch's (a name typed on the command line)
        entry = next((p for p in ws.series.patches if p.name == current["name"]), None)
        if entry is None:
            raise MaterializeError(
                f"rebase {step} refused: the stopped patch {current['name']} is no longer in {ws.series.path} "
                f"(taken out by hand?): put its entry back, or `materialize rebase --abort` (it restores the series "
                f"file as it was before the rebase and keeps the edited one under {ws.meta / 'saved'})")
    changes = ws.changes(state)
    _refuse_edits_elsewhere(ws, state, changes, entry, step)
    if current is None or entry is None:
        return _run(rb)
    top_record = state.applied[-1] if state.applied else {}
    if not skip and top_record.get("name") == entry.name and top_record.get("sha256") not in (None, entry.sha256()) \
            and not _does_what_it_did(ws, rb, entry):
        raise MaterializeError(
            f"rebase --continue refused: {entry.path} was changed since the rebase stopped, and --continue writes "
            f"it again from the files in {ws.target_dir(entry.target)}, over that change. Put the change into those "
            f"files and the patch file back, or `materialize rebase --skip` (keeps the edited file under "
            f"{ws.meta / 'saved' / 'rebase-dropped'}), or --abort (keeps it too)")
    with Journal.run(ws.meta, "rebase", [step]) as journal:
        if skip:
            mine = Changes()
            if changes.modified.get(entry.target):
                mine.modified[entry.target] = changes.modified[entry.target]  # (all its own: checked above)
            saved = ws.save_changes(state, mine, "rebase-skip", journal) if mine.any() else None
            kept = _drop(rb, entry, journal)
            for path in state.added.get(entry.name, []):
                ws.write_file(journal, entry.target, path, ws.tree_entry(state.trees[entry.target], path))
            current["status"] = "skipped"
            current["detail"] = f"file kept in {kept}" + (f"; its files as work/ held them in {saved}" if saved else "")
            rb.data["tree"] = state.trees[entry.target]
        else:
            contents = {}
            before = state.trees[entry.target]
            for path in state.added.get(entry.name, []):
                disk = ws.disk_entry(entry.target, path)
                base = ws.tree_entry(before, path)
                lines = patchtext.conflict_markers(base[1] if base else None, disk[1] if disk else None)
                if lines:
                    raise MaterializeError(
                        f"rebase --continue: {ws.target_dir(entry.target) / path}:{lines[0]}: still has conflict "
                        f"markers ({len(lines)} marker lines); resolve them first")
                contents[path] = disk
            data = entry.read()
            new = _regenerate(ws.store, before, entry, data, contents)
            if data.strip() and not patchtext.parse(new, source=str(entry.path), strip=entry.strip).sections:
                # git's "No changes - did you forget to use 'git add'?": a resolution that keeps none of
                # the patch's changes wrote it back empty (its bytes gone when the rebase ended)
                raise MaterializeError(
                    f"rebase --continue: the files of {entry.name} in {ws.target_dir(entry.target)} now hold none of "
                    f"its changes, so it would be written back empty; edit them to keep its changes, or "
                    f"`materialize rebase --skip` to drop it (its file is kept under {ws.meta / 'saved'})")
            _write_patch(rb, entry, new, journal)
            rb.data["tree"] = ws.store.write_tree(before, contents)
            current["status"] = "merged"
            current["detail"] = "resolved by hand"
        ws.reload_series()
        position = entry.position - 1 if skip else entry.position
        ws.sync(state, trees_at(ws.series, ws.store, position), {}, journal)
        state.position = position
        state.applied = [pushed(p) for p in ws.series.patches[:position]]
        state.added = {}
        ws.save(state, journal)
        rb.data["todo"].pop(0)
        rb.data["done"].append(current)
        rb.data["current"] = None
        rb.save(journal)
    ws.reload_series()
    return _run(rb)


def _does_what_it_did(ws: Workspace, rb: Rebase, entry: PatchEntry) -> bool:
    """Whether the stopped patch's file, edited since the stop, still turns its old base into its old
    result (``old``: the pair the rebase recorded on the old pin): then the edit changed no file (its
    description, fixed by hand as a quilt user does), and --continue keeps it, since it regenerates only
    below the file's own header. Refusing it sent the user to --skip or --abort for a reworded message."""
    old = rb.data.get("old", {}).get(entry.name)
    if not old:
        return False
    try:
        return apply_one(ws.store, old[0], entry, entry.read()) == old[1]
    except MaterializeError:
        return False


def abort(ws: Workspace) -> list[str]:
    """Restore the series file, every patch file and the workspace position exactly; what that would drop
    is copied under saved/ first (unrefreshed files of work/, and any patch or series file edited by hand
    during the rebase: bytes neither the backup's nor the rebase's own). Returns what was kept where."""
    from materialize import digest

    ws.check_no_pending()
    rb = Rebase(ws)
    rb.load()
    backup = rb.dir / "backup"
    # the series file is restored from the backup below, so a pin changed by hand since the rebase wrote it
    # (`git checkout` of the series) is no reason to refuse: that refusal pointed at `goto 0 --force`,
    # which a rebase refuses, so nothing could end the rebase
    state = ws.load(follow_pins=True)
    notes: list[str] = []
    with Journal.run(ws.meta, "rebase", ["--abort"]) as journal:
        changes = ws.changes(state)
        saved = ws.save_changes(state, changes, "rebase-abort", journal) if changes.any() else None
        if saved is not None:
            notes.append(f"saved the changes in work/ to {saved}")
        restore = [(ws.series.path, backup / "series")] + \
            [(Path(path), backup / f"{name}.patch") for name, path in rb.data["patches"].items()]
        wrote = rb.data.get("wrote", {})
        edited = []
        for path, old in restore:
            if not path.is_file():
                continue
            now = path.read_bytes()
            if now != old.read_bytes() and wrote.get(str(path)) != digest.sha256(now).hexdigest():
                saved = saved or ws.saved_dir("rebase-abort")
                try:
                    rel = path.relative_to(ws.series.base_dir.parent)
                except ValueError:
                    rel = Path(path.name)
                (saved / rel).parent.mkdir(parents=True, exist_ok=True)
                (saved / rel).write_bytes(now)
                edited.append(str(saved / rel))
        if edited:
            notes.append("kept the files edited during the rebase (as they were) in:\n  " + "\n  ".join(edited))
        for target in list(state.files):
            for path in list(state.files[target]) + changes.stray.get(target, []):
                ws.write_file(journal, target, path, None)
            state.files[target] = {}
        journal.write(ws.series.path, (backup / "series").read_bytes())
        for name, path in rb.data["patches"].items():
            journal.write(Path(path), (backup / f"{name}.patch").read_bytes())
        ws.reload_series()
        from materialize.workspace.trees import base_trees

        bases = base_trees(ws.series, ws.store)
        # the files added to each patch come back with it (the goto below keeps those of the patches it
        # pushes: stack.still_added), so state.json is restored byte for byte too
        state.position, state.applied, state.added = 0, [], dict(rb.data.get("added") or {})
        state.trees, state.bases = dict(bases), dict(bases)
        state.pins = ws.pins()
        ws.save(state, journal)
        journal.remove(rb.file)
        # back to where the user was, in this journal (a kill between the two left position 0)
        stayed = _goto_inside(ws, rb.data["orig_position"], journal)
        if stayed:
            notes.append(f"the workspace stays at position 0: {stayed}")
    shutil.rmtree(rb.dir, ignore_errors=True)
    return notes


def render_report(outcomes: list[Outcome], target: str, spec: str) -> str:
    """The upstream-watch table (markdown, readable as plain text)."""
    lines = [f"# upstream watch: {target} -> {spec}", "",
             "| # | patch | status | hunks | files | detail |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        hunks = ", ".join(f"{k} {v}" for k, v in sorted(o.hunks.items()))
        lines.append(f"| {o.position} | {o.name} | {o.status} | {hunks} | {len(o.files)} | {o.detail} |")
    return "\n".join(lines) + "\n"
