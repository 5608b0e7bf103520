"""The one way a patch is applied to a tree: ``apply_to_tree``.

The engine, rebase, fold, git import/export and the offline tree sources all call this function
with their own view of a tree (store blobs, a sparse workspace on disk, an unpacked directory).
It never raises and never writes: it returns the changes and a per-file report, or the error that
refused the patch. Every safety rule therefore lives here once:

* every name from the patch goes through ``safe_relpath`` (``..``, absolute, ``.git`` in any case);
* nothing is written through a symlink or below a file on the way;
* an existing symlink is only patched by a patch that says it is one (``old mode 120000``);
* a symlink the patch leaves behind must resolve inside the tree, following the tree's other
  links the way the kernel would (``paths.resolve_link``); a ``.gitmodules`` symlink is refused;
* modes are checked by the parser (100644, 100755, 120000 only), before anything here runs.

Which file a plain (non-git) section patches follows GNU ``patch`` (``choose_name``).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from materialize.errors import MaterializeError, PatchApplyError, PatchFormatError, UnsafePathError
from materialize.patching.apply import apply_file, creatable
from materialize.patching.model import FilePatch, FileResult, PatchSet, split_lines
from materialize.patching.parse import parse_patch
from materialize.paths import MAX_LINK_TARGET, check_link_name, resolve_link, safe_relpath

REGULAR = "100644"
SYMLINK = "120000"

Content = tuple[str, bytes]  # (git mode, bytes)


class TreeView(Protocol):
    """What the applier needs to know about a tree (plus what it changed so far)."""

    def get(self, path: str) -> Content | None:
        """(mode, bytes) of the file or symlink at ``path``; None when absent or a directory."""
        ...

    def is_dir(self, path: str) -> bool:
        """True when ``path`` is a directory of the tree."""
        ...


class FileOutcome:
    """How one file section of the patch went."""

    __slots__ = ("fp", "path", "source", "before", "result", "error", "reverse_applies")

    def __init__(self, fp: FilePatch, path: str | None, source: str | None, before: Content | None,
                 result: FileResult | None, error: str | None = None) -> None:
        self.fp = fp
        self.path = path  # where the result lives
        self.source = source  # what was read (differs from path for renames and copies)
        self.before = before
        self.result = result
        self.error = error  # a file-level failure outside the hunks (binary payload, missing file)
        self.reverse_applies = False  # the failed section applies reversed: GNU's "Reversed ... detected"

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None and self.result.ok


class TreeApply:
    """The outcome of applying one patch: changes to write, per-file outcomes, or a refusal."""

    __slots__ = ("source", "patchset", "files", "changes", "error")

    def __init__(self, source: str, patchset: PatchSet | None, error: MaterializeError | None = None) -> None:
        self.source = source
        self.patchset = patchset
        self.files: list[FileOutcome] = []
        self.changes: dict[str, Content | None] = {}
        self.error = error  # format or safety refusal: write nothing

    @property
    def ok(self) -> bool:
        return self.error is None and all(f.ok for f in self.files)

    @property
    def failed(self) -> list[FileOutcome]:
        return [f for f in self.files if not f.ok]


class _Overlay:
    """The view plus the changes this patch made so far (later sections see earlier ones)."""

    def __init__(self, view: TreeView) -> None:
        self.view = view
        self.changes: dict[str, Content | None] = {}
        self.read: dict[str, Content | None] = {}  # the view's answers: a section asks several times

    def get(self, path: str) -> Content | None:
        if path in self.changes:
            return self.changes[path]
        if path not in self.read:
            self.read[path] = self.view.get(path)
        return self.read[path]

    def is_dir(self, path: str) -> bool:
        if path not in self.changes and self.view.is_dir(path):
            return True
        prefix = path + "/"  # a directory this patch created (rare: scanning its changes is fine)
        return any(p.startswith(prefix) and c is not None for p, c in self.changes.items())

    def link_lookup(self, path: str) -> str | None | bool:
        found = self.get(path)
        if found is not None:
            return found[1].decode("utf-8", "surrogateescape") if found[0] == SYMLINK else True
        return True if self.is_dir(path) else None


def _components(name: str) -> int:
    """GNU ``prefix_components``: the slashes after the first byte that do not follow a slash."""
    return sum(1 for k in range(1, len(name)) if name[k] == "/" and name[k - 1] != "/")


def gnu_dangerous(name: str) -> bool:
    """GNU's ``filename_is_safe``, negated: an absolute name, or one with a ".." component. GNU ignores
    such a name ("Ignoring potentially dangerous file name") and chooses among the others."""
    return name.startswith("/") or ".." in name.split("/")


def best_name(names: list[str | None]) -> str | None:
    """GNU ``best_name`` over the candidates (None: ignored), in order: it keeps the least number of
    components, then of "basename" length (gnulib's ``base_len`` of the whole name), then of length
    (bytes both), each as it goes (a later name with fewer
    components does not reset the least basename an earlier one set), then takes the first safe name
    holding all three; None when there is none (GNU then finds no file to patch)."""
    least = [1 << 62] * 3
    keys: list[list[int]] = []
    for name in names:
        key: list[int] = []
        keys.append(key)
        if name is None:
            continue
        # GNU's lengths are strlen's (bytes, not characters), and its "basename" length is gnulib's
        # base_len of the whole name: the name's length less its trailing slashes, not its last part's
        raw = name.encode("utf-8", "surrogateescape")
        for k, value in enumerate((_components(name), max(len(raw.rstrip(b"/")), 1), len(raw))):
            key.append(value)
            if least[k] < value:
                break
            least[k] = value
    for name, key in zip(names, keys, strict=True):
        if name is not None and key == least and not gnu_dangerous(name):
            return name
    return None


def choose_name(fp: FilePatch, exists: Callable[[str], bool], is_dir: Callable[[str], bool]) -> str | None:
    """The file a plain section patches, as GNU 2.7 picks it from the old and new names.

    An existing file wins (best of those); otherwise the best of the names that would create the
    fewest new folders (GNU counts a name's leading folders that exist). An ``Index:`` name counts
    only when neither ``---`` nor ``+++`` gives one (GNU without POSIXLY_CORRECT). A dangerous name
    (``gnu_dangerous``) is never looked up and never chosen, but counts in ``best_name`` as in GNU;
    None: GNU finds no file to patch.
    """
    names = [n for n in (fp.old_path, fp.new_path) if n is not None] or [n for n in (fp.index_path,) if n]
    if not names:
        return None
    present = [n if not gnu_dangerous(n) and exists(n) else None for n in names]
    if any(present):
        return best_name(present)

    def new_folders(name: str) -> int:
        # (a dangerous name's folders are outside the tree: an absolute one's taken as missing, "..": there)
        folders = name.split("/")[:-1]
        if name.startswith("/"):
            return _components(name)
        there = next((k for k in range(len(folders))
                      if folders[k] != ".." and not is_dir("/".join(folders[: k + 1]))), len(folders))
        return _components(name) - min(there, _components(name))

    counts = [new_folders(n) for n in names]
    fewest = min(counts)
    return best_name([n if count == fewest else None for n, count in zip(names, counts, strict=True)])


_SWAP = bytes.maketrans(b"+-", b"-+")


def reverse_file_patch(fp: FilePatch) -> FilePatch:
    """The same section applied as ``patch -R`` would: sides, names, modes and kinds swapped."""
    hunks = tuple(
        h._replace(
            source_start=h.target_start,
            source_length=h.target_length,
            target_start=h.source_start,
            target_length=h.source_length,
            body=b"".join(text[:1].translate(_SWAP) + text[1:] for text in split_lines(h.body)),
            kinds=h.kinds.translate(_SWAP),
        ) if h.reverse_body is None else h._replace(  # the new side's context is the pattern now
            source_start=h.target_start,
            source_length=h.target_length,
            target_start=h.source_start,
            target_length=h.source_length,
            body=b"".join(text[:1].translate(_SWAP) + text[1:] for text in split_lines(h.reverse_body[0])),
            kinds=h.kinds.translate(_SWAP),
            unterminated=h.reverse_body[1],
            reverse_body=(b"".join(text[:1].translate(_SWAP) + text[1:] for text in split_lines(h.body)),
                          h.unterminated),
        )
        for h in fp.hunks
    )
    return fp._replace(
        old_path=fp.new_path, new_path=fp.old_path, is_new=fp.is_delete, is_delete=fp.is_new,
        old_mode=fp.new_mode, new_mode=fp.old_mode, hunks=hunks,
        old_timestamp=fp.new_timestamp, new_timestamp=fp.old_timestamp,
        may_be_missing=fp.may_be_missing_after, may_be_missing_after=fp.may_be_missing,
        says_missing=fp.says_missing[::-1] if fp.says_missing is not None else None,
    )


def apply_to_tree(
    view: TreeView,
    data: bytes | PatchSet,
    *,
    source: str,
    strip: int = 1,
    max_fuzz: int = 0,
    reverse: bool = False,
    partial: bool = False,
) -> TreeApply:
    """Apply one patch (bytes, or an already parsed PatchSet) to ``view``; never raises, never writes.

    Sections that fail are reported and skipped, as GNU continues with the next file; the caller
    decides whether a partial result is of any use (the engine refuses it, rebase merges it).
    With ``partial`` (quilt's ``push -f``), a failed section's hunks that did apply are kept in
    ``changes``, through the same path and link checks as a clean section; the report still fails.
    """
    with collector_paused():
        if isinstance(data, PatchSet):
            patchset: PatchSet | None = data
        else:
            try:
                patchset = parse_patch(data, source=source, strip=strip)
            except MaterializeError as exc:
                return TreeApply(source, None, error=exc)
        assert patchset is not None
        out = TreeApply(source, patchset)
        overlay = _Overlay(view)
        queue = _GnuQueue()
        disk = _GnuDisk(view) if not partial and any(fp.is_git for fp in patchset.files) else None
        queue.checked = disk is not None
        try:
            for fp in patchset.files:
                queue.next_section(fp)
                seen = disk.existence(fp, overlay) if disk is not None else None
                outcome = _apply_section(overlay, fp, source, max_fuzz, reverse, partial, queue)
                out.files.append(outcome)
                if disk is not None and seen is not None:
                    # (a section that fails is checked too: where GNU read otherwise, it is refused)
                    disk.section(outcome, seen, overlay, f"{source}:{fp.patch_line}")
                    if not outcome.ok:
                        disk = None  # the patch fails, GNU's too: nothing more to compare
            if disk is not None:
                disk.adopt(overlay, source)
        except MaterializeError as exc:
            out.error = exc
            out.changes = {}
            return out
        out.changes = overlay.changes
        return out


@contextmanager
def collector_paused() -> Iterator[None]:
    """Parsing and applying allocate a tuple or two per hunk and make no reference cycles, so the
    cyclic garbage collector, which would run many times over a 100k-hunk patch and walk every
    tuple made so far each time, has nothing to find: it is paused meanwhile (and runs after).
    The engine holds it over its per-hunk reports too: re-enabled between the two, the collector
    would walk the patch's hundreds of thousands of young tuples once or twice for nothing."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _GnuQueue:
    """Where GNU patch (so quilt) and applying a git-style patch's sections in turn would disagree.

    GNU patch 2.7 holds back what a git-style section writes to a file that is already on disk (a
    file it deletes counts as gone at once) and what a rename or copy writes, and does it after the
    last section, or as soon as a later section writes such a file again while it is on disk (and
    before any plain diff); a new file and a rename's removal of its source happen at once. Until
    then a later section that reads a held-back file reads what was on disk before: renaming or copying
    a file that an earlier section of the same patch changed renames or copies the unchanged file, and
    the change is written to the old name after the last section (``git apply`` agrees: a swap of two
    names). Otherwise git applies each section to the result of the ones before, and so do we; where
    GNU would read something else, the patch is refused, naming the section and the file, rather than
    applied differently from quilt (tests/patching/test_git_headers.py runs GNU patch as the oracle).
    """

    def __init__(self) -> None:
        self.held: set[str] = set()  # files whose new state GNU holds back: on its disk they are as before
        self.gone: set[str] = set()  # of those, files a rename has since removed from its disk
        # GNU deletes files (any section's deletion, a git rename's source) at the end of the patch only:
        # until then they stay on its disk, and nothing can be written below one ("Invalid file name");
        # a plain section right after a git one (GNU writes out what it held back and stats its input
        # again) that creates or deletes a file a section deleted reads it as it was.
        self.doomed: set[str] = set()
        self.deleted_content: dict[str, Content] = {}
        self.prev_git = False
        self.restat = False  # this section is a plain one right after a git one
        # of ``held``, what each file held on GNU's disk when its change was held back: a later copy reads
        # that, as GNU does (and git: a copy's hunks are against the source before the patch)
        self.original: dict[str, Content | None] = {}
        self.checked = False  # a ``_GnuDisk`` follows the patch: it checks each section's inputs itself

    def below_doomed(self, overlay: _Overlay, path: str) -> str | None:
        """A file GNU still has on its disk where ``path`` needs a folder (None: there is none)."""
        if not self.doomed:
            return None
        parts = path.split("/")
        for k in range(1, len(parts)):
            parent = "/".join(parts[:k])
            if parent in self.doomed and overlay.get(parent) is None:
                return parent
        return None

    def deleted(self, fp: FilePatch, path: str, before: Content | None) -> None:
        """``path`` was deleted by section ``fp`` (before: what it held)."""
        self.doomed.add(path)
        if before is not None:
            self.deleted_content[path] = before

    def next_section(self, fp: FilePatch) -> None:
        """Called for every section, before it is applied (GNU's ``have_git_diff`` flips)."""
        self.restat = self.prev_git and not fp.is_git
        self.prev_git = fp.is_git

    def copy_source(self, fp: FilePatch, source: str) -> Content | None:
        """What a copy or rename section reads from ``source`` on GNU's disk when an earlier section of
        the patch changed it and GNU holds that back (None: read the tree as it is). ``git apply`` reads
        the same: a rename's or copy's source is the file before the patch (a swap of two names)."""
        # (a rename's source is counted gone by ``check`` just before: it was there when checked)
        if ((fp.is_copy or fp.is_rename) and source in self.held and (fp.is_rename or source not in self.gone)
                and source in self.original):
            return self.original[source]
        return None

    def write_out(self) -> None:
        self.held.clear()
        self.gone.clear()
        self.original.clear()

    def check(self, overlay: _Overlay, fp: FilePatch, source: str | None, out: str, where: str) -> None:
        """``source``: the file the section reads (None for a new file); ``out``: the one it writes."""
        if not fp.is_git:
            self.write_out()
            return
        touched = [path for path in (source, out) if path in self.held]
        if touched and source == out and out not in self.gone:  # written again while on disk: GNU writes out
            self.write_out()
        elif (touched == [source] and (fp.is_copy or fp.is_rename) and source not in self.gone
              and source in self.original):
            pass  # GNU copies or renames the source on its disk, as it was before the patch (``copy_source``)
        elif touched and self.checked:
            pass  # GNU's own disk (``_GnuDisk``) checks what this section reads against GNU's, and refuses
        elif touched:  # reading held-back state (GNU's order of writing it out is its own): refused
            stale = touched[0]
            raise PatchFormatError(
                f"{where}: {stale} was written by an earlier section of this git-style patch; GNU patch "
                "(and so quilt) reads it here as it was before the patch, git as the earlier section left "
                "it: split the patch before this section (one commit per patch file)")
        if fp.is_delete:  # GNU counts a file it will delete as gone at once (DELETE_LATER), as we do
            self.held.discard(out)
        elif overlay.get(out) is not None:  # on disk already: GNU holds the new state back
            self.held.add(out)
            self.original.setdefault(out, overlay.get(out))
        elif fp.is_rename or fp.is_copy:  # a new name of a rename or copy: held back too, not on disk yet
            self.held.add(out)
            self.gone.add(out)
        if fp.is_rename and source in self.held:  # GNU removes a rename's source at once
            self.gone.add(source)


class _GnuDisk:
    """GNU patch 2.7's own disk, kept beside the sections applied in turn, for patches with git sections.

    GNU keys its bookkeeping by inode (src/patch.c ``output_file``, util.c's file id table): at the start of
    a git section it marks the output file's inode as having queued output, and writes out every queued
    output first when that inode is marked already; a git section that modifies an existing file queues its
    write (``output_file_later``) until then, the end of the patch, or the first plain section; a new file is
    written at once; a deletion, and a rename's source, is remembered by inode (DELETE_LATER: no such file to
    the name choice) and done at the end of the patch only if that inode was not overwritten meanwhile.
    After a write-out GNU stats the file it reads again (``inerrno = -1``), and then sees a file waiting to be
    deleted. Each section's inputs (which names exist, what the file read holds) are checked against what
    the sections applied in turn saw: a disagreement is refused (``diverged``); when they all agree, the
    disk's final state is GNU's tree, and it is the one taken."""

    _DELETE_LATER, _OTHER = 1, 0

    def __init__(self, view: TreeView) -> None:
        self.view = view
        self.names: dict[str, int | None] = {}  # name -> inode (None: not on the disk)
        self.content: dict[int, Content] = {}
        self.kind: dict[int, int] = {}  # inode -> _DELETE_LATER or not
        self.queued: set[int] = set()  # inodes marked as having queued output
        self.to_output: list[tuple[int, str]] = []
        self.to_delete: list[tuple[str, int]] = []
        self.have_git = False
        self.reset = False  # GNU's inerrno = -1 for the current section: the file read is stat'ed again
        self.next = 0

    def _inode(self, name: str) -> int | None:
        if name not in self.names:
            found = self.view.get(name)
            self.names[name] = self._new(found) if found is not None else None
        return self.names[name]

    def _new(self, content: Content) -> int:
        self.next += 1
        self.content[self.next] = content
        return self.next

    def get(self, name: str) -> Content | None:
        inode = self._inode(name)
        return None if inode is None else self.content[inode]

    def exists_for_choice(self, name: str) -> bool:
        inode = self._inode(name)
        return inode is not None and self.kind.get(inode) != self._DELETE_LATER

    def _move(self, inode: int, name: str) -> None:
        old = self._inode(name)
        if old is not None:
            self.kind[old] = self._OTHER  # OVERWRITTEN: a deletion remembered for it no longer happens
        self.names[name] = inode
        self.kind[inode] = self._OTHER  # CREATED

    def flush(self) -> None:
        for inode, name in self.to_output:
            self._move(inode, name)
        self.to_output.clear()

    def delete_later(self, name: str) -> None:
        inode = self._inode(name)
        if inode is not None:  # (GNU stats it; a missing one is a fatal error there)
            self.to_delete.append((name, inode))
            self.kind[inode] = self._DELETE_LATER

    def finish(self) -> None:
        self.flush()
        for name, inode in self.to_delete:
            if self.kind.get(inode) == self._DELETE_LATER:
                self.names[name] = None

    def start(self, fp: FilePatch, inname: str | None, outname: str) -> None:
        """GNU's steps before it reads the section's input file."""
        self.reset = False
        if self.have_git != fp.is_git:
            if self.have_git:
                self.flush()
                self.reset = True
            self.have_git = fp.is_git
        if not fp.is_git:
            return
        if inname == outname:
            exists = self.exists_for_choice(outname) if not self.reset else self._inode(outname) is not None
        else:
            exists = self._inode(outname) is not None
        if exists and self._inode(outname) in self.queued:
            self.flush()
            self.reset = True
        inode = self._inode(outname)
        if exists and inode is not None:
            self.queued.add(inode)

    def read(self, inname: str | None) -> Content | None:
        """What GNU reads as the section's input (None: no such file)."""
        if inname is None:
            return None
        return self.get(inname) if self.reset else self.get(inname) if self.exists_for_choice(inname) else None

    def existence(self, fp: FilePatch, overlay: _Overlay) -> dict[str, bool] | None:
        """Which of the section's names the sections applied in turn see (None: a name the section
        will refuse, or the patch's own check does)."""
        seen: dict[str, bool] = {}
        for name in (fp.old_path, fp.new_path, fp.index_path):
            if name is None or gnu_dangerous(name):
                continue
            try:
                safe_relpath(name, origin="")
            except MaterializeError:
                return None
            seen[name] = overlay.get(name) is not None
        return seen

    def section(self, outcome: FileOutcome, seen: dict[str, bool], overlay: _Overlay, where: str) -> None:
        """GNU's steps for one section that applied; refused where its inputs differ from ours."""
        fp = outcome.fp
        outname = outcome.path
        for name, present in seen.items():
            if self.exists_for_choice(name) != present:
                self._diverged(where, name)
        if outname is None:
            return
        inname = outcome.source if outcome.source is not None else outname
        self.start(fp, inname, outname)
        if not outcome.ok and (outcome.result is None or not (fp.is_new or any(map(self.exists_for_choice, seen)))):
            return  # it failed before reading anything, or GNU finds no file to patch either: on names that agree
        if self.read(inname) != outcome.before:
            self._diverged(where, inname)
        if outcome.ok:
            self.write(fp, inname, outname, overlay.changes.get(outname))

    @staticmethod
    def _diverged(where: str, name: str) -> None:
        raise PatchFormatError(
            f"{where}: {name} was written by an earlier section of this git-style patch; GNU patch (and so "
            "quilt), which holds back and reorders such writes, reads it here otherwise than the sections "
            "before left it: split the patch before this section (one commit per patch file)")

    def adopt(self, overlay: _Overlay, source: str) -> None:
        """At the end of the patch: GNU's tree, where it differs from the sections applied in turn, is the
        one taken (every section read what GNU's read, so only the order of writes and deletions differs)."""
        self.finish()
        adopted = [name for name in self.names if self.get(name) != overlay.get(name)]
        if not adopted:
            return
        for name in adopted:
            overlay.changes[name] = self.get(name)
        for name in adopted:
            content = overlay.changes[name]
            if content is not None:
                _check_no_link_on_the_way(overlay, name, source)
                if content[0] == SYMLINK:
                    _check_link(overlay, name, content[1], source)

    def write(self, fp: FilePatch, inname: str | None, outname: str, result: Content | None) -> None:
        """GNU's steps after the section's hunks applied: ``result`` is what the file now holds."""
        if result is None:
            self.delete_later(outname)
            return
        set_mode = fp.new_mode is not None and fp.new_mode != fp.old_mode
        if not (fp.hunks or set_mode or fp.is_copy or fp.is_rename):
            return  # GNU replaces nothing when nothing changed
        inode = self._new(result)
        if fp.is_git and not fp.is_new:
            self.to_output.append((inode, outname))
        else:
            self._move(inode, outname)
        if fp.is_rename and inname is not None:
            self.delete_later(inname)


def _type_bits(mode: str | None) -> str:
    """A git mode's file-type bits as GNU prints them (``%o`` of ``mode & S_IFMT``)."""
    return "120000" if mode == SYMLINK else "100000"


def _apply_section(overlay: _Overlay, fp: FilePatch, source: str, max_fuzz: int, reverse: bool,
                   partial: bool = False, queue: _GnuQueue | None = None) -> FileOutcome:
    """One file section: choose and check its paths, apply its hunks, check what it leaves."""
    where = f"{source}:{fp.patch_line}"
    for name in (fp.old_path, fp.new_path, fp.index_path):
        if name is not None and not gnu_dangerous(name):  # (GNU ignores those: choose_name)
            safe_relpath(name, origin=where)  # every candidate, before the tree is even asked about it
    names = [n for n in (fp.old_path, fp.new_path) if n is not None] or [n for n in (fp.index_path,) if n]
    if names and all(map(gnu_dangerous, names)):  # GNU finds no file to patch either: refused, naming it
        safe_relpath(names[0], origin=where)
    # GNU reads the best of the names that exist (choose_name), taken in the patch's own order: its
    # tie-break ignores -R. A git section chooses when its two names differ; one that creates or
    # deletes a file (not a rename or copy) is then one file, as a plain section is.
    single = not fp.is_git or ((fp.is_new or fp.is_delete) and not (fp.is_rename or fp.is_copy))
    chosen = None
    if single or (fp.old_path is not None and fp.new_path is not None and fp.old_path != fp.new_path):
        chosen = choose_name(fp, lambda p: overlay.get(safe_relpath(p, origin=where)) is not None, overlay.is_dir)
        if chosen is None and not (fp.is_rename or fp.is_copy):  # GNU: "can't find file to patch", skipped
            return FileOutcome(fp, None, None, None, None, error=(
                "can't find file to patch: GNU patch chooses none of its names (it ignores a dangerous one, "
                "absolute or with '..', and takes only a name with the fewest components, the shortest "
                "basename and the shortest length at once)"))
    if reverse:
        fp = reverse_file_patch(fp)
    if single:
        fp = fp._replace(
            old_path=None if fp.is_new else chosen, new_path=None if fp.is_delete else chosen
        )
    elif chosen is not None and not (fp.is_rename or fp.is_copy):  # patched in place: the chosen file
        fp = fp._replace(old_path=chosen, new_path=chosen)
    old = safe_relpath(fp.old_path, origin=where) if fp.old_path is not None else None
    new = safe_relpath(fp.new_path, origin=where) if fp.new_path is not None else None
    if fp.is_copy and old is not None and old == new:
        # GNU 2.7.6 patches the file in place (nothing is copied) and quilt pushes it: refusing it failed a
        # series quilt applies
        fp = fp._replace(is_copy=False)
    # a rename onto itself: GNU patches the file in place too ("already renamed from a") and remembers its
    # inode for deletion, which its own held-back write then cancels; meanwhile a later section of the patch
    # finds no such file (``_GnuDisk`` refuses one that reads it)
    already = False
    if fp.is_git and chosen is not None and old is not None and new is not None:
        # a rename or copy that reads its destination was "already renamed"; a section that is
        # neither patches the chosen file in place
        if fp.is_rename or fp.is_copy:
            already = chosen == new and overlay.get(new) is not None
        else:
            old = new = chosen
    dest = new or old
    assert dest is not None
    if (fp.is_rename or fp.is_copy) and new is not None and (onto := overlay.get(new)) is not None \
            and onto[0] == SYMLINK:  # GNU finds no valid destination name: nothing is renamed or copied
        return FileOutcome(fp, dest, old, None, None, error=(
            f"Cannot {'rename' if fp.is_rename else 'copy'} file without two valid file names"))
    if queue is not None:
        queue.check(overlay, fp, dest if already else None if fp.is_new else old, dest, where)
    for path in {p for p in (old, new) if p is not None}:
        _check_no_link_on_the_way(overlay, path, where)
        if overlay.get(path) is None and overlay.is_dir(path):  # GNU patch's wording and outcome
            return FileOutcome(fp, dest, old, None, None, error=f"File {path} is not a regular file -- refusing to patch")
    if queue is not None and (doomed := queue.below_doomed(overlay, dest)):
        return FileOutcome(fp, dest, old, None, None, error=(
            f"Invalid file name {dest} -- skipping patch (GNU patch deletes {doomed} only at the end of the patch)"))
    if fp.is_binary:
        return FileOutcome(fp, dest, old, None, None, error=f"File {dest}: git binary diffs are not supported.")
    read_from = old if (old is not None and (fp.is_rename or fp.is_copy or overlay.get(old) is not None)) else new
    if already:
        read_from = dest
    before = overlay.get(read_from) if read_from else None
    held = None
    if queue is not None and read_from is not None and read_from == old and (held := queue.copy_source(fp, old)):
        before = held  # GNU copies or renames the source as it was before this patch (and so does git)
    if (before is None and queue is not None and queue.restat and (read_from or old) in queue.deleted_content
            and (fp.is_delete or creatable(fp))):  # still on GNU's disk, and GNU stats it again: read as it was
        read_from = read_from or old
        before = queue.deleted_content[read_from]  # type: ignore[index]
    # GNU's file type: the modes' (a section whose two modes are of two types changes none: git writes
    # a deletion and a creation for that), and the file it reads must be of that type: a symlink that a
    # section without a 120000 mode patches fails that file ("is not a regular file"), as in GNU, and
    # nothing is read or written through the link.
    types = {mode == SYMLINK for mode in (fp.old_mode, fp.new_mode) if mode}
    if len(types) > 1:
        return FileOutcome(fp, dest, read_from, before, None, error=(
            f"File {read_from or dest}: can't change file type from 0{_type_bits(fp.old_mode)} to "
            f"0{_type_bits(fp.new_mode)}."))
    if before is not None and (before[0] == SYMLINK) != (True in types):
        kind = "symbolic link" if True in types else "regular file"
        return FileOutcome(fp, dest, read_from, before, None, error=f"File {read_from} is not a {kind} -- refusing to patch")
    result = apply_file(before[1] if before else None, fp, max_fuzz=max_fuzz)
    outcome = FileOutcome(fp, dest, read_from, before, result)
    if not result.ok:
        if result.hunks or result.error:
            now = overlay.get(dest)
            back = apply_file(now[1] if now else None, reverse_file_patch(fp), max_fuzz=0)
            outcome.reverse_applies = back.ok and bool(fp.hunks)
        if not partial or result.content is None:
            return outcome
    if fp.is_rename and old is not None and old != dest and not already and held is None:
        # (a source read as it was before the patch keeps what the earlier section wrote to it: GNU
        # renames the file on its disk and writes the held-back change after the last section)
        overlay.changes[old] = None
        if queue is not None:
            queue.deleted(fp, old, before)
    if result.content is None:
        overlay.changes[dest] = None
        if queue is not None:
            queue.deleted(fp, dest, before)
        return outcome
    # GNU patch 2.7.6 sets a mode only where the patch changes it (an old and a new mode that differ,
    # or a new file's mode): the mode on an ``index`` line only says what both sides were.
    mode = fp.new_mode if fp.new_mode and fp.new_mode != fp.old_mode else before[0] if before else REGULAR
    if mode == SYMLINK:
        _check_link(overlay, dest, result.content, where)
    overlay.changes[dest] = (mode, result.content)
    return outcome


def _check_no_link_on_the_way(overlay: _Overlay, path: str, where: str) -> None:
    """Refuse writing through a symlinked (or file) ancestor: it could point outside the tree."""
    parts = path.split("/")
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        found = overlay.get(parent)
        if found is not None and found[0] == SYMLINK:
            raise UnsafePathError(f"{where}: {path} goes through symlink {parent} in the tree; refused")
        if found is not None:
            raise PatchApplyError(f"{where}: {path} needs {parent} to be a directory, but it is a file")


def _check_link(overlay: _Overlay, path: str, content: bytes, where: str) -> None:
    """A symlink the patch leaves must resolve inside the tree (kernel rules, through other links)."""
    target = content.decode("utf-8", "surrogateescape")
    check_link_name(path, where)
    if not target or "\0" in target or "\n" in target:
        raise UnsafePathError(f"{where}: symlink {path} has an invalid target {target!r}")
    if len(content) > MAX_LINK_TARGET:  # the kernel's PATH_MAX: no output or workspace could hold it
        raise UnsafePathError(f"{where}: symlink {path} has a target of {len(content)} bytes (at most "
                              f"{MAX_LINK_TARGET}); refused")
    saved = overlay.changes.get(path, False)
    overlay.changes[path] = (SYMLINK, content)  # a link that reaches itself is a loop, as in the kernel
    try:
        if resolve_link(path, target, overlay.link_lookup) is None:
            raise UnsafePathError(f"{where}: symlink {path} -> {target!r} points outside the tree; refused")
    finally:
        if saved is False:
            del overlay.changes[path]
        else:
            overlay.changes[path] = saved  # type: ignore[assignment]
