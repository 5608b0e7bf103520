"""Quilt-style sessions on real trees (path pins of real Python files), through the commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from materialize.errors import MaterializeError, PatchApplyError
from materialize.workspace import cli
from materialize.workspace.patchtext import parse
from materialize.workspace.state import DirtyWorkspaceError

ATTN = "models/tt/attention.py"


def run(project: Path, name: str, *args: str) -> int:
    command = next(c for c in cli.COMMANDS if c.name == name)
    return command.main([*args, "--series", str(project / "series" / "default.yaml")], prog=f"materialize {name}")


def wfile(project: Path, path: str = ATTN, target: str = "tt-metal") -> Path:
    return project / "work" / target / path


def patch_file(project: Path, name: str, target: str = "tt-metal") -> Path:
    return project / "patches" / target / f"{name}.patch"


def hunks(data: bytes) -> list[bytes]:
    return [h.raw for s in parse(data).sections for h in s.hunks]


def test_new_edit_refresh_pop_push_refresh_gives_a_minimal_patch(project: Path, capsys) -> None:
    assert run(project, "new", "0001-attn-cache", "--target", "tt-metal", "-m", "attention: cache trees") == 0
    assert run(project, "add", ATTN) == 0
    f = wfile(project)
    text = f.read_text()
    f.write_text(text.replace("class StoreTree:", "class StoreTree:\n    # cached per prefix")
                 .replace("def apply_patch(", "# hot path\ndef apply_patch(")
                 .replace("def materialize(", "# entry\ndef materialize("))
    assert run(project, "refresh") == 0
    first = patch_file(project, "0001-attn-cache").read_bytes()
    assert first.startswith(b"From: Ada Tester <ada@example.com>\n") and b"Subject: attention: cache trees\n" in first
    assert len(hunks(first)) == 3

    assert run(project, "pop") == 0
    assert not f.exists()  # sparse workspace: nothing applied, nothing checked out
    assert run(project, "push") == 0
    assert f.read_text().count("# hot path") == 1

    f.write_text(f.read_text().replace("# hot path\n", "# hot path: one lookup per touched file\n"))
    assert run(project, "refresh") == 0
    second = patch_file(project, "0001-attn-cache").read_bytes()
    review = subprocess.run(["diff", "-u", "-", str(patch_file(project, "0001-attn-cache"))], input=first,
                            capture_output=True).stdout.decode()
    changed = [line for line in review.splitlines()[2:] if line[:1] in "+-"]
    assert changed == ["-+# hot path", "++# hot path: one lookup per touched file"]
    h1, h2 = hunks(first), hunks(second)
    assert (h2[0], h2[2]) == (h1[0], h1[2])
    # the series entry (metadata) is untouched by refresh
    assert "0001-attn-cache.patch" in (project / "series" / "default.yaml").read_text()
    capsys.readouterr()
    assert run(project, "top") == 0
    assert capsys.readouterr().out.strip() == "0001-attn-cache"


def test_pop_refuses_with_unrefreshed_changes_and_force_saves_them(project: Path) -> None:
    run(project, "new", "0001-x", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# work in progress\n")
    with pytest.raises(DirtyWorkspaceError, match="modified  tt-metal/models/tt/attention.py"):
        run(project, "pop")
    assert f.read_text().endswith("# work in progress\n")  # nothing touched
    assert run(project, "pop", "--force") == 0
    saved = list((project / "work" / ".materialize" / "saved").glob("*-pop/tt-metal/models/tt/attention.py"))
    assert len(saved) == 1 and saved[0].read_text().endswith("# work in progress\n")
    assert not f.exists()


def test_edits_to_files_in_no_patch_are_reported_and_block_pop(project: Path, capsys) -> None:
    run(project, "new", "0001-x", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# mine\n")
    stray = wfile(project, "models/tt/notes.py")
    stray.write_text("print('not in any patch')\n")
    capsys.readouterr()
    run(project, "refresh")
    captured = capsys.readouterr()
    assert "tt-metal/models/tt/notes.py" in captured.err and "in no patch" in captured.err
    assert b"notes.py" not in patch_file(project, "0001-x").read_bytes()
    with pytest.raises(DirtyWorkspaceError, match="no patch  tt-metal/models/tt/notes.py"):
        run(project, "goto", "0")
    run(project, "add", "models/tt/notes.py")
    run(project, "refresh")
    assert b"+++ b/models/tt/notes.py" in patch_file(project, "0001-x").read_bytes()
    assert run(project, "goto", "0") == 0


def test_push_stops_at_a_patch_that_does_not_apply_naming_it(project: Path, capsys) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20"))
    run(project, "refresh")
    bad = patch_file(project, "0001-a").read_bytes().replace(b"0001", b"0002")
    run(project, "new", "0002-b", "--target", "tt-metal")
    patch_file(project, "0002-b").write_bytes(bad.replace(b"-ID_LENGTH = 16", b"-ID_LENGTH = 99"))
    run(project, "pop", "-a")
    capsys.readouterr()
    assert run(project, "push", "-a") == 1
    captured = capsys.readouterr()
    assert "0002-b" in captured.err and "FAILED" in captured.err
    assert "Now at patch 0001-a" in captured.out


def test_add_checks_out_a_file_and_new_files_and_deletions_refresh(project: Path) -> None:
    run(project, "new", "0001-files", "--target", "tt-metal")
    run(project, "add", "models/tt/generator.py", "models/tt/fresh.py", "scripts/run.sh")
    assert wfile(project, "models/tt/generator.py").read_bytes() == \
        (project / "upstream" / "tt-metal" / "models" / "tt" / "generator.py").read_bytes()
    wfile(project, "models/tt/fresh.py").write_text("def fresh():\n    return 1\n")
    wfile(project, "scripts/run.sh").unlink()
    run(project, "refresh")
    data = patch_file(project, "0001-files").read_bytes()
    assert b"new file mode 100644" in data and b"deleted file mode 100755" in data
    assert b"generator.py" not in data  # added but unchanged: not in the patch
    run(project, "pop")
    run(project, "push")
    assert wfile(project, "models/tt/fresh.py").read_text() == "def fresh():\n    return 1\n"
    assert not wfile(project, "scripts/run.sh").exists()


def test_rename_move_delete_header_keep_yaml_comments(project: Path, capsys) -> None:
    yaml_path = project / "series" / "default.yaml"
    for name, path in (("0001-a", ATTN), ("0002-b", "models/tt/generator.py")):
        run(project, "new", name, "--target", "tt-metal")
        run(project, "add", path)
        f = wfile(project, path)
        f.write_text(f.read_text() + f"# {name}\n")
        run(project, "refresh")
    run(project, "new", "0003-plugin", "--target", "plugin")
    run(project, "add", "vllm/config.py")
    pf = wfile(project, "vllm/config.py", "plugin")
    pf.write_text(pf.read_text() + "# plugin\n")
    run(project, "refresh")
    run(project, "rename", "0003-plugin-cfg")
    assert (project / "patches" / "plugin" / "0003-plugin-cfg.patch").exists()
    assert not (project / "patches" / "plugin" / "0003-plugin.patch").exists()
    text = yaml_path.read_text()
    assert "# the vLLM side" in text and "# test series: two path pins" in text
    run(project, "goto", "0")
    run(project, "move", "0003-plugin-cfg", "--after", "0")
    capsys.readouterr()
    run(project, "series")
    assert capsys.readouterr().out.split() == ["0003-plugin-cfg", "0001-a", "0002-b"]
    run(project, "header", "0001-a")
    assert "Subject: 0001-a" in capsys.readouterr().out
    body = patch_file(project, "0001-a").read_bytes().split(b"diff --git", 1)[1]
    header_file = project / "h.txt"
    header_file.write_text("From: Ada <a@x>\nSubject: attention: note\n\nLonger story.\n")
    run(project, "header", "0001-a", "--set", str(header_file))
    data = patch_file(project, "0001-a").read_bytes()
    assert data.startswith(b"From: Ada <a@x>\nSubject: attention: note\n\nLonger story.\n\ndiff --git")
    assert data.split(b"diff --git", 1)[1] == body
    run(project, "delete", "0002-b", "-r")
    assert not patch_file(project, "0002-b").exists()
    assert list((project / "work" / ".materialize" / "saved").glob("*-delete/tt-metal/0002-b.patch"))


def test_move_refuses_when_a_later_patch_would_no_longer_apply(project: Path) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20"))
    run(project, "refresh")
    run(project, "new", "0002-b", "--target", "tt-metal")
    run(project, "add", ATTN)
    f.write_text(f.read_text().replace("ID_LENGTH = 20", "ID_LENGTH = 24"))
    run(project, "refresh")
    run(project, "goto", "0")
    before = (project / "series" / "default.yaml").read_bytes()
    with pytest.raises(PatchApplyError, match=r"0002-b.*\n.*attention.py: hunk @@"):
        run(project, "move", "0002-b", "--after", "0")
    assert (project / "series" / "default.yaml").read_bytes() == before


def test_fold_applies_a_patch_into_the_top(project: Path, tmp_path: Path) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal")
    upstream = (project / "upstream" / "tt-metal" / ATTN).read_text()
    patched = upstream.replace("ID_LENGTH = 16", "ID_LENGTH = 32")
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text(upstream)
    b.write_text(patched)
    diff = subprocess.run(["diff", "-u", "--label", f"a/{ATTN}", "--label", f"b/{ATTN}", str(a), str(b)],
                          capture_output=True).stdout
    (tmp_path / "fold.diff").write_bytes(diff)
    run(project, "fold", str(tmp_path / "fold.diff"))
    run(project, "refresh")
    assert b"+ID_LENGTH = 32" in patch_file(project, "0001-a").read_bytes()


def test_refresh_of_a_lower_patch_is_refused_when_a_later_one_shares_files(project: Path) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# a\n")
    run(project, "refresh")
    run(project, "new", "0002-b", "--target", "tt-metal")
    run(project, "add", ATTN)
    f.write_text(f.read_text() + "# b\n")
    run(project, "refresh")
    with pytest.raises(MaterializeError, match="later applied patch 0002-b also changes"):
        run(project, "refresh", "0001-a")


def test_a_pin_edited_by_hand_is_followed_at_position_0_and_refused_above(project: Path) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# a\n")
    run(project, "refresh")
    yaml_path = project / "series" / "default.yaml"
    other = project / "upstream" / "tt-metal-2"
    import shutil

    shutil.copytree(project / "upstream" / "tt-metal", other)
    yaml_path.write_text(yaml_path.read_text().replace("path: ../upstream/tt-metal\n", "path: ../upstream/tt-metal-2\n"))
    with pytest.raises(MaterializeError, match="pin of tt-metal changed"):
        run(project, "pop")
    assert run(project, "goto", "0", "--force") == 0
    assert run(project, "push") == 0


def test_edit_runs_the_editor_and_header_e_edits_the_description(project: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    editor = tmp_path / "editor.py"
    editor.write_text("import sys\nfor name in sys.argv[1:]:\n    open(name, 'a').write('# via editor\\n')\n")
    monkeypatch.setenv("EDITOR", f"{sys.executable} {editor}")
    monkeypatch.delenv("VISUAL", raising=False)
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    run(project, "edit", ATTN)
    assert wfile(project).read_text().endswith("# via editor\n")
    run(project, "refresh")
    assert b"+# via editor" in patch_file(project, "0001-a").read_bytes()
    run(project, "header", "-e")
    header = patch_file(project, "0001-a").read_bytes().split(b"diff --git")[0]
    assert header.startswith(b"From: Ada Tester") and header.endswith(b"# via editor\n\n")


def test_a_second_command_while_one_runs_is_refused(project: Path) -> None:
    from filelock import FileLock

    from materialize.errors import BusyError

    run(project, "new", "0001-a", "--target", "tt-metal")
    with FileLock(str(project / "work" / ".materialize" / "lock")), pytest.raises(BusyError):
        run(project, "add", ATTN)


def test_refresh_keeps_a_deeper_strip_level_and_its_prefixes(project: Path) -> None:
    """Patches taken from another layout (the seed's -p6 case) keep their path prefixes on refresh."""
    upstream = (project / "upstream" / "tt-metal" / ATTN).read_text()
    patched = upstream.replace("ID_LENGTH = 16", "ID_LENGTH = 20")
    a, b = project / "a.py", project / "b.py"
    a.write_text(upstream)
    b.write_text(patched)
    diff = subprocess.run(["diff", "-u", "--label", f"x/prod-local-metal/{ATTN}", "--label",
                           f"y/prod-local-metal/{ATTN}", str(a), str(b)], capture_output=True).stdout
    (project / "patches" / "tt-metal" / "0001-deep.patch").write_bytes(b"Deep layout.\n\n" + diff)
    yaml_path = project / "series" / "default.yaml"
    yaml_path.write_text(yaml_path.read_text().replace(
        "patches: []", "patches:\n  - patch: tt-metal/0001-deep.patch\n    target: tt-metal\n    strip: 2\n"))
    run(project, "push")
    run(project, "add", "models/tt/generator.py")
    f = wfile(project)
    f.write_text(f.read_text().replace("class StoreTree:", "class StoreTree:\n    # deep"))
    g = wfile(project, "models/tt/generator.py")
    g.write_text(g.read_text() + "# deep too\n")
    run(project, "refresh")
    data = patch_file(project, "0001-deep").read_bytes()
    assert data.startswith(b"Deep layout.\n\n--- x/prod-local-metal/models/tt/attention.py\n")
    assert b"--- x/prod-local-metal/models/tt/generator.py\n+++ x/prod-local-metal/models/tt/generator.py\n" in data
    run(project, "pop")
    run(project, "push")
    assert wfile(project, "models/tt/generator.py").read_text().endswith("# deep too\n")


def test_fold_refuses_a_path_out_of_the_workspace(project: Path, tmp_path: Path) -> None:
    from materialize.errors import UnsafePathError

    run(project, "new", "0001-a", "--target", "tt-metal")
    evil = b"--- /dev/null\n+++ b/../../../escaped.txt\n@@ -0,0 +1 @@\n+evil\n"
    (tmp_path / "evil.diff").write_bytes(evil)
    with pytest.raises(UnsafePathError):
        run(project, "fold", str(tmp_path / "evil.diff"))
    assert not any(p.name == "escaped.txt" for p in tmp_path.rglob("escaped.txt"))
    assert not (project.parent / "escaped.txt").exists() and not (project / "escaped.txt").exists()


def test_a_refreshed_patch_pops_and_pushes_from_the_prefix_cache(project: Path, monkeypatch) -> None:
    """refresh records the new prefix through the engine: the daily pop/push after it finds the patch
    cached (no apply), and the files are the refreshed ones."""
    from materialize import engine

    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# refreshed\n")
    assert run(project, "refresh") == 0
    assert run(project, "pop") == 0

    def no_apply(*_args, **_kwargs):
        raise AssertionError("the refreshed patch was applied again")

    monkeypatch.setattr(engine, "apply_patch", no_apply)
    assert run(project, "push") == 0
    assert f.read_text().endswith("# refreshed\n")


def test_new_on_an_empty_stack_takes_the_only_target_and_names_the_choices_when_there_are_several(
        project: Path) -> None:
    """quilt has one tree, so `quilt new` needs no target: with one target neither do we."""
    with pytest.raises(MaterializeError, match="give --target \\(one of plugin, tt-metal\\)"):
        run(project, "new", "0001-x")
    series = project / "series" / "default.yaml"
    text = series.read_text()
    series.write_text(text[:text.index("  plugin:")] + text[text.index("patches:"):])
    assert run(project, "new", "0001-x") == 0
    assert patch_file(project, "0001-x").exists()
    assert "target: tt-metal" in series.read_text()


def test_rename_of_a_patch_that_carries_its_own_name_renames_both(project: Path) -> None:
    assert run(project, "new", "0001-x", "--target", "tt-metal") == 0
    assert run(project, "pop") == 0
    series = project / "series" / "default.yaml"
    text = series.read_text()
    indent = re.search(r"\n( *)target: tt-metal\n", text[text.index("patch: tt-metal/0001-x.patch"):]).group(1)
    series.write_text(text.replace("patch: tt-metal/0001-x.patch", f"patch: tt-metal/0001-x.patch\n{indent}name: own"))
    assert "name: own" in series.read_text()
    assert run(project, "push") == 0
    assert run(project, "rename", "0002-y") == 0
    text = series.read_text()
    assert "tt-metal/0002-y.patch" in text and "name: 0002-y" in text and patch_file(project, "0002-y").exists()
    assert run(project, "refresh") == 0


@pytest.mark.parametrize("bad", ["a/b", "12", "..", "/tmp/x-outside", "../../x-outside", "x\ny", ".patch", "sub/.."])
def test_new_and_rename_refuse_a_name_that_is_not_a_patch_name_before_writing_anything(project: Path, bad) -> None:
    """`rename a/b` wrote tt-metal/a/b.patch, then could not find it (exit 2 after the change, the workspace
    wedged on 'the series changed'); `rename /tmp/x` wrote /tmp/x.patch before the series refused it; `new 12`
    made a patch that "12" (a position) cannot name; `new .patch` one named ''."""
    from materialize.errors import SeriesError
    from materialize.workspace import edit
    from materialize.workspace.state import Workspace

    assert run(project, "new", "0001-x", "--target", "tt-metal") == 0
    series = project / "series" / "default.yaml"
    before = series.read_bytes()
    listing = sorted(p for p in project.rglob("*") if ".materialize" not in p.parts)
    ws = Workspace.open(series)
    try:
        with pytest.raises(SeriesError, match="is not a patch name"):
            edit.rename(ws, bad)
        if bad != "a/b":  # new puts a/b.patch in a folder a/ of patches_dir: the name is b
            # (a path out of patches_dir is refused by the series itself, before writing)
            with pytest.raises(SeriesError, match="is not a patch name|outside patches_dir"):
                edit.new_patch(ws, bad, target="tt-metal")
    finally:
        ws.store.close()
    assert series.read_bytes() == before
    assert sorted(p for p in project.rglob("*") if ".materialize" not in p.parts) == listing
    assert not Path("/tmp/x-outside.patch").exists() and not (project.parent / "x-outside.patch").exists()
    assert run(project, "refresh") == 0  # the workspace is not wedged


def _header(project: Path, name: str) -> bytes:
    return patch_file(project, name).read_bytes().split(b"diff --git")[0]


def _editor_that(monkeypatch: pytest.MonkeyPatch, meanwhile, text: bytes = b"reworded description\n") -> None:
    """$EDITOR as `header -e` runs it, with ``meanwhile`` run (another terminal) before it saves ``text``."""
    from materialize.workspace import edit

    def fake(files: list[str]) -> None:
        meanwhile()
        Path(files[0]).write_bytes(text)

    monkeypatch.setattr(edit, "open_editor", fake)


def test_header_e_writes_the_patch_it_opened_even_when_the_top_moves_meanwhile(project: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    run(project, "new", "0002-b", "--target", "tt-metal", "-m", "second words")
    before_a = _header(project, "0001-a")
    _editor_that(monkeypatch, lambda: run(project, "pop"))
    assert run(project, "header", "-e") == 0
    assert _header(project, "0001-a") == before_a  # never the patch that became the top
    assert _header(project, "0002-b").startswith(b"reworded description\n")


@pytest.mark.parametrize("meanwhile", ["header --set", "rename", "delete"])
def test_header_e_refuses_when_its_patch_changed_meanwhile_and_keeps_the_text(
        project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, meanwhile: str) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    run(project, "new", "0002-b", "--target", "tt-metal", "-m", "second words")
    other = tmp_path / "other.txt"
    other.write_bytes(b"the other terminal's words\n")
    actions = {"header --set": lambda: run(project, "header", "--set", str(other), "0002-b"),
               "rename": lambda: run(project, "rename", "0002-c"),
               "delete": lambda: run(project, "delete", "-r", "0002-b")}
    before_a = _header(project, "0001-a")
    _editor_that(monkeypatch, actions[meanwhile])
    with pytest.raises(MaterializeError, match="0002-b") as raised:
        run(project, "header", "-e")
    assert _header(project, "0001-a") == before_a
    if meanwhile == "header --set":
        assert _header(project, "0002-b").startswith(b"the other terminal's words\n")  # the other save stays
    kept = list((project / "work" / ".materialize" / "saved").glob("*-header/0002-b.txt"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"reworded description\n"
    assert str(kept[0]) in str(raised.value)


@pytest.mark.parametrize("command", ["refresh", "diff"])
def test_a_full_temporary_folder_is_one_line_and_exit_1_and_nothing_is_written(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys, command: str) -> None:
    import errno

    from materialize.cli import main

    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    run(project, "add", ATTN)
    wfile(project).write_text(wfile(project).read_text().replace("import ", "import  ", 1))
    before = patch_file(project, "0001-a").read_bytes()
    state = (project / "work" / ".materialize" / "state.json").read_bytes()
    real = Path.write_bytes

    def full(self: Path, data: bytes) -> int:
        if "materialize-diff-" in str(self):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    capsys.readouterr()
    assert main([command, "--series", str(project / "series" / "default.yaml")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "No space left on device" in err and "materialize-diff-" in err
    assert patch_file(project, "0001-a").read_bytes() == before
    assert (project / "work" / ".materialize" / "state.json").read_bytes() == state
    assert not list((project / "work" / ".materialize").glob("journal*"))


def test_header_e_with_a_full_temporary_folder_is_one_line(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys) -> None:
    import errno
    import tempfile

    from materialize.cli import main

    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    before = patch_file(project, "0001-a").read_bytes()
    real = Path.write_bytes

    def full(self: Path, data: bytes) -> int:
        if str(self).startswith(tempfile.gettempdir()) and self.name == "description.txt":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    monkeypatch.setenv("EDITOR", "true")
    capsys.readouterr()
    assert main(["header", "-e", "--series", str(project / "series" / "default.yaml")]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "No space left on device" in err and "description.txt" in err
    assert patch_file(project, "0001-a").read_bytes() == before


def test_edit_says_so_when_the_top_moved_while_the_editor_was_open(project: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from materialize.workspace import edit

    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first")
    run(project, "add", ATTN)
    wfile(project).write_text(wfile(project).read_text().replace("import ", "import  ", 1))
    run(project, "refresh")
    run(project, "new", "0002-b", "--target", "tt-metal", "-m", "second")

    def fake(files: list[str]) -> None:
        run(project, "pop")  # another terminal: 0001-a is the top now
        with open(files[0], "a") as handle:
            handle.write("# meant for 0002-b\n")

    monkeypatch.setattr(edit, "open_editor", fake)
    with pytest.raises(MaterializeError, match="0002-b.*0001-a") as raised:
        run(project, "edit", ATTN)
    kept = list((project / "work" / ".materialize" / "saved").glob(f"*-edit/tt-metal/{ATTN}"))
    assert len(kept) == 1 and kept[0].read_text().endswith("# meant for 0002-b\n")
    assert str(kept[0].parents[3]) in str(raised.value)


def test_delete_r_keeps_the_series_entry_beside_the_file(project: Path) -> None:
    """delete -r (and a rebase's drop, import-git --prune) kept the patch file but dropped its entry's
    why/flag/banner/status and comments with no copy: "nothing typed is dropped without a copy"."""
    yaml_path = project / "series" / "default.yaml"
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project, ATTN)
    f.write_text(f.read_text() + "# a\n")
    run(project, "refresh")
    text = yaml_path.read_text()
    entry = "    target: tt-metal\n"
    assert entry in text
    yaml_path.write_text(text.replace(entry, entry + '    # see bug 1234\n    why: "the decode stall"\n', 1))
    run(project, "pop")
    run(project, "delete", "0001-a", "-r")
    (kept,) = (project / "work" / ".materialize" / "saved").glob("*-delete/tt-metal/0001-a.patch.entry.yaml")
    saved = kept.read_text()
    assert "- patch: tt-metal/0001-a.patch" in saved and "# see bug 1234" in saved and 'why: "the decode stall"' in saved
    assert "0001-a" not in yaml_path.read_text()


# -- an editor that fails: quilt's `header -e` keeps the patch (`$EDITOR "$tmp" || exit 1`), its `edit`
# exits with the editor's status; ours wrote what a killed editor left and said 0 -------------------------

def _real_editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    script = tmp_path / "editor.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(script))


@pytest.mark.parametrize("body", ['echo "half typed" >> "$1"; kill -9 $$', 'echo "half typed" >> "$1"; exit 3'])
def test_header_e_writes_nothing_when_the_editor_fails_and_keeps_the_text(
        project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    before = patch_file(project, "0001-a").read_bytes()
    _real_editor(tmp_path, monkeypatch, body)
    with pytest.raises(MaterializeError, match="editor") as raised:
        run(project, "header", "-e")
    assert raised.value.exit_code == 1
    assert patch_file(project, "0001-a").read_bytes() == before
    kept = list((project / "work" / ".materialize" / "saved").glob("*-header/0001-a.txt"))
    assert len(kept) == 1 and kept[0].read_bytes().endswith(b"half typed\n")
    assert str(kept[0]) in str(raised.value)


def test_edit_exits_1_when_the_editor_fails_and_keeps_the_file_as_it_left_it(
        project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    _real_editor(tmp_path, monkeypatch, 'echo "# half typed" >> "$1"; exit 3')
    with pytest.raises(MaterializeError, match="status 3"):
        run(project, "edit", ATTN)
    assert wfile(project).read_bytes().endswith(b"# half typed\n")  # as quilt: the file stays added, as left
    assert run(project, "refresh") == 0
    assert b"+# half typed" in patch_file(project, "0001-a").read_bytes()


@pytest.mark.parametrize("command", [("header", "-e"), ("edit", ATTN)])
def test_a_missing_editor_is_one_line_naming_it(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path, command: tuple[str, ...]) -> None:
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "first words")
    before = patch_file(project, "0001-a").read_bytes()
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(tmp_path / "no-such-editor"))
    with pytest.raises(MaterializeError, match="no-such-editor"):
        run(project, *command)
    assert patch_file(project, "0001-a").read_bytes() == before


def test_add_says_when_it_takes_a_lower_patchs_unrefreshed_changes_into_the_top(project: Path, capsys) -> None:
    """quilt's `add` backs the file up as it is, so edits not refreshed into the patch below stay that
    patch's; ours records them in the top (README): it must say so, never silently."""
    run(project, "new", "0001-a", "--target", "tt-metal", "-m", "a")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text().replace("ID_LENGTH = 16", "ID_LENGTH = 20", 1))
    run(project, "refresh")
    f.write_text(f.read_text() + "# not refreshed into 0001-a\n")
    run(project, "new", "0002-b", "--target", "tt-metal", "-m", "b")
    capsys.readouterr()
    assert run(project, "add", ATTN) == 0
    err = capsys.readouterr().err
    assert "0001-a" in err and ATTN in err and "0002-b" in err
    assert run(project, "add", ATTN) == 2  # already the top's: no warning, only quilt's "already in patch"
    assert capsys.readouterr().err == f"File {ATTN} is already in patch 0002-b\n"


def test_delete_refused_over_unrefreshed_work_names_delete_force(project: Path) -> None:
    """`delete` of the top over its unrefreshed edit refused as "`pop` refused ... `materialize pop --force`
    saves them": that way out pops the patch and leaves it in the series (the user asked to delete it);
    the refusal names the command that was run and its own --force."""
    run(project, "new", "a", "--target", "tt-metal", "-m", "a")
    run(project, "add", "models/tt/brand.py")
    wfile(project, "models/tt/brand.py").write_text("typed\n")
    with pytest.raises(DirtyWorkspaceError, match=r"`delete` refused[\s\S]*`materialize delete --force` saves") as caught:
        run(project, "delete")
    assert "pop --force" not in str(caught.value)
    assert wfile(project, "models/tt/brand.py").read_text() == "typed\n"
    assert run(project, "delete", "--force") == 0
    assert list((project / "work" / ".materialize" / "saved").glob("*/tt-metal/models/tt/brand.py"))
