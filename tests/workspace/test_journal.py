"""Interrupted operations: every command refuses until `recover` rolls back (byte-exact) or resumes."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from materialize.errors import MaterializeError
from materialize.workspace.journal import Journal

from .test_edit import ATTN, patch_file, run, wfile


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "journal" not in path.parts:
            out[str(path.relative_to(root))] = path.read_bytes() + (b"+x" if path.stat().st_mode & 0o100 else b"")
    return out


def crash_after(monkeypatch: pytest.MonkeyPatch, changes: int, op: str | None = None,
                args: list[str] | None = None) -> pytest.MonkeyPatch:
    # (a private MonkeyPatch: undoing it must not undo the project fixture's environment)
    """The process dies (KeyboardInterrupt: not a user error, so no automatic rollback) at the
    ``changes + 1``-th time the next operation (of kind ``op``, when given) records files before
    changing them (once per file changed, plus once for a move's whole batch)."""
    real = Journal.protect
    count = {"n": 0}

    def dying(self, *paths):
        if (op is not None and self.data.get("op") != op) or (args is not None and self.data.get("args") != args):
            return real(self, *paths)
        count["n"] += 1
        if count["n"] > changes:
            raise KeyboardInterrupt
        return real(self, *paths)

    monkeypatch.setattr(Journal, "protect", dying)
    return monkeypatch


def two_patches(project: Path) -> None:
    for name, paths in (("0001-a", [ATTN, "scripts/run.sh"]), ("0002-b", ["models/tt/generator.py", ATTN])):
        run(project, "new", name, "--target", "tt-metal")
        run(project, "add", *paths)
        for p in paths:
            f = wfile(project, p)
            f.write_text(f.read_text() + f"# {name}\n")
        run(project, "refresh")


def test_interrupted_pop_rolls_back_byte_for_byte(project: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    two_patches(project)
    before = snapshot(project)
    crash = crash_after(pytest.MonkeyPatch(), 2)
    with pytest.raises(click.exceptions.Abort):
        run(project, "pop", "-a")
    crash.undo()
    assert snapshot(project) != before  # it really was half-way
    with pytest.raises(MaterializeError, match="interrupted `materialize pop -a`"):
        run(project, "push")
    assert run(project, "recover") == 1
    assert run(project, "recover", "--rollback") == 0
    assert snapshot(project) == before
    capsys.readouterr()
    run(project, "top")
    assert capsys.readouterr().out.strip() == "0002-b"


def test_interrupted_pop_resumes(project: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    two_patches(project)
    crash = crash_after(pytest.MonkeyPatch(), 1)
    with pytest.raises(click.exceptions.Abort):
        run(project, "pop", "-a")
    crash.undo()
    assert run(project, "recover", "--resume") == 0
    assert not any(p.is_file() for p in (project / "work" / "tt-metal").rglob("*"))
    capsys.readouterr()
    assert run(project, "applied") == 0
    assert capsys.readouterr().out.strip() == ""


def test_interrupted_refresh_keeps_patch_and_state_consistent(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    two_patches(project)
    f = wfile(project)
    f.write_text(f.read_text() + "# more\n")
    before = snapshot(project)
    crash = crash_after(pytest.MonkeyPatch(), 1)  # the patch file is written, the state is not
    with pytest.raises(click.exceptions.Abort):
        run(project, "refresh")
    crash.undo()
    run(project, "recover", "--rollback")
    assert snapshot(project) == before
    assert run(project, "recover", "--resume") == 0  # nothing pending: a no-op
    run(project, "refresh")
    assert patch_file(project, "0002-b").read_bytes().count(b"+# more") == 1


def test_a_user_error_inside_an_operation_rolls_back_by_itself(tmp_path: Path) -> None:
    victim = tmp_path / "a.txt"
    victim.write_bytes(b"old")
    with pytest.raises(MaterializeError), Journal.run(tmp_path / "meta", "op", []) as j:
        j.write(victim, b"new")
        j.write(tmp_path / "created.txt", b"x")
        raise MaterializeError("boom")
    assert victim.read_bytes() == b"old"
    assert not (tmp_path / "created.txt").exists()
    assert Journal.pending(tmp_path / "meta") is None
