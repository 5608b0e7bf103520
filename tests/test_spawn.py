"""``spawn``: what ``subprocess.run`` gave the editor and ``git config`` calls, without importing it."""

from __future__ import annotations

import pytest

from materialize import spawn


def test_output_captures_stdout_and_discards_stderr():
    status, out = spawn.output(["sh", "-c", "printf 'a\\nb'; echo noise >&2; exit 3"])
    assert (status, out) == (3, b"a\nb")


def test_output_reads_more_than_a_pipe_holds():
    status, out = spawn.output(["sh", "-c", "head -c 300000 /dev/zero"])
    assert status == 0 and out == bytes(300000)


def test_run_gives_the_exit_status_and_a_signal_as_negative():
    assert spawn.run(["true"]) == 0
    assert spawn.run(["sh", "-c", "exit 7"]) == 7
    assert spawn.run(["sh", "-c", "kill -TERM $$"]) == -15


def test_a_missing_program_raises_file_not_found():
    with pytest.raises(FileNotFoundError):
        spawn.run(["materialize-no-such-program"])
    with pytest.raises(FileNotFoundError):
        spawn.output(["materialize-no-such-program"])
