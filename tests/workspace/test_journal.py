"""Interrupted operations: every command refuses until `recover` rolls back (byte-exact) or resumes."""

from __future__ import annotations

from pathlib import Path

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


def restored(project: Path) -> dict[str, bytes]:
    """``snapshot`` without saved/: `recover --rollback` keeps there the files it writes over."""
    return {k: v for k, v in snapshot(project).items() if not k.startswith("work/.materialize/saved/")}


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
    with pytest.raises(KeyboardInterrupt):
        run(project, "pop", "-a")
    crash.undo()
    assert snapshot(project) != before  # it really was half-way
    with pytest.raises(MaterializeError, match="interrupted `materialize pop -a`"):
        run(project, "push")
    assert run(project, "recover") == 1
    assert run(project, "recover", "--rollback") == 0
    assert restored(project) == before
    capsys.readouterr()
    run(project, "top")
    assert capsys.readouterr().out.strip() == "0002-b"


def test_interrupted_pop_resumes(project: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    two_patches(project)
    crash = crash_after(pytest.MonkeyPatch(), 1)
    with pytest.raises(KeyboardInterrupt):
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
    with pytest.raises(KeyboardInterrupt):
        run(project, "refresh")
    crash.undo()
    run(project, "recover", "--rollback")
    assert restored(project) == before
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


def _cli(project: Path, *args: str, die_at_write: int | None = None, fail_at_write: int | None = None):
    """``materialize ARGS`` in its own process; optionally killed (os._exit, as kill -9: no finally, no
    except) or failing with ENOSPC inside its N-th journaled file write, after the temporary file is
    written and before its rename. Only renames inside the project are counted: the cache's (YAML
    parses, path pins' stamps) are rewritten or not by mtime, which made the N-th rename a different one."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import errno, os, sys
        from materialize.workspace import journal
        real, count = os.replace, [0]
        def replace(src, dst):
            if not os.path.abspath(dst).startswith(os.getcwd() + os.sep):
                return real(src, dst)  # the cache's (YAML parses, pin stamps): written or not by mtime
            count[0] += 1
            if count[0] == {die_at_write!r}:
                os._exit(137)
            if count[0] == {fail_at_write!r}:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
            return real(src, dst)
        journal.os.replace = replace
        from materialize.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=project)


def _leftovers(project: Path) -> list[Path]:
    return [p for p in project.rglob(".materialize-tmp-*")]


@pytest.mark.parametrize("at", [3, 6])
def test_a_kill_inside_a_write_leaves_no_temporary_file_after_recover(project: Path, at: int) -> None:
    """kill -9 between writing a file's temporary copy and its rename left `.attention.py.XXXX` in work/:
    after `recover --rollback` it was a file of no patch and `push` refused (exit 1) until removed by hand."""
    two_patches(project)
    run(project, "pop", "-a")
    before = snapshot(project)
    died = _cli(project, "push", "-a", die_at_write=at)
    assert died.returncode == 137
    assert _leftovers(project)  # the kill left one
    assert _cli(project, "push").returncode == 1  # interrupted: refused until recovered
    assert _cli(project, "recover", "--rollback").returncode == 0
    assert _leftovers(project) == []
    assert restored(project) == before
    assert _cli(project, "push", "-a").returncode == 0


def test_a_full_disk_inside_an_operation_is_one_line_and_undone(project: Path) -> None:
    two_patches(project)
    run(project, "pop", "-a")
    before = snapshot(project)
    proc = _cli(project, "push", "-a", fail_at_write=4)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("materialize: error: materialize push: ") and "No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert snapshot(project) == before and _leftovers(project) == []
    assert not (project / "work" / ".materialize" / "journal").exists()  # nothing to recover: it was undone


def test_a_file_name_as_long_as_the_filesystem_allows_is_pushed(project: Path) -> None:
    """The temporary name was '.' + the file's name + '.' + 8 characters: a 250-byte name (which `apply`
    publishes) made `push` die with ENAMETOOLONG and a journal left behind."""
    long = "n" * 250
    (project / "upstream" / "tt-metal" / long).write_text("a\n")
    (project / "patches" / "tt-metal" / "long.patch").write_text(f"--- a/{long}\n+++ b/{long}\n@@ -1 +1 @@\n-a\n+b\n")
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("patches: []", "patches:\n  - {patch: tt-metal/long.patch, target: tt-metal}"))
    proc = _cli(project, "push")
    assert proc.returncode == 0, proc.stderr
    assert (project / "work" / "tt-metal" / long).read_text() == "b\n"


def test_recover_rollback_keeps_what_was_typed_after_the_crash(project: Path, capsys) -> None:
    """A command killed half-way, and the user, not noticing, goes on editing a file it had recorded:
    `recover --rollback` put the recorded bytes back over the new edit, without a copy."""
    two_patches(project)
    crash = crash_after(pytest.MonkeyPatch(), 2)
    with pytest.raises(KeyboardInterrupt):
        run(project, "pop", "-a")
    crash.undo()
    f = wfile(project)
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("# typed after the crash\n")
    capsys.readouterr()
    assert run(project, "recover", "--rollback") == 0
    out = capsys.readouterr()
    assert f.read_text() != "# typed after the crash\n"  # rolled back, as asked
    kept = [p for p in (project / "work" / ".materialize" / "saved").rglob("attention.py")
            if p.read_text() == "# typed after the crash\n"]
    assert kept and str(kept[0].parents[4]) in out.out + out.err


def test_recover_rollback_over_a_file_made_a_directory_after_the_crash(project: Path, capsys) -> None:
    """A command killed half-way, and a file it had recorded is now a directory holding a typed file (the
    user made it one): `recover --rollback` died on a traceback (IsADirectoryError) at that file, half of
    the files restored, and so did every rerun. Now the directory's files are kept under saved/, as any
    file typed since is, and the file as it was comes back."""
    two_patches(project)
    before = snapshot(project)
    crash = crash_after(pytest.MonkeyPatch(), 2)
    with pytest.raises(KeyboardInterrupt):
        run(project, "pop", "-a")
    crash.undo()
    f = wfile(project)
    if f.exists():
        f.unlink()
    f.mkdir(parents=True)
    (f / "typed.py").write_text("# typed after the crash\n")
    capsys.readouterr()
    assert run(project, "recover", "--rollback") == 0
    out = capsys.readouterr()
    assert restored(project) == before
    kept = list((project / "work" / ".materialize" / "saved").rglob("attention.py/typed.py"))
    assert kept and kept[0].read_text() == "# typed after the crash\n"
    assert str(kept[0].parents[5]) in out.out + out.err
