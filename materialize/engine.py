"""Apply the series to the pinned trees, one store commit per patch, cached per prefix.

A prefix's cache key is a hash chain over the pin's identity and every applied patch's bytes and
options, so re-materializing after editing patch k reuses prefixes 1..k-1 and costs only k..n. A
patch is applied by reading the blobs it touches, running the GNU-patch-exact applier in memory and
writing a new tree through a temporary index: the cost follows the files a patch touches, not the
size of tt-metal.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING

from materialize import digest
from materialize.errors import PatchApplyError
from materialize.report import HunkReport, PatchReport
from materialize.series import PatchEntry, Series
from materialize.store import SYMLINK, Store
from materialize.upstream import resolve

if TYPE_CHECKING:  # the applier loads in apply_patch: a run whose every prefix is cached never needs it
    from materialize.patching.model import HunkResult
    from materialize.patching.tree import TreeApply

PREFIX_REF = "refs/materialize/prefix/"
# The version of the applier's rules, part of every prefix key: a cached prefix was computed by the
# code of its day, so a change that could make any patch apply differently (a GNU rule fixed, a
# refusal added) bumps this, and caches made before re-apply once instead of being trusted.
APPLY_RULES = 29  # 3-6 (2026-12-01): GNU's mode rule, git-section names and holds, context diffs, plain names, -R order, delete then create, link length; 7: blank-only patch is garbage; 8: header lines found as GNU intuit_diff_type finds them; 9: git regions likewise, indented header lines; 10: GNU hunk header spacing; 11: indented hunks refused; 12: git name slots swap at a hunk; 13: a normal diff before any header is garbage; 14: Index: names as GNU fetchname; 15 (session 10): '#' lines, indented/RFC 934 sections, near-epoch times, normal diffs after a header, fetchname slots, CRLF rule; 16 (session 12): a mail header above an unreadable diff is garbage, git sections create/delete by GNU's names and sides, context hunks as GNU's another_hunk; 17: a file type never changes (GNU: "can't change file type", "is not a symbolic link"); 18 (session 13): older links re-checked after any deletion (a folder removed, a link put where it was); 19 (red team, exactness): a context hunk's empty range goes before its line, a file turned into a folder within one patch, plain sections after a git deletion, a cut-off last marker line, dangerous names ignored, fetchmode, TAB-led context lines; 20 (session 14): a context line shown differently on a context hunk's two sides applies as GNU's (pattern side matched); 21: a context hunk GNU counts otherwise is located by GNU's counts; 22: a git copy that sets its own mode reads a source whose held-back change is a mode alone; 23: a git copy reads its source as GNU's disk holds it, before the patch's held-back change; 24: best_name measures names as GNU's does (bytes; its basename length is the whole name's, gnulib's base_len); 25: a context hunk with no header line before it is garbage, as to GNU; 26 (session 15): a git rename of a file an earlier section changed renames it as it was (a swap), the change kept; 27: a git rename/copy onto an existing symlink fails as GNU's (was: the link replaced, exit 0); 28 (session 16): a hunk whose leading context an earlier hunk consumed applies as GNU's (was: misordered, failed); a git copy onto itself patches the file in place (was: refused); 29 (session 17): a patch with git sections ends as GNU's own disk bookkeeping leaves it (held-back writes written out by inode, deletions cancelled by a later write: a section that changes nothing between a change and a rename was a silent difference), a git rename onto itself patches in place (was: refused); a section reading what GNU holds back is refused only where GNU reads otherwise (exit 2, as the README says; was exit 1); a plain section right after a git one reads a file any section deleted as it was (was: a git deletion's only)
_new_tuple = tuple.__new__
_HEADER = "@@ -%d,%d +%d,%d @@"  # Hunk.header, as one C-level format
_HUNK_OF, _RANGES, _SECTION = itemgetter(0), itemgetter(0, 1, 2, 3), itemgetter(4)
_OUTCOME = tuple(map(itemgetter, (1, 2, 3, 4)))  # HunkResult's status, offset, fuzz, applied_at
_KINDS_OF, _OLD_LENGTH, _NEW_LENGTH = itemgetter(6), itemgetter(1), itemgetter(3)  # Hunk.kinds, source/target_length
ID_LENGTH = 16


class StoreTree:
    """A target's tree read straight from the store (implements ``materialize.tree.Tree``)."""

    def __init__(self, store: Store, tree: str, target: str, display_root: str | None = None) -> None:
        self.store = store
        self.tree = tree
        self.target = target
        self.display_root = display_root

    def read_bytes(self, path: str) -> bytes:
        return self.store.read_blob(self.tree, path)

    def exists(self, path: str) -> bool:
        return self.store.lookup(self.tree, path) is not None

    def display_path(self, path: str) -> str:
        if self.display_root:
            return f"{self.display_root}/{path}"
        return f"<materialized {self.target}@{self.tree[:12]}>/{path}"


class Materialization:
    """The result of applying a selection of the series; ``id`` names the code, nothing else.

    ``empty_dirs``: per target, the upstream's empty directories that a full output recreates (see
    ``surviving_empty_dirs``). ``_manifests``: ``output.manifest_json``'s text per overlay flag (the output writes
    it and ``apply --json`` prints it). A plain class, as every record that each command loads: the
    ``dataclasses`` module and the methods it generates cost more start-up than ``status`` itself.
    """

    def __init__(self, id: str, series: Series, position: int, applied: tuple[PatchEntry, ...], store: Store,
                 trees: dict[str, str], base_trees: dict[str, str], pins: dict[str, dict], commits: dict[str, str],
                 reports: list[PatchReport] | None = None, display_root: str | None = None,
                 empty_dirs: dict[str, list[str]] | None = None) -> None:
        self.id = id
        self.series = series
        self.position = position
        self.applied = applied
        self.store = store
        self.trees = trees
        self.base_trees = base_trees
        self.pins = pins
        self.commits = commits
        self.reports = reports if reports is not None else []
        self.display_root = display_root
        self.empty_dirs = empty_dirs if empty_dirs is not None else {}
        self._changed: dict[str, tuple[list[str], list[str]]] = {}
        self._manifests: dict[bool, str] = {}

    def __repr__(self) -> str:
        return f"Materialization(id={self.id!r}, position={self.position}, trees={self.trees!r})"

    def tree(self, target: str) -> StoreTree:
        root = f"{self.display_root}/{target}" if self.display_root else None
        return StoreTree(self.store, self.trees[target], target, root)

    def changed_paths(self, target: str) -> tuple[list[str], list[str]]:
        """(changed or added, deleted) files of ``target`` against its pinned base.

        Asked by the manifest and again by an overlay: one ``git diff-tree`` per target, remembered.
        """
        if target not in self._changed:
            self._changed[target] = self.store.changed_paths(self.base_trees[target], self.trees[target])
        return self._changed[target]


def surviving_empty_dirs(dirs: Sequence[str], deleted: Sequence[str]) -> list[str]:
    """The empty directories of ``dirs`` still there after a patch deleted (or renamed away) ``deleted``.

    GNU patch removes a deleted file's parent directories while they are empty, so an upstream empty
    directory that received a file which a later patch deleted is gone; one that only got new files
    is no longer empty, and recreating it is harmless.
    """
    if not deleted:
        return list(dirs)
    return [d for d in dirs if not any(path.startswith(d + "/") for path in deleted)]


def materialization_id(trees: dict[str, str]) -> str:
    """Same trees, same id: the id hashes only the resulting tree ids, never how they were made."""
    text = "".join(f"{target}\0{tree}\n" for target, tree in sorted(trees.items()))
    return digest.sha256(text.encode()).hexdigest()[:ID_LENGTH]


def _chain(previous: str, entry: PatchEntry, data_sha256: str) -> str:
    options = [entry.strip, entry.max_fuzz] + (["reverse"] if entry.reverse else [])  # old keys stay valid
    material = json.dumps([previous, entry.name, data_sha256, *options])
    return digest.sha256(material.encode()).hexdigest()


class StoreView:
    """A store tree as the applier's ``TreeView`` (``materialize.patching.tree``).

    ``empty_dirs`` are the upstream's empty directories still present (a git tree cannot hold
    them): GNU patch sees them on disk and refuses to put a file where one is, so must we.
    """

    def __init__(self, store: Store, tree: str, empty_dirs: Iterable[str] = ()) -> None:
        self.store = store
        self.tree = tree
        self._empty = {"/".join(parts[:i]) for parts in (d.split("/") for d in empty_dirs)
                       for i in range(1, len(parts) + 1)}

    def get(self, path: str) -> tuple[str, bytes] | None:
        entry = self.store.lookup(self.tree, path)
        if entry is None:
            return None
        return entry.mode, self.store.read_blob_by_id(entry.sha)

    def is_dir(self, path: str) -> bool:
        if path in self._empty and self.store.lookup(self.tree, path) is None:
            return True
        return self.store.is_dir(self.tree, path)


def _may_move_a_link(result: TreeApply) -> bool:
    """Whether the patch could change where a link it did not touch leads: it deleted, replaced or
    retargeted a symlink, or deleted anything (a folder emptied is a folder gone, and a link can then
    be put in its place). New files and new links where nothing was cannot: a link through a path
    that did not exist was refused already (``..`` after a missing component)."""
    return None in result.changes.values() or any(f.before is not None and f.before[0] == SYMLINK
                                                  for f in result.files)


def tree_after(store: Store, tree: str, result: TreeApply, *, origin: str, empty_dirs: Iterable[str] = ()) -> str:
    """``tree`` with ``result``'s changes, refused (exit 4) if a link of it now escapes.

    The applier judges each link a patch adds, but a removed or retargeted link, or a folder removed
    (and maybe replaced by a link), can change where older links lead (a link "s" replaced by a real
    directory makes "x -> s/../.." climb out; so does a link "a/b -> .." where the folder a/b was, for
    "l -> a/b/../../etc"), so then every link of the new tree is re-checked. Every path that writes an applier's result (the
    engine, a forced push, a rebase, a fold) goes through here.
    """
    new_tree = store.write_tree(tree, result.changes) if result.changes else tree
    store.derive_links(tree, new_tree, result.changes)
    if _may_move_a_link(result):
        store.check_tree_links(new_tree, origin=origin, extra_dirs=empty_dirs)
    return new_tree


def describe_failure(entry: PatchEntry, result: TreeApply) -> str:
    """The message of a patch that does not apply: patch, files, hunks, GNU's hints, the reject."""
    source = result.source
    lines = [f"patch {entry.name} (#{entry.position}, {source}) does not apply to {entry.target}:"]
    failed = result.failed
    for outcome in failed:
        path = outcome.path or "?"
        if outcome.error:
            lines.append(f"  {path}: {outcome.error}")
        if outcome.result is None:
            continue
        if outcome.result.error:
            lines.append(f"  {path}: {outcome.result.error}")
        for hunk in outcome.result.hunks:
            if hunk.status == "failed":
                lines.append(f"  {path}: hunk {hunk.hunk.header} (patch line {hunk.hunk.patch_line}) FAILED")
    if failed and all(o.reverse_applies for o in failed):
        lines.append("  Reversed (or previously applied) patch detected!"
                     + ("" if entry.reverse else " (mark it `reverse: true` if it is meant as patch -R)"))
    for outcome in failed:
        if outcome.result is not None and outcome.result.reject:
            lines.append("reject:")
            lines.extend("  " + line for line in outcome.result.reject.rstrip("\n").split("\n"))
    return "\n".join(lines)


def _hunk_reports(dest: str, results: tuple[HunkResult, ...]) -> list[HunkReport]:
    """One report per hunk, built in C-level passes (a patch may have 100k hunks): the header text is
    ``Hunk.header``'s, the rest is the HunkResult's status, offset, fuzz and line."""
    hunks = list(map(_HUNK_OF, results))
    headers = list(map(_HEADER.__mod__, map(_RANGES, hunks)))
    if any(map(_SECTION, hunks)):
        for k, section in enumerate(map(_SECTION, hunks)):
            if section:
                headers[k] += " " + section
    rows = zip(repeat(dest), headers, *(map(column, results) for column in _OUTCOME), strict=False)
    return list(map(_new_tuple, repeat(HunkReport), rows))


def apply_patch(store: Store, tree: str, entry: PatchEntry, data: bytes, empty_dirs: Iterable[str] = (), *,
                data_sha256: str | None = None) -> tuple[str, PatchReport]:
    """Apply one series entry to ``tree`` (whose upstream ``empty_dirs`` are still there); returns
    the new tree and the per-hunk report. ``data_sha256`` is the patch's digest when the caller
    already has it (hashing a 17 MiB patch twice cost 10 ms)."""
    from materialize.patching.tree import collector_paused

    with collector_paused():  # one pause over applying and the per-hunk reports (see collector_paused)
        return _apply_patch(store, tree, entry, data, empty_dirs, data_sha256 or digest.sha256(data).hexdigest())


def _apply_patch(store: Store, tree: str, entry: PatchEntry, data: bytes,
                 empty_dirs: Iterable[str], data_sha256: str) -> tuple[str, PatchReport]:
    from materialize.patching.tree import apply_to_tree

    result = apply_to_tree(StoreView(store, tree, empty_dirs), data, source=str(entry.path), strip=entry.strip,
                           max_fuzz=entry.max_fuzz, reverse=entry.reverse)
    if result.error is not None:
        raise result.error
    if not result.ok:
        raise PatchApplyError(describe_failure(entry, result))
    hunk_reports: list[HunkReport] = []
    files: list[str] = []
    deleted: list[str] = []
    added = removed = 0
    for outcome in result.files:
        assert outcome.result is not None and outcome.path is not None
        dest = outcome.path
        hunk_reports.extend(_hunk_reports(dest, outcome.result.hunks))
        hunks = outcome.fp.hunks  # every body line is context, removed or added: summed in C per file
        lines = sum(map(len, map(_KINDS_OF, hunks)))
        added += lines - sum(map(_OLD_LENGTH, hunks))
        removed += lines - sum(map(_NEW_LENGTH, hunks))
        if outcome.fp.is_rename and outcome.source is not None and outcome.source != dest:
            deleted.append(outcome.source)
        if outcome.result.content is None:
            deleted.append(dest)
        else:
            files.append(dest)
    new_tree = tree_after(store, tree, result, origin=f"{entry.path} (patch {entry.name})", empty_dirs=empty_dirs)
    report = PatchReport(entry.position, entry.name, entry.target, data_sha256,
                         files, hunk_reports, added, removed, deleted=deleted)
    return new_tree, report


def _select(series: Series, upto: str | int | None, without: Iterable[str | int]) -> tuple[int, list[PatchEntry]]:
    position = series.position(upto)
    skipped = {series.find(ref).name for ref in without}
    return position, [p for p in series.patches[:position] if p.name not in skipped]


def materialize(series: Series, *, upto: str | int | None = None, without: Sequence[str | int] = (),
                store: Store | None = None, progress: bool = False) -> Materialization:
    """Apply the selected prefix of ``series``; raises PatchApplyError naming patch, file and hunk."""
    store = store or Store.open()
    position, selected = _select(series, upto, without)
    base_trees: dict[str, str] = {}
    pins: dict[str, dict] = {}
    keys: dict[str, str] = {}
    empty: dict[str, list[str]] = {}  # per target, the upstream's empty directories still there
    for target, spec in sorted(series.targets.items()):
        resolved = resolve(spec.pin, store, base_dir=series.base_dir, progress=progress)
        empty[target] = list(resolved.empty_dirs)
        base_trees[target] = resolved.tree
        pins[target] = {"pin": spec.pin.model_dump(), "resolved": resolved.identity}
        # Empty directories change what applies (a file cannot replace one), so they key the chain too.
        empty_key = "".join(f"\0{d}" for d in resolved.empty_dirs)
        keys[target] = digest.sha256(f"base\0{APPLY_RULES}\0{resolved.tree}{empty_key}".encode()).hexdigest()
    trees = dict(base_trees)
    commits: dict[str, str] = {t: store.commit(tree, [], f"base {t}\n") for t, tree in base_trees.items()}
    reports: list[PatchReport] = []
    new_refs: dict[str, str] = {}
    # The chain keys need only the patches' bytes, so every cached prefix is known before applying,
    # and their commits (tree + report) are read in one exchange with git, not 109.
    planned = []
    for entry in selected:
        data = entry.read()
        data_sha256 = digest.sha256(data).hexdigest()  # hashed once: the key and the report both name it
        keys[entry.target] = _chain(keys[entry.target], entry, data_sha256)
        planned.append((entry, data, data_sha256, keys[entry.target]))
    known = store.lookup_refs(PREFIX_REF + key for *_entry, key in planned)
    cached_commits = store.read_commits(c for c in (known.get(PREFIX_REF + k) for *_e, k in planned) if c)
    try:
        with store.batch(), _progress_bar(progress) as bar:  # new objects: one pack, not a file each
            task = bar.add_task("apply", total=len(selected))
            for entry, data, data_sha256, key in planned:
                bar.update(task, description=f"apply {entry.name}")
                cached = known.get(PREFIX_REF + key)
                if cached is not None:
                    trees[entry.target], message = cached_commits[cached]
                    report = PatchReport.from_json(json.loads(message.split("\n\n", 1)[1]), reused=True)
                    commit = cached
                else:
                    try:
                        tree, report = apply_patch(store, trees[entry.target], entry, data, empty[entry.target],
                                                   data_sha256=data_sha256)
                    except PatchApplyError as exc:
                        exc.entry = entry  # type: ignore[attr-defined]  # status shows where it stopped
                        exc.reports = reports  # type: ignore[attr-defined]
                        raise
                    message = f"{entry.name}\n\n{report.json_text()}\n"
                    commit = store.commit(tree, [commits[entry.target]], message)
                    new_refs[PREFIX_REF + key] = commit
                    trees[entry.target] = tree
                commits[entry.target] = commit
                if empty[entry.target]:
                    empty[entry.target] = surviving_empty_dirs(empty[entry.target], report.deleted)
                reports.append(report)
                bar.advance(task)
    finally:
        store.set_refs(new_refs)  # keep every prefix that did apply, even when a later one failed
    return Materialization(
        id=materialization_id(trees), series=series, position=position, applied=tuple(selected), store=store,
        trees=trees, base_trees=base_trees, pins=pins, commits=commits, reports=reports,
        empty_dirs={t: dirs for t, dirs in empty.items() if dirs},
    )


class _NoBar:
    """Stand-in for rich's Progress off a terminal: importing rich costs more than a cached run."""

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def add_task(self, *_args: object, **_kwargs: object) -> int:
        return 0

    def update(self, *_args: object, **_kwargs: object) -> None:
        return None

    def advance(self, *_args: object, **_kwargs: object) -> None:
        return None


def _progress_bar(enabled: bool):  # noqa: ANN202 - rich's Progress or the stand-in
    """A transient progress bar for a person at a terminal, else a no-op (rich is then never imported)."""
    if not enabled:
        return _NoBar()
    from rich.progress import Progress

    return Progress(transient=True)
