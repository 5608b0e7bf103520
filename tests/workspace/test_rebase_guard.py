"""A stopped rebase owns the workspace (issue 11 items 1-2), and the workspace lock (issue 10 item 11).

While a rebase is stopped at a conflict only what resolves it runs: edits in work/, the reads, `diff`,
`add`, `rebase --continue/--skip/--abort`; every other command refuses with exit 1 and changes
nothing (git's rule). `refresh` never writes conflict markers into a patch. A command that finds
another one running says "busy" (exit 5), and `recover` never touches a live command's journal.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from materialize.cli import main

from .test_edit import ATTN, patch_file, run, wfile
from .test_journal import snapshot

GEN = "models/tt/generator.py"
TARGETS = 'TARGETS = ("tt-metal", "plugin")'


def change(project: Path, name: str, path: str, old: str, new: str) -> None:
    run(project, "new", name, "--target", "tt-metal")
    run(project, "add", path)
    f = wfile(project, path)
    assert old in f.read_text()
    f.write_text(f.read_text().replace(old, new, 1))
    run(project, "refresh")


def three_patches_and_a_conflicting_upstream(project: Path) -> Path:
    """0001 and 0003 carry cleanly; 0002 changes the line v2 also changed (the issue's reproducer)."""
    change(project, "0001-ids", ATTN, "ID_LENGTH = 16", "ID_LENGTH = 20")
    change(project, "0002-targets", GEN, TARGETS, 'TARGETS = ("tt-metal", "plugin", "extra")')
    change(project, "0003-run", "scripts/run.sh", "echo run\n", "echo run fast\n")
    v2 = project.parent / "v2"
    subprocess.run(["cp", "-a", str(project / "upstream" / "tt-metal"), str(v2)], check=True)
    gen = v2 / GEN
    gen.write_text(gen.read_text().replace(TARGETS, 'TARGETS = ("tt-metal", "plugin", "other")'))
    return v2


def cli(project: Path, *args: str) -> int:
    return main([*args, "--series", str(project / "series" / "default.yaml")])


def everything(project: Path) -> dict[str, bytes]:
    """Every byte of the series, the patches and the workspace."""
    return {f"{name}/{k}": v for name in ("series", "patches", "work") for k, v in snapshot(project / name).items()}


@pytest.fixture
def stopped(project: Path, store, capsys) -> Path:
    v2 = three_patches_and_a_conflicting_upstream(project)
    assert cli(project, "rebase", "tt-metal", "--to", str(v2)) == 1
    assert "0002-targets" in capsys.readouterr().err
    assert "<<<<<<<" in wfile(project, GEN).read_text()
    return project


REFUSED = [
    ["pop", "-f"], ["pop"], ["pop", "-a", "--force"], ["push"], ["push", "-a"], ["goto", "0"], ["goto", "0", "-f"],
    ["new", "0009-extra", "--target", "tt-metal"], ["rename", "0002-renamed"], ["rename", "0003-x", "-P", "0003-run"],
    ["delete", "0003-run"], ["delete", "-r", "0003-run"], ["refresh"], ["move", "0003-run", "--after", "0"],
    ["header", "--set", "-"], ["export-git", "tt-metal", "pq"], ["rebase", "tt-metal", "--to", "/nonexistent"],
    ["rebase", "tt-metal", "--to", "/nonexistent", "--report"],
]


def test_a_stopped_rebase_refuses_everything_that_does_not_resolve_it(stopped: Path, capsys) -> None:
    before = everything(stopped)
    for args in REFUSED:
        assert cli(stopped, *args) == 1, args
        message = capsys.readouterr().err
        assert "refused" in message and "rebase" in message and "0002-targets" in message, (args, message)
        assert "--continue" in message and "--abort" in message
        assert everything(stopped) == before, args
    for args in (["top"], ["series", "-v"], ["applied"], ["unapplied"], ["diff"], ["header"]):
        assert cli(stopped, *args) == 0, args  # reads and diff still run
        assert everything(stopped) == before, args


def test_pop_force_during_a_conflict_cannot_empty_the_patch(stopped: Path, capsys) -> None:
    """The issue's data loss: `pop -f` then `--continue` left 0002 holding only its header."""
    assert cli(stopped, "pop", "-f") == 1
    gen = wfile(stopped, GEN)
    text = gen.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    end = text.index("\n", end) + 1
    gen.write_text(text[:start] + 'TARGETS = ("tt-metal", "plugin", "other", "extra")\n' + text[end:])
    assert cli(stopped, "rebase", "--continue") == 0
    patch = patch_file(stopped, "0002-targets").read_text()
    assert '+TARGETS = ("tt-metal", "plugin", "other", "extra")' in patch
    assert '-TARGETS = ("tt-metal", "plugin", "other")' in patch
    assert [p.name for p in (stopped / "patches" / "tt-metal").iterdir()] and \
        sorted(p.name for p in (stopped / "patches" / "tt-metal").iterdir()) == \
        ["0001-ids.patch", "0002-targets.patch", "0003-run.patch"]


def test_continue_refuses_while_markers_remain_and_add_joins_the_stopped_patch(stopped: Path, capsys) -> None:
    assert cli(stopped, "rebase", "--continue") == 1
    assert f"{GEN}:" in capsys.readouterr().err
    assert cli(stopped, "add", "scripts/run.sh") == 0  # resolving may need another file: allowed
    assert cli(stopped, "rebase", "--abort") == 0
    assert cli(stopped, "top") == 0


def test_refresh_never_records_conflict_markers(project: Path, store, capsys) -> None:
    change(project, "0001-ids", ATTN, "ID_LENGTH = 16", "ID_LENGTH = 20")
    before = patch_file(project, "0001-ids").read_bytes()
    f = wfile(project)
    text = f.read_text().replace("ID_LENGTH = 20\n", "<<<<<<< ours\nID_LENGTH = 20\n=======\nID_LENGTH = 24\n>>>>>>> theirs\n")
    f.write_text(text)
    assert cli(project, "refresh") == 1
    err = capsys.readouterr().err
    assert "conflict marker" in err and f"{ATTN}:" in err
    assert patch_file(project, "0001-ids").read_bytes() == before
    assert cli(project, "diff") == 0  # diff shows what would be written, and warns
    assert "conflict markers" in capsys.readouterr().err


# -- the workspace lock (issue 10 item 11) -------------------------------------------------------------
LIVE = """
import sys, time
from pathlib import Path
from materialize.workspace.journal import Journal
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
real = Journal.protect
def slow(self, *paths):
    real(self, *paths)
    ready.touch()
    while not go.exists():
        time.sleep(0.02)
Journal.protect = slow
from materialize.cli import main
sys.exit(main(sys.argv[3:]))
"""


def test_a_second_command_on_a_live_one_is_busy_and_recover_leaves_its_journal_alone(project: Path, store,
                                                                                      capsys) -> None:
    change(project, "0001-ids", ATTN, "ID_LENGTH = 16", "ID_LENGTH = 20")
    change(project, "0002-targets", GEN, TARGETS, 'TARGETS = ("tt-metal", "plugin", "extra")')
    ready, go = project / "ready", project / "go"
    live = subprocess.Popen([sys.executable, "-c", LIVE, str(ready), str(go), "pop", "-a", "--series",
                             str(project / "series" / "default.yaml")], env=os.environ.copy())
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert live.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        assert (project / "work" / ".materialize" / "journal" / "journal.json").exists()
        for args in (["recover", "--rollback"], ["recover", "--resume"], ["pop"], ["top"], ["refresh"]):
            assert cli(project, *args) == 5, args
            message = capsys.readouterr().err
            assert "busy" in message and "interrupted" not in message
        go.touch()
        assert live.wait(60) == 0
    finally:
        go.touch()
        live.wait(60)
    assert cli(project, "top") == 2  # the live pop finished its work: nothing applied
    assert not wfile(project).exists()
    assert not (project / "work" / ".materialize" / "journal" / "journal.json").exists()


def test_listing_reads_work_while_an_interrupted_journal_waits(project: Path, store, capsys) -> None:
    from .test_journal import crash_after

    change(project, "0001-ids", ATTN, "ID_LENGTH = 16", "ID_LENGTH = 20")
    crash = crash_after(pytest.MonkeyPatch(), 1)
    assert cli(project, "pop") == 130
    crash.undo()
    capsys.readouterr()
    assert cli(project, "top") == 0
    out, err = capsys.readouterr()
    assert out.strip() == "0001-ids" and "interrupted" in err
    assert cli(project, "series", "-v") == 0
    assert cli(project, "push") == 1
    assert "recover" in capsys.readouterr().err
    assert cli(project, "recover", "--rollback") == 0
