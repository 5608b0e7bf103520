"""export-git / import-git round trips on gitpython fixture repositories."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import git
import pytest

from materialize.errors import MaterializeError
from materialize.store import Store
from materialize.workspace import gitio
from materialize.workspace.state import Workspace

from .conftest import SERIES, make_upstream
from .test_edit import ATTN, run, wfile

ENV = {"GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.com", "GIT_COMMITTER_NAME": "Ada",
       "GIT_COMMITTER_EMAIL": "ada@example.com", "GIT_AUTHOR_DATE": "2026-09-21T10:00:00+0200",
       "GIT_COMMITTER_DATE": "2026-09-21T10:00:00+0200"}


def fixture_repo(project: Path, where: Path) -> git.Repo:
    """The tt-metal upstream as a git repo, plus commits covering every kind of change."""
    shutil.copytree(project / "upstream" / "tt-metal", where)
    repo = git.Repo.init(where)
    with repo.git.custom_environment(**ENV):
        repo.git.add("-A")
        repo.git.commit("-q", "-m", "upstream")
        f = where / ATTN
        f.write_text(f.read_text().replace("class StoreTree:", "class StoreTree:\n    # patched")
                     .replace("ID_LENGTH = 16", "ID_LENGTH = 20"))
        (where / "models" / "tt" / "kernel.py").write_text("def k():\n    return 1\n")
        repo.git.add("-A")
        repo.git.commit("-q", "-m", "attention: mark StoreTree\n\nWhy: the cache.\nSecond line.")
        repo.git.mv("models/tt/generator.py", "models/tt/gen2.py")
        g = where / "models" / "tt" / "gen2.py"
        g.write_text(g.read_text().replace("TARGETS =", "TARGETS  ="))
        repo.git.add("-A")
        repo.git.commit("-q", "-m", "generator: rename with an edit")
        repo.git.mv("models/tt/kernel.py", "models/tt/kernel2.py")
        repo.git.commit("-q", "-m", "pure rename")
        os.chmod(where / "models" / "tt" / "kernel2.py", 0o755)
        repo.git.rm("-q", "scripts/run.sh")
        repo.git.add("-A")
        repo.git.commit("-q", "-m", "mode change and deletion")
    return repo


def patches(project: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((project / "patches" / "tt-metal").iterdir())}


def new_project(root: Path) -> Path:
    make_upstream(root)
    (root / "series").mkdir()
    (root / "series" / "default.yaml").write_text(SERIES)
    (root / "patches" / "tt-metal").mkdir(parents=True)
    return root


def test_import_export_import_is_byte_identical(project: Path, store: Store, tmp_path: Path) -> None:
    fixture_repo(project, tmp_path / "fx")
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    result = gitio.import_git(ws, "tt-metal", "HEAD~4..HEAD", tmp_path / "fx")
    assert len(result.created) == 4
    first = patches(project)
    text = b"".join(first.values())
    for needle in (b"rename from models/tt/generator.py", b"rename to models/tt/kernel2.py",
                   b"old mode 100644\nnew mode 100755", b"deleted file mode 100755", b"new file mode 100644",
                   b"Why: the cache.\nSecond line.", b"Date: Mon, 21 Sep 2026 10:00:00 +0200"):
        assert needle in text

    exported = gitio.export_git(ws.series, store, "tt-metal", "patch-queue", tmp_path / "out")
    out = git.Repo(tmp_path / "out")
    log = out.git.log("--format=%an|%ad|%s", "--date=iso", "patch-queue").splitlines()
    assert log[0] == "Ada|2026-09-21 10:00:00 +0200|mode change and deletion"
    assert len(log) == 5 and log[-1].endswith("tt-metal: pinned upstream")
    fx_tip = git.Repo(tmp_path / "fx").head.commit.tree.hexsha
    assert out.commit("patch-queue").tree.hexsha == fx_tip  # same code as the fixture branch
    assert "kernel2.py" in out.git.show("--stat", "-M", "patch-queue~1")

    again = gitio.import_git(ws, "tt-metal", "patch-queue~4..patch-queue", tmp_path / "out")
    assert sorted(again.unchanged) == sorted(p[:-6] for p in first)
    assert patches(project) == first

    # a fresh project importing the exported branch writes the very same files
    other = new_project(tmp_path / "other")
    ws2 = Workspace(Workspace.open(other / "series" / "default.yaml").series, store)
    gitio.import_git(ws2, "tt-metal", "patch-queue~4..patch-queue", tmp_path / "out")
    assert patches(other) == first
    # exporting twice gives the same commits (committer = author, dates from the headers)
    assert gitio.export_git(ws.series, store, "tt-metal", "again", tmp_path / "out").commits == exported.commits


def test_hand_made_patches_survive_export_then_import(project: Path, store: Store, tmp_path: Path) -> None:
    """Patches made in the workspace (and one edited by hand) come back byte for byte."""
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "attention: bump id")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20"))
    run(project, "refresh")
    p = project / "patches" / "tt-metal" / "0001-a.patch"
    p.write_bytes(p.read_bytes().replace(b"\n\ndiff --git", b"\nA plain description line.\n\ndiff --git"))
    before = patches(project)
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    result = gitio.import_git(ws, "tt-metal", "pq~1..pq", tmp_path / "out")
    assert result.unchanged == ["0001-a"] and patches(project) == before


def test_import_after_a_git_edit_changes_only_that_hunk(project: Path, store: Store, tmp_path: Path) -> None:
    fixture_repo(project, tmp_path / "fx")
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    gitio.import_git(ws, "tt-metal", "HEAD~4..HEAD", tmp_path / "fx")
    before = patches(project)
    gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    out = git.Repo(tmp_path / "out")
    # the gbp-pq habit: check the branch out, amend a commit with an interactive-rebase-like sequence
    with out.git.custom_environment(**ENV):
        out.git.checkout("-q", "-b", "work", "pq~3")
        f = tmp_path / "out" / ATTN
        f.write_text(f.read_text().replace("ID_LENGTH = 20", "ID_LENGTH = 24"))
        out.git.commit("-q", "-a", "--amend", "--no-edit")
        out.git.cherry_pick("pq~2", "pq~1", "pq")
    result = gitio.import_git(ws, "tt-metal", "pq~4..work", tmp_path / "out")
    assert result.updated == ["0001-attention-mark-storetree"]
    after = patches(project)
    changed = [k for k in after if after[k] != before[k]]
    assert changed == ["0001-attention-mark-storetree.patch"]
    old_lines, new_lines = before[changed[0]].splitlines(), after[changed[0]].splitlines()
    assert [x for x in new_lines if x not in old_lines] == [b"+ID_LENGTH = 24"]


def test_import_refuses_merges(project: Path, store: Store, tmp_path: Path) -> None:
    repo = fixture_repo(project, tmp_path / "fx")
    with repo.git.custom_environment(**ENV):
        repo.git.checkout("-q", "-b", "side", "HEAD~1")
        (tmp_path / "fx" / "side.txt").write_text("side\n")
        repo.git.add("-A")
        repo.git.commit("-q", "-m", "side")
        repo.git.checkout("-q", "-")
        repo.git.merge("-q", "--no-edit", "side")
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    with pytest.raises(Exception, match="merges"):
        gitio.import_git(ws, "tt-metal", "HEAD~3..HEAD", tmp_path / "fx")


def test_format_patch_files_survive_export_then_import(project: Path, store: Store, tmp_path: Path) -> None:
    """A patch written by `git format-patch` (mbox line, [PATCH] subject, diffstat, signature)."""
    repo = fixture_repo(project, tmp_path / "fx")
    data = repo.git.format_patch("-1", "--stdout", "HEAD~3", stdout_as_string=False)
    data = data if data.endswith(b"\n") else data + b"\n"
    (project / "patches" / "tt-metal" / "0001-attn.patch").write_bytes(data)
    yaml_path = project / "series" / "default.yaml"
    yaml_path.write_text(yaml_path.read_text().replace(
        "patches: []", "patches:\n  - patch: tt-metal/0001-attn.patch\n    target: tt-metal\n"))
    ws = Workspace(Workspace.open(yaml_path).series, store)
    gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    log = git.Repo(tmp_path / "out").git.log("-1", "--format=%an|%s", "pq")
    assert log == "Ada|attention: mark StoreTree"
    result = gitio.import_git(ws, "tt-metal", "pq~1..pq", tmp_path / "out")
    assert result.unchanged == ["0001-attn"]
    assert (project / "patches" / "tt-metal" / "0001-attn.patch").read_bytes() == data


@pytest.mark.parametrize("trailer", ["../../../x-outside.patch", "{abs}", "tt-metal/../../x-outside.patch",
                                     "link/x.patch", "tt-metal/.patch"])
def test_import_refuses_a_trailer_that_names_a_file_outside_patches_dir(project: Path, store: Store,
                                                                         tmp_path: Path, trailer: str) -> None:
    """A commit's `Materialize-Patch:` trailer chose the file import-git writes: ../../../x wrote the
    patch outside patches_dir (an absolute one anywhere), then the series refused the entry after the
    journal had committed, so the series file was left broken. Refused now (exit 4), naming the commit,
    before anything is written."""
    from materialize.errors import UnsafePathError

    (tmp_path / "elsewhere").mkdir()
    (project / "patches" / "link").symlink_to(tmp_path / "elsewhere")
    repo = fixture_repo(project, tmp_path / "fx")
    named = trailer.format(abs=tmp_path / "x-outside.patch")
    with repo.git.custom_environment(**ENV):
        (tmp_path / "fx" / "new.txt").write_text("x\n")
        repo.git.add("-A")
        repo.git.commit("-q", "-m", f"hostile\n\nMaterialize-Patch: {named}")
    series = project / "series" / "default.yaml"
    before = series.read_bytes()
    ws = Workspace(Workspace.open(series).series, store)
    with pytest.raises(UnsafePathError, match=rf"import-git: {repo.head.commit.hexsha[:12]}: Materialize-Patch"):
        gitio.import_git(ws, "tt-metal", "HEAD~2..HEAD", tmp_path / "fx")
    assert series.read_bytes() == before
    assert not list(tmp_path.rglob("x-outside.patch")) and not list((tmp_path / "elsewhere").iterdir())
    assert list((project / "patches" / "tt-metal").iterdir()) == []


def test_export_refuses_to_overwrite_a_branch_holding_commits_of_the_user(project: Path, store: Store,
                                                                           tmp_path: Path) -> None:
    """export-git fetched with a forced refspec: a branch the user had rebased (`git rebase -i pq`, not
    imported yet) was overwritten by the next export, their commits left only in the reflog. gbp pq
    refuses an existing patch-queue branch; so do we, unless it is one of our own exports."""
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "attention: bump id")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20"))
    run(project, "refresh")
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    first = gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    # our own export is replaced freely (after a refresh, say)
    f.write_text(f.read_text().replace("ID_LENGTH = 20", "ID_LENGTH = 22"))
    run(project, "refresh")
    ws.reload_series()
    second = gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    assert second.commits != first.commits
    out = git.Repo(tmp_path / "out")
    with out.git.custom_environment(**ENV):
        out.git.checkout("-q", "-b", "elsewhere", "pq~1")
        out.git.checkout("-q", "pq")
        target = tmp_path / "out" / ATTN
        target.write_text(target.read_text() + "# mine\n")
        out.git.commit("-q", "-a", "--amend", "--no-edit")
        out.git.checkout("-q", "elsewhere")
    mine = out.git.rev_parse("pq")
    with pytest.raises(MaterializeError, match="pq in .* holds commits that no export wrote"):
        gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    assert out.git.rev_parse("pq") == mine
    assert run(project, "export-git", "tt-metal", "pq", "--repo", str(tmp_path / "out"), "--force") == 0
    assert out.git.rev_parse("pq") != mine


def test_import_refuses_a_squash_of_several_patches_commits(project: Path, store: Store, tmp_path: Path) -> None:
    """`git rebase -i` squashing two exported commits keeps both trailers; only the last was read, the
    other patch stayed in the series with its change now in the squashed one too (push -a then failed:
    "Reversed (or previously applied) patch detected"), and import-git exited 0."""
    fixture_repo(project, tmp_path / "fx")
    ws = Workspace(Workspace.open(project / "series" / "default.yaml").series, store)
    gitio.import_git(ws, "tt-metal", "HEAD~4..HEAD", tmp_path / "fx")
    before = patches(project)
    gitio.export_git(ws.series, store, "tt-metal", "pq", tmp_path / "out")
    out = git.Repo(tmp_path / "out")
    with out.git.custom_environment(**ENV):
        out.git.checkout("-q", "pq")
        message = out.git.log("-2", "--format=%B", "pq")  # both commits' messages, trailers included
        out.git.reset("-q", "--soft", "HEAD~2")
        out.git.commit("-q", "-m", message)
    with pytest.raises(MaterializeError, match="trailers of 2 patches"):
        gitio.import_git(ws, "tt-metal", "pq~3..pq", tmp_path / "out")
    assert patches(project) == before
