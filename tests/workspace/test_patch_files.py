"""The patch files themselves, as users keep them: compressed (quilt's `.patch.gz`), or edited by hand
while applied. Every command that writes a patch file writes it the way it was kept, and none silently
overwrites a hand edit with what work/ holds."""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
from pathlib import Path

import pytest

from materialize.errors import MaterializeError

from .test_edit import ATTN, patch_file, run, wfile

COMPRESS = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}


def first_patch(project: Path) -> Path:
    """0001-a appends "# first" to ATTN and is refreshed; its work/ file is returned."""
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# first\n")
    run(project, "refresh")
    return f


def hand_edit(patch: Path) -> bytes:
    """Edit 0001-a's added line in the patch file itself, as a user would; the new bytes."""
    patch.write_bytes(patch.read_bytes().replace(b"+# first\n", b"+# first, by hand\n"))
    return patch.read_bytes()


def compressed_patch(project: Path, suffix: str) -> Path:
    """One refreshed patch, then compressed in place as a quilt user (or dpkg-source) keeps it."""
    first_patch(project)
    run(project, "pop")
    plain = patch_file(project, "0001-a")
    packed = plain.with_name(plain.name + suffix)
    packed.write_bytes({".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}[suffix](plain.read_bytes()))
    plain.unlink()
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("0001-a.patch", "0001-a.patch" + suffix))
    return packed


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_refresh_of_a_compressed_patch_writes_it_compressed(project: Path, suffix: str) -> None:
    """refresh wrote the plain diff into 0001-a.patch.gz: the series no longer loaded (rolled back, but
    a compressed patch could never be refreshed). quilt recompresses by the file's suffix."""
    packed = compressed_patch(project, suffix)
    assert run(project, "push") == 0
    f = wfile(project)
    f.write_text(f.read_text() + "# second\n")
    assert run(project, "refresh") == 0
    text = COMPRESS[suffix](packed.read_bytes())
    assert b"+# first\n" in text and b"+# second\n" in text
    assert run(project, "pop") == 0 and run(project, "push") == 0
    assert f.read_text().endswith("# first\n# second\n")


def test_header_of_a_compressed_patch_keeps_it_compressed(project: Path, tmp_path: Path) -> None:
    packed = compressed_patch(project, ".gz")
    text = tmp_path / "h.txt"
    text.write_text("Subject: a new description\n")
    assert run(project, "header", "--set", str(text), "0001-a") == 0
    data = gzip.decompress(packed.read_bytes())
    assert data.startswith(b"Subject: a new description\n") and b"+# first\n" in data
    assert run(project, "push") == 0


def test_rename_of_a_compressed_patch_moves_its_bytes_and_keeps_its_suffixes(project: Path) -> None:
    """rename copied the decompressed bytes into `uno.gz`: a plain diff under a .gz name, and every later
    command failed to load the series (exit 2) until the file was fixed by hand."""
    packed = compressed_patch(project, ".gz")
    raw = packed.read_bytes()
    assert run(project, "rename", "-P", "0001-a", "uno") == 0
    renamed = packed.with_name("uno.patch.gz")
    assert renamed.read_bytes() == raw and not packed.exists()
    assert "tt-metal/uno.patch.gz" in (project / "series" / "default.yaml").read_text()
    assert run(project, "push") == 0


def test_rebase_abort_restores_a_compressed_patch_byte_for_byte(project: Path) -> None:
    """The rebase backup held the decompressed text, and --abort wrote it back under the .gz name."""
    packed = compressed_patch(project, ".gz")
    raw = packed.read_bytes()
    upstream = project / "upstream" / "tt-metal" / "models" / "tt" / "attention.py"
    moved = project / "upstream-2"
    shutil.copytree(project / "upstream" / "tt-metal", moved)
    target = moved / "models" / "tt" / "attention.py"
    lines = upstream.read_text().splitlines(keepends=True)
    target.write_text("".join(lines[:-1]) + "# upstream rewrote its last line\n")  # the patch's context: conflict
    run(project, "push")
    with pytest.raises(MaterializeError, match="rebase stopped: 0001-a"):
        run(project, "rebase", "tt-metal", "--to", str(moved))
    assert run(project, "rebase", "--abort") == 0
    assert packed.read_bytes() == raw


def test_refresh_refuses_to_overwrite_a_patch_edited_by_hand_while_applied(project: Path, capsys) -> None:
    """quilt's pop notices a patch file newer than its push ("does not remove cleanly"); our refresh wrote
    what work/ holds over the hand edit, which work/ never saw: the edit was gone without a word."""
    f = first_patch(project)
    p = patch_file(project, "0001-a")
    edited = hand_edit(p)
    with pytest.raises(MaterializeError, match=r"0001-a.patch was changed since it was pushed"):
        run(project, "refresh")
    assert p.read_bytes() == edited
    # the way out the message names: pop and push it again (work/ then holds the edit), then refresh
    assert run(project, "pop") == 0 and run(project, "push") == 0
    assert f.read_text().endswith("# first, by hand\n")
    assert run(project, "refresh") == 0 and p.read_bytes() == edited
    # or refresh --force: what work/ holds wins, on purpose
    p.write_bytes(edited.replace(b"by hand", b"by hand again"))
    assert run(project, "refresh", "--force") == 0
    assert b"by hand again" not in p.read_bytes() and b"+# first, by hand\n" in p.read_bytes()


def test_a_header_edit_does_not_bless_a_hand_edited_diff(project: Path, tmp_path: Path) -> None:
    """`header --set` re-recorded every applied patch's sha256, so a diff edited by hand before it was
    recorded as the one pushed, and the next refresh dropped the edit without a word."""
    first_patch(project)
    p = patch_file(project, "0001-a")
    hand_edit(p)
    text = tmp_path / "h.txt"
    text.write_text("Subject: described\n")
    assert run(project, "header", "--set", str(text)) == 0
    with pytest.raises(MaterializeError, match="changed since it was pushed"):
        run(project, "refresh")
    assert b"+# first, by hand\n" in p.read_bytes()


def test_refresh_refuses_while_a_lower_patch_was_edited_by_hand(project: Path) -> None:
    """refresh diffs the top against the series as it is now: with 0001 edited by hand (and work/ still
    holding the pushed 0001), 0002 recorded the reverse of that edit as its own hunk."""
    f = first_patch(project)
    run(project, "new", "0002-b", "--target", "tt-metal")
    run(project, "add", ATTN)
    f.write_text(f.read_text() + "# second\n")
    lower = patch_file(project, "0001-a")
    hand_edit(lower)
    top = patch_file(project, "0002-b").read_bytes()
    for args in ([], ["--force"]):
        with pytest.raises(MaterializeError, match="would record the reverse of that change"):
            run(project, "refresh", *args)
    assert patch_file(project, "0002-b").read_bytes() == top


def test_a_reversed_patch_refreshes_forward_and_loses_its_reverse_flag(project: Path) -> None:
    """`reverse: true` (a quilt -R entry): refresh diffed forward, then applied that diff reversed to check
    it ("Reversed (or previously applied) patch detected!", exit 1), so the edit could not be recorded and
    pop refused until `pop -f`. quilt's refresh writes the patch forward and drops the -R; so do we."""
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    pristine = (project / "upstream" / "tt-metal" / ATTN).read_bytes()
    f.write_text(f.read_text() + "# upstream had this\n")
    run(project, "refresh")
    run(project, "pop")
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("    target: tt-metal\n", "    target: tt-metal\n    reverse: true\n"))
    # the reversed patch removes the line; work on it as the upstream that has the line
    (project / "upstream" / "tt-metal" / ATTN).write_text(f"{pristine.decode()}# upstream had this\n")
    assert run(project, "push") == 0
    assert f.read_bytes() == pristine
    f.write_text(f.read_text() + "# and mine\n")
    assert run(project, "refresh") == 0
    data = patch_file(project, "0001-a").read_bytes()
    assert b"-# upstream had this\n" in data and b"+# and mine\n" in data
    assert "reverse" not in series.read_text()
    assert run(project, "pop") == 0 and run(project, "push") == 0
    assert f.read_bytes() == pristine + b"# and mine\n"


def test_refresh_refuses_when_a_path_pin_changed_under_work(project: Path) -> None:
    """A path pin is re-read on every run: `git pull` in the upstream checkout while a patch is applied
    made refresh diff the new upstream against work/ (written from the old one), so the patch recorded
    the reverse of upstream's change as its own, without a word."""
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# mine\n")
    run(project, "refresh")
    upstream = project / "upstream" / "tt-metal" / ATTN
    upstream.write_text(upstream.read_text().replace("import ", "import  ", 1))  # upstream moved on
    f.write_text(f.read_text() + "# more of mine\n")
    before = patch_file(project, "0001-a").read_bytes()
    with pytest.raises(MaterializeError, match="upstream of tt-metal changed since work/ was written"):
        run(project, "refresh")
    assert patch_file(project, "0001-a").read_bytes() == before
    # the way out: save the edit aside, move, and the workspace is written from the new upstream
    assert run(project, "pop", "--force") == 0 and run(project, "push") == 0
    assert f.read_text().count("import  ") == 1
    f.write_text(f.read_text() + "# more of mine\n")
    assert run(project, "refresh") == 0
    data = patch_file(project, "0001-a").read_bytes()
    assert b"import  " not in data and b"+# more of mine\n" in data


def test_push_writes_a_file_whose_patched_content_equals_the_old_upstream(project: Path) -> None:
    """The workspace compared the new tree with the base recorded when work/ was first written; after a
    path pin changed, a patched file equal to the old upstream file was not written at all (and the
    next refresh would have read its absence as a deletion)."""
    pristine = (project / "upstream" / "tt-metal" / ATTN).read_bytes()
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# upstream had this\n")
    run(project, "refresh")
    run(project, "pop")
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("    target: tt-metal\n", "    target: tt-metal\n    reverse: true\n"))
    (project / "upstream" / "tt-metal" / ATTN).write_bytes(pristine + b"# upstream had this\n")
    assert run(project, "push") == 0
    assert f.read_bytes() == pristine


def test_patch_files_removed_by_a_command_are_all_kept_even_with_one_name(project: Path) -> None:
    """delete -r, a rebase's drop and import-git --prune kept a removed patch file as saved/<op>/<file
    name>: riscv/flaky.patch and mips/flaky.patch (quilt names patches by path) went to one name, and
    the first copy, the only one left, was overwritten."""
    for arch in ("riscv", "mips"):
        folder = project / "patches" / "tt-metal" / arch
        folder.mkdir()
        (folder / "flaky.patch").write_text(f"Subject: flaky on {arch}\n")
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("patches: []", "patches:\n"
                      "  - {patch: tt-metal/riscv/flaky.patch, name: riscv-flaky, target: tt-metal}\n"
                      "  - {patch: tt-metal/mips/flaky.patch, name: mips-flaky, target: tt-metal}\n"))
    from materialize.workspace.state import Workspace

    ws = Workspace.open(series)
    for entry in ws.series.patches:
        ws.keep_patch(entry, "rebase-dropped")
        ws.keep_patch(entry, "rebase-dropped")  # a later drop of a patch of that name
    kept = sorted(p.read_text() for p in (project / "work" / ".materialize" / "saved").rglob("flaky.patch*"))
    assert kept == ["Subject: flaky on mips\n"] * 2 + ["Subject: flaky on riscv\n"] * 2
    assert run(project, "delete", "-r", "riscv-flaky") == 0 and run(project, "delete", "-r", "mips-flaky") == 0
    kept = [p for p in (project / "work" / ".materialize" / "saved").glob("*-delete/**/flaky.patch*")
            if not p.name.endswith(".entry.yaml")]  # (each entry's series lines are kept beside its file)
    assert sorted(p.read_text() for p in kept) == ["Subject: flaky on mips\n", "Subject: flaky on riscv\n"]
    entries = sorted(p.read_text() for p in (project / "work" / ".materialize" / "saved").glob("*-delete/**/*.entry.yaml"))
    assert len(entries) == 2 and all("flaky.patch" in e for e in entries)


def test_add_refuses_a_folder(project: Path) -> None:
    """`add models` recorded the folder as a file of the patch: nothing to refresh, and nothing said."""
    run(project, "new", "0001-a", "--target", "tt-metal")
    with pytest.raises(MaterializeError, match="is a folder"):
        run(project, "add", "models/tt")
    (project / "work" / "tt-metal" / "fresh").mkdir(parents=True)
    with pytest.raises(MaterializeError, match="is a folder"):
        run(project, "add", "fresh")


def test_an_underline_of_seven_equals_signs_is_no_conflict_marker(project: Path) -> None:
    """A heading underlined with exactly seven '=' (Markdown's setext, reStructuredText: "Summary") was
    taken for a conflict marker, so a patch adding one could never be refreshed; a real conflict block
    is still refused."""
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", "NOTES.md")
    notes = wfile(project, "NOTES.md")
    notes.parent.mkdir(parents=True, exist_ok=True)
    notes.write_text("Summary\n=======\n\ntext\n")
    assert run(project, "refresh") == 0
    notes.write_text("Summary\n=======\n\n<<<<<<< ours\ntext\n=======\nother\n>>>>>>> theirs\n")
    with pytest.raises(MaterializeError, match=r"NOTES.md:4.*NOTES.md:6.*NOTES.md:8"):
        run(project, "refresh")


def test_a_rebase_carries_a_reversed_patch_across_an_offset(project: Path) -> None:
    """A `reverse: true` patch that applied with an offset on the new upstream was regenerated forward and
    checked by applying it reversed: the rebase died on its own patch half-way (exit 1, in progress, no
    conflict to resolve). It is written forward now and loses the flag, as refresh does."""
    upstream = project / "upstream" / "tt-metal" / ATTN
    pristine = upstream.read_bytes()
    run(project, "new", "0001-a", "--target", "tt-metal")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_bytes(b"# upstream had this\n" + pristine)
    run(project, "refresh")
    run(project, "pop")
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("    target: tt-metal\n", "    target: tt-metal\n    reverse: true\n"))
    upstream.write_bytes(b"# upstream had this\n" + pristine)
    moved = project / "upstream-2"
    shutil.copytree(project / "upstream" / "tt-metal", moved)
    (moved / ATTN).write_bytes(b"# a new first line\n# upstream had this\n" + pristine)
    assert run(project, "push") == 0
    assert run(project, "rebase", "tt-metal", "--to", str(moved)) == 0
    assert "reverse" not in series.read_text()
    assert f.read_bytes() == b"# a new first line\n" + pristine


def test_new_refuses_a_name_leading_out_of_patches_dir_before_writing(project: Path, monkeypatch) -> None:
    """`new ../../x` wrote ../../x.patch beside the project, then the series' reload refused the entry
    and the journal removed the file again: refused now before anything is written."""
    from materialize.workspace import journal

    written = []
    real = journal.atomic_write
    monkeypatch.setattr(journal, "atomic_write", lambda path, *a, **k: (written.append(path), real(path, *a, **k)))
    with pytest.raises(MaterializeError, match="outside patches_dir"):
        run(project, "new", "../../outside", "--target", "tt-metal")
    assert not [p for p in written if "outside" in str(p)]
