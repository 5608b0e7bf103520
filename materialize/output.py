"""Publish a materialization to disk: full trees or an overlay of touched files, plus manifest.json.

Full trees and overlays are hard links into the read-only file cache (``filecache.py``), so their
files are read-only and shared between outputs: edit in ``work/``, never in an output.

A new output is built in a temporary sibling directory and published with one atomic rename, so a
killed run leaves the previous output intact and a reader never sees half a tree. An output that is
already at the path and untouched since we published it (``_Audit``) is updated in place instead:
only the files whose entry changed are linked again, while the folder is moved aside (so a reader
still never sees a mix). Anything done to an output since it was published (a ``__pycache__``, an
edited or chmod-ed file) makes the next publish build it afresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from materialize import digest
from materialize.atomic import atomic_write
from materialize.engine import Materialization
from materialize.errors import MaterializeError
from materialize.filecache import FIXED_MTIME_NS, FileCache
from materialize.locking import exclusive
from materialize.report import hunks_json, with_hunks
from materialize.store import Store

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
DEFAULT_ROOT = Path("build/materialized")
_SHA1 = re.compile(r"[0-9a-f]{40}")


def manifest(m: Materialization, *, overlay: bool) -> dict[str, Any]:
    """Everything a reader needs to know which code this is and how it was made, as plain data: the
    text of ``manifest.json`` read back, so what a caller sees is what the output holds."""
    return json.loads(manifest_json(m, overlay=overlay))


def manifest_json(m: Materialization, *, overlay: bool) -> str:
    """``manifest.json``'s text (built once per materialization: a patch of 100k hunks makes it big)."""
    if overlay not in m._manifests:
        m._manifests[overlay] = manifest_text(_manifest(m, overlay=overlay))
    return m._manifests[overlay]


def _manifest(m: Materialization, *, overlay: bool) -> dict[str, Any]:
    targets: dict[str, Any] = {}
    for target in sorted(m.trees):
        changed, deleted = m.changed_paths(target)
        targets[target] = {
            **m.pins[target],
            "base_tree": m.base_trees[target],
            "tree": m.trees[target],
            "install_path": m.series.targets[target].install_path,
            "changed": changed,
            "deleted": deleted,
        }
        if m.empty_dirs.get(target):
            targets[target]["empty_dirs"] = m.empty_dirs[target]
    patches = []
    for report, entry in zip(m.reports, m.applied, strict=True):
        patches.append({  # keys in sorted order, as manifest_text writes a patch without sorting
            "banner": entry.banner,
            "deleted": report.deleted,
            "files": report.files,
            "flag": entry.flag,
            "hunks": report.hunks,  # HunkReports: manifest_text writes them as objects
            "name": entry.name,
            "position": entry.position,
            "sha256": report.sha256,
            "status": entry.spec.status,
            "target": entry.target,
        })
    return {
        "format": MANIFEST_FORMAT,
        "id": m.id,
        "series": str(m.series.path),
        "position": m.position,
        "overlay": overlay,
        "targets": targets,
        "patches": patches,
    }


def manifest_text(doc: dict[str, Any]) -> str:
    """``doc`` as JSON for people and programs: one top-level key per line, one line per patch and
    per target (a patch's ``hunks`` are ``HunkReport``s, written as objects by ``hunks_json``).

    json's indenting encoder is pure Python: a 109-patch series with 2,000 hunks took ~0.1 s there,
    a patch of 100k hunks seconds, while the C encoder writes each line in a fraction of that. The
    document is the same JSON either way; ``jq`` shows it fully indented.
    """
    def encode(value: Any) -> str:
        return json.dumps(value, sort_keys=True)

    lines = []
    for key in sorted(doc):
        value = doc[key]
        if key == "patches" and value:  # built with sorted keys: sorting 100k hunk objects again cost 40%
            text = "[\n" + ",\n".join("    " + with_hunks(patch, hunks_json(patch["hunks"], objects=True))
                                       for patch in value) + "\n  ]"
        elif key == "targets" and value:
            text = "{\n" + ",\n".join(f"    {encode(name)}: {encode(value[name])}" for name in sorted(value)) + "\n  }"
        else:
            text = encode(value)
        lines.append(f"  {encode(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _checkout_full(m: Materialization, target: str, dest: Path) -> None:
    """Write a whole tree as hard links into the read-only file cache beside the store: a second full
    output costs directories and links, not bytes (see materialize/filecache.py)."""
    FileCache(m.store).materialize_tree(m.trees[target], dest, empty_dirs=m.empty_dirs.get(target, ()))


def _write_overlay(m: Materialization, target: str, dest: Path) -> None:
    """Only the files the series changed against the pin, linked from the same file cache."""
    FileCache(m.store).materialize_tree(m.trees[target], dest, paths=m.changed_paths(target)[0])


# Ours holds a hunk report per hunk (a patch of 100k hunks: ~10 MB); a manifest.json larger than this
# is someone else's, and is not read into memory.
MAX_MANIFEST = 256 << 20


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    data = _manifest_bytes(directory)
    try:
        return None if data is None else json.loads(data)
    except (ValueError, RecursionError):  # a folder's manifest.json nested 100k deep is not ours either
        return None


def _manifest_bytes(directory: Path) -> bytes | None:
    """The bytes of ``directory``'s manifest.json when it is a regular file (not a link) of a size we
    could have written, else None: a folder at ``--out`` is not ours, and its manifest.json may be a
    link to /dev/zero (memory without bound) or a fifo (a read that never returns)."""
    try:
        fd = os.open(directory / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST:
            return None
        try:
            return handle.read(MAX_MANIFEST + 1)
        except OSError:
            return None


def replaceable(directory: Path) -> bool:
    """Only an empty directory or one of our own outputs may be replaced: never a user's folder.

    Ours: a manifest.json as we write it (``format``, a 16-digit ``id``, ``targets``) beside nothing but
    those targets' folders. Any parseable manifest.json counted before, so `--out` at a browser
    extension or a PWA (both keep one) replaced the folder and its files were gone; a file of the
    user's put beside one of our outputs is kept the same way (the output is rebuilt elsewhere).
    """
    if not directory.exists():
        return True
    if directory.is_dir() and not any(directory.iterdir()):
        return True
    doc = _read_manifest(directory)
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT or not isinstance(doc.get("targets"), dict):
        return False
    if not isinstance(doc.get("id"), str) or not re.fullmatch(r"[0-9a-f]{16}", doc["id"]):
        return False
    try:
        names = {entry.name for entry in os.scandir(directory)}
    except OSError:
        return False
    return names <= {MANIFEST, *doc["targets"]}


def write_output(m: Materialization, out: Path | None = None, *, overlay: bool = False) -> Path:
    """Publish ``m`` and return its directory (default build/materialized/<id>[-overlay]).

    An output that is already there, untouched since we published it (``_Audit``), is brought up to
    date in place: only the files whose entry changed are linked again, so editing the last patch of
    a 20k-file tree costs that patch's files, not the tree. Anything else is built fresh beside it
    and swapped in with one rename.
    """
    default = out is None
    final = (DEFAULT_ROOT / (m.id + ("-overlay" if overlay else ""))) if default else out
    final = final.absolute()
    _refuse_inside_inputs(m, final)
    if final.is_symlink():  # `latest`, or a deployment's pointer: replacing it by a folder breaks its owner
        raise MaterializeError(f"{final} is a symlink (to {os.readlink(final)}); refusing to replace it: name the"
                               " folder itself")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(str(final.parent / ".materialize-output.lock")):
            _write_locked(m, final, default, overlay)
    except OSError as exc:  # a full disk, a read-only folder: one line; the steps were undone on the way out
        where = exc.filename2 or exc.filename or final
        raise MaterializeError(f"publishing {final}: {where}: {exc.strerror or exc}; the previous output (if any) "
                               "is unchanged") from None
    m.display_root = str(final)
    return final


def _refuse_inside_inputs(m: Materialization, final: Path) -> None:
    """An output inside (or holding) a folder that a path pin reads is read back by the next run as
    upstream, each run nesting the last output one level deeper; one inside the cache sits among the
    entries gc prunes and the objects the store owns. Refused before anything is written (exit 2)."""
    from materialize.cliargs import UsageError

    where = final.resolve()
    inputs = [(f"the path pin of target {name!r}", Path(pin["resolved"]["path"]), "the next run would read it back")
              for name, pin in m.pins.items() if pin["resolved"].get("kind") == "path"]
    for what, folder, why in [*inputs, ("the cache", m.store.root.resolve(), "the cache owns that folder")]:
        if where.is_relative_to(folder) or folder.is_relative_to(where):
            side = "inside" if where.is_relative_to(folder) else "holding"
            raise UsageError(f"{final}: an output {side} {what} ({folder}) is refused: {why}; name a folder"
                             " outside it (--out)")


def _write_locked(m: Materialization, final: Path, default: bool, overlay: bool) -> None:
    """``write_output``'s work, under the output lock."""
    audit = _Audit(final, m.store)  # runs beside the work below
    try:
        _remove_leftovers(final)
        wanted = manifest_json(m, overlay=overlay)
        previous = _manifest_bytes(final)
        untouched = audit.untouched()
        if previous == wanted.encode() and untouched:  # bytes, not parsed JSON: a manifest can be big
            _point_latest(final, default)
            return
        if not replaceable(final):
            raise MaterializeError(f"{final} exists and is not a materialize output; refusing to replace it")
        plan = _plan(m, previous, overlay) if untouched else None
        if plan is not None:
            _update_in_place(m, final, plan, wanted, previous or b"")
        else:
            _publish_fresh(m, final, wanted, overlay)
        audit.seal()
    finally:
        audit.close()
    _point_latest(final, default)


def _publish_fresh(m: Materialization, final: Path, wanted: str, overlay: bool) -> None:
    """Build the whole output in a temporary sibling and swap it in with one rename: a killed run
    leaves the previous output as it was, and a reader never sees half a tree."""
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; an output is meant to be read and mounted
    try:
        for target in sorted(m.trees):
            (_write_overlay if overlay else _checkout_full)(m, target, tmp / target)
        (tmp / MANIFEST).write_text(wanted)
        if final.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".old-{final.name}-", dir=final.parent))
            os.replace(final, trash / "old")
            os.replace(tmp, final)
            _discard(trash)
        else:
            os.replace(tmp, final)
    except BaseException:
        remove_tree(tmp)
        raise


class _Step:
    """What one target's folder needs to go from one output to another (``undo``: and back)."""

    __slots__ = ("write", "remove", "empty_dirs", "drop_dirs", "tree", "undo")

    def __init__(self, write: list[str], remove: list[str], empty_dirs: list[str], drop_dirs: list[str],
                 tree: str) -> None:
        self.write = write
        self.remove = remove
        self.empty_dirs = empty_dirs
        self.drop_dirs = drop_dirs
        self.tree = tree
        self.undo: _Step | None = None

    def changes(self) -> bool:
        assert self.undo is not None
        return bool(self.write or self.remove or self.drop_dirs or set(self.empty_dirs) - set(self.undo.empty_dirs))


def _plan(m: Materialization, previous: bytes | None, overlay: bool) -> dict[str, _Step] | None:
    """Per target, the files to link again and to remove, from the previous output's manifest; None
    when that output cannot be updated in place (another kind, other targets, trees the store lost)."""
    try:
        old = json.loads(previous or b"")
        targets = old["targets"]
        if old["format"] != MANIFEST_FORMAT or old["overlay"] is not overlay or set(targets) != set(m.trees):
            return None
        plan: dict[str, _Step] = {}
        for target, new_tree in m.trees.items():
            entry = targets[target]
            old_tree = entry["tree"]
            if not (isinstance(old_tree, str) and _SHA1.fullmatch(old_tree)):
                return None
            changed, deleted = m.store.changed_paths(old_tree, new_tree)
            if overlay:
                old_files = set(entry["changed"])
                new_files = set(m.changed_paths(target)[0])
                touched = set(changed) | set(deleted) | (old_files ^ new_files)
                step = _Step(sorted(touched & new_files), sorted((touched - new_files) & old_files), [], [], new_tree)
                step.undo = _Step(sorted(touched & old_files), sorted((touched - old_files) & new_files), [], [],
                                  old_tree)
            else:
                old_empty = [str(d) for d in entry.get("empty_dirs", [])]
                new_empty = m.empty_dirs.get(target, [])
                added = [path for path in changed if m.store.lookup(old_tree, path) is None]
                step = _Step(changed, deleted, new_empty, sorted(set(old_empty) - set(new_empty)), new_tree)
                step.undo = _Step(sorted(set(changed) - set(added)) + deleted, added, old_empty,
                                  sorted(set(new_empty) - set(old_empty)), old_tree)
            plan[target] = step
    except (ValueError, KeyError, TypeError, MaterializeError):  # not our manifest, or a tree gc removed
        return None
    return plan


def _update_in_place(m: Materialization, final: Path, plan: dict[str, _Step], wanted: str,
                     previous: bytes) -> None:
    """Apply ``plan`` to the output at ``final``, moved aside while it changes.

    A reader finds the complete previous output, nothing (for the milliseconds of the update), or
    the complete new one: never a mix. An exception (Ctrl-C, a full disk) undoes the steps and puts
    the previous output back; a run killed outright leaves no output at ``final`` (the next run
    builds it afresh and sweeps the ``.upd-*`` folder), never a half-updated one.
    """
    if not any(step.changes() for step in plan.values()):
        atomic_write(final / MANIFEST, wanted.encode())  # same trees (a renamed patch, a new series file):
        # only the manifest changes, and one rename changes it
        return
    work = Path(tempfile.mkdtemp(prefix=f".upd-{final.name}-", dir=final.parent))
    staged = work / "output"
    os.replace(final, staged)
    cache = FileCache(m.store)

    def apply(steps: list[tuple[str, _Step]], manifest_bytes: bytes) -> None:
        (staged / MANIFEST).unlink(missing_ok=True)  # until it is complete, the folder is no output
        for target, step in steps:
            cache.update_tree(step.tree, staged / target, write=step.write, remove=step.remove,
                              empty_dirs=step.empty_dirs, drop_dirs=step.drop_dirs)
        (staged / MANIFEST).write_bytes(manifest_bytes)
        os.replace(staged, final)
        with contextlib.suppress(OSError):
            os.rmdir(work)

    try:
        apply(sorted(plan.items()), wanted.encode())
    except BaseException:
        with contextlib.suppress(Exception):
            apply([(target, step.undo) for target, step in sorted(plan.items()) if step.undo], previous)
        raise


class _Audit:
    """Whether the output at a path is exactly as we published it, checked by ``find`` beside our work.

    At publication (``seal``) every file of an output has the file cache's fixed mtime, mode 0444 or
    0555 and a link into the cache, and its manifest is touched after everything else, so that no
    folder is newer than the manifest; the manifest's inode and change time are remembered in the
    cache (a user can set an mtime, never a ctime). Anything done to the output since (a file
    written or chmod-ed, a ``__pycache__``, a backup or a new file added, a file removed or renamed,
    the manifest edited) breaks one of these. ``find`` checks the files at C speed in its own
    process, started before the manifest is built, so a 20k-file output costs little wall time.
    """

    def __init__(self, final: Path, store: Store) -> None:
        self.final = final
        self.stamp = store.root / "outputs" / digest.sha256(str(final).encode()).hexdigest()[:32]
        self.proc: subprocess.Popen | None = None
        self.ok = False
        try:
            folder = os.lstat(final)
            if not stat.S_ISDIR(folder.st_mode):
                return
            st = os.lstat(final / MANIFEST)
            recorded = json.loads(self.stamp.read_text())
        except (OSError, ValueError):
            return
        if recorded != [str(final), st.st_ino, st.st_size, st.st_ctime_ns] or not stat.S_ISREG(st.st_mode):
            return
        with os.scandir(final) as entries:
            names = {entry.name: entry.is_dir(follow_symlinks=False) for entry in entries}
        if names.pop(MANIFEST, None) is not False or not all(names.values()) or folder.st_mtime_ns > st.st_mtime_ns:
            return
        fixed = FIXED_MTIME_NS // 1_000_000_000
        with contextlib.suppress(OSError):  # no find here: the output is simply built afresh
            self.proc = subprocess.Popen(
                ["find", *(str(final / name) for name in sorted(names)), "(", "-newer", str(final / MANIFEST),
                 "-o", "-type", "f", "(", "!", "-perm", "444", "!", "-perm", "555", "-o", "-links", "1",
                 "-o", "-newermt", f"@{fixed}", "-o", "!", "-newermt", f"@{fixed - 1}.999999999", ")",
                 "-o", "!", "-type", "f", "!", "-type", "d", "!", "-type", "l", ")", "-print", "-quit"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def untouched(self) -> bool:
        """Waits for ``find``: True when nothing in the output changed since ``seal``."""
        if self.proc is not None:
            found, _ = self.proc.communicate()
            self.ok = self.proc.returncode == 0 and not found
            self.proc = None
        return self.ok

    def seal(self) -> None:
        """Touch the manifest last and remember it: the state the next audit compares against."""
        manifest_path = self.final / MANIFEST
        os.utime(manifest_path)
        st = os.lstat(manifest_path)
        try:
            atomic_write(self.stamp, json.dumps([str(self.final), st.st_ino, st.st_size, st.st_ctime_ns]).encode())
        except OSError:  # a read-only or full cache: the next publish builds afresh, nothing worse
            with contextlib.suppress(OSError):
                self.stamp.unlink()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


_DISCARDS: list[subprocess.Popen] = []


def _discard(trash: Path) -> None:
    """Delete a replaced output in the background: removing a 20k-file tree takes seconds that the
    user should not wait for once the new output is published. The ``rm`` outlives us (its own
    session); if it is killed, the next publish of that output (or ``gc``) sweeps the ``.old-*`` it left."""
    _DISCARDS[:] = [proc for proc in _DISCARDS if proc.poll() is None]  # reap finished ones (no zombies)
    _DISCARDS.append(subprocess.Popen(["rm", "-rf", "--", str(trash)], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))


def remove_tree(path: Path | str) -> bool:
    """Delete the folder ``path`` (an output, or what a run left of one) and say whether it is gone.
    ``rm -rf``, as ``_discard`` runs it, not ``shutil.rmtree``: that recurses once per folder level,
    and a patch may make a tree deeper than Python's recursion limit (1,500 folders are 3 KB of path);
    its RecursionError left the folder behind and failed every later publish and gc."""
    subprocess.run(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return not os.path.lexists(path)


def settle() -> None:
    """Wait for this process's background deletions (tests, and callers about to measure disk)."""
    while _DISCARDS:
        _DISCARDS.pop().wait()


def _remove_leftovers(final: Path) -> None:
    """The temp dirs of killed runs that published ``final``: we hold the lock, so no live run owns one.

    Only ``final``'s own (``.tmp-<name>-XXXXXXXX``, as ``mkdtemp`` names them): ``--out ~/x`` sweeping
    every ``.tmp-*`` beside it deleted a user's folders (``gc`` sweeps the default folder's others)."""
    own = re.compile(rf"\.(?:tmp|old|upd)-{re.escape(final.name)}-[a-z0-9_]{{8}}")
    with contextlib.suppress(OSError):
        for entry in os.scandir(final.parent):
            if own.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)


def _point_latest(final: Path, default: bool) -> None:
    if not default:
        return
    link = final.parent / "latest"
    tmp_link = final.parent / f".latest-{os.getpid()}"
    _sweep_dead_latest(final.parent)
    if os.path.lexists(link) and not link.is_symlink():  # ours is always a link: a file of that name is someone's
        raise MaterializeError(f"{final} is published, but {link} is not a link (ours always is): it is kept; "
                               "move it away for `latest` to point at the newest output")
    tmp_link.unlink(missing_ok=True)
    try:
        os.symlink(final.name, tmp_link)
        os.replace(tmp_link, link)
    except OSError as exc:  # the output is published: say so, not "the previous output is unchanged"
        tmp_link.unlink(missing_ok=True)
        raise MaterializeError(f"{final} is published, but {link} could not be pointed at it: "
                               f"{exc.strerror or exc}") from None


def _sweep_dead_latest(folder: Path) -> None:
    """Remove the ``.latest-<pid>`` links of runs killed between making one and renaming it over
    ``latest`` (we hold the output lock: no live run of this folder is making one)."""
    from materialize.atomic import alive

    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            pid = entry.name[len(".latest-"):]
            if entry.name.startswith(".latest-") and pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)


def verify_clean(directory: Path) -> list[str]:
    """Paths of bytecode caches inside an output: must be empty (seed 000: a __pycache__ broke prod)."""
    return sorted(str(p) for p in directory.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc")
