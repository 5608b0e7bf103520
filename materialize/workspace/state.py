"""The workspace: per-target editable trees under ``work/<target>/`` plus what we know about them.

The workspace is *sparse*: ``work/<target>/`` holds the files the applied patches touch plus the files
added to the top patch, never all of tt-metal (341 MB in the ttnn wheel). Every other file is one
``materialize add`` away. ``work/.materialize/state.json`` records the position in the series and, per
target, the store tree the files on disk were written from and the blob id of each file we wrote, so
"unrefreshed changes" is a byte comparison with the store, never a guess from timestamps.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

from materialize.errors import MaterializeError, UnsafePathError
from materialize.paths import safe_relpath
from materialize.series import PatchEntry, Series, load_series
from materialize.store import EXECUTABLE, REGULAR, SYMLINK, Entry, Store, blob_id
from materialize.workspace.journal import DamagedRecordError, Journal, atomic_write, load_record

WORK_ENV = "MATERIALIZE_WORK"
STATE_KEYS = ("series", "position", "applied", "trees", "bases", "files")
STATE_WAY_OUT = ("remove {file} to start again at position 0 (then `materialize goto 0 --force` saves the files of "
                 "work/ under work/.materialize/saved/ and clears it)")
STATE_FORMAT = 1


class DirtyWorkspaceError(MaterializeError):
    """The workspace holds changes no patch records yet (unrefreshed, or files of no patch)."""

    exit_code = 1


class PinMovedError(MaterializeError):
    """A pin was edited in the series file while work/ holds files written from the old one."""


def work_root(series: Series) -> Path:
    """``work/`` next to ``series/`` at the repository root (override: MATERIALIZE_WORK)."""
    override = os.environ.get(WORK_ENV)
    return Path(override).resolve() if override else series.base_dir.parent / "work"


class State:
    """What ``state.json`` holds: position, applied patches, and per target the tree on disk.

    A plain class, as every record that each command loads (``dataclasses`` costs more start-up than
    ``materialize add`` itself).
    """

    __slots__ = ("series", "position", "applied", "trees", "bases", "files", "added", "pins", "rejects", "refs_for")

    def __init__(self, series: str, position: int = 0, applied: list[dict[str, Any]] | None = None,
                 trees: dict[str, str] | None = None, bases: dict[str, str] | None = None,
                 files: dict[str, dict[str, str | None]] | None = None, added: dict[str, list[str]] | None = None,
                 pins: dict[str, Any] | None = None, rejects: dict[str, list[str]] | None = None) -> None:
        self.series = series
        self.position = position
        self.applied = applied if applied is not None else []  # [stack.pushed(entry)] in order
        self.trees = trees if trees is not None else {}  # target -> store tree at ``position``
        self.bases = bases if bases is not None else {}  # target -> pinned base tree
        self.files = files if files is not None else {}  # target -> path -> blob|None
        self.added = added if added is not None else {}  # applied patch name -> files added to it (stack.still_added)
        self.pins = pins if pins is not None else {}  # target -> the pin the bases were resolved from
        self.rejects = rejects if rejects is not None else {}  # target -> .rej files a push -f left
        self.refs_for: dict[str, str] = {}  # trees whose gc refs are set

    def to_json(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "series": self.series, "position": self.position, "applied": self.applied,
                "trees": self.trees, "bases": self.bases, "files": self.files, "added": self.added, "pins": self.pins,
                "rejects": self.rejects}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> State:
        return cls(series=data["series"], position=data["position"], applied=data["applied"],
                   trees=data["trees"], bases=data["bases"], files=data["files"], added=data.get("added", {}),
                   pins=data.get("pins", {}), rejects=data.get("rejects", {}))

    @property
    def top(self) -> str | None:
        return self.applied[-1]["name"] if self.applied else None


class Changes:
    """How the files on disk differ from the trees they were written from."""

    __slots__ = ("modified", "stray", "rejects")

    def __init__(self) -> None:
        self.modified: dict[str, list[str]] = {}  # tracked files whose bytes/mode changed
        self.stray: dict[str, list[str]] = {}  # files on disk no applied patch owns
        # push -f's .rej files still on disk: not changes (``any``), but the next move removes them, and
        # the user may have been working in them: a save (``--force``) keeps them with the files
        self.rejects: dict[str, list[str]] = {}

    def any(self) -> bool:
        return any(self.modified.values()) or any(self.stray.values())

    def describe(self, owners: dict[tuple[str, str], str] | None = None) -> str:
        """One line per file; a modified file names the applied patch it belongs to (unrefreshed work
        of that patch, not "in no patch")."""
        lines = []
        for target, paths in sorted(self.modified.items()):
            for p in paths:
                owner = (owners or {}).get((target, p))
                lines.append(f"  modified  {target}/{p}" + (f"  (unrefreshed, patch {owner})" if owner else ""))
        for target, paths in sorted(self.stray.items()):
            lines += [f"  no patch  {target}/{p}" for p in paths]
        return "\n".join(lines)


class Workspace:
    """The ``work/`` directory of one series."""

    def __init__(self, series: Series, store: Store, root: Path | None = None) -> None:
        self.series = series
        self.store = store
        self.root = root or work_root(series)
        self.meta = self.root / ".materialize"
        self.state_file = self.meta / "state.json"
        self._folders_ok: set[str] = set()  # folders of work/ seen to be real folders (see work_path)

    @classmethod
    def open(cls, series_path: Path, store: Store | None = None) -> Workspace:
        series = load_series(series_path)
        return cls(series, store or Store.open())

    def reload_series(self) -> None:
        self.series = load_series(self.series.path)

    def target_dir(self, target: str) -> Path:
        return self.root / target

    def work_path(self, target: str, path: str) -> str:
        """``work/<target>/<path>`` to write, once no folder on the way (``work/<target>`` included) is a
        symlink.

        A tree's paths never pass through one of its links, so a symlinked folder in work/ is either one
        of the tree's links (which a later tree may make a folder: the link goes first, then the files
        are written) or someone else's: written through it, ``pop`` deleted and ``push`` overwrote files
        outside work/. Refused (exit 4) naming the folder. One ``lstat`` per folder per command
        (remembered; a link this command writes forgets what it replaces).
        """
        found = self._walk_folders(target, path, reading=False)
        assert found is not None
        return found

    def read_path(self, target: str, path: str) -> str | None:
        """``work/<target>/<path>`` to read; None when a folder on the way is a symlink that stays in
        work/<target> (a tree's own link: nothing lies beneath it, and it is never followed). A symlinked
        folder leading out of work/<target> is refused (exit 4): ``refresh`` would record what lies there."""
        return self._walk_folders(target, path, reading=True)

    def _walk_folders(self, target: str, path: str, *, reading: bool) -> str | None:
        root = os.path.join(str(self.root), target)
        folder = root
        parts = path.split("/")[:-1]
        for index in range(len(parts) + 1):
            if index:
                folder = os.path.join(folder, parts[index - 1])
            if folder in self._folders_ok:
                continue
            try:
                st = os.lstat(folder)
            except OSError:  # missing (a write makes real folders), or a file on the way (nothing to read)
                break
            if stat.S_ISLNK(st.st_mode):
                if reading and index and os.path.realpath(folder).startswith(os.path.realpath(root) + os.sep):
                    return None
                raise UnsafePathError(
                    f"{folder} is a symlink (to {os.readlink(folder)}): workspace files are not "
                    f"{'read' if reading else 'written'} through it ({target}/{path}); make it a real folder "
                    "(or remove it) and run the command again"
                )
            if not stat.S_ISDIR(st.st_mode):
                break
            self._folders_ok.add(folder)
        return os.path.join(root, path)

    def check_no_pending(self) -> None:
        pending = Journal.pending(self.meta)
        if pending is not None:
            args = " ".join(["materialize", pending["op"], *pending["args"]])
            raise MaterializeError(
                f"an interrupted `{args}` left a journal in {self.meta / 'journal'}; run "
                "`materialize recover --rollback` or `materialize recover --resume` first"
            )

    # -- state ----------------------------------------------------------------------------------
    def load(self, *, in_journal: bool = False, follow_pins: bool = False, allow_pending: bool = False) -> State:
        """The recorded state, or a fresh one at position 0 (the pinned upstreams alone).

        Refuses while an interrupted operation's journal exists, unless called from inside the
        operation that owns it (``in_journal``) or for a listing read (``allow_pending``: ``top``,
        ``series`` show what state.json holds, with a warning).
        """
        if not (in_journal or allow_pending):
            self.check_no_pending()
        if self.state_file.exists():
            data = load_record(self.state_file, STATE_KEYS, STATE_WAY_OUT.format(file=self.state_file))
            kinds = {"series": str, "position": int, "applied": list, "trees": dict, "bases": dict, "files": dict}
            wrong = [key for key, kind in kinds.items() if not isinstance(data[key], kind)]
            if wrong or any(not isinstance(a, dict) or "name" not in a for a in data["applied"]):
                raise DamagedRecordError(f"{self.state_file}:1: damaged ({', '.join(wrong) or 'applied'} not as "
                                         f"written); {STATE_WAY_OUT.format(file=self.state_file)}")
            state = State.from_json(data)
            state.refs_for = dict(state.trees)
            if Path(state.series) != self.series.path:
                raise MaterializeError(
                    f"{self.root} is the workspace of {state.series}, not {self.series.path}; "
                    f"set {WORK_ENV} to use another directory"
                )
            self._check_pins(state, follow_pins)
            return state
        from materialize.workspace.trees import base_trees

        bases = base_trees(self.series, self.store)
        return State(series=str(self.series.path), trees=dict(bases), bases=dict(bases),
                     files={t: {} for t in bases}, pins=self.pins())

    def pins(self) -> dict[str, Any]:
        return {t: spec.pin.model_dump() for t, spec in sorted(self.series.targets.items())}

    def _check_pins(self, state: State, follow: bool = False) -> None:
        """A pin edited behind our back: follow it at position 0 (or when told to), else refuse naming it.

        Following changes only the bases; the trees stay those the disk was written from, so a forced
        move still compares (and saves) unrefreshed work against what the user really had.
        """
        current = self.pins()
        if not state.pins or state.pins == current:
            state.pins = current
            return
        moved = sorted(t for t in current if state.pins.get(t) != current[t])
        if not follow and (state.position or any(state.files.get(t) for t in moved)):
            raise PinMovedError(
                f"the pin of {', '.join(moved)} changed in {self.series.path} while patches were applied in "
                f"{self.root}; `materialize rebase` moves pins, or `materialize goto 0 --force` resets the workspace"
            )
        from materialize.workspace.trees import base_trees

        bases = base_trees(self.series, self.store)
        for target in moved:
            state.bases[target] = bases[target]
            if not state.files.get(target):
                state.trees[target] = bases[target]
        state.pins = current

    def save(self, state: State, journal: Journal) -> None:
        journal.write(self.state_file, json.dumps(state.to_json(), indent=1, sort_keys=True).encode())
        # keep the trees the workspace was written from alive in the store (gc safety); a command that
        # moved no tree (new, add, rename, header) has nothing to point
        if state.trees != state.refs_for:
            self.store.set_refs({f"refs/materialize/workspace/{t}": self.store.commit(tree, [], f"workspace {t}\n")
                                 for t, tree in state.trees.items()})
            state.refs_for = dict(state.trees)

    # -- reading the disk -----------------------------------------------------------------------
    def disk_entry(self, target: str, path: str) -> tuple[str, bytes] | None:
        """(mode, bytes) at ``path`` in work/<target>/ (a link: its target), None when no file or link is
        there. One ``lstat`` on a plain string: push and pop look at every tracked file twice."""
        full = self.read_path(target, path)
        if full is None:
            return None
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            return SYMLINK, os.readlink(full).encode("utf-8", "surrogateescape")
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(full, "rb") as handle:
            return EXECUTABLE if st.st_mode & stat.S_IXUSR else REGULAR, handle.read()

    def tree_entry(self, tree: str, path: str) -> tuple[str, bytes] | None:
        entry = self.store.lookup(tree, path)
        if entry is None:
            return None
        return entry.mode, self.store.read_blob_by_id(entry.sha)

    def disk_files(self, target: str) -> list[str]:
        root = self.target_dir(target)
        out: list[str] = []
        if not root.is_dir():
            return out
        self.work_path(target, "")  # work/<target> itself is no symlink
        for dirpath, dirnames, filenames in os.walk(root):
            # os.walk puts a symlink to a folder among the folders (and does not enter it): it is a file
            # of the workspace like any other link, reported and kept, never followed
            links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            dirnames[:] = sorted(d for d in dirnames if d != ".materialize" and d not in links)
            for name in (*filenames, *links):
                out.append(Path(dirpath, name).relative_to(root).as_posix())
        return sorted(out)

    def holds(self, target: str, path: str, entry: Entry | None) -> bool:
        """Whether the disk has exactly ``entry`` (mode and bytes; None: nothing) at ``path``, compared by
        git blob id: the store's copy is not read (push and pop compare every tracked file)."""
        disk = self.disk_entry(target, path)
        if entry is None or disk is None:
            return entry is None and disk is None
        return disk[0] == entry.mode and blob_id(disk[1]) == entry.sha

    def changes(self, state: State) -> Changes:
        """Every difference between disk and the recorded trees: modified tracked files, stray files."""
        result = Changes()
        for target in sorted(state.trees):
            tracked = state.files.get(target, {})
            tree = state.trees[target]
            modified = [p for p in sorted(tracked) if not self.holds(target, p, self.store.lookup(tree, p))]
            rejects = set(state.rejects.get(target, []))
            stray = [p for p in self.disk_files(target) if p not in tracked and p not in rejects]
            if modified:
                result.modified[target] = modified
            if stray:
                result.stray[target] = stray
            on_disk = self.rejects_on_disk(state, target)
            if on_disk:
                result.rejects[target] = on_disk
        return result

    def rejects_on_disk(self, state: State, target: str) -> list[str]:
        """push -f's .rej files of ``target`` that are still files in work/ (the user may delete one)."""
        return [p for p in sorted(state.rejects.get(target, [])) if Path(self.read_path(target, p) or os.devnull).is_file()]

    def owners(self, state: State) -> dict[tuple[str, str], str]:
        """(target, path) -> the topmost applied patch that touches it (files added to the top count)."""
        from materialize.workspace.patchtext import touched

        out: dict[tuple[str, str], str] = {}
        for entry in self.series.patches[: state.position]:
            for _src, dest in touched(entry.read(), source=str(entry.path), strip=entry.strip):
                out[(entry.target, dest)] = entry.name
            for path in state.added.get(entry.name, []):
                out[(entry.target, path)] = entry.name
        return out

    def relpath(self, target: str, name: str, cwd: Path | None = None) -> str:
        """A user-given file name as a path inside ``target``: what the user sees from the current
        directory when that lies inside work/<target>/ (``add rope.py`` in work/tt-metal/models/), or
        a path inside work/<target>/ given from anywhere; else a path relative to the target's root.

        Only the directory part is resolved (symlinks in the workspace path itself, /tmp -> /private/tmp):
        the file may be a symlink of the tree, which must not be followed.
        """
        cwd = cwd or Path.cwd()
        root = self.target_dir(target).resolve()
        given = Path(name) if Path(name).is_absolute() else cwd / name
        given = Path(os.path.normpath(given))
        candidate = given.parent.resolve() / given.name if given.name else given.resolve()
        if candidate == root or root in candidate.parents:  # the same gate as any other path (.git, the root)
            return safe_relpath(candidate.relative_to(root).as_posix(), origin=f"command line: {name}")
        for other in sorted(self.series.targets):
            # a name seen from inside another target's folder means a file of that target, never a file of
            # ``target`` under the same name (`add b.py` in work/tt-metal/models/ with a plugin patch on
            # top added plugin's b.py, silently, while the user went on to edit tt-metal's)
            elsewhere = self.target_dir(other).resolve()
            if other != target and (candidate == elsewhere or elsewhere in candidate.parents):
                raise MaterializeError(
                    f"{name} is {other}/{candidate.relative_to(elsewhere).as_posix()}, but the top patch is of "
                    f"{target}: a patch changes one target's files (push or `new -t {other}` a patch of {other}, "
                    f"or name a path from {target}'s root outside work/{other}/)")
        return safe_relpath(name, origin="command line")

    # -- writing the disk -----------------------------------------------------------------------
    def saved_dir(self, op: str) -> Path:
        """A new folder ``work/.materialize/saved/<stamp>-<op>[-n]/`` for what ``op`` is about to drop."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = self.meta / "saved" / f"{stamp}-{op}"
        n = 1
        while dest.exists():
            n += 1
            dest = self.meta / "saved" / f"{stamp}-{op}-{n}"
        dest.mkdir(parents=True)
        return dest

    def save_changes(self, state: State, changes: Changes, op: str, journal: Journal) -> Path:
        """Copy every changed or stray file, and push -f's .rej files, to ``work/.materialize/saved/<stamp>-<op>/``
        (nothing is lost)."""
        dest = self.saved_dir(op)
        stamp = dest.name[:16]
        listing = []
        for kind, table in (("modified", changes.modified), ("no-patch", changes.stray), ("reject", changes.rejects)):
            for target, paths in table.items():
                for path in paths:
                    found = self.read_path(target, path)
                    src = Path(found) if found is not None else None
                    if src is None:  # beneath a link of the tree: nothing there
                        listing.append(f"{kind}\t{target}/{path}")
                        continue
                    if src.is_dir() and not src.is_symlink():  # a folder where a file was: its files are
                        listing.append(f"{kind}\t{target}/{path}\t(now a folder: its files are listed)")
                        continue  # listed (and copied) one by one as files of no patch
                    if src.exists() or src.is_symlink():
                        out = dest / target / path
                        out.parent.mkdir(parents=True, exist_ok=True)
                        import shutil

                        shutil.copy2(src, out, follow_symlinks=False)
                    listing.append(f"{kind}\t{target}/{path}")
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "SAVED.txt").write_text(
            f"Saved by materialize ({op}) at {stamp} (position {state.position}, top {state.top}).\n"
            "Copy a file back into work/<target>/ and `materialize refresh` to put it into a patch.\n\n"
            + "\n".join(listing) + "\n"
        )
        return dest

    def keep_entry(self, entry: PatchEntry, folder: str) -> Path:
        """``keep_patch`` for a command that takes the entry out of the series (delete -r, a rebase's
        drop, import-git --prune): its lines of the series file (``why``, ``flag``, ``banner``,
        ``status``, a comment inside it) are kept too, as ``<copy>.entry.yaml``. Call it before the
        series file is rewritten."""
        from materialize.series import load_series

        kept = self.keep_patch(entry, folder)
        path = self.series.path
        with contextlib.suppress(OSError, IndexError, StopIteration, MaterializeError):
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            # the file as it is now (a rebase may have rewritten it since this workspace read it)
            line = next(p.line for p in load_series(path).patches if p.spec.patch == entry.spec.patch)
            kept.with_name(kept.name + ".entry.yaml").write_text(
                f"# {path}:{line}: the entry of {entry.name}\n" + _entry_lines(text, line),
                encoding="utf-8", errors="surrogateescape")
        return kept

    def keep_patch(self, entry: PatchEntry, folder: str) -> Path:
        """Copy ``entry``'s file as it is (compressed or not) to ``work/.materialize/saved/<folder>/``
        under its path in patches_dir, before a command removes it (delete -r, a rebase's drop, import-git
        --prune). Never over another copy: riscv/flaky.patch and mips/flaky.patch, dropped by one rebase,
        were both kept as rebase-dropped/flaky.patch (the first one lost), and so was a patch of the same
        name dropped by a later rebase."""
        dest = self.meta / "saved" / folder / entry.spec.patch
        n = 0
        while dest.exists() or dest.is_symlink():
            n += 1
            dest = dest.with_name(f"{Path(entry.spec.patch).name}.{n}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(entry.raw())
        return dest

    def sync(self, state: State, trees: dict[str, str], keep: dict[str, set[str]], journal: Journal) -> None:
        """Make the disk match ``trees``: the files they change vs the base, plus ``keep`` per target.

        Only files whose bytes differ are rewritten; files that leave the stack are removed. Callers
        check for unrefreshed changes first, so everything removed or overwritten is in the store.
        """
        for target in state.rejects:  # push -f's .rej files go with the move
            for path in self.rejects_on_disk(state, target):
                journal.remove(self.target_dir(target) / path)
        state.rejects = {}
        for target, tree in trees.items():
            base = state.bases[target]
            changed, deleted = self.store.changed_paths(base, tree)
            wanted = set(changed) | set(deleted) | keep.get(target, set())
            old = state.files.get(target, {})
            new_files: dict[str, str | None] = {}
            stale: list[tuple[str, Entry | None]] = []
            for path in sorted(set(old) | wanted):
                entry = self.store.lookup(tree, path) if path in wanted else None
                if path in wanted:
                    new_files[path] = entry.sha if entry else None
                if not self.holds(target, path, entry):
                    stale.append((path, entry))
            # removals first: a link that takes a folder's place (or a folder a link's) needs the old one
            # gone before the new one is written (and protected: never through the old link)
            for batch in ([(p, e) for p, e in stale if e is None], [(p, e) for p, e in stale if e is not None]):
                if batch:
                    journal.protect(*(Path(self.work_path(target, path)) for path, _entry in batch))
                for path, entry in batch:
                    desired = (entry.mode, self.store.read_blob_by_id(entry.sha)) if entry else None
                    self.write_file(journal, target, path, desired)
            state.files[target] = new_files
            state.trees[target] = tree

    def write_file(self, journal: Journal, target: str, path: str, entry: tuple[str, bytes] | None) -> None:
        full = Path(self.work_path(target, path))
        self._folders_ok.discard(str(full))  # a link or nothing may take a folder's place
        if entry is None:
            journal.remove(full)
        elif entry[0] == SYMLINK:
            journal.symlink(full, entry[1].decode("utf-8", "surrogateescape"))
        else:
            journal.write(full, entry[1], executable=entry[0] == EXECUTABLE)


def write_plain(path: Path, data: bytes) -> None:
    """For files outside any journal (reports): still atomic."""
    atomic_write(path, data)


def _entry_lines(text: str, line: int) -> str:
    """The lines of the series entry that starts at ``line`` (1-based, its ``- `` line): that line and
    every later one indented deeper than it (blank and comment lines between included)."""
    lines = text.splitlines(keepends=True)
    first = lines[line - 1]
    indent = len(first) - len(first.lstrip(" "))
    out = [first]
    for later in lines[line:]:
        if later.strip() and len(later) - len(later.lstrip(" ")) <= indent:
            break
        out.append(later)
    while len(out) > 1 and not out[-1].strip():
        out.pop()
    return "".join(out).rstrip("\n") + "\n"
