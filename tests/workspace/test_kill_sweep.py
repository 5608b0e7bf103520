"""kill -9 at every step of every journaled command: `recover --rollback` gives back the files byte for
byte, `recover --resume` gives what the uninterrupted command gives.

A step is any call that changes the filesystem (``os.replace``, ``os.unlink``, ``os.symlink``,
``os.rmdir``, ``os.mkdir``, ``shutil.copyfile``: the journal's own writes, its backups, the store's
objects); the command runs in its own process, which ``os._exit``-s (no ``finally``, no ``except``, as
SIGKILL) right before the N-th one, for every 5th N the uninterrupted run makes
(``MATERIALIZE_SWEEP_STRIDE=1``: every N; the first nine commands passed so, the rebase family, move,
push -f, import-git and export-git were run at the default stride).

A rebase is a run of journals (the start, one per patch carried, the end with its goto back): a kill in a
later one rolls back to that step's start, where the rebase is in progress; from there ``rebase
--continue`` must give what the uninterrupted command gives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from .test_edit import ATTN, run, wfile
from .test_habits import _two_hunk_patch_with_hunk_2_broken
from .test_hand_edit_sweep import stack
from .test_hand_edit_sweep import stopped as stopped_rebase
from .test_journal import snapshot, two_patches

KILLER = textwrap.dedent("""
    import os, shutil, sys
    die_at, count = int(os.environ["SWEEP_DIE_AT"]), [0]
    def step(real):
        def wrapper(*args, **kwargs):
            count[0] += 1
            if count[0] == die_at:
                os._exit(137)
            return real(*args, **kwargs)
        return wrapper
    for name in ("replace", "unlink", "symlink", "rmdir", "mkdir", "rename"):
        setattr(os, name, step(getattr(os, name)))
    shutil.copyfile = step(shutil.copyfile)
    import atexit
    atexit.register(lambda: open(os.environ["SWEEP_COUNT"], "w").write(str(count[0])))
    from materialize.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def cli(project: Path, args: list[str], die_at: int = 0, *, workspace: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SWEEP_DIE_AT": str(die_at), "SWEEP_COUNT": str(project.parent / "count"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    series = ["--series", str(project / "series" / "default.yaml")] if workspace else []
    return subprocess.run([sys.executable, "-c", KILLER, *args, *series], capture_output=True, text=True,
                          cwd=project, env=env)


def files(project: Path) -> dict[str, bytes]:
    """What a user would compare: the series, the patch files, work/ and the workspace's state (not the
    journal, saved copies or the lock file)."""
    return {k: v for k, v in snapshot(project).items()
            if not k.startswith("work/.materialize/") or k in ("work/.materialize/state.json",
                                                               "work/.materialize/rebase/rebase.json")}


def _edited(project: Path) -> None:
    two_patches(project)
    f = wfile(project)
    f.write_text(f.read_text().replace("import ", "import  ", 1) + "# more\n")
    (wfile(project, "models/tt/generator.py")).unlink()
    run(project, "add", "models/tt/fresh.py")
    wfile(project, "models/tt/fresh.py").write_text("fresh = 1\n")


def _popped(project: Path) -> None:
    two_patches(project)
    run(project, "pop", "-a")


def _dirty(project: Path) -> None:
    two_patches(project)
    f = wfile(project)
    f.write_text(f.read_text() + "# unrefreshed\n")
    wfile(project, "models/tt/stray.py").write_text("stray = 1\n")


def _lower_edited(project: Path) -> None:
    """0001-a (run.sh) under 0002-b (generator.py), 0001-a's file edited: `refresh 0001-a` records it there."""
    for name, path in (("0001-a", "scripts/run.sh"), ("0002-b", "models/tt/generator.py")):
        run(project, "new", name, "--target", "tt-metal")
        run(project, "add", path)
        wfile(project, path).write_text(wfile(project, path).read_text() + f"# {name}\n")
        run(project, "refresh")
    f = wfile(project, "scripts/run.sh")
    f.write_text(f.read_text() + "# 0001-a, unrefreshed\n")


def _forced(project: Path) -> None:
    """``_broken``, pushed with -f: attention.py half patched, its failed hunk in attention.py.rej, and an
    edit typed since; `pop -f` keeps both under saved/."""
    _two_hunk_patch_with_hunk_2_broken(project)
    assert cli(project, ["push", "-f"]).returncode == 1
    f = wfile(project)
    f.write_text(f.read_text() + "# typed after push -f\n")


def _fold_file(project: Path) -> None:
    two_patches(project)
    data = (wfile(project, "models/tt/generator.py")).read_text()
    lines = data.splitlines(keepends=True)
    new = lines[:3] + ["# folded\n"] + lines[3:]
    import difflib

    diff = "".join(difflib.unified_diff(lines, new, "a/models/tt/generator.py", "b/models/tt/generator.py"))
    (project / "fold.diff").write_text(diff)


def _header_file(project: Path) -> None:
    two_patches(project)
    (project / "header.txt").write_text("Subject: described again\n")


def _broken(project: Path) -> None:
    """0001-two unapplied, its second hunk's context gone: `push -f` applies the first, the second goes into
    attention.py.rej (exit 1: the push stopped short of a clean apply)."""
    _two_hunk_patch_with_hunk_2_broken(project)


def _exported(project: Path) -> None:
    """``stack`` exported to ../pq, then edited there as with `git rebase -i`: 0001-a's commit amended
    (its file is rewritten on import) and a new commit on top (a new patch)."""
    import git

    from .test_gitio import ENV

    stack(project)
    repo = project.parent / "pq"
    run(project, "export-git", "tt-metal", "pq", "--repo", str(repo))
    g = git.Repo(repo)
    with g.git.custom_environment(**ENV):
        g.git.checkout("-q", "pq")
        run_sh = repo / "scripts" / "run.sh"
        run_sh.write_text(run_sh.read_text() + "# amended\n")
        g.git.commit("-q", "-a", "--amend", "--no-edit")
        f = repo / "models" / "tt" / "kernel.py"
        f.write_text("k = 1\n")
        g.git.add("-A")
        g.git.commit("-q", "-m", "kernel: a new file")


def _v2(project: Path) -> None:
    """``stack`` and an upstream v2 that moves every tt-metal patch by an offset (nothing conflicts)."""
    stack(project)
    v2 = project.parent / "v2"
    shutil.copytree(project / "upstream" / "tt-metal", v2, symlinks=True)
    attn = v2 / ATTN
    attn.write_text("# v2\n# moved\n" + attn.read_text())
    (v2 / "models" / "tt" / "kernel.py").write_text("k = 1\n")


CASES: dict[str, tuple[Callable[[Path], None], list[str]] | tuple[Callable[[Path], None], list[str], int]] = {
    "push -a": (_popped, ["push", "-a"]),
    "push -f": (_broken, ["push", "-f"], 1),
    "pop -a": (two_patches, ["pop", "-a"]),
    "goto 0 --force": (_dirty, ["goto", "0", "--force"]),
    "delete -f": (_dirty, ["delete", "-f"]),
    "refresh a lower patch": (_lower_edited, ["refresh", "0001-a"]),
    "pop -f after push -f": (_forced, ["pop", "-f"]),
    "refresh": (_edited, ["refresh"]),
    "fold": (_fold_file, ["fold", "fold.diff"]),
    "rename": (two_patches, ["rename", "-P", "0001-a", "first"]),
    "delete -r": (two_patches, ["delete", "-r"]),
    "new": (two_patches, ["new", "0003-c", "-m", "a subject of its own"]),
    "header --set": (_header_file, ["header", "--set", "header.txt"]),
    "move": (stack, ["move", "0004-d", "--after", "2"]),
    "import-git": (_exported, ["import-git", "tt-metal", "pq~4..pq", "--repo", "../pq"]),
    "export-git": (two_patches, ["export-git", "tt-metal", "pq", "--repo", "../exported"]),
    "rebase": (_v2, ["rebase", "tt-metal", "--to", "../v2"]),
    "rebase --continue": (stopped_rebase, ["rebase", "--continue"]),
    "rebase --skip": (stopped_rebase, ["rebase", "--skip"]),
    "rebase --abort": (stopped_rebase, ["rebase", "--abort"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kill_at_every_step_then_recover(project: Path, case: str) -> None:
    setup, args, code = (*CASES[case], 0)[:3]
    setup(project)
    template = project.parent / "template"
    shutil.copytree(project, template, symlinks=True)
    before = files(project)
    done = cli(project, args)
    assert done.returncode == code, done.stderr
    after = files(project)
    steps = int((project.parent / "count").read_text())
    stride = int(os.environ.get("MATERIALIZE_SWEEP_STRIDE", "5"))  # 1: every step (13 min on 2 cores)
    failures = []
    for die_at in range(1, steps + 1, stride):
        for mode, want in (("--rollback", before), ("--resume", after)):
            shutil.rmtree(project)
            shutil.copytree(template, project, symlinks=True)
            died = cli(project, args, die_at)
            if died.returncode == code:  # the engine's cache, warm now, saves steps: it finished first
                break
            if died.returncode != 137:
                failures.append(f"step {die_at}: failed ({died.returncode}: {died.stderr.strip()})")
                break
            got = files(project)
            untouched = got == before and not (project / "work" / ".materialize" / "journal" / "journal.json").exists()
            rebasing = (project / "work" / ".materialize" / "rebase" / "rebase.json").exists()
            if got not in (before, after):  # half-way: every other command must refuse until recovered
                refused = cli(project, ["push"])
                if refused.returncode != 1 or not ("interrupted" in refused.stderr or rebasing and
                                                   "rebase" in refused.stderr):
                    failures.append(f"step {die_at}: half-way, and push ran: {refused.stderr.strip()}")
            recovered = cli(project, ["recover", mode])
            if recovered.returncode not in (0, code if mode == "--resume" else 0):  # (resume: the command's code)
                failures.append(f"step {die_at}: recover {mode} failed: {recovered.stderr.strip()}")
                continue
            got = files(project)
            if mode == "--rollback" and got not in (before, after) and \
                    (project / "work" / ".materialize" / "rebase" / "rebase.json").exists():
                # rolled back to the start of a later step of a rebase (or killed between two): go on
                went_on = cli(project, ["rebase", "--continue"])
                if went_on.returncode != 0:
                    failures.append(f"step {die_at}: rebase --continue after the rollback failed: "
                                    f"{went_on.stderr.strip()}")
                    continue
                got, want = files(project), after
            if got != want and not (mode == "--rollback" and got == after) and not untouched:
                # (killed after the commit: done; before anything was journaled: nothing was done)
                diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
                failures.append(f"step {die_at}: recover {mode} differs in {diff}")
            # (in work/.materialize/ a leftover is the tool's own: a journal folder without journal.json changed
            # nothing, and the next command's journal sweeps it)
            if [p for p in project.rglob(".materialize-tmp-*") if ".materialize" not in p.parts]:
                failures.append(f"step {die_at}: recover {mode} left temporary files")
    assert not failures, f"{case} ({steps} steps):\n" + "\n".join(failures)


def test_import_quilt_killed_at_every_step_leaves_the_old_series_or_the_new_one(project: Path) -> None:
    """import-quilt has no journal: it writes one file. A kill anywhere must leave that file as it was or
    as the finished command writes it. A kill between writing the temporary and renaming it leaves
    that temporary (no process can remove it after kill -9): the next run of the command removes it.
    ``--force`` keeps the old file first (``quilt.yaml.orig``; ``.orig.1`` on the next run): a kill may
    leave that copy too, which is a copy and never the series itself (``kept`` leaves them out)."""
    quilt = project / "quilt"
    quilt.mkdir()
    (quilt / "series").write_text("fix.patch -p1\n")
    (quilt / "fix.patch").write_text("--- a/scripts/run.sh\n+++ b/scripts/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n"
                                     "-echo run\n+echo run fast\n")
    out = project / "series" / "quilt.yaml"
    out.write_text("# an older import\n")
    args = ["import-quilt", "quilt", "--upstream", "upstream/tt-metal", "--target", "tt-metal", "-o", str(out),
            "--force"]

    def kept(snap: dict[str, bytes]) -> dict[str, bytes]:
        return {k: v for k, v in snap.items()
                if not (k.startswith("series/quilt.yaml.orig") and v == b"# an older import\n")}

    template = project.parent / "template"
    shutil.copytree(project, template, symlinks=True)
    before = snapshot(project)
    done = cli(project, args, workspace=False)
    assert done.returncode == 0, done.stderr
    after = snapshot(project)
    assert after != before and after["series/quilt.yaml.orig"] == b"# an older import\n"
    steps = int((project.parent / "count").read_text())
    failures = []
    for die_at in range(1, steps + 1):  # every step: on a warm store the write is the second or third
        shutil.rmtree(project)
        shutil.copytree(template, project, symlinks=True)
        died = cli(project, args, die_at, workspace=False)
        if died.returncode == 0:  # the store's cache, warm now, saves steps: it finished first
            break
        got = snapshot(project)
        left = [k for k in got if Path(k).name.startswith(".materialize-tmp-")]
        got = {k: v for k, v in got.items() if k not in left}
        if died.returncode not in (0, 137) or kept(got) not in (kept(before), kept(after)) or len(left) > 1:
            failures.append(f"step {die_at} ({died.returncode}): differs in "
                            f"{sorted(k for k in set(got) | set(before) if got.get(k) != before.get(k))}")
        if left:
            again = cli(project, args, workspace=False)
            if again.returncode != 0 or kept(snapshot(project)) != kept(after):
                failures.append(f"step {die_at}: the next run did not finish cleanly and sweep {left}: "
                                f"{again.stderr.strip()}")
    assert not failures, "\n".join(failures)
