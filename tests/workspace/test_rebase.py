"""rebase onto a new pin: clean/offset/fuzz/already-upstream/conflict, --continue/--skip/--abort, --report."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from materialize.engine import materialize
from materialize.series import load_series
from materialize.store import Store
from materialize.workspace.patchtext import parse
from materialize.workspace.rebase import RebaseConflict

from .test_edit import ATTN, patch_file, run, wfile
from .test_journal import snapshot

GEN = "models/tt/generator.py"


def edit_patch(project: Path, name: str, path: str, old: str, new: str, target: str = "tt-metal") -> None:
    run(project, "new", name, "--target", target)
    run(project, "add", path)
    f = wfile(project, path, target)
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new, 1))
    run(project, "refresh")


def build_series(project: Path) -> Path:
    """Four tt-metal patches and one plugin patch, plus a v2 upstream that moves under each of them."""
    edit_patch(project, "0001-id", ATTN, "ID_LENGTH = 16", "ID_LENGTH = 20")
    edit_patch(project, "0002-plugin", "vllm/config.py", "CACHE_ENV = ", "CACHE_ENV: str = ", target="plugin")
    edit_patch(project, "0003-mat", ATTN, "    store = store or Store.open()\n",
               "    store = store or Store.open()  # one store per run\n")
    edit_patch(project, "0004-run", "scripts/run.sh", "echo run\n", "echo run fast\n")
    edit_patch(project, "0005-targets", GEN, 'TARGETS = ("tt-metal", "plugin")', 'TARGETS = ("tt-metal", "plugin", "extra")')
    v2 = project.parent / "v2"
    shutil.copytree(project / "upstream" / "tt-metal", v2)
    attn = v2 / ATTN
    text = attn.read_text().replace('"""Apply the series', '"""(v2)\n\nApply the series', 1)
    text = text.replace('PREFIX_REF = "refs/materialize/prefix/"', 'PREFIX_REF = "refs/materialize/prefix-v2/"')
    attn.write_text("# v2 header\n# two more lines\n# three\n" + text)
    (v2 / "scripts" / "run.sh").write_text("#!/bin/sh\necho run fast\n")
    gen = v2 / GEN
    gen.write_text(gen.read_text().replace('TARGETS = ("tt-metal", "plugin")', 'TARGETS = ("tt-metal", "plugin", "other")'))
    os.chmod(v2 / "scripts" / "run.sh", 0o755)
    run(project, "goto", "0003-mat")
    return v2


def statuses(done) -> dict[str, str]:
    return {o["name"] if isinstance(o, dict) else o.name: o["status"] if isinstance(o, dict) else o.status
            for o in done}


def test_rebase_stops_at_a_conflict_and_abort_restores_everything(project: Path, store: Store) -> None:
    v2 = build_series(project)
    before = snapshot(project / "series") | snapshot(project / "patches") | snapshot(project / "work")
    with pytest.raises(RebaseConflict, match="0005-targets"):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    conflicted = wfile(project, GEN).read_text()
    assert "<<<<<<< upstream (new pin)" in conflicted and ">>>>>>> patch 0005-targets" in conflicted
    assert '"other"' in conflicted and '"extra"' in conflicted
    assert run(project, "rebase", "--abort") == 0
    after = snapshot(project / "series") | snapshot(project / "patches") | snapshot(project / "work")
    saved = {k: v for k, v in after.items() if k.startswith(".materialize/saved/")}
    assert any(k.endswith("-rebase-abort/tt-metal/models/tt/generator.py") for k in saved)  # markers kept aside
    assert {k: v for k, v in after.items() if k not in saved} == before


def test_rebase_continue_leaves_an_exact_series_on_the_new_pin(project: Path, store: Store, capsys) -> None:
    v2 = build_series(project)
    old_mat = patch_file(project, "0003-mat").read_bytes()
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    state = (project / "work" / ".materialize" / "rebase" / "rebase.json").read_text()
    assert statuses(__import__("json").loads(state)["done"]) == {
        "0001-id": "fuzz", "0003-mat": "offset", "0004-run": "already-upstream"}
    f = wfile(project, GEN)
    resolved = f.read_text().split("<<<<<<< ")[0] + 'TARGETS = ("tt-metal", "plugin", "other", "extra")\n' + \
        f.read_text().split(">>>>>>> patch 0005-targets\n")[1]
    with pytest.raises(Exception, match="conflict markers"):
        run(project, "rebase", "--continue")
    f.write_text(resolved)
    capsys.readouterr()
    assert run(project, "rebase", "--continue") == 0
    assert "rebase complete" in capsys.readouterr().out

    series = load_series(project / "series" / "default.yaml")
    assert series.targets["tt-metal"].pin.path == str(v2)
    assert [p.name for p in series.patches] == ["0001-id", "0002-plugin", "0003-mat", "0005-targets"]
    assert (project / "work" / ".materialize" / "saved" / "rebase-dropped" / "tt-metal" / "0004-run.patch").exists()
    assert "# the vLLM side" in series.path.read_text()
    m = materialize(series, store=store)
    assert {h.status for r in m.reports for h in r.hunks} == {"clean"}  # offsets and fuzz refreshed away
    assert b'"other", "extra"' in m.tree("tt-metal").read_bytes(GEN)
    # the offset patch kept its hunk body byte for byte; only the @@ numbers moved
    old_h, new_h = parse(old_mat).sections[0].hunks[0], parse(patch_file(project, "0003-mat").read_bytes()).sections[0].hunks[0]
    assert new_h.body == old_h.body and new_h.old_start == old_h.old_start + 5  # 3 + 2 lines added above
    capsys.readouterr()
    run(project, "top")
    assert capsys.readouterr().out.strip() == "0003-mat"  # back where the user was


def test_rebase_skip_drops_the_conflicting_patch(project: Path, store: Store) -> None:
    v2 = build_series(project)
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    assert run(project, "rebase", "--skip") == 0
    series = load_series(project / "series" / "default.yaml")
    assert [p.name for p in series.patches] == ["0001-id", "0002-plugin", "0003-mat"]
    assert not wfile(project, GEN).exists()
    materialize(series, store=store)


def test_rebase_report_changes_nothing(project: Path, store: Store, tmp_path: Path, capsys) -> None:
    v2 = build_series(project)
    before = snapshot(project / "series") | snapshot(project / "patches") | snapshot(project / "work")
    capsys.readouterr()
    code = run(project, "rebase", "tt-metal", "--to", str(v2), "--report", "-o", str(tmp_path / "watch.md"))
    assert code == 1  # a conflict is ahead
    text = (tmp_path / "watch.md").read_text()
    for row in ("| 1 | 0001-id | fuzz |", "| 3 | 0003-mat | offset |", "| 4 | 0004-run | already-upstream |",
                "| 5 | 0005-targets | conflict |"):
        assert row in text
    after = snapshot(project / "series") | snapshot(project / "patches") | snapshot(project / "work")
    assert after == before


def test_an_interrupted_rebase_rolls_back_exactly_and_can_run_again(project: Path, store: Store) -> None:

    from .test_journal import crash_after

    v2 = build_series(project)
    before = snapshot(project / "series") | snapshot(project / "patches") | snapshot(project / "work")
    crash = crash_after(pytest.MonkeyPatch(), 1, op="rebase")  # dies half-way through the start step
    with pytest.raises(KeyboardInterrupt):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    crash.undo()
    with pytest.raises(Exception, match="interrupted `materialize rebase tt-metal --to"):
        run(project, "rebase", "--continue")
    assert run(project, "recover", "--rollback") == 0
    assert not (project / "work" / ".materialize" / "rebase" / "rebase.json").exists()
    assert (project / "series" / "default.yaml").read_bytes() == before["default.yaml"]
    # a crash inside a later step: rollback returns to that step's start, --continue carries on
    crash = crash_after(pytest.MonkeyPatch(), 1, op="rebase", args=["--continue"])  # in the first patch's step
    with pytest.raises(KeyboardInterrupt):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    crash.undo()
    assert run(project, "recover", "--rollback") == 0
    assert (project / "work" / ".materialize" / "rebase" / "rebase.json").exists()
    with pytest.raises(RebaseConflict, match="0005-targets"):
        run(project, "rebase", "--continue")
    assert run(project, "rebase", "--abort") == 0
    after = snapshot(project / "series") | snapshot(project / "patches") | snapshot(project / "work")
    assert {k: v for k, v in after.items() if not k.startswith(".materialize/saved/")} == before
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))


def test_rebase_continue_refuses_to_write_a_patch_back_empty(project: Path, store: Store) -> None:
    """Resolving the conflict to the new upstream's lines (none of the patch's) and `--continue` wrote the
    patch back empty and ended the rebase: its bytes were gone. Refused as git does ("No changes"):
    keep a change, or --skip (which keeps the file under saved/)."""
    from materialize.errors import MaterializeError

    v2 = build_series(project)
    old = patch_file(project, "0005-targets").read_bytes()
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(v2))
    wfile(project, GEN).write_bytes((v2 / GEN).read_bytes())  # "theirs": none of the patch's changes
    with pytest.raises(MaterializeError, match=r"none of its changes, so it would be written back empty.*--skip"):
        run(project, "rebase", "--continue")
    assert patch_file(project, "0005-targets").read_bytes() == old
    assert run(project, "rebase", "--skip") == 0
    assert (project / "work" / ".materialize" / "saved" / "rebase-dropped" / "tt-metal" / "0005-targets.patch").read_bytes() == old


def test_rebase_onto_a_folder_of_the_project_writes_it_relative(project: Path, capsys) -> None:
    """`--to up2` wrote the pin as an absolute `/home/me/proj/up2` plus `root: ''`: a shared series
    broke for everyone else. A folder in or beside the project stays relative to the series file."""
    v2 = build_series(project)
    inside = project / "upstream" / "tt-metal-v2"
    shutil.copytree(v2, inside)
    with pytest.raises(RebaseConflict):
        run(project, "rebase", "tt-metal", "--to", str(inside))
    text = (project / "series" / "default.yaml").read_text()
    assert "path: ../upstream/tt-metal-v2" in text and "root:" not in text and str(project) not in text
    assert run(project, "rebase", "--abort") == 0


def test_a_rebase_over_a_patch_emptied_by_hand_keeps_its_files_as_pushed(project: Path, capsys) -> None:
    """An applied patch file emptied by hand (its changes only in work/), then a rebase: the rebase carried
    the empty file and wrote work/ over, without a word; the changes were nowhere a user could reach. As
    pop does, the files as pushed are kept under saved/ and named."""
    from .test_journal import two_patches

    two_patches(project)
    p = patch_file(project, "0002-b")
    data = p.read_bytes()
    p.write_bytes(data[: data.index(b"diff --git")])
    pushed = wfile(project).read_bytes()
    v2 = project.parent / "v2"
    shutil.copytree(project / "upstream" / "tt-metal", v2)
    (v2 / "k.py").write_text("k = 1\n")
    capsys.readouterr()
    assert run(project, "rebase", "tt-metal", "--to", str(v2)) == 0
    err = capsys.readouterr().err
    kept = list((project / "work" / ".materialize" / "saved").rglob("tt-metal/models/tt/attention.py"))
    assert [k.read_bytes() for k in kept] == [pushed]
    assert str(kept[0].parents[3]) in err
