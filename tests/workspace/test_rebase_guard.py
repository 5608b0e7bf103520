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


# -- what --continue / --skip may fold or drop (item: edits outside the stopped patch) ------------------
def resolve(project: Path) -> None:
    gen = wfile(project, GEN)
    text = gen.read_text()
    start, end = text.index("<<<<<<<"), text.index(">>>>>>>")
    gen.write_text(text[:start] + 'TARGETS = ("tt-metal", "plugin", "other", "extra")\n' + text[text.index("\n", end) + 1:])


@pytest.mark.parametrize("step", ["--continue", "--skip"])
@pytest.mark.parametrize("where", ["file of a lower patch", "file of no patch", "other target"])
def test_continue_and_skip_refuse_edits_outside_the_stopped_patch(stopped: Path, capsys, step: str,
                                                                  where: str) -> None:
    """While stopped at 0002, an edit to 0001's attention.py was written back to the tree by --continue
    (sync to the new position) without a word; --skip did the same (git's --skip resets such edits away
    too; its --continue leaves them in the tree, which here the next step rewrites): refused, naming the
    file and the ways out."""
    resolve(stopped)
    original = None
    if where == "file of a lower patch":
        edited = wfile(stopped, ATTN)
        original = edited.read_bytes()
        edited.write_text(edited.read_text() + "# typed while stopped\n")
    elif where == "file of no patch":
        edited = wfile(stopped, "models/tt/notes.py")
        edited.write_text("# typed while stopped\n")
    else:
        edited = wfile(stopped, "vllm/new.py", target="plugin")
        edited.parent.mkdir(parents=True)
        edited.write_text("# typed while stopped\n")
    before = everything(stopped)
    capsys.readouterr()
    assert cli(stopped, "rebase", step) == 1
    message = capsys.readouterr().err
    rel = str(edited.relative_to(stopped / "work"))
    assert f"rebase {step} refused" in message and rel in message, message
    assert "materialize add" in message and "--abort" in message
    assert everything(stopped) == before
    assert edited.read_text().endswith("# typed while stopped\n")
    # the ways out: add it to the stopped patch (as `git add` does), or take the edit away
    if where != "other target" and step == "--continue":
        assert cli(stopped, "add", str(edited)) == 0
        assert cli(stopped, "rebase", "--continue") == 0
        assert b"+# typed while stopped" in patch_file(stopped, "0002-targets").read_bytes()
    else:  # the user takes the edit back out of work/
        edited.write_bytes(original) if original is not None else edited.unlink()
        assert cli(stopped, "rebase", step) == 0


def test_skip_keeps_a_copy_of_the_resolution_it_drops(stopped: Path, capsys) -> None:
    """--skip put the stopped patch's files back as the tree has them: a half-typed resolution went with
    them. It is copied under saved/ first, and the output says where (the patch file too)."""
    resolve(stopped)
    resolution = wfile(stopped, GEN).read_bytes()
    capsys.readouterr()
    assert cli(stopped, "rebase", "--skip") == 0
    out = capsys.readouterr()
    saved = [p for p in (stopped / "work" / ".materialize" / "saved").rglob("generator.py")]
    assert [p.read_bytes() for p in saved] == [resolution]
    text = out.out + out.err
    assert str(saved[0].parents[3]) in text and "rebase-dropped" in text


def test_continue_refuses_when_the_stopped_patch_file_was_edited_by_hand(stopped: Path, capsys) -> None:
    """Editing the stopped patch's file (instead of work/) and --continue: the patch was regenerated from
    work/ over the edit, which was gone."""
    resolve(stopped)
    patch = patch_file(stopped, "0002-targets")
    patch.write_bytes(patch.read_bytes().replace(b'"extra")', b'"extra", "by hand")'))
    edited = patch.read_bytes()
    capsys.readouterr()
    assert cli(stopped, "rebase", "--continue") == 1
    message = capsys.readouterr().err
    assert "0002-targets.patch" in message and "changed since the rebase stopped" in message
    assert patch.read_bytes() == edited
    assert cli(stopped, "rebase", "--skip") == 0  # the way out it names: the file is kept
    kept = stopped / "work" / ".materialize" / "saved" / "rebase-dropped" / "tt-metal" / "0002-targets.patch"
    assert kept.read_bytes() == edited


def test_abort_keeps_patch_files_edited_during_the_rebase(stopped: Path, capsys) -> None:
    """--abort writes back every patch file as it was before the rebase: one edited by hand meanwhile (a
    patch still to be carried, here) was overwritten without a copy."""
    later = patch_file(stopped, "0003-run")
    later.write_bytes(later.read_bytes().replace(b"echo run fast", b"echo run faster"))
    edited = later.read_bytes()
    capsys.readouterr()
    assert cli(stopped, "rebase", "--abort") == 0
    out = capsys.readouterr()
    kept = [p for p in (stopped / "work" / ".materialize" / "saved").rglob("0003-run.patch")]
    assert [p.read_bytes() for p in kept] == [edited]
    assert str(kept[0].parent.parent) in out.out + out.err
    assert b"echo run faster" not in later.read_bytes()  # restored as before the rebase


# -- rt-ws 11: the series file changed by hand while a rebase is stopped ---------------------------------

def _pin_put_back(project: Path) -> tuple[Path, bytes, bytes]:
    """The pin as it was before the rebase (`git checkout series/default.yaml`, an editor's undo)."""
    series = project / "series" / "default.yaml"
    before = (project / "work" / ".materialize" / "rebase" / "backup" / "series").read_bytes()
    during = series.read_bytes()
    assert during != before
    series.write_bytes(before + b"# put back by hand\n")
    return series, before, during


def test_abort_restores_everything_after_the_pin_was_put_back_by_hand(project: Path, stopped: Path, capsys) -> None:
    """--abort refused ("the pin changed ... `goto 0 --force` resets the workspace"), and goto is refused
    during a rebase: every way out refused. --abort restores the series file anyway; the hand-edited one
    is kept under saved/ and named."""
    series, before, _during = _pin_put_back(project)
    resolved = wfile(project, GEN).read_bytes()
    capsys.readouterr()
    assert cli(project, "rebase", "--abort") == 0
    assert series.read_bytes() == before
    assert not (project / "work" / ".materialize" / "rebase").exists()
    saved = project / "work" / ".materialize" / "saved"
    assert before + b"# put back by hand\n" in [p.read_bytes() for p in saved.rglob("default.yaml")]
    assert resolved in [p.read_bytes() for p in saved.rglob("generator.py")]


@pytest.mark.parametrize("step", ["--continue", "--skip"])
def test_continue_and_skip_name_the_way_out_when_the_pin_was_put_back_by_hand(
        project: Path, stopped: Path, step: str, capsys) -> None:
    """They refuse (the workspace was written from the rebase's pin), naming a way out that runs now."""
    _pin_put_back(project)
    everything_before = everything(project)
    capsys.readouterr()
    assert cli(project, "rebase", step) == 1
    err = capsys.readouterr().err
    assert "rebase --abort" in err and "goto 0 --force" not in err
    assert everything(project) == everything_before


def test_a_patch_taken_out_of_the_series_by_hand_during_a_rebase_is_left_out(project: Path, stopped: Path,
                                                                             capsys) -> None:
    """0003-run removed from the series by hand while the rebase is stopped at 0002 (git's `rebase
    --edit-todo`, deleting its line): --continue carried 0002, then failed on 0003 ("no patch named") at every
    --continue after it, so only --abort (dropping the resolution) ended the rebase."""
    series = project / "series" / "default.yaml"
    entry = "  - patch: tt-metal/0003-run.patch\n    target: tt-metal\n"
    assert entry in series.read_text()
    series.write_text(series.read_text().replace(entry, ""))
    run3 = patch_file(project, "0003-run").read_bytes()
    resolve(project)
    capsys.readouterr()
    assert cli(project, "rebase", "--continue") == 0
    assert not (project / "work" / ".materialize" / "rebase").exists()
    assert "0003-run" not in series.read_text() and patch_file(project, "0003-run").read_bytes() == run3
    assert "0003-run" in capsys.readouterr().out  # the outcome table says it was left out


def test_continue_never_takes_another_patch_for_the_stopped_one_by_a_prefix(project: Path, stopped: Path,
                                                                           capsys) -> None:
    """The stopped patch's entry taken out by hand and another entry named so that the stopped name is its
    prefix: the stopped patch was looked up like a name typed on the command line (a unique prefix), so
    --continue and --skip took 0003-run for it (only their other guards kept its file)."""
    series = project / "series" / "default.yaml"
    e2 = "  - patch: tt-metal/0002-targets.patch\n    target: tt-metal\n"
    e3 = "  - patch: tt-metal/0003-run.patch\n    target: tt-metal\n"
    text = series.read_text()
    assert e2 in text and e3 in text
    series.write_text(text.replace(e2, "").replace(e3, e3 + "    name: 0002-targets-run\n"))
    resolve(project)
    run3 = patch_file(project, "0003-run").read_bytes()
    for step in ("--continue", "--skip"):
        assert cli(project, "rebase", step) != 0
        err = capsys.readouterr().err
        assert "0002-targets is no longer in" in err and "stopped patch 0002-targets-run" not in err
        assert patch_file(project, "0003-run").read_bytes() == run3
    assert cli(project, "rebase", "--abort") == 0


@pytest.mark.parametrize("first, second", [(["new", "b", "-m", "b"], ["new", "c", "-m", "c"]),
                                           (["rename", "a2"], ["pop"])])
def test_a_command_reads_the_series_that_the_one_before_it_wrote(project: Path, first: list[str],
                                                                second: list[str]) -> None:
    """A command read the series before it took the workspace lock: another command that wrote the series in
    between (two terminals, a script) left it working from the old file, and it refused with "the series
    changed under the workspace ... `materialize goto 0 --force` resets the workspace", a way out that
    discards work, for nothing a user did. Read again once the lock is held, when it changed."""
    from materialize.workspace.state import Workspace

    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    wfile(project).write_text(wfile(project).read_text() + "# a\n")
    run(project, "refresh")
    real = Workspace.open.__func__
    raced: list[int] = []

    def racing(cls, path, store=None):  # noqa: ANN001, ANN202 - the classmethod it stands for
        ws = real(cls, path, store)
        if not raced:
            raced.append(1)
            assert run(project, *first) == 0  # the other command, done in the window
        return ws

    race = pytest.MonkeyPatch()  # (private: undoing it must not undo the project fixture's environment)
    race.setattr(Workspace, "open", classmethod(racing))
    try:
        assert run(project, *second) == 0
    finally:
        race.undo()
    assert raced
