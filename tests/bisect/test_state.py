"""Crash safety of the bisect state: atomic replace, a kill at any moment, the lock, corrupt files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from materialize.bisect import session
from materialize.bisect.state import BisectError, BisectState, StateStore
from materialize.errors import BusyError


def _state(n: int = 8) -> BisectState:
    return session.start(series="s.yaml", n_patches=n, good=0, bad=n, gate="stage3", requests=32)


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    state = _state()
    session.mark(state, "good", 3)
    session.mark(state, "bad", 6, failures=2)
    session.skip(state, 4)
    store.save(state)
    again = store.load()
    assert again == state
    assert store.log_path.read_text().splitlines()[1:] == state.log


def test_a_failed_write_leaves_the_old_state_and_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    store = StateStore(tmp_path)
    state = _state()
    store.save(state)
    before = store.state_path.read_text()
    session.mark(state, "good", 2)

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        store.save(state)
    assert store.state_path.read_text() == before
    assert sorted(p.name for p in store.dir.iterdir() if p.name.startswith(".state")) == []


def test_sigkill_during_saves_never_leaves_a_torn_state(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from materialize.bisect import session
        from materialize.bisect.state import StateStore
        store = StateStore({str(tmp_path)!r})
        state = session.start(series="s", n_patches=64, good=0, bad=64, gate="g", requests=32)
        i = 0
        while True:
            session.observe(state, i % 64, source="run", requests=32, failures=i % 3, materialization_id="ab" * 8)
            store.save(state)
            i += 1
        """
    )
    store = StateStore(tmp_path)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", script])
        deadline = time.time() + 20
        while not store.exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        state = store.load()  # parses: old or new, never half
        assert state.observations
        assert len(state.log) == len(state.observations) + 1
        store.reset()


def test_corrupt_state_is_reported_with_its_path(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.state_path.parent.mkdir(parents=True)
    store.state_path.write_text('{"format": 1, "series": ')
    with pytest.raises(BisectError, match=r"state\.json:1: corrupt bisect state"):
        store.load()
    store.state_path.write_text('{"format": 99}')
    with pytest.raises(BisectError, match="unknown bisect state format"):
        store.load()


def test_no_state_says_how_to_start(tmp_path: Path) -> None:
    with pytest.raises(BisectError, match="bisect start"):
        StateStore(tmp_path).load()


def test_a_second_bisect_command_is_refused_while_one_holds_the_lock(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.dir.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(30)",
            str(store.dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(BusyError, match="another bisect command"), store.locked():
            pass
    finally:
        holder.kill()
        holder.wait()
    with store.locked():  # released by the kernel when the holder died
        pass
    assert sorted(p.name for p in store.dir.iterdir()) == []  # no lock file left behind
