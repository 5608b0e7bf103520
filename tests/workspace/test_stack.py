"""push/pop/goto (workspace/stack.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_edit import ATTN, patch_file, run, wfile
from .test_journal import two_patches


def _emptied(project: Path, how: str) -> bytes:
    """0002-b's file emptied by hand while applied (the field's "patch emptied"): its changes are then only
    in work/, as pushed. Returns work/'s attention.py (0002-b's change in it)."""
    two_patches(project)
    p = patch_file(project, "0002-b")
    data = p.read_bytes()
    if how == "removed":
        p.unlink()
    else:
        p.write_bytes(data[: data.index(b"diff --git")] if how == "header only" else b"")
    return wfile(project).read_bytes()


@pytest.mark.parametrize("how", ["header only", "zero bytes", "removed"])
@pytest.mark.parametrize("command", [["pop"], ["pop", "-f"], ["goto", "0"], ["goto", "1", "-f"], ["delete"]])
def test_popping_a_patch_emptied_by_hand_keeps_its_files_as_pushed(project: Path, capsys, command: list[str],
                                                                    how: str) -> None:
    """quilt's pop refuses ("does not remove cleanly") a patch whose file no longer gives its files; ours
    popped it, and work/, the last copy of the patch's changes, went with it without a word (the store
    holds the tree, but no command shows it). Now the files as pushed are kept under saved/, named."""
    pushed = _emptied(project, how)
    assert b"# 0002-b\n" in pushed
    capsys.readouterr()
    assert run(project, *command) == 0
    out = capsys.readouterr()
    kept = list((project / "work" / ".materialize" / "saved").rglob("tt-metal/" + ATTN))
    assert [k.read_bytes() for k in kept] == [pushed]
    assert str(kept[0].parents[3]) in out.out + out.err
    assert "0002-b" in (kept[0].parents[3] / "SAVED.txt").read_text()


def test_popping_a_patch_whose_description_was_edited_keeps_nothing(project: Path) -> None:
    two_patches(project)
    p = patch_file(project, "0002-b")
    p.write_bytes(b"A description fixed by hand\n\n" + p.read_bytes())
    assert run(project, "pop") == 0
    assert not (project / "work" / ".materialize" / "saved").exists()
