"""A copy-before-write journal, so an interrupted operation can be rolled back or redone exactly.

Every multi-file operation (refresh writes a patch file, the series YAML and the workspace state;
pop rewrites many workspace files) runs inside ``Journal.run``. Before a file is first changed its old
bytes (or its absence) are copied under ``work/.materialize/journal/`` and recorded in
``journal.json``; only then is the file replaced (atomically, by rename). On success the journal is
deleted. If the process dies half-way the journal stays behind: every later command refuses to run
until ``materialize recover`` either rolls back (restores every recorded file byte for byte) or
resumes (rolls back, then re-runs the recorded command, which is deterministic). The store needs no
journal: it only ever gains content-addressed objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from materialize.atomic import TMP_PREFIX, atomic_write, read_json
from materialize.errors import BusyError, MaterializeError
from materialize.locking import Held, exclusive

# Ours are a few KiB (state.json lists a workspace's added files); a record past this is not ours.
RECORD_LIMIT = 64 << 20


class DamagedRecordError(MaterializeError):
    """A record of ``work/.materialize/`` (state, journal, rebase) is not what we wrote: edited by hand,
    or broken by a disk. Named with its line and the way out; never a traceback."""

    exit_code = 2


def load_record(path: Path, required: tuple[str, ...], way_out: str) -> dict[str, Any]:
    """The JSON object in ``path`` with at least the keys ``required``: the one reader of the workspace's
    records (state.json, journal.json, rebase.json), so a damaged one is one line naming it (exit 2)."""
    try:  # (a checkout's work/ may hold a link to /dev/zero, a fifo, [[[... 100k deep: read as damaged)
        data = read_json(path, RECORD_LIMIT)
    except json.JSONDecodeError as exc:
        raise DamagedRecordError(f"{path}:{exc.lineno}: damaged ({exc.msg}); {way_out}") from None
    except FileNotFoundError:
        raise
    except (ValueError, OSError) as exc:
        raise DamagedRecordError(f"{path}: damaged ({getattr(exc, 'strerror', None) or exc}); {way_out}") from None
    missing = [key for key in required if not isinstance(data, dict) or key not in data]
    if missing:
        raise DamagedRecordError(f"{path}:1: damaged (no {', '.join(missing)}); {way_out}")
    return data


class PendingOperationError(MaterializeError):
    """A previous operation was interrupted; it must be recovered before anything else runs."""

    exit_code = 1


@contextlib.contextmanager
def workspace_lock(meta: Path, command: str = "materialize") -> Iterator[None]:
    """Hold ``<meta>/lock`` for the body, or fail at once with BusyError (exit 5) naming the holder.

    Every workspace command takes it before it looks at the journal or the rebase state, so a second
    command never mistakes a live operation's journal for an interrupted one (and ``recover`` never
    rolls back a live journal). Re-entrant within one process: a command's own journals nest inside.
    """
    meta.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(exclusive(str(meta / "lock"), wait=False))
        except Held:
            raise BusyError(
                f"busy: another materialize command is working in {meta.parent}; wait for it to finish and run "
                f"`{command}` again"
            ) from None
        yield


# The temporary name a file is written under before its rename: short (a 250-byte file name plus a
# prefix and suffix would pass NAME_MAX) and ours alone, so a rollback sweeps what a kill -9 left
# beside the files its journal records (it was a file of no patch, blocking pop, after `recover`).
def _remove_journal_dir(folder: Path, *, ignore_errors: bool = True) -> None:
    """Remove a journal's folder: its ``backup/`` of plain files, then itself (what the journal writes).
    Anything else in it goes through ``shutil.rmtree``, which only then is imported: every writing
    command ends here, and importing shutil (with zlib, bz2 and lzma) cost ~7M instructions of each."""
    try:
        for name in os.listdir(folder / "backup"):
            os.unlink(folder / "backup" / name)
        os.rmdir(folder / "backup")
        os.rmdir(folder)
        return
    except FileNotFoundError:
        if not folder.exists():
            return
    except OSError:
        pass
    import shutil

    shutil.rmtree(folder, ignore_errors=ignore_errors)


JOURNAL_WAY_OUT = ("it cannot be rolled back: move {dir} aside to go on with the files as they are (its backup/ "
                   "folder holds each file as it was before the operation)")


class Journal:
    """The record of one operation in progress, under ``<meta>/journal``."""

    def __init__(self, meta: Path) -> None:
        self.dir = meta / "journal"
        self.file = self.dir / "journal.json"
        self.data: dict[str, Any] = {}
        self._protected: set[str] = set()
        self.changes = 0  # calls of protect: a step that raised with this unchanged wrote nothing

    # -- lifecycle ------------------------------------------------------------------------------
    @staticmethod
    def pending(meta: Path) -> dict[str, Any] | None:
        file = meta / "journal" / "journal.json"
        if not file.exists():
            return None
        data = load_record(file, ("op", "args", "files"), JOURNAL_WAY_OUT.format(dir=file.parent))
        if not isinstance(data["args"], list) or not isinstance(data["files"], list):
            raise DamagedRecordError(f"{file}:1: damaged (args, files are lists); "
                                     + JOURNAL_WAY_OUT.format(dir=file.parent))
        return data

    @classmethod
    def begin(cls, meta: Path, op: str, args: list[str]) -> Journal:
        pending = cls.pending(meta)
        if pending is not None:
            raise PendingOperationError(
                f"an interrupted `{' '.join(['materialize', pending['op'], *pending['args']])}` left a journal in "
                f"{meta / 'journal'}; run `materialize recover --rollback` (restore the state before it) or "
                "`materialize recover --resume` (finish it)"
            )
        journal = cls(meta)
        if journal.dir.exists():  # a journal dir without journal.json never changed anything
            _remove_journal_dir(journal.dir, ignore_errors=False)
        (journal.dir / "backup").mkdir(parents=True)
        journal.data = {"op": op, "args": list(args), "started": time.time(), "files": []}
        journal._save()
        return journal

    @classmethod
    @contextlib.contextmanager
    def run(cls, meta: Path, op: str, args: list[str]) -> Iterator[Journal]:
        """Journal the body: committed (deleted) on success, rolled back on an ordinary error.

        A hard stop (SIGKILL, power loss, KeyboardInterrupt) leaves the journal for ``recover``.
        """
        with workspace_lock(meta, " ".join(["materialize", op, *args])):
            from materialize.workspace.session import check_rebase  # (session imports this module)

            check_rebase(meta, op, writing=True)
            try:
                journal = cls.begin(meta, op, args)
            except OSError as exc:  # nothing was changed yet: no journal either
                _remove_journal_dir(meta / "journal")
                raise MaterializeError(f"materialize {op}: {exc.filename or meta}: {exc.strerror or exc}; nothing "
                                       "was changed") from None
            try:
                yield journal
            except MaterializeError:
                journal.rollback()
                raise
            except OSError as exc:  # a full disk, a file name the filesystem refuses: one line, undone
                where = exc.filename2 or exc.filename or "work/"  # (symlink, replace: the second names ours)
                try:
                    journal.rollback()
                except OSError:
                    raise MaterializeError(
                        f"materialize {op}: {where}: {exc.strerror or exc}; it could not be undone either, so its "
                        f"journal is kept in {journal.dir}: free the space, then `materialize recover --rollback`"
                    ) from None
                raise MaterializeError(f"materialize {op}: {where}: {exc.strerror or exc}; nothing was changed") from None
            journal.commit()

    def _save(self) -> None:
        atomic_write(self.file, json.dumps(self.data, indent=1).encode())

    @classmethod
    def load(cls, meta: Path) -> Journal:
        journal = cls(meta)
        data = cls.pending(meta)
        if data is None:
            raise MaterializeError(f"no interrupted operation to recover in {meta}")
        journal.data = data
        return journal

    # -- recording ------------------------------------------------------------------------------
    def protect(self, *paths: Path) -> None:
        """Back each path up (or note that it did not exist) before its first change; the journal is
        saved once for all of them (a move protects its files together: one save, not one per file)."""
        self.changes += 1
        recorded = False
        for path in paths:
            key = str(path.absolute())
            if key in self._protected:
                continue
            self._protected.add(key)
            index = len(self.data["files"])
            record: dict[str, Any] = {"path": key, "backup": None, "link": None, "mode": None}
            if path.is_symlink():
                record["link"] = os.readlink(path)
            elif path.exists():
                backup = self.dir / "backup" / str(index)
                backup.write_bytes(path.read_bytes())  # shutil.copyfile's bytes, without importing shutil
                record["backup"] = str(index)
                record["mode"] = stat.S_IMODE(path.stat().st_mode)
            self.data["files"].append(record)
            recorded = True
        if recorded:
            self._save()

    def write(self, path: Path, data: bytes, *, executable: bool = False) -> None:
        self.protect(path)
        atomic_write(path, data, executable=executable)

    def symlink(self, path: Path, target: str) -> None:
        self.protect(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() or path.is_symlink():
            path.unlink()
        os.symlink(target, path)

    def remove(self, path: Path) -> None:
        self.protect(path)
        if path.exists() or path.is_symlink():
            path.unlink()
        _prune_empty_dirs(path.parent)

    # -- ending ---------------------------------------------------------------------------------
    def commit(self) -> None:
        self.file.unlink()
        _remove_journal_dir(self.dir)

    def rollback(self, keep: Callable[[Path, bytes], None] | None = None) -> None:
        """Restore every recorded file to its bytes before the operation (newest change first), and
        remove the temporary files a killed write left beside them. ``keep`` (``recover --rollback``)
        is handed each file that holds other bytes now, before they go: what the interrupted command
        wrote, or what the user typed since (the two look alike)."""
        folders = [Path(r["path"]) for r in self.data["files"]
                   if Path(r["path"]).is_dir() and not Path(r["path"]).is_symlink()]
        if folders and keep is None:  # (checked before anything is restored: nothing half-done)
            raise MaterializeError(
                f"{folders[0]}: a directory now, where `materialize {self.data.get('op')}` had a file (or none): "
                f"move it out of the way, then `materialize recover --rollback`; its journal is kept in {self.dir}")
        for folder in {Path(record["path"]).parent for record in self.data["files"]}:
            with contextlib.suppress(OSError):
                for leftover in folder.glob(TMP_PREFIX + "*"):
                    leftover.unlink()
        for record in reversed(self.data["files"]):
            path = Path(record["path"])
            if keep is not None and path.is_file() and not path.is_symlink():
                now = path.read_bytes()
                if record["backup"] is None or now != (self.dir / "backup" / record["backup"]).read_bytes():
                    keep(path, now)
            if path in folders:  # made a directory since (a file of it typed there): kept, then removed
                for inner in sorted(path.rglob("*")):
                    if inner.is_file() and not inner.is_symlink() and keep is not None:
                        keep(inner, inner.read_bytes())
                import shutil

                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
            if record["link"] is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(record["link"], path)
            elif record["backup"] is not None:
                data = (self.dir / "backup" / record["backup"]).read_bytes()
                atomic_write(path, data, executable=bool(record["mode"] & 0o100))
                os.chmod(path, record["mode"])
            else:
                _prune_empty_dirs(path.parent)
        self.commit()


def _prune_empty_dirs(directory: Path) -> None:
    """Remove now-empty parent directories (stops at the first non-empty one or a missing one)."""
    with contextlib.suppress(OSError):
        while directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent
