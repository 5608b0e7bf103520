"""Red team findings on the workspace (rt-ws 02, 03, 04, 06, 07): each from its reproducer."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from materialize.errors import MaterializeError, PatchFormatError
from materialize.store import Store
from materialize.workspace import gitio
from materialize.workspace.state import Workspace

from .test_edit import ATTN, patch_file, run, wfile
from .test_gitio import ENV

GEN = "models/tt/generator.py"
QUOTED = (b"Subject: fix attention\n\nAn earlier attempt patched the generator instead:\n\n"
          b"--- a/models/tt/generator.py\n+++ b/models/tt/generator.py\n@@ -1 +1 @@\n-x\n+OOPS\n\nwhich was wrong.\n")


def _one_patch(project: Path, name: str = "a", path: str = ATTN, old: str = "ID_LENGTH = 16",
               new: str = "ID_LENGTH = 20") -> None:
    run(project, "new", name, "--target", "tt-metal", "-m", name)
    run(project, "add", path)
    f = wfile(project, path)
    f.write_text(f.read_text().replace(old, new, 1))
    run(project, "refresh")


# -- 04: a description that quotes a diff ------------------------------------------------------------

@pytest.mark.parametrize("quoted", [
    QUOTED,
    b"Subject: x\n\nlike this:\n\ndiff --git a/models/tt/generator.py b/models/tt/generator.py\n"
    b"--- a/models/tt/generator.py\n+++ b/models/tt/generator.py\n@@ -1 +1 @@\n-x\n+y\n",
    b"Subject: x\n\n    --- a/models/tt/generator.py\n    +++ b/models/tt/generator.py\n    @@ -1 +1 @@\n    -x\n    +y\n",
    b"Subject: x\n\n*** a/models/tt/generator.py\n--- b/models/tt/generator.py\n***************\n*** 1 ****\n! x\n"
    b"--- 1 ----\n! y\n",
])
def test_header_set_refuses_a_description_gnu_patch_reads_as_a_diff(project: Path, tmp_path: Path, quoted) -> None:
    _one_patch(project)
    before = patch_file(project, "a").read_bytes()
    text = tmp_path / "h.txt"
    text.write_bytes(quoted)
    with pytest.raises(PatchFormatError, match=r"header a: the description's line \d+ \('.*(---|diff|\*\*\*)"):
        run(project, "header", "--set", str(text))
    assert patch_file(project, "a").read_bytes() == before
    assert not (project / "work" / ".materialize" / "header-input.txt").exists()


@pytest.mark.parametrize("prose", [
    QUOTED.replace(b"\n-", b"\n> -").replace(b"\n+", b"\n> +").replace(b"\n@", b"\n> @"),
    b"Subject: x\n\nplain words\n---\n models/tt/attention.py | 2 +-\n 1 file changed\n",
    b"Subject: x\n\n-- \nsignature\n",
])
def test_header_set_keeps_a_description_that_is_prose(project: Path, tmp_path: Path, prose) -> None:
    _one_patch(project)
    text = tmp_path / "h.txt"
    text.write_bytes(prose)
    assert run(project, "header", "--set", str(text)) == 0
    assert patch_file(project, "a").read_bytes().startswith(prose)


def test_header_e_refuses_a_quoted_diff_and_keeps_the_text(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from materialize.workspace import edit

    _one_patch(project)
    before = patch_file(project, "a").read_bytes()
    monkeypatch.setattr(edit, "open_editor", lambda files: Path(files[0]).write_bytes(QUOTED))
    with pytest.raises(MaterializeError, match="read by GNU patch as part of the diff.*kept in") as caught:
        run(project, "header", "-e")
    assert caught.value.exit_code == 2
    assert patch_file(project, "a").read_bytes() == before
    assert [p.read_bytes() for p in (project / "work" / ".materialize" / "saved").glob("*-header/a.txt")] == [QUOTED]


def test_a_quoted_diff_on_an_empty_patch_is_refused_too(project: Path, tmp_path: Path) -> None:
    run(project, "new", "a", "--target", "tt-metal")
    text = tmp_path / "h.txt"
    text.write_bytes(QUOTED)
    with pytest.raises(PatchFormatError, match="line 5"):
        run(project, "header", "--set", str(text))


def test_import_git_refuses_a_commit_message_that_quotes_a_diff(project: Path, store: Store, tmp_path: Path) -> None:
    _one_patch(project)
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    repo = git.Repo(tmp_path / "out")
    before = patch_file(project, "a").read_bytes()
    with repo.git.custom_environment(**ENV):
        repo.git.checkout("-q", "pq")
        message = repo.head.commit.message.replace("\n\n", "\n\n" + QUOTED.decode().split("\n\n", 1)[1] + "\n", 1)
        repo.git.commit("-q", "--amend", "-m", message)
    with pytest.raises(PatchFormatError, match=r"message of commit [0-9a-f]{12}: the description's line \d+"):
        gitio.import_git(ws, "tt-metal", "pq~1..HEAD", tmp_path / "out")
    assert patch_file(project, "a").read_bytes() == before


# -- 03: import-git that inserts a commit below the top ---------------------------------------------

def _two_applied_and_an_inserted_commit(project: Path, store: Store, tmp_path: Path) -> tuple[Workspace, git.Repo]:
    _one_patch(project, "a")
    _one_patch(project, "b", GEN, "TARGETS =", "TARGETS  =")
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    repo = git.Repo(tmp_path / "out")
    with repo.git.custom_environment(**ENV):
        repo.git.checkout("-q", "-b", "edited", "pq~1")
        (tmp_path / "out" / "new.txt").write_text("new\n")
        repo.git.add("new.txt")
        repo.git.commit("-q", "-m", "c: new commit")
        repo.git.cherry_pick("pq")
    return ws, repo


def test_import_git_refuses_to_insert_a_commit_below_the_top_and_names_what_to_pop(
        project: Path, store: Store, tmp_path: Path, capsys) -> None:
    ws, _repo = _two_applied_and_an_inserted_commit(project, store, tmp_path)
    series = project / "series" / "default.yaml"
    before = (series.read_bytes(), sorted((project / "patches" / "tt-metal").iterdir()))
    with pytest.raises(MaterializeError, match=r"the applied b would no longer be patch 2 .*`materialize goto a`"):
        gitio.import_git(ws, "tt-metal", "pq~2..edited", tmp_path / "out")
    assert (series.read_bytes(), sorted((project / "patches" / "tt-metal").iterdir())) == before
    capsys.readouterr()
    run(project, "applied")
    assert capsys.readouterr().out.split() == ["a", "b"]
    # popped as told, the import goes through and the stack pushes
    run(project, "goto", "a")
    ws.reload_series()
    result = gitio.import_git(ws, "tt-metal", "pq~2..edited", tmp_path / "out")
    assert len(result.created) == 1
    assert run(project, "push", "-a") == 0
    capsys.readouterr()
    run(project, "applied")
    assert capsys.readouterr().out.split()[::2] == ["a", "b"]


def test_applied_and_series_v_follow_the_record_when_the_series_changed_by_hand(project: Path, capsys) -> None:
    _one_patch(project, "a")
    _one_patch(project, "b", GEN, "TARGETS =", "TARGETS  =")
    run(project, "pop")
    series = project / "series" / "default.yaml"
    text = series.read_text()
    a = "  - patch: tt-metal/a.patch\n    target: tt-metal\n"
    assert a in text
    series.write_text(text.replace(a, "") + a)  # b, a: a hand edit while a is applied
    capsys.readouterr()
    run(project, "applied")
    out = capsys.readouterr()
    assert out.out.split() == ["a"] and "the series changed under the workspace" in out.err
    run(project, "series", "-v")
    assert capsys.readouterr().out.splitlines() == ["  b", "= a"]


# -- 06: new --after a patch above the top -----------------------------------------------------------

def test_new_after_a_patch_above_the_top_says_it_is_not_applied(project: Path, capsys) -> None:
    for n in "abc":
        run(project, "new", n, "--target", "tt-metal")
    run(project, "goto", "a")
    capsys.readouterr()
    run(project, "new", "n", "--after", "b")
    out = capsys.readouterr().out
    assert "now on top" not in out
    assert "Patch tt-metal/n.patch inserted after b, not applied; the top is a: `materialize goto n`" in out
    run(project, "top")
    assert capsys.readouterr().out.strip() == "a"
    run(project, "goto", "0")
    capsys.readouterr()
    run(project, "new", "x", "--after", "a")
    assert "inserted after a, not applied; the top is none (no patch is applied)" in capsys.readouterr().out
    run(project, "new", "y", "--after", "0", "-t", "tt-metal")  # at the top (position 0): pushed, as quilt's new
    assert capsys.readouterr().out.strip() == "Patch tt-metal/y.patch is now on top"
    run(project, "new", "z")
    assert capsys.readouterr().out.strip() == "Patch tt-metal/z.patch is now on top"


# -- 02: an unchanged round trip of a patch that moved a file ----------------------------------------

def test_an_unchanged_export_of_a_moved_file_imports_byte_identical(project: Path, store: Store,
                                                                     tmp_path: Path) -> None:
    run(project, "new", "a", "--target", "tt-metal", "-m", "move the generator")
    run(project, "add", GEN, "models/tt/gen9.py")
    wfile(project, GEN).rename(wfile(project, "models/tt/gen9.py"))
    run(project, "refresh")
    before = patch_file(project, "a").read_bytes()
    assert b"deleted file mode" in before and b"new file mode" in before and b"rename from" not in before
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    result = gitio.import_git(ws, "tt-metal", "pq~1..pq", tmp_path / "out")
    assert result.unchanged == ["a"] and not result.updated
    assert patch_file(project, "a").read_bytes() == before
    assert run(project, "refresh") == 0  # not "changed since it was pushed"
    assert patch_file(project, "a").read_bytes() == before


# -- 07: recover --rollback of an interrupted `header --set` -----------------------------------------

def test_rollback_of_an_interrupted_header_set_keeps_the_text_under_saved_and_names_it(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from materialize.workspace.journal import Journal

    _one_patch(project)
    before = patch_file(project, "a").read_bytes()
    text = tmp_path / "h.txt"
    text.write_bytes(b"Subject: new words\n")
    real = Journal.write

    def killed(self, path, data, **kw):
        real(self, path, data, **kw)
        raise KeyboardInterrupt  # as a kill -9 after the patch file was written: the journal stays

    monkeypatch.setattr(Journal, "write", killed)
    with pytest.raises(KeyboardInterrupt):
        run(project, "header", "--set", str(text))
    monkeypatch.setattr(Journal, "write", real)
    given = project / "work" / ".materialize" / "header-input.txt"
    assert given.exists()
    capsys.readouterr()
    assert run(project, "recover", "--rollback") == 0
    err = capsys.readouterr().err
    assert not given.exists()
    assert patch_file(project, "a").read_bytes() == before
    saved = list((project / "work" / ".materialize" / "saved").glob("*-recover/header-input.txt"))
    assert [p.read_bytes() for p in saved] == [b"Subject: new words\n\n"] and str(saved[0]) in err


def test_new_refuses_a_subject_of_several_lines_that_quotes_a_diff(project: Path) -> None:
    with pytest.raises(PatchFormatError, match=r"new a: the description's line \d+ \('--- a/models"):
        run(project, "new", "a", "--target", "tt-metal", "-m", QUOTED.decode().split("\n", 1)[1])
    assert not patch_file(project, "a").exists()


# -- rt-ws 08: "the top" after a hand edit of the series -----------------------------------------------

def _top_dropped_by_hand(project: Path) -> tuple[Path, bytes]:
    """a, b, c; a and b applied, b on top; b's entry then deleted from the series by hand, so the series'
    second entry (what `position - 1` indexes) is c, a patch that is not applied."""
    _one_patch(project, "a")
    _one_patch(project, "b", GEN, "TARGETS =", "TARGETS  =")
    _one_patch(project, "c", GEN, "import ", "import  ")
    run(project, "pop")
    series = project / "series" / "default.yaml"
    b = "  - patch: tt-metal/b.patch\n    target: tt-metal\n"
    assert b in series.read_text()
    series.write_text(series.read_text().replace(b, ""))
    return series, patch_file(project, "c").read_bytes()


@pytest.mark.parametrize("args", [["header", "--set", "-"], ["header"], ["diff"]])
def test_header_and_diff_refuse_the_top_when_the_series_changed_by_hand(
        project: Path, args: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The record says b is the top; every command that writes "the top" refuses (refresh, rename...), and so
    must `header --set` (it rewrote c's description, a patch not applied and not named) and the readers that
    would show c as the top's."""
    import io

    series, c = _top_dropped_by_hand(project)
    before = series.read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"Subject: words for the top\n")))
    capsys.readouterr()
    with pytest.raises(MaterializeError, match="the series changed under the workspace"):
        run(project, *args)
    assert patch_file(project, "c").read_bytes() == c and series.read_bytes() == before
    assert b"Subject: c" not in capsys.readouterr().out.encode()


def test_header_of_a_named_patch_still_works_when_the_series_changed_by_hand(project: Path, capsys) -> None:
    _top_dropped_by_hand(project)
    capsys.readouterr()
    assert run(project, "header", "c") == 0
    assert "Subject: c" in capsys.readouterr().out


# -- rt-ws 09: a series entry's strip / reverse changed by hand while the patch is applied ----------------

@pytest.mark.parametrize("field", ["    strip: 0\n", "    max_fuzz: 0\n    strip: 2\n"])
@pytest.mark.parametrize("args", [["refresh"], ["refresh", "--force"], ["diff"]])
def test_refresh_refuses_a_top_whose_strip_changed_since_it_was_pushed(project: Path, field: str, args: list[str],
                                                                       capsys) -> None:
    """`strip: 0` added by hand to the applied top: refresh read the patch's files as `a/models/...` (in no
    tree), wrote the section as `new file mode None` with no hunk, and the patch's change was gone (no copy).
    work/ holds the patch applied with the strip it was pushed with, so refresh cannot regenerate it."""
    _one_patch(project, "a")
    before = patch_file(project, "a").read_bytes()
    series = project / "series" / "default.yaml"
    entry = "  - patch: tt-metal/a.patch\n    target: tt-metal\n"
    series.write_text(series.read_text().replace(entry, entry + field))
    with pytest.raises(MaterializeError, match=r"a was pushed with strip 1.*now says strip [02].*Pop it"):
        run(project, *args)
    assert patch_file(project, "a").read_bytes() == before
    # the way out the message gives: pop, then push applies it as the entry now says (here: it cannot)
    assert run(project, "pop") == 0
    assert patch_file(project, "a").read_bytes() == before


def test_refresh_refuses_a_top_now_reversed_by_hand(project: Path) -> None:
    """`reverse: true` added by hand to the applied top: refresh regenerated it forward from work/ (which holds
    it applied forward) and dropped the new `reverse: true` from the series: the hand edit undone silently."""
    _one_patch(project, "a")
    series = project / "series" / "default.yaml"
    entry = "  - patch: tt-metal/a.patch\n    target: tt-metal\n"
    series.write_text(series.read_text().replace(entry, entry + "    reverse: true\n"))
    wfile(project).write_text(wfile(project).read_text() + "# more\n")
    edited, before = series.read_bytes(), patch_file(project, "a").read_bytes()
    with pytest.raises(MaterializeError, match=r"a was pushed with reverse false.*now says reverse true"):
        run(project, "refresh")
    assert patch_file(project, "a").read_bytes() == before and series.read_bytes() == edited
    assert run(project, "pop", "-f") == 0  # the way out: pop (it leaves), then push applies it reversed
    assert series.read_bytes() == edited
