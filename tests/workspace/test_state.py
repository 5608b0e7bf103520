"""The workspace's files on disk (``state.py``), attacked through the real CLI (``python -m materialize``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ATTN = "models/tt/attention.py"


def cli(project: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True,
                          cwd=cwd or project)


@pytest.fixture
def pushed(project: Path) -> Path:
    """p1 on top, recording an edit of attention.py."""
    assert cli(project, "new", "p1", "-t", "tt-metal").returncode == 0
    assert cli(project, "add", ATTN).returncode == 0
    work = project / "work" / "tt-metal" / ATTN
    work.write_text(work.read_text().replace("import", "import  ", 1))
    assert cli(project, "refresh").returncode == 0
    return project


def _folder_to_outside(project: Path, tmp_path: Path) -> Path:
    """work/tt-metal/models/tt becomes a symlink to a copy outside work/ (same bytes)."""
    inside = project / "work" / "tt-metal" / "models" / "tt"
    outside = tmp_path / "outside" / "tt"
    shutil.copytree(inside, outside)
    shutil.rmtree(inside)
    inside.symlink_to(outside)
    return outside


@pytest.mark.parametrize("command", [["pop"], ["pop", "-f"], ["goto", "0", "--force"], ["refresh"], ["diff"],
                                     ["add", "models/tt/generator.py"]])
def test_no_workspace_command_reads_or_writes_through_a_symlinked_folder_in_work(pushed, tmp_path, command):
    """`pop` deleted outside/tt/attention.py through work/tt-metal/models/tt -> outside/tt (and push
    would have written there): a folder of work/ that is a symlink is refused, exit 4, naming it."""
    outside = _folder_to_outside(pushed, tmp_path)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    state = (pushed / "work" / ".materialize" / "state.json").read_bytes()
    proc = cli(pushed, *command)
    assert proc.returncode == 4, proc.stderr
    assert "work/tt-metal/models/tt is a symlink" in proc.stderr
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert (pushed / "work" / ".materialize" / "state.json").read_bytes() == state
    assert not (pushed / "work" / ".materialize" / "journal").exists()


def test_the_target_folder_itself_may_not_be_a_symlink(pushed, tmp_path):
    work = pushed / "work" / "tt-metal"
    outside = tmp_path / "elsewhere"
    shutil.move(work, outside)
    work.symlink_to(outside)
    proc = cli(pushed, "pop")
    assert proc.returncode == 4 and "work/tt-metal is a symlink" in proc.stderr, proc.stderr
    assert (outside / ATTN).exists()


def test_a_symlink_to_a_folder_made_in_work_is_a_file_of_no_patch(pushed):
    """os.walk lists a symlink to a folder among the folders and does not enter it: it was invisible to
    `refresh` and `pop` (neither reported it nor kept it from being lost). It is a stray file now."""
    (pushed / "work" / "tt-metal" / "models" / "link").symlink_to("tt")
    proc = cli(pushed, "pop")
    assert proc.returncode == 1 and "tt-metal/models/link" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name", ["{work}/src/.GIT/x", "{work}", ".git/config", "../outside", "/etc/passwd"])
def test_add_refuses_a_name_that_is_no_path_of_the_tree(pushed, name):
    """A path given inside work/<target>/ skipped the gate every other path goes through: `add
    $PWD/work/t/src/.GIT/x` put a .git path into the top patch."""
    work = pushed / "work" / "tt-metal"
    proc = cli(pushed, "add", name.format(work=work))
    assert proc.returncode == 4, proc.stderr
    assert "command line" in proc.stderr


def test_pop_force_saves_a_folder_that_took_a_files_place(pushed):
    """A tracked file replaced by a folder: `pop -f` died copying the folder as a file (a traceback,
    then 'Is a directory'), so nothing could move the stack. Its files are saved, the stack moves."""
    work = pushed / "work" / "tt-metal" / ATTN
    work.unlink()
    work.mkdir()
    (work / "keep.txt").write_text("mine\n")
    proc = cli(pushed, "pop", "-f")
    assert proc.returncode == 0, proc.stderr
    saved = next((pushed / "work" / ".materialize" / "saved").iterdir())
    assert (saved / "tt-metal" / ATTN / "keep.txt").read_text() == "mine\n"
    assert "now a folder" in (saved / "SAVED.txt").read_text()
    assert cli(pushed, "push").returncode == 0
    assert "import  " in work.read_text()


LINK_PATCH = """\
diff --git a/models/lnk b/models/lnk
new file mode 120000
--- /dev/null
+++ b/models/lnk
@@ -0,0 +1 @@
+tt
\\ No newline at end of file
"""
UNLINK_PATCH = """\
diff --git a/models/lnk b/models/lnk
deleted file mode 120000
--- a/models/lnk
+++ /dev/null
@@ -1 +0,0 @@
-tt
\\ No newline at end of file
"""
FOLDER_PATCH = """\
diff --git a/models/lnk/x.txt b/models/lnk/x.txt
new file mode 100644
--- /dev/null
+++ b/models/lnk/x.txt
@@ -0,0 +1 @@
+x
"""


def test_a_link_that_becomes_a_folder_is_pushed_and_popped_one_patch_at_a_time(project):
    """p2 removes the symlink models/lnk, p3 puts a folder there (GNU refuses both in one patch: its
    deletions wait for the end of the patch, "Can't create temporary file models/lnk/x.txt"): `pop`
    must remove the folder's file before the link comes back ('Is a directory'), and `push` must not
    protect lnk/x.txt through a link still there."""
    (project / "patches" / "tt-metal" / "p1.patch").write_text(LINK_PATCH)
    (project / "patches" / "tt-metal" / "p2.patch").write_text(UNLINK_PATCH)
    (project / "patches" / "tt-metal" / "p3.patch").write_text(FOLDER_PATCH)
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("patches: []", "patches:\n  - {patch: tt-metal/p1.patch, target: tt-metal}"
                                                                "\n  - {patch: tt-metal/p2.patch, target: tt-metal}"
                                                                "\n  - {patch: tt-metal/p3.patch, target: tt-metal}"))
    lnk = project / "work" / "tt-metal" / "models" / "lnk"
    for step, state in (("push", "link"), ("push", None), ("push", "folder"), ("pop", None), ("pop", "link"),
                        ("goto", "folder"), ("pop", None), ("pop", "link"), ("pop", None)):
        proc = cli(project, *([step, "3"] if step == "goto" else [step]))
        assert proc.returncode == 0, (step, proc.stderr)
        here = "link" if lnk.is_symlink() else "folder" if lnk.is_dir() else None if not lnk.exists() else "file"
        assert here == state, (step, here)
    assert cli(project, "goto", "3").returncode == 0 and (lnk / "x.txt").read_text() == "x\n"
