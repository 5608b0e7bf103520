"""Replace a file in one rename: readers see the old file or the new one, never half of either.

The one way this project writes a file that someone may be reading or that a kill must not leave
half-written: the workspace journal, bisect state, serve's installed units, test results and the
report page. The temporary file sits beside the target (same filesystem, so the rename is atomic),
is created ``O_EXCL`` with a name no one else uses (``TMP_PREFIX``: ``recover`` and the workspace's
stray-file check know it), and is removed when anything fails. ``durable`` also fsyncs the file and
its folder, for records that must survive a power cut (a bisect's hardware runs), not only a kill.
Made without ``tempfile``, ``shutil`` or ``random``: the daily workspace commands write through here,
and those imports cost ~15M instructions each time.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

TMP_PREFIX = ".materialize-tmp-"


def new_temporary(folder: Path | str) -> tuple[int, str]:
    """A new file of ours in ``folder``, as ``tempfile.mkstemp`` makes one (``O_EXCL``, mode 0600). Its
    name carries our process id, so that a later writer can tell it from a live writer's when a kill
    (``kill -9``, a power cut) left it behind (``sweep_dead_temporaries``)."""
    while True:
        name = os.path.join(folder, f"{TMP_PREFIX}{os.getpid()}-{os.urandom(6).hex()}")
        try:
            return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), name
        except FileExistsError:
            continue


def atomic_write(path: Path, data: bytes, *, executable: bool = False, durable: bool = False) -> None:
    """Replace ``path`` with ``data`` (mode 0644, or 0755 when ``executable``) in one rename; a
    symlink at ``path`` is replaced, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    sweep_dead_temporaries(path.parent)
    fd, tmp = new_temporary(path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, 0o755 if executable else 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:  # a write's ENOSPC names no file: name it
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    if durable:
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def sweep_dead_temporaries(folder: Path | str) -> None:
    """Remove the temporaries in ``folder`` whose writer is dead: a process killed between writing and
    renaming leaves its temporary, and nothing else can remove it (git leaves its ``index.lock`` so and
    asks the user to). Each write into a folder sweeps it first, so the next run of the command that
    was killed cleans up after it. A name without a process id, or one of a live process, is kept."""
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.name.startswith(TMP_PREFIX)]
    except OSError:
        return
    for name in names:
        pid_text = name[len(TMP_PREFIX):].partition("-")[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or alive(int(pid_text)):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(folder, name))


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts as alive: we cannot tell)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process (or a number no process has: kept, as we cannot tell)
    return True


def read_regular(path: Path | str, limit: int) -> bytes:
    """The first ``limit + 1`` bytes of the regular file at ``path`` (links followed): the reading side
    of a file someone else chose. Opened without blocking, so a fifo or a link to ``/dev/tty`` (which a
    checkout may hold) is refused at once, as are devices (``/dev/zero``: a read without end) and
    folders, by an OSError whose ``strerror`` says so; more than ``limit`` bytes back means too big."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        import stat

        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            raise IsADirectoryError(21, "Is a directory", str(path))
        if not stat.S_ISREG(kind):
            raise OSError(22, "not a regular file (a device, fifo or socket)", str(path))
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, min(limit + 1 - size, 1 << 24))):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_json(path: Path | str, limit: int) -> Any:
    """The JSON document in the regular file at ``path`` (``read_regular``, at most ``limit`` bytes): the
    reader of JSON files a checkout holds (workspace records, manifests, results). A file past
    ``limit`` or not UTF-8 is a ``ValueError``, as is an array nested past Python's recursion limit
    (``[[[...`` 100k deep: json's RecursionError was a traceback no handler of bad input took);
    ``OSError`` for what cannot be read (missing, a device, a fifo, a folder)."""
    import json

    data = read_regular(path, limit)
    if len(data) > limit:
        raise ValueError(f"larger than {limit} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise json.JSONDecodeError("arrays or objects nested too deeply to read", "", 0) from None
