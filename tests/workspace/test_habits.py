"""quilt and git habits (issue 11 items 4 and 7): commands from any directory inside the repository,
paths relative to where the user stands, messages that say what a file is, `import-git --prune`."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from materialize.cli import main
from materialize.store import Store

from .test_edit import ATTN, patch_file, run, wfile
from .test_gitio import ENV


def test_commands_run_from_any_directory_inside_the_repository(project: Path, store: Store, capsys,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project / "patches" / "tt-metal")
    assert main(["new", "0001-gen", "--target", "tt-metal"]) == 0
    assert main(["add", ATTN]) == 0  # a path inside the target, from outside work/
    monkeypatch.chdir(project / "work" / "tt-metal" / "models" / "tt")
    assert main(["add", "generator.py"]) == 0  # relative to where the user stands
    for name in ("generator.py", "attention.py"):
        f = Path(name)
        f.write_text(f.read_text() + f"# edited {name}\n")
    assert main(["refresh"]) == 0
    patch = patch_file(project, "0001-gen").read_text()
    assert "+++ b/models/tt/generator.py" in patch and "+++ b/models/tt/attention.py" in patch
    capsys.readouterr()
    assert main(["top"]) == 0
    assert capsys.readouterr().out.strip() == "0001-gen"
    monkeypatch.chdir(project.parent)
    assert main(["top"]) == 2
    assert "series/default.yaml" in capsys.readouterr().err


def test_an_unrefreshed_file_of_the_top_patch_is_named_as_such(project: Path, store: Store, capsys) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN, "models/tt/new_module.py")
    wfile(project).write_text(wfile(project).read_text() + "# wip\n")
    wfile(project, "models/tt/new_module.py").write_text("X = 1\n")
    (project / "work" / "tt-metal" / "stray.txt").write_text("mine\n")
    assert main(["pop", "--series", str(project / "series" / "default.yaml")]) == 1
    message = capsys.readouterr().err
    assert f"modified  tt-metal/{ATTN}  (unrefreshed, patch 0001-a)" in message
    assert "modified  tt-metal/models/tt/new_module.py  (unrefreshed, patch 0001-a)" in message
    assert "no patch  tt-metal/stray.txt" in message
    assert "changes that are in no patch" not in message


def commit(repo: git.Repo, path: Path, text: str, message: str) -> None:
    path.write_text(text)
    with repo.git.custom_environment(**ENV):
        repo.git.add("-A")
        repo.git.commit("-q", "-m", message)


def test_import_git_prune_drops_the_patch_of_a_removed_commit(project: Path, store: Store, tmp_path: Path,
                                                              capsys) -> None:
    for name, old, new in (("0001-a", "ID_LENGTH = 16", "ID_LENGTH = 20"),
                           ("0002-b", "class StoreTree:", "class StoreTree:\n    # b")):
        run(project, "new", name, "--target", "tt-metal")
        run(project, "add", ATTN)
        wfile(project).write_text(wfile(project).read_text().replace(old, new))
        run(project, "refresh")
    run(project, "goto", "0")
    series = str(project / "series" / "default.yaml")
    assert main(["export-git", "tt-metal", "pq", "--repo", str(tmp_path / "out"), "--series", series]) == 0
    repo = git.Repo(tmp_path / "out")
    with repo.git.custom_environment(**ENV):  # git rebase -i: drop 0001-a
        repo.git.checkout("-q", "-b", "work", "pq~2")
        repo.git.cherry_pick("pq")
    capsys.readouterr()
    assert main(["import-git", "tt-metal", "pq~2..work", "--repo", str(tmp_path / "out"), "--series", series]) == 0
    assert "0001-a is left in the series (`--prune` drops it)" in capsys.readouterr().err
    assert "0001-a.patch" in (project / "series" / "default.yaml").read_text()
    assert main(["import-git", "tt-metal", "pq~2..work", "--repo", str(tmp_path / "out"), "--prune",
                 "--series", series]) == 0
    out = capsys.readouterr().out
    assert "dropped   0001-a" in out
    assert "0001-a.patch" not in (project / "series" / "default.yaml").read_text()
    assert not patch_file(project, "0001-a").exists()
    assert list((project / "work" / ".materialize" / "saved").glob("*-import-git-prune/tt-metal/0001-a.patch"))
    assert main(["push", "-a", "--series", series]) == 0


def _two_hunk_patch_with_hunk_2_broken(project: Path) -> tuple[list[str], Path, Path, str]:
    """A two-hunk patch of ATTN, popped, whose second hunk's context no longer matches upstream:
    (the --series arguments, the work file, the patch file, the broken patch text)."""
    series = ["--series", str(project / "series" / "default.yaml")]
    run(project, "new", "0001-two", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20")
                 .replace("def materialize(", "# cached per prefix\ndef materialize("))
    run(project, "refresh")
    run(project, "pop")
    p = patch_file(project, "0001-two")
    good = p.read_text()
    broken = good.replace(" def materialize(", " def materialize_renamed_upstream(")  # hunk 2's context is gone
    assert broken != good
    p.write_text(broken)
    return series, f, p, broken


def test_push_force_applies_what_applies_and_leaves_rej_files_for_refresh_to_repair(project: Path, store: Store,
                                                                                    capsys) -> None:
    """quilt's `push -f`: the broken patch is repaired in place, then `refresh` records the repair."""
    series, f, p, broken = _two_hunk_patch_with_hunk_2_broken(project)
    assert main(["push", *series]) == 1  # without -f: nothing applied, and -f is named
    assert "push -f" in capsys.readouterr().err
    assert not f.exists()
    capsys.readouterr()
    assert main(["push", "-f", *series]) == 1
    err = capsys.readouterr().err
    assert "forced; needs refresh" in err and f"{ATTN}.rej" in err
    assert "ID_LENGTH = 20" in f.read_text() and "# cached per prefix" not in f.read_text()
    rej = wfile(project, f"{ATTN}.rej").read_text()
    assert "+# cached per prefix" in rej and rej.startswith("--- ")
    assert main(["pop", *series]) == 1  # the forced top needs a refresh (or pop -f) first
    assert "unrefreshed, patch 0001-two" in capsys.readouterr().err
    f.write_text(f.read_text().replace("def materialize(", "# cached per prefix\ndef materialize("))
    assert main(["refresh", *series]) == 0
    assert p.read_text().count("+# cached per prefix") == 1 and "renamed_upstream" not in p.read_text()
    assert main(["pop", *series]) == 0
    assert not wfile(project, f"{ATTN}.rej").exists()
    assert main(["push", *series]) == 0
    assert "# cached per prefix" in f.read_text()


def test_push_force_goes_through_the_one_applier_and_refuses_a_link_out(project: Path, store: Store, capsys) -> None:
    """A forced push writes into work/, so it gets every check of a normal apply (it runs the same
    ``apply_to_tree``): a patch that leaves a symlink pointing outside the tree is refused (exit 4) and
    nothing reaches the workspace."""
    series = ["--series", str(project / "series" / "default.yaml")]
    run(project, "new", "0001-link", "--target", "tt-metal")
    run(project, "pop")
    p = patch_file(project, "0001-link")
    p.write_text(p.read_text() + "diff --git a/evil b/evil\nnew file mode 120000\nindex 0000000..1111111\n"
                 "--- /dev/null\n+++ b/evil\n@@ -0,0 +1 @@\n+/etc/passwd\n\\ No newline at end of file\n")
    capsys.readouterr()
    assert main(["push", "-f", *series]) == 4
    assert "points outside the tree" in capsys.readouterr().err
    assert not wfile(project, "evil").is_symlink() and not wfile(project, "evil").exists()


def test_push_force_cannot_set_an_older_link_free(project: Path, store: Store, capsys) -> None:
    """The chain case through a forced push: patch 1 adds ``s -> models/tt`` and ``x -> s/../..`` (x
    resolves to the tree's root, through s); patch 2 replaces the link ``s`` by a real folder, so x
    would climb out of the tree. Patch 2 adds no link itself: only a re-check of the tree's links
    finds it. Exit 4, and the workspace keeps ``s`` as the link it was."""
    series = ["--series", str(project / "series" / "default.yaml")]

    def new_link(name: str, target: str) -> str:
        return (f"diff --git a/{name} b/{name}\nnew file mode 120000\n--- /dev/null\n+++ b/{name}\n"
                f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")

    run(project, "new", "0001-links", "--target", "tt-metal")
    run(project, "pop")
    first = patch_file(project, "0001-links")
    first.write_text(first.read_text() + new_link("s", "models/tt") + new_link("x", "s/../.."))
    assert main(["push", *series]) == 0
    assert wfile(project, "x").is_symlink()
    run(project, "new", "0002-free", "--target", "tt-metal")
    run(project, "pop")
    second = patch_file(project, "0002-free")
    second.write_text(second.read_text()
                      + "diff --git a/s b/s\ndeleted file mode 120000\n--- a/s\n+++ /dev/null\n@@ -1 +0,0 @@\n"
                        "-models/tt\n\\ No newline at end of file\n"
                        "diff --git a/s/f b/s/f\nnew file mode 100644\n--- /dev/null\n+++ b/s/f\n@@ -0,0 +1 @@\n+f\n"
                        # and a hunk that fails, so that only the forced path applies the rest
                        "--- a/scripts/run.sh\n+++ b/scripts/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n-echo nope\n+echo yes\n")
    capsys.readouterr()
    assert main(["push", *series]) == 1  # the failing hunk: a plain push refuses the whole patch
    capsys.readouterr()
    assert main(["push", "-f", *series]) == 4
    assert "symlink x -> 's/../..' points outside" in capsys.readouterr().err
    assert wfile(project, "s").is_symlink() and not wfile(project, "s/f").exists()


def test_refresh_after_push_force_keeps_hunks_nobody_put_into_the_files(project: Path, store: Store, capsys) -> None:
    """push -f, refresh, pop: the failed hunk left the patch at refresh and its .rej (its last copy) at
    pop. refresh refuses while a .rej holds hunks not in their file; deleting the .rej drops them."""
    series, f, p, broken = _two_hunk_patch_with_hunk_2_broken(project)
    assert main(["push", "-f", *series]) == 1
    capsys.readouterr()
    assert main(["refresh", *series]) == 1
    err = capsys.readouterr().err
    assert f"{ATTN}.rej: 1 hunk(s) not in" in err and "delete the .rej" in err
    assert p.read_text() == broken
    wfile(project, f"{ATTN}.rej").unlink()  # "drop them"
    assert main(["refresh", *series]) == 0
    assert "# cached per prefix" not in p.read_text() and "ID_LENGTH = 20" in p.read_text()


def test_pop_force_keeps_the_rej_files_with_the_files_it_saves(project: Path, store: Store, capsys) -> None:
    """push -f, work on the failed hunks in the .rej (here: a note), then give up with pop -f: the half-
    applied files are saved, and so is the .rej as the user left it (pop removes it from work/)."""
    series, f, p, broken = _two_hunk_patch_with_hunk_2_broken(project)
    assert main(["push", "-f", *series]) == 1
    rej = wfile(project, f"{ATTN}.rej")
    rej.write_text(rej.read_text() + "# my note: this hunk belongs in materialize() now\n")
    capsys.readouterr()
    assert main(["pop", "-f", *series]) == 0
    err = capsys.readouterr().err
    saved = Path(err.split("saved unrefreshed changes to ", 1)[1].split()[0])
    assert not rej.exists()
    copy = saved / "tt-metal" / f"{ATTN}.rej"
    assert copy.read_text().endswith("# my note: this hunk belongs in materialize() now\n")
    assert f"reject\ttt-metal/{ATTN}.rej" in (saved / "SAVED.txt").read_text()


UPSTREAM_F = ("import functools\n\n\n@functools.cache\ndef a(x):\n    return x + 1\n\n\n"
              "def b(y):\n    y = y * 2\n    return y\n\n\ndebug_log(level=2)\n")
# hunk 1 applies; hunk 2 was written against b(y, z) and hunk 3 against debug_log(level=1): both rejected
FORCED_PATCH = """Subject: cache b too; document a; drop the debug log

--- a/f.py
+++ b/f.py
@@ -5,2 +5,3 @@
 def a(x):
+    \"\"\"a.\"\"\"
     return x + 1
@@ -8,2 +9,3 @@
\x20
+@functools.cache
 def b(y, z):
@@ -13,2 +14,1 @@
\x20
-debug_log(level=1)
"""


def _forced_push_of_three_hunks(project: Path, capsys) -> tuple[list[str], Path, Path]:
    series = ["--series", str(project / "series" / "default.yaml")]
    (project / "upstream" / "tt-metal" / "f.py").write_text(UPSTREAM_F)
    run(project, "new", "0001-cache", "--target", "tt-metal")
    run(project, "pop")
    p = patch_file(project, "0001-cache")
    p.write_text(FORCED_PATCH)
    assert main(["push", "-f", *series]) == 1
    capsys.readouterr()
    return series, wfile(project, "f.py"), p


def test_refresh_after_push_force_does_not_take_a_hunk_for_repaired_by_its_lines_elsewhere(
        project: Path, store: Store, capsys) -> None:
    """A rejected `+@functools.cache` above b() is not repaired by a() having that decorator already,
    nor a rejected `-debug_log(level=1)` by that line missing (upstream has level=2: why it failed).
    refresh refuses, the patch and the .rej stay; repairing both hunks lets it through."""
    series, f, p = _forced_push_of_three_hunks(project, capsys)
    assert '"""a."""' in f.read_text()
    assert main(["refresh", *series]) == 1
    assert "f.py.rej: 2 hunk(s) not in" in capsys.readouterr().err
    assert p.read_text() == FORCED_PATCH and wfile(project, "f.py.rej").exists()
    f.write_text(f.read_text().replace("\ndef b(y):", "\n@functools.cache\ndef b(y):"))
    assert main(["refresh", *series]) == 1
    assert "f.py.rej: 1 hunk(s) not in" in capsys.readouterr().err
    f.write_text(f.read_text().replace("debug_log(level=2)\n", ""))
    assert main(["refresh", *series]) == 1  # a deletion of another line than the hunk's: unsure, refused
    assert "f.py.rej: 1 hunk(s) not in" in capsys.readouterr().err
    wfile(project, "f.py.rej").unlink()  # the user confirms
    assert main(["refresh", *series]) == 0
    text = p.read_text()
    assert text.count("+@functools.cache") == 1 and "-debug_log(level=2)" in text


def test_refresh_after_push_force_takes_a_deletion_repaired_where_its_context_puts_it(
        project: Path, store: Store, capsys) -> None:
    series, f, p = _forced_push_of_three_hunks(project, capsys)
    f.write_text(f.read_text().replace("\ndef b(y):", "\n@functools.cache\ndef b(y):"))
    wfile(project, "f.py.rej").write_text(  # the user fixed the .rej's deletion to upstream's line
        "--- f.py\n+++ f.py\n@@ -9,2 +9,3 @@\n \n+@functools.cache\n def b(y, z):\n"
        "@@ -13,2 +14,1 @@\n \n-debug_log(level=2)\n")
    assert main(["refresh", *series]) == 1
    f.write_text(f.read_text().replace("debug_log(level=2)\n", ""))
    assert main(["refresh", *series]) == 0


def test_push_and_pop_with_nothing_to_do_exit_2_as_quilts(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys) -> None:
    """quilt push/pop exit 2 when there is nothing to push or pop ("File series fully applied", "No
    patch removed"), and Debian's rules run `quilt push -a || test $? = 2`: a script must tell "nothing
    to do" from "a patch failed" (1) by the code alone."""
    monkeypatch.chdir(project)
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "a")
    for args in (["push"], ["push", "-a"]):
        assert main(args) == 2
        assert "nothing to push" in capsys.readouterr().err
    assert main(["pop"]) == 0
    for args in (["pop"], ["pop", "-a"]):
        assert main(args) == 2
        assert "nothing to pop" in capsys.readouterr().err


def test_add_of_a_file_already_in_the_top_patch_says_so_and_exits_2_as_quilts(project: Path, capsys,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """quilt add of a file the top patch already has prints "File X is already in patch P" and exits 2
    (the others named are still added); `quilt edit` takes that 2 as success. Ours exited 0, so a script
    could not tell a file newly added from one the patch had (after a refresh, or from the patch file)."""
    monkeypatch.chdir(project)
    run(project, "new", "0001-a", "--target", "tt-metal")
    assert main(["add", ATTN]) == 0
    capsys.readouterr()
    assert main(["add", ATTN]) == 2
    assert f"File {ATTN} is already in patch 0001-a" in capsys.readouterr().err
    wfile(project, ATTN).write_text(wfile(project, ATTN).read_text() + "# edited\n")
    assert main(["refresh"]) == 0
    run(project, "pop")
    run(project, "push")  # the file is the patch's now through its patch file, not through `add`
    capsys.readouterr()
    other = "models/tt/generator.py"
    assert main(["add", ATTN, other]) == 2  # the new one is still added
    err = capsys.readouterr().err
    assert f"File {ATTN} is already in patch 0001-a" in err and other not in err
    assert main(["add", other]) == 2
    monkeypatch.setenv("EDITOR", "true")
    assert main(["edit", ATTN]) == 0  # edit of a file the patch has is what edit is for
