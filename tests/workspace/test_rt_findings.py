"""Red team findings on the workspace (ws-redteam): each test is its reproducer, failing before the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.errors import MaterializeError

from .test_edit import ATTN, patch_file, run, wfile


def _refreshed(project: Path, name: str, old: str, new: str, path: str = ATTN) -> None:
    run(project, "new", name, "--target", "tt-metal", "-m", name)
    run(project, "add", path)
    f = wfile(project, path)
    f.write_text(f.read_text().replace(old, new, 1))
    run(project, "refresh")


# -- refresh of a lower patch while the top added one of its files ------------------------------------

def test_refresh_of_a_lower_patch_refuses_a_file_the_top_added_but_has_not_refreshed(project: Path) -> None:
    """quilt: 'More recent patches modify files in patch A' (its .pc/B/ holds the added file). We took
    B's unrefreshed edit into A: B's change silently became A's."""
    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    run(project, "new", "b", "--target", "tt-metal", "-m", "b")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# b's edit\n")
    before = patch_file(project, "a").read_bytes()
    with pytest.raises(MaterializeError, match="later applied patch b also changes"):
        run(project, "refresh", "a")
    assert patch_file(project, "a").read_bytes() == before
    run(project, "refresh")
    assert b"+# b's edit" in patch_file(project, "b").read_bytes()


# -- files added to a patch stay its own when another patch goes on top ------------------------------

def test_a_file_added_to_the_top_stays_its_own_under_a_new_patch(project: Path) -> None:
    """quilt: `add x`, edit x, `new B`, then `refresh A` (or pop, refresh) records x in A (.pc/A/ keeps it).
    `new` forgot what had been added to A: `refresh a` left x out, pop refused naming x as a change of no
    patch, and the message's way out (`add`) made A's edit B's. (Our pop still refuses a lower patch's
    unrefreshed edit, as documented, now naming the patch.)"""
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1))
    run(project, "new", "b", "-m", "b")
    with pytest.raises(MaterializeError, match=r"unrefreshed, patch a\)"):
        run(project, "pop")
    assert run(project, "refresh", "a") == 0
    assert b"+ID_LENGTH = 20" in patch_file(project, "a").read_bytes()
    assert run(project, "pop") == 0
    assert run(project, "refresh") == 0
    assert b"+ID_LENGTH = 20" in patch_file(project, "a").read_bytes()
    assert b"ID_LENGTH" not in patch_file(project, "b").read_bytes()


def test_a_file_added_and_not_yet_edited_stays_with_its_patch_across_a_push_and_pop(project: Path) -> None:
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    run(project, "new", "b", "-m", "b")
    run(project, "add", "models/tt/generator.py")
    assert run(project, "pop") == 0
    f = wfile(project)
    assert f.exists()
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1))
    assert run(project, "refresh") == 0
    assert b"+ID_LENGTH = 20" in patch_file(project, "a").read_bytes()
    assert run(project, "push") == 0  # b: its added file was never refreshed, so nothing of it is kept
    assert not wfile(project, "models/tt/generator.py").exists()


# -- fold over a lower patch's unrefreshed edit -------------------------------------------------------

def test_fold_says_when_it_takes_a_lower_patchs_unrefreshed_edit_into_the_top(project: Path, tmp_path: Path,
                                                                              capsys) -> None:
    """quilt's fold backs the file up as it is, so a lower patch's unrefreshed edit stays that patch's;
    ours applies the diff over the disk copy and adds the file to the top, whose refresh takes the edit.
    `add` and `edit` say so (42d9230); fold said nothing."""
    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    f = wfile(project)
    f.write_text(f.read_text() + "# a's unrefreshed edit\n")
    run(project, "new", "b", "-m", "b")
    lines = f.read_text().splitlines(keepends=True)
    import difflib

    diff = "".join(difflib.unified_diff(lines, ["# folded\n", *lines], f"a/{ATTN}", f"b/{ATTN}"))
    (tmp_path / "fold.diff").write_text(diff)
    capsys.readouterr()
    assert run(project, "fold", str(tmp_path / "fold.diff")) == 0
    err = capsys.readouterr().err
    assert f"warning: {ATTN} holds changes not refreshed into a; they now belong to b" in err
    assert "quilt's fold" in err


# -- a description edited by hand in the patch file ---------------------------------------------------

def test_refresh_keeps_a_description_edited_by_hand_in_the_applied_top(project: Path) -> None:
    """quilt refreshes over a description fixed in the patch file by hand and keeps it. We refused, saying
    refresh would overwrite the change (it keeps the header) and pointing at pop, which the unrefreshed
    edit blocks: --force was the only way on."""
    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    p = patch_file(project, "a")
    p.write_bytes(p.read_bytes().replace(b"Subject: a\n", b"Subject: a, described by hand\n", 1))
    f = wfile(project)
    f.write_text(f.read_text() + "# more\n")
    assert run(project, "refresh") == 0
    data = p.read_bytes()
    assert b"Subject: a, described by hand\n" in data and b"+# more" in data and b"+ID_LENGTH = 20" in data
    assert not (project / "work" / ".materialize" / "saved").exists()


def test_refresh_of_the_top_runs_over_a_lower_patchs_description_edited_by_hand(project: Path) -> None:
    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    _refreshed(project, "b", "import ", "import  ", path="models/tt/generator.py")
    p = patch_file(project, "a")
    p.write_bytes(p.read_bytes().replace(b"Subject: a\n", b"Subject: a, described by hand\n", 1))
    g = wfile(project, "models/tt/generator.py")
    g.write_text(g.read_text() + "# more\n")
    assert run(project, "refresh") == 0
    assert b"+# more" in patch_file(project, "b").read_bytes()
    assert b"Subject: a, described by hand\n" in p.read_bytes()


def test_refresh_still_refuses_a_hand_edit_of_the_diff(project: Path) -> None:
    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    p = patch_file(project, "a")
    p.write_bytes(p.read_bytes().replace(b"+ID_LENGTH = 20", b"+ID_LENGTH = 24", 1))
    before = p.read_bytes()
    f = wfile(project)
    f.write_text(f.read_text() + "# more\n")
    with pytest.raises(MaterializeError, match="was changed since it was pushed"):
        run(project, "refresh")
    assert p.read_bytes() == before


def test_rebase_continue_keeps_a_description_edited_by_hand_while_stopped(project: Path) -> None:
    """The stopped patch's file edited by hand made --continue refuse ('writes it again ... over that
    change'), also when only its description was edited, which --continue keeps (it regenerates below
    the file's header): git lets the message be changed at that point."""
    from .test_hand_edit_sweep import stopped

    stopped(project)
    p = patch_file(project, "0002-targets")
    data = p.read_bytes()
    assert data.startswith(b"From: ")
    p.write_bytes(b"X-Note: described by hand during the rebase\n" + data)
    assert run(project, "rebase", "--continue") == 0
    assert p.read_bytes().startswith(b"X-Note: described by hand during the rebase\nFrom: ")


# -- a new file in a folder the sparse work/ does not hold yet ---------------------------------------

def test_add_of_a_new_file_makes_its_folder_when_the_tree_has_it(project: Path) -> None:
    """quilt's tree is whole, so `quilt edit src/new.py` saves into the existing src/; work/ is sparse and
    held no models/tt/ before a file of it was added: the editor could not save the new file (exit 1, the
    typed text only in its buffer). A folder the tree does not have is not made, as in quilt."""
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    assert not (project / "work" / "tt-metal" / "models").exists()
    run(project, "add", "models/tt/fresh.py", "nowhere/new.py")
    assert (project / "work" / "tt-metal" / "models" / "tt").is_dir()
    assert not (project / "work" / "tt-metal" / "nowhere").exists()
    wfile(project, "models/tt/fresh.py").write_text("fresh = 1\n")
    assert run(project, "refresh") == 0
    assert b"+fresh = 1" in patch_file(project, "a").read_bytes()
    assert run(project, "pop") == 0
    assert not (project / "work" / "tt-metal" / "models").exists()


def test_refresh_names_the_patch_whose_unrefreshed_edit_it_leaves_out(project: Path, capsys) -> None:
    """refresh of the top listed a lower patch's unrefreshed edit as 'belonging to other patches' and
    offered `add`, which makes it the top's; quilt leaves it to that patch, whose refresh records it."""
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# a's\n")
    run(project, "new", "b", "-m", "b")
    capsys.readouterr()
    run(project, "refresh")
    assert f"{ATTN}  (patch a's: `materialize refresh a` records it there)" in capsys.readouterr().err


# -- a new patch over a force-pushed, unrefreshed top ----------------------------------------------

def test_new_refuses_while_the_top_was_force_pushed_and_not_refreshed(project: Path) -> None:
    """`new` over a top that `push -f` left half applied (its hunks in .rej) made that patch one below the
    top that does not apply: pop, push, refresh of the new patch and `refresh` of the forced one then all
    failed on it ('does not apply'), and only `goto 0 --force` got out. Refused first, naming refresh."""
    from materialize.cli import main

    from .test_habits import _two_hunk_patch_with_hunk_2_broken

    series, f, _p, _broken = _two_hunk_patch_with_hunk_2_broken(project)
    assert main(["push", "-f", *series]) == 1
    state = (project / "work" / ".materialize" / "state.json").read_bytes()
    with pytest.raises(MaterializeError, match=r"0001-two was pushed with push -f.*refresh"):
        run(project, "new", "c", "-m", "c")
    assert (project / "work" / ".materialize" / "state.json").read_bytes() == state
    assert not patch_file(project, "c").exists()
    f.write_text(f.read_text().replace("def materialize(", "# cached per prefix\ndef materialize(", 1))
    (project / "work" / "tt-metal" / (ATTN + ".rej")).unlink()
    assert run(project, "refresh") == 0
    assert run(project, "new", "c", "-m", "c") == 0  # refreshed: it applies again
    assert run(project, "pop") == 0


def test_push_over_a_force_pushed_top_says_refresh_it_not_push_f(project: Path) -> None:
    """push (-f) of the next patch over a top left by push -f said the top 'does not apply (enforce with
    `materialize push -f`)', and push -f said the same: a circle. quilt: 'needs to be refreshed first'."""
    from materialize.cli import main

    from .test_habits import _two_hunk_patch_with_hunk_2_broken

    series, _f, _p, _broken = _two_hunk_patch_with_hunk_2_broken(project)
    run(project, "new", "c", "--after", "0001-two", "-m", "c")
    assert main(["push", "-f", *series]) == 1
    with pytest.raises(MaterializeError, match="0001-two is applied but was pushed with push -f.*refresh") as caught:
        run(project, "push", "-f")
    assert "enforce with" not in str(caught.value)


# -- a file name given from inside another target's folder -------------------------------------------

def test_add_refuses_a_name_seen_from_inside_another_targets_folder(project: Path, monkeypatch) -> None:
    """Standing in work/tt-metal/models/tt/ with a plugin patch on top, `add generator.py` added (and
    checked out, or created) plugin's generator.py, silently: README says a name means what you see from
    where you stand inside work/<target>/."""
    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    run(project, "new", "b", "--target", "plugin", "-m", "b")
    monkeypatch.chdir(wfile(project).parent)
    with pytest.raises(MaterializeError, match=r"generator.py is tt-metal/models/tt/generator.py, but the top patch "
                                               r"is of plugin"):
        run(project, "add", "generator.py")
    assert not (project / "work" / "plugin" / "generator.py").exists()
    monkeypatch.chdir(project)
    assert run(project, "add", "vllm/config.py") == 0


# -- import-git of a `reverse: true` entry -----------------------------------------------------------

def _reverse_entry(project: Path) -> Path:
    """One quilt -R patch (reverse: true) of ATTN, applied; returns its file."""
    text = wfile(project).read_text() if wfile(project).exists() else \
        (project / "upstream" / "tt-metal" / ATTN).read_text()
    assert "ID_LENGTH = 16\n" in text
    p = patch_file(project, "r")
    p.write_text(f"--- a/{ATTN}\n+++ b/{ATTN}\n@@ -1,1 +1,1 @@\n-ID_LENGTH = 99\n+ID_LENGTH = 16\n"
                 .replace("@@ -1,1 +1,1 @@", f"@@ -{text.splitlines().index('ID_LENGTH = 16') + 1} "
                          f"+{text.splitlines().index('ID_LENGTH = 16') + 1} @@"))
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace(
        "patches: []", "patches:\n  - patch: tt-metal/r.patch\n    target: tt-metal\n    reverse: true"))
    run(project, "push")
    assert "ID_LENGTH = 99\n" in wfile(project).read_text()
    return p


def test_import_git_of_an_unchanged_reverse_patch_leaves_it_as_it_was(project: Path) -> None:
    """export + import of a `reverse: true` entry wrote the commit's forward diff into its file and left
    `reverse: true` in the series: the patch then ran backwards ('Reversed patch detected', or a silent
    inversion where it applied). README: an unchanged export imports byte-identical."""
    p = _reverse_entry(project)
    before = (p.read_bytes(), (project / "series" / "default.yaml").read_bytes())
    repo = project.parent / "pq"
    run(project, "export-git", "tt-metal", "pq", "--repo", str(repo))
    run(project, "import-git", "tt-metal", "pq~1..pq", "--repo", str(repo))
    assert (p.read_bytes(), (project / "series" / "default.yaml").read_bytes()) == before


def test_import_git_of_a_changed_reverse_patch_writes_it_forward_without_the_flag(project: Path) -> None:
    """A changed commit is written forward (its diff), so the entry loses `reverse: true`, as refresh and a
    rebase write such a patch: the series then does what the commit does."""
    import git

    from .test_gitio import ENV

    p = _reverse_entry(project)
    repo = project.parent / "pq"
    run(project, "export-git", "tt-metal", "pq", "--repo", str(repo))
    g = git.Repo(repo)
    with g.git.custom_environment(**ENV):
        g.git.checkout("-q", "pq")
        f = repo / ATTN
        f.write_text(f.read_text() + "# amended\n")
        g.git.commit("-q", "-a", "--amend", "--no-edit")
    run(project, "import-git", "tt-metal", "pq~1..pq", "--repo", str(repo))
    assert "reverse" not in (project / "series" / "default.yaml").read_text()
    assert b"+ID_LENGTH = 99" in p.read_bytes()
    run(project, "goto", "0")
    run(project, "push")
    assert wfile(project).read_text() == (repo / ATTN).read_text()


# -- a file whose changes a refresh took out stays the patch's ---------------------------------------

def test_a_file_stays_in_the_top_after_a_refresh_emptied_it(project: Path) -> None:
    """quilt keeps a file in the patch (.pc/) when a refresh finds no change in it; the next edit is
    recorded by the next refresh. Ours forgot it once its section left the patch file: the edit was
    listed as a change of no patch, refresh recorded nothing, and pop refused."""
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    f = wfile(project)
    upstream = f.read_text()
    f.write_text(upstream.replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1))
    run(project, "refresh")
    run(project, "pop")
    run(project, "push")  # (the file is a's by its patch now, not by `add`)
    f.write_text(upstream)
    run(project, "refresh")
    assert b"ID_LENGTH" not in patch_file(project, "a").read_bytes()
    f.write_text(upstream.replace("ID_LENGTH = 16", "ID_LENGTH = 24", 1))
    assert run(project, "refresh") == 0
    assert b"+ID_LENGTH = 24" in patch_file(project, "a").read_bytes()
    assert run(project, "pop") == 0


# -- a rebase onto an upstream that deleted or added a file the patch changes ------------------------

def _v2(project: Path, change) -> Path:
    import shutil

    v2 = project.parent / "v2"
    shutil.copytree(project / "upstream" / "tt-metal", v2)
    change(v2)
    return v2


def test_rebase_stops_with_markers_when_upstream_deleted_a_file_the_patch_changes(project: Path) -> None:
    """modify/delete: the stop left the patched file in work/ without a marker, so a bare --continue
    rewrote the 2-line patch as the creation of the whole file upstream had deleted, silently (git stops
    on 'CONFLICT (modify/delete)' until the file is added or removed)."""
    from materialize.workspace.rebase import RebaseConflict

    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    v2 = _v2(project, lambda v2: (v2 / ATTN).unlink())
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    with pytest.raises(MaterializeError, match="still has conflict markers"):
        run(project, "rebase", "--continue")
    wfile(project).unlink()  # upstream's deletion wins: the patch keeps nothing
    with pytest.raises(MaterializeError, match="hold none of its changes"):
        run(project, "rebase", "--continue")
    assert run(project, "rebase", "--skip") == 0


def test_rebase_modify_delete_kept_by_removing_the_markers(project: Path) -> None:
    from materialize.workspace.rebase import RebaseConflict

    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    patched = wfile(project).read_text()
    v2 = _v2(project, lambda v2: (v2 / ATTN).unlink())
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    lines = wfile(project).read_text().splitlines(keepends=True)
    wfile(project).write_text("".join(x for x in lines if not x.startswith(("<<<<<<<", "=======", ">>>>>>>"))))
    assert wfile(project).read_text() == patched
    assert run(project, "rebase", "--continue") == 0
    assert b"new file mode" in patch_file(project, "a").read_bytes()


def test_rebase_stops_with_markers_when_upstream_added_a_file_the_patch_creates(project: Path) -> None:
    """add/add: the stop wrote the patch's version over upstream's new file without a marker, and a bare
    --continue made the patch replace upstream's file with its own, silently."""
    from materialize.workspace.rebase import RebaseConflict

    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", "models/tt/fresh.py")
    wfile(project, "models/tt/fresh.py").write_text("mine = 1\n")
    run(project, "refresh")
    v2 = _v2(project, lambda v2: (v2 / "models" / "tt" / "fresh.py").write_text("theirs = 2\n"))
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    text = wfile(project, "models/tt/fresh.py").read_text()
    assert "theirs = 2" in text and "mine = 1" in text
    with pytest.raises(MaterializeError, match="still has conflict markers"):
        run(project, "rebase", "--continue")
    wfile(project, "models/tt/fresh.py").write_text("theirs = 2\nmine = 1\n")
    assert run(project, "rebase", "--continue") == 0
    assert b"+mine = 1" in patch_file(project, "a").read_bytes()
    assert b"-theirs = 2" not in patch_file(project, "a").read_bytes()


def test_rebase_stops_with_markers_when_the_patch_deletes_a_file_upstream_changed(project: Path) -> None:
    """delete/modify: the stop deleted upstream's changed file from work/, and a bare --continue deleted
    it with upstream's change, silently."""
    from materialize.workspace.rebase import RebaseConflict

    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", "scripts/run.sh")
    wfile(project, "scripts/run.sh").unlink()
    run(project, "refresh")
    v2 = _v2(project, lambda v2: (v2 / "scripts" / "run.sh").write_text("#!/bin/sh\necho run v2\n"))
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    assert "echo run v2" in wfile(project, "scripts/run.sh").read_text()
    with pytest.raises(MaterializeError, match="still has conflict markers"):
        run(project, "rebase", "--continue")
    wfile(project, "scripts/run.sh").unlink()  # the patch's deletion wins
    assert run(project, "rebase", "--continue") == 0
    assert b"deleted file mode" in patch_file(project, "a").read_bytes()


def test_rebase_keeps_the_part_of_a_patch_upstream_does_not_have(project: Path) -> None:
    """A patch of two files, one of whose changes upstream took: the other applied, the taken one
    reverse-applied, and the rebase called the whole patch 'already-upstream' and dropped it (its file
    under saved/): the series silently lost the change upstream did not take. git keeps it."""
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN, "scripts/run.sh")
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1))
    wfile(project, "scripts/run.sh").write_text("#!/bin/sh\necho run fast\n")
    run(project, "refresh")

    def took_attention_only(v2: Path) -> None:
        (v2 / ATTN).write_text((v2 / ATTN).read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1))

    v2 = _v2(project, took_attention_only)
    assert run(project, "rebase", "tt-metal", "--to", str(v2)) == 0
    data = patch_file(project, "a").read_bytes()
    assert b"+echo run fast" in data and b"ID_LENGTH" not in data
    assert "tt-metal/a.patch" in (project / "series" / "default.yaml").read_text()
    assert wfile(project, "scripts/run.sh").read_text() == "#!/bin/sh\necho run fast\n"


def test_rebase_still_drops_a_patch_upstream_took_whole(project: Path) -> None:
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1))
    run(project, "refresh")
    v2 = _v2(project, lambda v2: (v2 / ATTN).write_text(
        (v2 / ATTN).read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1)))
    assert run(project, "rebase", "tt-metal", "--to", str(v2)) == 0
    assert "a.patch" not in (project / "series" / "default.yaml").read_text()


def test_rebase_merges_a_renamed_file_with_upstreams_changes_to_its_source(project: Path) -> None:
    """A patch renaming run.sh with a change, onto an upstream that changed run.sh twice (once on the
    patch's line): the merge looked the new name up on both sides, found nothing, and the stop held the
    patch's old file, so --continue wrote upstream's other change out of the renamed file, silently."""
    from materialize.workspace.rebase import RebaseConflict

    lines = "".join(f"echo {i}\n" for i in range(1, 21))
    up = project / "upstream" / "tt-metal" / "scripts" / "run.sh"
    up.write_text("#!/bin/sh\n" + lines)
    p = patch_file(project, "r")
    p.write_text("diff --git a/scripts/run.sh b/scripts/go.sh\nsimilarity index 90%\nrename from scripts/run.sh\n"
                 "rename to scripts/go.sh\n--- a/scripts/run.sh\n+++ b/scripts/go.sh\n@@ -2,3 +2,3 @@\n echo 1\n"
                 "-echo 2\n+echo two\n echo 3\n")
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("patches: []", "patches:\n  - patch: tt-metal/r.patch\n"
                                                 "    target: tt-metal"))
    run(project, "push")
    v2 = _v2(project, lambda v2: (v2 / "scripts" / "run.sh").write_text(
        "#!/bin/sh\n" + lines.replace("echo 2\n", "echo TWO\n").replace("echo 18\n", "echo upstream 18\n")))
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    text = wfile(project, "scripts/go.sh").read_text()
    assert "echo upstream 18\n" in text and "echo TWO\n" in text and "echo two\n" in text
    kept = [x for x in text.splitlines(keepends=True) if not x.startswith(("<<<<<<<", "=======", ">>>>>>>"))
            and x != "echo TWO\n"]
    wfile(project, "scripts/go.sh").write_text("".join(kept))
    assert run(project, "rebase", "--continue") == 0
    run(project, "goto", "0")
    run(project, "push")
    assert wfile(project, "scripts/go.sh").read_text() == "".join(kept)
    assert not wfile(project, "scripts/run.sh").exists()


def test_a_move_refused_over_a_lower_patchs_edit_names_refresh_of_that_patch(project: Path) -> None:
    """The refusal named the owner ('unrefreshed, patch a') but offered only `refresh` (the top's) and `add`
    (which makes the edit the top's): `refresh a` is the way that keeps it a's, as quilt would."""
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# a's\n")
    run(project, "new", "b", "-m", "b")
    with pytest.raises(MaterializeError, match=r"unrefreshed, patch a\)[\s\S]*`materialize refresh PATCH` a lower"):
        run(project, "pop")
