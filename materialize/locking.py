"""The exclusive locks of the hot paths (the store's fill lock, the workspace lock): ``flock(2)`` on a
lock file, in a few lines of the standard library.

filelock (which the output, ledger and serve locks use) takes the very same ``flock`` on Unix, so
both kinds interoperate; but importing it costs ~30 ms (logging, decimal, secrets...), as much as a
whole ``materialize add`` does otherwise, and every workspace command takes a lock. The kernel drops
an ``flock`` with its process, so a ``kill -9`` never leaves a lock held.

Re-entrant per thread: a holder may take the same lock again (a pin import that holds the store lock
records its ref through ``set_refs``, which takes it too); another thread of the process opens its
own descriptor and so waits (or fails) like another process would.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from _thread import get_ident
from collections.abc import Iterator

_HELD: dict[tuple[str, int], list[int]] = {}  # (lock file, thread) -> [descriptor, depth]


class Held(Exception):
    """The lock is held by someone else and ``wait`` was False."""


@contextlib.contextmanager
def exclusive(path: str, *, wait: bool = True) -> Iterator[None]:
    """Hold the lock on ``path`` (created if missing) for the body; ``wait=False`` raises ``Held`` at
    once instead of waiting for the holder."""
    key = (os.path.abspath(path), get_ident())
    held = _HELD.get(key)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    try:
        # never through a link: a lock file sits in a folder a checkout may hold (build/materialized,
        # work/.materialize), and O_CREAT through `x.lock -> /etc/nologin` created /etc/nologin
        fd = os.open(key[0], os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        if not os.path.islink(key[0]):
            raise
        from materialize.errors import UnsafePathError

        raise UnsafePathError(f"{path}: the lock file is a symlink (to {os.readlink(key[0])}); refused: locking it"
                              " would open or create the file it names. Remove the link") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Held(path) from None
    except BaseException:
        os.close(fd)
        raise
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        os.close(fd)  # closing the last descriptor releases the flock
