"""Nothing a user typed disappears: every command that rewrites or drops a patch or the tree, run over each
kind of hand edit, either refuses (exit 1, naming the file, the edit still in place) or ends with the
edit still somewhere the user finds it: in its place, in a patch file, or in a copy under
``work/.materialize/saved/`` that the command's output names.

The kinds of hand edit: an unrefreshed edit of a file of the top patch (``top``), of a lower patch
(``lower``), a new file of no patch (``stray``), and a patch file in patches/ edited while applied
(``patch``). A field report had a patch emptied by ``pop -f`` during a rebase conflict; the rebase
family runs over a stopped rebase with the same kinds.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from materialize.cli import main

from .test_edit import ATTN, patch_file, run, wfile
from .test_journal import two_patches
from .test_rebase_guard import GEN, resolve, three_patches_and_a_conflicting_upstream

MARK = "typed-by-hand-5f1c"
KINDS = ("top", "lower", "stray", "patch")


def series(project: Path) -> list[str]:
    return ["--series", str(project / "series" / "default.yaml")]


def stack(project: Path) -> None:
    """0001-a (attention.py, run.sh) and 0002-b (generator.py, attention.py) applied; 0003-c (run.sh) and
    0004-d (the plugin's config.py) unapplied."""
    two_patches(project)
    for name, path, target in (("0003-c", "scripts/run.sh", "tt-metal"), ("0004-d", "vllm/config.py", "plugin")):
        run(project, "new", name, "--target", target)
        run(project, "add", path)
        f = wfile(project, path, target)
        f.write_text(f.read_text() + f"# {name}\n")
        run(project, "refresh")
    run(project, "goto", "0002-b")
    first, second = wfile(project, GEN).read_text().splitlines(keepends=True)[:2]
    (project / "fold.diff").write_text(
        f"--- a/models/tt/generator.py\n+++ b/models/tt/generator.py\n@@ -1,2 +1,3 @@\n {first}+# folded\n {second}")
    (project / "header.txt").write_text("Subject: described again\n")


def exported(project: Path) -> None:
    """``stack``, then exported to a git repository (the hand edits come after: import-git reads it)."""
    stack(project)
    repo = project.parent / "pq"
    assert main(["export-git", "tt-metal", "pq", "--repo", str(repo), *series(project)]) == 0


def stopped(project: Path) -> None:
    """A rebase stopped at 0002-targets (generator.py), its conflict resolved by hand; 0001-ids applied."""
    v2 = three_patches_and_a_conflicting_upstream(project)
    assert main(["rebase", "tt-metal", "--to", str(v2), *series(project)]) == 1
    resolve(project)


def rebase_v2(project: Path) -> None:
    stack(project)
    v2 = project.parent / "v2"
    subprocess.run(["cp", "-a", str(project / "upstream" / "tt-metal"), str(v2)], check=True)
    (v2 / "models" / "tt" / "kernel.py").write_text("k = 1\n")


def hand_edit(project: Path, kind: str, setup: Callable[[Path], None]) -> tuple[str, Path]:
    """Make the edit; (what a refusal must name, the file edited)."""
    rebasing = setup is stopped
    top_file, lower_file = (GEN, ATTN) if rebasing else (ATTN, "scripts/run.sh")
    if kind in ("top", "lower"):
        f = wfile(project, top_file if kind == "top" else lower_file)
        f.write_text(f.read_text() + f"# {MARK}\n")
        return f"tt-metal/{top_file if kind == 'top' else lower_file}", f
    if kind == "stray":
        f = wfile(project, "models/tt/notes.py")
        f.write_text(f"# {MARK}\n")
        return "tt-metal/models/tt/notes.py", f
    p = patch_file(project, "0002-targets" if rebasing else "0002-b")
    data = p.read_bytes()
    if rebasing:  # its one added line
        p.write_bytes(data.replace(b'"extra")', f'"extra", "{MARK}")'.encode(), 1))
    else:  # the added line of its generator.py hunk: no later hunk depends on it
        at = data.index(b"+# 0002-b\n", data.index(b"generator.py"))
        p.write_bytes(data[:at] + f"+# 0002-b {MARK}\n".encode() + data[at + len(b"+# 0002-b\n"):])
    assert MARK.encode() in p.read_bytes()
    return p.name, p


COMMANDS: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "pop": (stack, ["pop"]),
    "pop -f": (stack, ["pop", "-f"]),
    "pop -a -f": (stack, ["pop", "-a", "-f"]),
    "push": (stack, ["push"]),
    "push -f": (stack, ["push", "-f"]),
    "goto 0": (stack, ["goto", "0"]),
    "goto 0 -f": (stack, ["goto", "0", "-f"]),
    "refresh": (stack, ["refresh"]),
    "refresh -f": (stack, ["refresh", "-f"]),
    "delete": (stack, ["delete"]),
    "delete -f": (stack, ["delete", "-f"]),
    "delete -r -f": (stack, ["delete", "-r", "-f"]),
    "delete -r unapplied": (stack, ["delete", "-r", "0003-c"]),
    "fold": (stack, ["fold", "fold.diff"]),
    "move": (stack, ["move", "0004-d", "--after", "2"]),
    "rename": (stack, ["rename", "second"]),
    "new": (stack, ["new", "0005-e"]),
    "header --set": (stack, ["header", "--set", "header.txt"]),
    "import-git": (exported, ["import-git", "tt-metal", "pq~3..pq", "--repo", "../pq"]),
    "rebase": (rebase_v2, ["rebase", "tt-metal", "--to", "../v2"]),
    "rebase --continue": (stopped, ["rebase", "--continue"]),
    "rebase --skip": (stopped, ["rebase", "--skip"]),
    "rebase --abort": (stopped, ["rebase", "--abort"]),
}


def findings(project: Path) -> dict[str, list[Path]]:
    """Where MARK is now: in place (work/, patches/, the series), or in saved copies."""
    out: dict[str, list[Path]] = {"kept": [], "saved": []}
    for path in project.rglob("*"):
        if not path.is_file() or "journal" in path.relative_to(project).parts:
            continue
        if MARK.encode() in path.read_bytes():
            out["saved" if "saved" in path.relative_to(project).parts else "kept"].append(path)
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_command_drops_a_hand_edit_without_a_refusal_or_a_named_copy(project: Path, store, capsys, monkeypatch,
                                                                         command: str, kind: str) -> None:
    setup, args = COMMANDS[command]
    setup(project)
    monkeypatch.chdir(project)
    named, edited = hand_edit(project, kind, setup)
    typed = edited.read_bytes()
    capsys.readouterr()
    code = main([*args, *series(project)])
    out, err = capsys.readouterr()
    found = findings(project)
    if code != 0:
        assert code == 1, (code, err)  # README's table: refused, the work was not done
        assert named in err, err
        assert edited.read_bytes() == typed, "a refusal changed the edited file"
        return
    if found["kept"]:
        return  # still in place, or recorded in a patch
    assert found["saved"], f"{command} dropped the {kind} edit: it is nowhere\n{out}{err}"
    text = out + err
    saved = project / "work" / ".materialize" / "saved"
    assert any(str(parent) in text for path in found["saved"] for parent in (path, *path.parents)
               if saved in parent.parents), \
        f"{command} kept the {kind} edit only in {found['saved']}, and its output does not say so:\n{text}"
