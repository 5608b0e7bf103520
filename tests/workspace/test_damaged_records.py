"""A damaged record of work/.materialize/ (state.json, journal.json, rebase.json: edited by hand, broken
by a disk) is one line naming the file, its line and the way out (exit 2), never a traceback; nothing
is written."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .test_journal import snapshot, two_patches

DAMAGE = ["{garbage", "[]", '{"series": 1}', '{"series": "x", "position": "1", "applied": [], "trees": {}, '
          '"bases": {}, "files": {}}']


def cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True, cwd=project)


@pytest.mark.parametrize("record", ["state.json", "journal/journal.json", "rebase/rebase.json"])
def test_a_damaged_record_is_one_line_naming_it(project: Path, record: str) -> None:
    two_patches(project)
    meta = project / "work" / ".materialize"
    path = meta / record
    path.parent.mkdir(exist_ok=True)
    for damage in DAMAGE:
        path.write_text(damage)
        before = snapshot(project)
        for args in (["pop"], ["push"], ["refresh"], ["recover", "--rollback"], ["rebase", "--abort"], ["top"]):
            if args[0] in ("recover", "rebase") and record == "state.json":
                continue  # (nothing to recover, no rebase: they say so)
            proc = cli(project, *args)
            assert proc.returncode == 2, (args, damage, proc.stderr)
            assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            assert f"{path}:" in proc.stderr and "damaged" in proc.stderr
            assert snapshot(project) == before
    path.write_bytes(b"\xff\xfe")
    proc = cli(project, "pop")
    assert proc.returncode == 2 and "damaged" in proc.stderr and "Traceback" not in proc.stderr
    # the way out the message names
    if record == "state.json":
        path.unlink()
        assert cli(project, "goto", "0", "--force").returncode == 0
        assert cli(project, "push", "-a").returncode == 0
    else:
        shutil.move(path.parent, meta / "aside")
        assert cli(project, "pop").returncode == 0
