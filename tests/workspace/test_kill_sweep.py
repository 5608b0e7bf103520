"""kill -9 at every step of every journaled command: `recover --rollback` gives back the files byte for
byte, `recover --resume` gives what the uninterrupted command gives.

A step is any call that changes the filesystem (``os.replace``, ``os.unlink``, ``os.symlink``,
``os.rmdir``, ``os.mkdir``, ``shutil.copyfile``: the journal's own writes, its backups, the store's
objects); the command runs in its own process, which ``os._exit``-s (no ``finally``, no ``except``, as
SIGKILL) right before the N-th one, for every 5th N the uninterrupted run makes
(``MATERIALIZE_SWEEP_STRIDE=1``: every N; all nine commands passed so).
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

from .test_edit import run, wfile
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


def cli(project: Path, args: list[str], die_at: int = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SWEEP_DIE_AT": str(die_at), "SWEEP_COUNT": str(project.parent / "count"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    series = ["--series", str(project / "series" / "default.yaml")]
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


CASES: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "push -a": (_popped, ["push", "-a"]),
    "pop -a": (two_patches, ["pop", "-a"]),
    "goto 0 --force": (_dirty, ["goto", "0", "--force"]),
    "refresh": (_edited, ["refresh"]),
    "fold": (_fold_file, ["fold", "fold.diff"]),
    "rename": (two_patches, ["rename", "-P", "0001-a", "first"]),
    "delete -r": (two_patches, ["delete", "-r"]),
    "new": (two_patches, ["new", "0003-c", "-m", "a subject of its own"]),
    "header --set": (_header_file, ["header", "--set", "header.txt"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kill_at_every_step_then_recover(project: Path, case: str) -> None:
    setup, args = CASES[case]
    setup(project)
    template = project.parent / "template"
    shutil.copytree(project, template, symlinks=True)
    before = files(project)
    done = cli(project, args)
    assert done.returncode == 0, done.stderr
    after = files(project)
    steps = int((project.parent / "count").read_text())
    stride = int(os.environ.get("MATERIALIZE_SWEEP_STRIDE", "5"))  # 1: every step (13 min on 2 cores)
    failures = []
    for die_at in range(1, steps + 1, stride):
        for mode, want in (("--rollback", before), ("--resume", after)):
            shutil.rmtree(project)
            shutil.copytree(template, project, symlinks=True)
            died = cli(project, args, die_at)
            if died.returncode == 0:  # the engine's cache, warm now, saves steps: it finished first
                break
            if died.returncode != 137:
                failures.append(f"step {die_at}: failed ({died.returncode}: {died.stderr.strip()})")
                break
            got = files(project)
            untouched = got == before and not (project / "work" / ".materialize" / "journal" / "journal.json").exists()
            if got not in (before, after):  # half-way: every other command must refuse until recovered
                refused = cli(project, ["push"])
                if refused.returncode != 1 or "interrupted" not in refused.stderr:
                    failures.append(f"step {die_at}: half-way, and push ran: {refused.stderr.strip()}")
            recovered = cli(project, ["recover", mode])
            if recovered.returncode != 0:
                failures.append(f"step {die_at}: recover {mode} failed: {recovered.stderr.strip()}")
                continue
            got = files(project)
            if got != want and not (mode == "--rollback" and got == after) and not untouched:
                # (killed after the commit: done; before anything was journaled: nothing was done)
                diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
                failures.append(f"step {die_at}: recover {mode} differs in {diff}")
            # (in work/.materialize/ a leftover is the tool's own: a journal folder without journal.json changed
            # nothing, and the next command's journal sweeps it)
            if [p for p in project.rglob(".materialize-tmp-*") if ".materialize" not in p.parts]:
                failures.append(f"step {die_at}: recover {mode} left temporary files")
    assert not failures, f"{case} ({steps} steps):\n" + "\n".join(failures)
