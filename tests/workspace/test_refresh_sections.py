"""Refresh of patches GNU patch reads but git does not write: ``diff -Naur`` output (a ``diff ...``
command line before each file, ``Only in``/``Binary files`` lines and blank lines between files), and
file/symlink changes. The oracle is GNU patch (``patch -p1``) and quilt (``quilt push``): the refreshed
patch must turn upstream into exactly the work/ tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from materialize.cli import main
from materialize.workspace.diffgen import FileChange, regenerate
from materialize.workspace.patchtext import parse, touched

SERIES = """\
version: 1
patches_dir: ../patches
defaults: {strip: 1, max_fuzz: 0}
targets:
  t:
    pin: {kind: path, path: ../up}
patches: %s
"""

NAUR = (
    b"Three files, as diff -Naur writes them.\n\n"
    b"diff -Naur a/f1 b/f1\n--- a/f1\t2026-01-01 00:00:00.000000000 +0000\n+++ b/f1\t2026-01-02 00:00:00.000000000 +0000\n"
    b"@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
    b"Only in b: newdir\n"
    b"Binary files a/img.bin and b/img.bin differ\n"
    b"diff -Naur a/f2 b/f2\n--- a/f2\n+++ b/f2\n@@ -1 +1 @@\n-x\n+X\n"
    b"\n"
    b"diff -Naur a/f3 b/f3\n--- a/f3\n+++ b/f3\n@@ -1,3 +1,3 @@\n-q\n+Q\n r\n s\n"
)


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry below ``root``: ("link", target) or ("file"/"exec", bytes); quilt's .pc and patches
    left out."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".pc", "patches")]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            else:
                out[rel] = ("exec" if os.access(p, os.X_OK) else "file", p.read_bytes())
    return out


def expected_tree(up: Path, patch: bytes, work: Path) -> dict[str, tuple[str, bytes | str]]:
    """The sparse work/ over upstream: a file the patch touches is as in work/ (absent: deleted)."""
    want = snapshot(up)
    have = snapshot(work)
    for src, dest in touched(patch):
        for path in (src, dest):
            want.pop(path, None)
            if path in have:
                want[path] = have[path]
    return want


def assert_gnu_and_quilt_give_work(tmp: Path, up: Path, patch: bytes, work: Path) -> None:
    """``patch -p1`` and ``quilt push`` of ``patch`` on a copy of ``up`` both give exactly ``work``."""
    want = expected_tree(up, patch, work)
    gnu = tmp / "oracle-gnu"
    shutil.rmtree(gnu, ignore_errors=True)
    shutil.copytree(up, gnu, symlinks=True)
    proc = subprocess.run(["patch", "-p1", "-F0", "-s", "-d", str(gnu)], input=patch, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rej in list(gnu.rglob("*.orig")):
        rej.unlink()
    assert snapshot(gnu) == want
    q = tmp / "oracle-quilt"
    shutil.rmtree(q, ignore_errors=True)
    shutil.copytree(up, q, symlinks=True)
    (q / "patches").mkdir()
    (q / "patches" / "p.patch").write_bytes(patch)
    (q / "patches" / "series").write_text("p.patch\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUILT")}
    env["HOME"] = str(tmp)  # no ~/.quiltrc
    proc = subprocess.run(["quilt", "push", "-a", "-q"], cwd=q, env=env, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert snapshot(q) == want


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MATERIALIZE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Tester")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ada@example.com")
    root = tmp_path / "proj"
    (root / "up").mkdir(parents=True)
    (root / "series").mkdir()
    (root / "patches" / "t").mkdir(parents=True)
    return root


def series(root: Path, patches: str = "[]") -> list[str]:
    (root / "series" / "default.yaml").write_text(SERIES % patches)
    return ["--series", str(root / "series" / "default.yaml")]


def naur_workspace(root: Path) -> list[str]:
    up = root / "up"
    (up / "f1").write_bytes(b"a\nb\n")
    (up / "f2").write_bytes(b"x\n")
    (up / "f3").write_bytes(b"q\nr\ns\n")
    (root / "patches" / "t" / "p0.patch").write_bytes(NAUR)
    args = series(root, "[{patch: t/p0.patch, target: t}]")
    assert main(["push", "-a", *args]) == 0
    return args


# -- 1. file sections after garbage lines ---------------------------------------------------------------


def test_diff_naur_sections_after_garbage_lines_are_all_parsed_and_render_byte_for_byte() -> None:
    parsed = parse(NAUR)
    assert parsed.render() == NAUR
    assert [s.path() for s in parsed.sections] == ["f1", "f2", "f3"]
    assert parsed.header == b"Three files, as diff -Naur writes them.\n\n"  # the diff line is the file's
    assert parsed.trailer == b""
    assert touched(NAUR) == [("f1", "f1"), ("f2", "f2"), ("f3", "f3")]


def test_garbage_after_the_last_section_stays_the_trailer() -> None:
    data = NAUR + b"Only in b: zzz\n-- \n2.40.1\n\n"
    parsed = parse(data)
    assert parsed.render() == data
    assert [s.path() for s in parsed.sections] == ["f1", "f2", "f3"]
    assert parsed.trailer == b"Only in b: zzz\n-- \n2.40.1\n\n"


def test_a_git_section_after_garbage_lines_is_a_section_too() -> None:
    data = (b"diff --git a/f1 b/f1\n--- a/f1\n+++ b/f1\n@@ -1 +1 @@\n-a\n+A\n\n"
            b"diff --git a/f2 b/f2\nold mode 100644\nnew mode 100755\n")
    parsed = parse(data)
    assert parsed.render() == data
    assert [s.path() for s in parsed.sections] == ["f1", "f2"]


def test_refresh_records_an_edit_to_a_file_after_the_first_section_of_a_diff_naur_patch(
        ws: Path, tmp_path: Path, capsys) -> None:
    args = naur_workspace(ws)
    work = ws / "work" / "t"
    (work / "f3").write_bytes(b"Q\nr\nEDITED\n")
    capsys.readouterr()
    assert main(["refresh", *args]) == 0
    assert "unchanged" not in capsys.readouterr().out
    new = (ws / "patches" / "t" / "p0.patch").read_bytes()
    assert b"+EDITED\n" in new
    # everything but f3's hunk is byte-identical: the diff lines, Only in, Binary files, the blank line
    assert new.startswith(NAUR[: NAUR.index(b"@@ -1,3 +1,3 @@\n-q")])
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", new, work)
    # and an edit to the middle file, with a new file added to the patch
    assert main(["add", "f4", *args]) == 0
    (work / "f4").write_bytes(b"new\n")
    (work / "f2").write_bytes(b"X2\n")
    assert main(["refresh", *args]) == 0
    newer = (ws / "patches" / "t" / "p0.patch").read_bytes()
    assert b"Only in b: newdir\nBinary files a/img.bin and b/img.bin differ\ndiff -Naur a/f2 b/f2\n" in newer
    assert b"\ndiff -Naur a/f3 b/f3\n" in newer and b"+X2\n" in newer and b"+new\n" in newer
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", newer, work)
    assert main(["pop", *args]) == 0
    assert main(["push", *args]) == 0
    assert snapshot(work) == {"f1": ("file", b"a\nB\n"), "f2": ("file", b"X2\n"), "f3": ("file", b"Q\nr\nEDITED\n"),
                              "f4": ("file", b"new\n")}


def test_reverting_a_later_file_of_a_diff_naur_patch_drops_its_section(ws: Path, tmp_path: Path) -> None:
    args = naur_workspace(ws)
    work = ws / "work" / "t"
    (work / "f2").write_bytes(b"x\n")
    assert main(["refresh", *args]) == 0
    new = (ws / "patches" / "t" / "p0.patch").read_bytes()
    assert b"a/f2" not in new and b"diff -Naur a/f3 b/f3\n" in new
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", new, work)


def test_diff_shows_every_file_of_a_diff_naur_patch(ws: Path, capsys) -> None:
    args = naur_workspace(ws)
    (ws / "work" / "t" / "f3").write_bytes(b"Q\nr\nEDITED\n")
    capsys.readouterr()
    assert main(["diff", *args]) == 0
    out = capsys.readouterr().out
    assert "f1" in out and "f2" in out and "+EDITED" in out


# -- 2. and 3. symlinks ----------------------------------------------------------------------------------


def one_patch(ws: Path, setup) -> tuple[list[str], Path]:
    up = ws / "up"
    (up / "f").write_bytes(b"a\n")
    (up / "g").write_bytes(b"b\n")
    setup(up)
    args = series(ws)
    assert main(["new", "p1", "-t", "t", *args]) == 0
    return args, ws / "work" / "t"


def test_refresh_writes_a_file_turned_symlink_as_a_delete_and_a_create(ws: Path, tmp_path: Path) -> None:
    args, work = one_patch(ws, lambda up: None)
    assert main(["add", "g", *args]) == 0
    (work / "g").unlink()
    (work / "g").symlink_to("f")
    assert main(["refresh", *args]) == 0
    new = (ws / "patches" / "t" / "p1.patch").read_bytes()
    assert b"deleted file mode 100644\n" in new and b"new file mode 120000\n" in new
    assert b"old mode" not in new
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", new, work)
    assert main(["pop", *args]) == 0 and main(["push", *args]) == 0
    assert (work / "g").is_symlink() and os.readlink(work / "g") == "f"
    assert main(["refresh", *args]) == 0  # and again: nothing moves
    assert (ws / "patches" / "t" / "p1.patch").read_bytes() == new


def test_refresh_writes_a_symlink_turned_file_as_a_delete_and_a_create(ws: Path, tmp_path: Path) -> None:
    args, work = one_patch(ws, lambda up: (up / "l").symlink_to("f"))
    assert main(["add", "l", *args]) == 0
    (work / "l").unlink()
    (work / "l").write_bytes(b"now a file\n")
    assert main(["refresh", *args]) == 0
    new = (ws / "patches" / "t" / "p1.patch").read_bytes()
    assert b"deleted file mode 120000\n" in new and b"new file mode 100644\n" in new
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", new, work)
    assert main(["pop", *args]) == 0 and main(["push", *args]) == 0
    assert not (work / "l").is_symlink() and (work / "l").read_bytes() == b"now a file\n"


def test_refresh_records_a_symlink_retarget_with_gits_index_line(ws: Path, tmp_path: Path) -> None:
    args, work = one_patch(ws, lambda up: (up / "l").symlink_to("f"))
    assert main(["add", "l", *args]) == 0
    (work / "l").unlink()
    (work / "l").symlink_to("g")
    assert main(["refresh", *args]) == 0
    new = (ws / "patches" / "t" / "p1.patch").read_bytes()
    lines = new.splitlines()
    index = next(line for line in lines if line.startswith(b"index "))
    assert index.endswith(b" 120000")
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", new, work)
    assert main(["pop", *args]) == 0 and main(["push", *args]) == 0
    assert os.readlink(work / "l") == "g"
    (work / "l").unlink()
    (work / "l").symlink_to("missing")
    assert main(["refresh", *args]) == 0
    again = (ws / "patches" / "t" / "p1.patch").read_bytes()
    assert b"+missing\n" in again
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", again, work)


def test_a_plain_section_of_a_symlink_gets_a_git_header_that_says_so(tmp_path: Path) -> None:
    """A ``--- a/l`` / ``+++ b/l`` section (no mode: a regular file to GNU patch) of a link whose target
    changed again is rewritten with git's header (``index ... 120000``); its garbage lead stays."""
    old = parse(b"desc\n\nOnly in b: d\ndiff -u a/l b/l\n--- a/l\n+++ b/l\n@@ -1 +1 @@\n-f\n\\ No newline at end of file\n"
                b"+g\n\\ No newline at end of file\n")
    new = regenerate(old, [FileChange("l", b"f", b"h", prev=b"g", old_mode="120000", new_mode="120000")])
    assert new.startswith(b"desc\n\nOnly in b: d\ndiff --git a/l b/l\nindex ")
    assert b" 120000\n--- a/l\n+++ b/l\n" in new and b"+h\n" in new
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "l").symlink_to("f")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "l").symlink_to("h")
    assert_gnu_and_quilt_give_work(tmp_path, tmp_path / "up", new, tmp_path / "work")


def test_a_file_of_a_diff_naur_patch_turned_symlink_keeps_the_garbage_before_it(tmp_path: Path) -> None:
    old = parse(NAUR)
    changes = [FileChange("f1", b"a\nb\n", b"a\nB\n", prev=b"a\nB\n"),
               FileChange("f2", b"x\n", b"f1", prev=b"X\n", new_mode="120000"),
               FileChange("f3", b"q\nr\ns\n", b"Q\nr\ns\n", prev=b"Q\nr\ns\n")]
    new = regenerate(old, changes)
    assert new.startswith(NAUR[: NAUR.index(b"diff -Naur a/f2")])
    assert (b"Binary files a/img.bin and b/img.bin differ\ndiff --git a/f2 b/f2\ndeleted file mode 100644\n" in new)
    assert b"diff --git a/f2 b/f2\nnew file mode 120000\n" in new
    assert new.endswith(NAUR[NAUR.index(b"\ndiff -Naur a/f3"):])
    up, work = tmp_path / "up", tmp_path / "work"
    for root in (up, work):
        root.mkdir()
    (up / "f1").write_bytes(b"a\nb\n")
    (up / "f2").write_bytes(b"x\n")
    (up / "f3").write_bytes(b"q\nr\ns\n")
    (work / "f1").write_bytes(b"a\nB\n")
    (work / "f2").symlink_to("f1")
    (work / "f3").write_bytes(b"Q\nr\ns\n")
    assert_gnu_and_quilt_give_work(tmp_path, up, new, work)
    again = regenerate(parse(new), [changes[0], changes[1]._replace(prev=b"f1"), changes[2]])
    assert again == new


def test_a_new_file_made_executable_after_its_first_refresh(ws: Path, tmp_path: Path) -> None:
    """The kept header still said `new file mode 100644`, so refresh's own check refused ("would not
    reproduce ... please report"); found by a workspace fuzzer once diff -Naur sections were read."""
    args, work = one_patch(ws, lambda up: None)
    assert main(["add", "n.txt", *args]) == 0  # quilt's habit: add, then create
    work.mkdir(parents=True, exist_ok=True)
    (work / "n.txt").write_bytes(b"new\n")
    assert main(["refresh", *args]) == 0
    assert b"new file mode 100644\n" in (ws / "patches" / "t" / "p1.patch").read_bytes()
    (work / "n.txt").chmod(0o755)
    (work / "n.txt").write_bytes(b"new\nmore\n")
    assert main(["refresh", *args]) == 0
    new = (ws / "patches" / "t" / "p1.patch").read_bytes()
    assert b"new file mode 100755\n" in new and b"new file mode 100644\n" not in new
    assert_gnu_and_quilt_give_work(tmp_path, ws / "up", new, work)


# rt-ws 10: a plain section whose two names differ (`diff -u x x.new`, `diff -u x.orig x`): GNU patches the
# one that exists, and so must refresh; it wrote `x.new` as created and `x` as deleted (the whole file), or
# refused with a creation of `x` that does not apply.
@pytest.mark.parametrize("names", [(b"f1", b"f1.new"), (b"f1.orig", b"f1"), (b"f1~", b"f1")])
def test_refresh_of_a_plain_section_patches_the_file_gnu_chose(ws: Path, tmp_path: Path, names) -> None:
    up = ws / "up"
    (up / "f1").write_bytes(b"".join(b"line %d\n" % i for i in range(20)))
    old, new = names
    patch = (b"--- " + old + b"\t2026-01-01 00:00:00\n+++ " + new + b"\t2026-01-02 00:00:00\n"
             b"@@ -2,3 +2,3 @@\n line 1\n-line 2\n+line two\n line 3\n")
    (ws / "patches" / "t" / "p0.patch").write_bytes(patch)
    args = series(ws, "[{patch: t/p0.patch, target: t, strip: 0}]")
    assert main(["push", "-a", *args]) == 0
    f1 = ws / "work" / "t" / "f1"
    f1.write_bytes(f1.read_bytes().replace(b"line 15\n", b"line fifteen\n"))
    assert main(["refresh", *args]) == 0
    refreshed = (ws / "patches" / "t" / "p0.patch").read_bytes()
    assert b"/dev/null" not in refreshed and b"deleted file" not in refreshed
    assert refreshed.startswith(patch[: patch.index(b"@@")])  # the section's header lines are kept
    gnu = tmp_path / "gnu"
    shutil.copytree(up, gnu)
    proc = subprocess.run(["patch", "-p0", "-F0", "-s", "-d", str(gnu)], input=refreshed, capture_output=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in gnu.iterdir()) == ["f1"] and (gnu / "f1").read_bytes() == f1.read_bytes()
    assert main(["pop", *args]) == 0 and main(["push", *args]) == 0
    assert f1.read_bytes().count(b"fifteen") == 1 and b"line two" in f1.read_bytes()
