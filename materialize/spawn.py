"""Run a short child process from a command that people type many times a day, without ``subprocess``.

Importing ``subprocess`` (with ``signal``, ``threading``, ``selectors`` and ``locale``) costs ~19M
instructions, more than the rest of ``materialize edit``; ``posix_spawnp`` and a wait are what
``subprocess.run`` does on Linux for a child that needs no shell, no timeout and no stdin. Commands that
talk to git at length (the store, rebase, export) keep ``subprocess``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def run(argv: Sequence[str]) -> int:
    """Run ``argv`` (found on PATH) with our stdin/stdout/stderr and wait: its exit status (negative:
    the signal that ended it). A missing program raises ``FileNotFoundError``, as ``subprocess`` does."""
    return os.waitstatus_to_exitcode(os.waitpid(os.posix_spawnp(argv[0], list(argv), os.environ), 0)[1])


def output(argv: Sequence[str]) -> tuple[int, bytes]:
    """Run ``argv`` with its stdout captured and stderr discarded: (exit status, stdout)."""
    read_end, write_end = os.pipe()
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            pid = os.posix_spawnp(argv[0], list(argv), os.environ, file_actions=[
                (os.POSIX_SPAWN_DUP2, write_end, 1), (os.POSIX_SPAWN_DUP2, null, 2),
                (os.POSIX_SPAWN_CLOSE, read_end)])
        finally:
            os.close(null)
            os.close(write_end)
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    finally:
        os.close(read_end)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), b"".join(chunks)
