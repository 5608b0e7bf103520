"""Lock files and the ledger sit in folders a checkout holds (``build/materialized``, ``work/.materialize``,
``bench/runs``), and a symlink is a file git keeps. A lock file opened with ``O_CREAT`` through a link
created the file the link names: a checkout holding ``build/materialized/.materialize-output.lock ->
/etc/nologin`` made ``materialize apply``, run as root, create /etc/nologin (no one else could log in).
A ledger that was a link had each run record appended to the file it named (``~/.bashrc``). A lock
file or a ledger that is a symlink is refused (exit 4) naming it and where it leads; nothing is created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from materialize.errors import UnsafePathError
from materialize.ledger import append_record
from materialize.locking import exclusive

RECORD = {"schema": 1, "materialization_id": "0123456789abcdef", "series_prefix": [], "host": "h",
          "time": "2026-09-19T11:20:00Z"}


@pytest.mark.parametrize("wait", [True, False])
def test_a_lock_file_that_is_a_link_is_refused_and_its_target_never_created(tmp_path, wait):
    victim = tmp_path / "etc" / "nologin"
    victim.parent.mkdir()
    lock = tmp_path / "x.lock"
    lock.symlink_to(victim)
    with pytest.raises(UnsafePathError, match=rf"{lock}: .*symlink.*{victim}") as info, exclusive(str(lock), wait=wait):
        pass
    assert info.value.exit_code == 4
    assert not victim.exists()


def test_a_lock_file_that_is_a_link_to_a_file_is_refused_too(tmp_path):
    target = tmp_path / "real"
    target.write_text("keep\n")
    lock = tmp_path / "x.lock"
    lock.symlink_to(target)
    with pytest.raises(UnsafePathError), exclusive(str(lock)):
        pass
    assert target.read_text() == "keep\n"


def test_a_lock_in_a_linked_folder_still_works(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "build").symlink_to(tmp_path / "real")  # a build folder on a bigger disk: the user's choice
    with exclusive(str(tmp_path / "build" / "x.lock")):
        pass
    assert (tmp_path / "real" / "x.lock").is_file()


def test_apply_with_a_linked_output_lock_creates_nothing_and_exits_4(tmp_path):
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "a.txt").write_text("a\n")
    series = tmp_path / "series.yaml"
    series.write_text("version: 1\ntargets:\n  t:\n    pin: {kind: path, path: up}\npatches: []\n")
    victim = tmp_path / "etc" / "nologin"
    victim.parent.mkdir()
    (tmp_path / "build" / "materialized").mkdir(parents=True)
    (tmp_path / "build" / "materialized" / ".materialize-output.lock").symlink_to(victim)
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 4, proc.stderr
    assert ".materialize-output.lock" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not victim.exists()
    assert sorted(p.name for p in (tmp_path / "build" / "materialized").iterdir()) == [".materialize-output.lock"]


@pytest.mark.parametrize("linked", ["ledger", "lock"])
def test_a_ledger_or_its_lock_that_is_a_link_is_refused_and_nothing_is_appended(tmp_path, linked):
    victim = tmp_path / "bashrc"
    victim.write_text("export A=1\n")
    ledger = tmp_path / "runs" / "prod.jsonl"
    ledger.parent.mkdir()
    (ledger if linked == "ledger" else Path(f"{ledger}.lock")).symlink_to(victim)
    with pytest.raises(UnsafePathError, match="symlink"):
        append_record(ledger, dict(RECORD))
    assert victim.read_text() == "export A=1\n"


def test_a_ledger_is_still_appended_to(tmp_path):
    ledger = tmp_path / "runs" / "prod.jsonl"
    append_record(ledger, dict(RECORD))
    append_record(ledger, dict(RECORD))
    assert len(ledger.read_text().splitlines()) == 2
