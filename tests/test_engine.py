import json
import os
import subprocess

import pytest

from materialize.engine import PREFIX_REF, materialize
from materialize.errors import PatchApplyError, UnsafePathError
from materialize.series import load_series
from materialize.store import Store

BASE = {
    "src/app.py": "".join(f"line {i}\n" for i in range(1, 41)),
    "src/util.py": "def helper():\n    return 1\n",
    "README": "hello\n",
}


def three_patch_series(builder):
    b = builder(BASE)
    b.add_patch("0001-edit-app", {"src/app.py": BASE["src/app.py"].replace("line 5\n", "line five\n")})
    b.add_patch("0002-new-file", {"src/new.py": "NEW = 1\n"})
    b.add_patch("0003-delete-readme", {"README": None, "src/util.py": "def helper():\n    return 2\n"})
    return b


def gnu_patch_result(b, upto):
    """The tree GNU patch produces by applying the first ``upto`` patches to a copy of upstream."""
    work = b.root / f"gnu-{upto}"
    subprocess.run(["cp", "-a", str(b.upstream), str(work)], check=True)
    for entry in b.patches[:upto]:
        subprocess.run(["patch", "-s", "-p1", "-F0", "--no-backup-if-mismatch", "-i",
                        str(b.root / "patches" / entry["patch"])], cwd=work, check=True)
    return {str(p.relative_to(work)): p.read_bytes() for p in work.rglob("*") if p.is_file()}


def tree_files(m, target):
    store = m.store
    return {path: store.read_blob_by_id(e.sha) for path, e in store.list_tree(m.trees[target]).items()}


def test_prefixes_match_gnu_patch(builder):
    b = three_patch_series(builder)
    series = load_series(b.write())
    for upto in range(0, 4):
        m = materialize(series, upto=upto)
        assert tree_files(m, "plugin") == gnu_patch_result(b, upto), upto
        assert len(m.applied) == upto


def test_same_code_same_id_and_prefix_reuse(builder):
    b = three_patch_series(builder)
    series = load_series(b.write())
    first = materialize(series)
    again = materialize(series)
    assert first.id == again.id
    assert all(r.reused for r in again.reports)
    # Changing only the last patch reuses 1..n-1.
    last = b.root / "patches" / "0003-delete-readme.patch"
    last.write_bytes(last.read_bytes().replace(b"+    return 2", b"+    return 3"))
    edited = materialize(load_series(b.root / "series.yaml"))
    assert [r.reused for r in edited.reports] == [True, True, False]
    assert edited.id != first.id


def test_id_depends_on_trees_not_on_history(builder):
    b = builder(BASE)
    b.add_patch("0001-a", {"README": "bye\n"})
    b.add_patch("0002-b", {"README": "hello\n"})  # back to upstream
    series = load_series(b.write())
    assert materialize(series).id == materialize(series, upto=0).id


def test_without_leaves_a_patch_out(builder):
    b = three_patch_series(builder)
    series = load_series(b.write())
    m = materialize(series, without=["0002-new-file"])
    files = tree_files(m, "plugin")
    assert "src/new.py" not in files and "README" not in files


def test_failed_patch_names_patch_file_and_hunk(builder):
    b = three_patch_series(builder)
    (b.upstream / "src" / "util.py").write_text("def helper():\n    return 42\n")
    series = load_series(b.write())
    with pytest.raises(PatchApplyError) as info:
        materialize(series)
    text = str(info.value)
    assert "0003-delete-readme" in text and "src/util.py" in text and "@@ -1,2 +1,2 @@" in text
    assert "FAILED" in text and "reject:" in text
    # The prefixes that applied are kept for next time.
    assert len(Store.open().git("for-each-ref", PREFIX_REF).splitlines()) == 2


def test_offset_is_reported(builder):
    b = builder(BASE)
    b.add_patch("0001-edit", {"src/app.py": BASE["src/app.py"].replace("line 30\n", "line thirty\n")})
    (b.upstream / "src" / "app.py").write_text("extra\n" * 3 + BASE["src/app.py"])
    m = materialize(load_series(b.write()))
    (hunk,) = m.reports[0].hunks
    assert (hunk.status, hunk.offset) == ("offset", 3)


@pytest.mark.parametrize("bad_path", ["../escape.txt", "/etc/passwd-x"])
def test_paths_escaping_the_root_are_refused(builder, bad_path):
    b = builder(BASE)
    series_path = b.write()
    patch = b.root / "patches" / "0001-evil.patch"
    patch.write_text(f"--- a/{bad_path}\n+++ b/{bad_path}\n@@ -0,0 +1 @@\n+pwned\n" if not bad_path.startswith("/")
                     else f"--- {bad_path}\n+++ {bad_path}\n@@ -0,0 +1 @@\n+pwned\n")
    doc = series_path.read_text().replace("patches: []", "patches:\n- patch: 0001-evil.patch\n  target: plugin\n  strip: "
                                          + ("1" if not bad_path.startswith("/") else "0"))
    series_path.write_text(doc)
    with pytest.raises(UnsafePathError):
        materialize(load_series(series_path))
    assert not (b.root / "escape.txt").exists()


def test_link_out_of_a_path_pin_is_refused(builder):
    b = builder(BASE)
    os.symlink("/tmp", b.upstream / "link")
    with pytest.raises(UnsafePathError, match="points outside"):
        materialize(load_series(b.write()))


def test_symlink_in_tree_is_not_followed(builder):
    b = builder(BASE)
    os.symlink("src", b.upstream / "link")
    b_series = b.write()
    patch = b.root / "patches" / "0001-through-link.patch"
    patch.write_text("--- a/link/x.txt\n+++ b/link/x.txt\n@@ -0,0 +1 @@\n+pwned\n")
    b_series.write_text(b_series.read_text().replace(
        "patches: []", "patches:\n- patch: 0001-through-link.patch\n  target: plugin"))
    with pytest.raises(UnsafePathError, match="symlink"):
        materialize(load_series(b_series))


def test_git_style_patch_rename_mode_and_new_file(builder, tmp_path):
    b = builder(BASE)
    series_path = b.write()
    (b.root / "patches" / "0001-git.patch").write_text(
        "From 1 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] rename and chmod\n\n---\n"
        "diff --git a/src/util.py b/src/helpers.py\nsimilarity index 100%\nrename from src/util.py\n"
        "rename to src/helpers.py\n"
        "diff --git a/README b/README\nold mode 100644\nnew mode 100755\n"
        "diff --git a/bin/run b/bin/run\nnew file mode 100755\nindex 0000000..1111111\n--- /dev/null\n"
        "+++ b/bin/run\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+exec true\n-- \n2.43.0\n"
    )
    series_path.write_text(series_path.read_text().replace(
        "patches: []", "patches:\n- patch: 0001-git.patch\n  target: plugin"))
    m = materialize(load_series(series_path))
    entries = m.store.list_tree(m.trees["plugin"])
    assert "src/util.py" not in entries and entries["src/helpers.py"].mode == "100644"
    assert entries["README"].mode == "100755" and entries["bin/run"].mode == "100755"
    report = json.loads(json.dumps(m.reports[0].to_json()))
    assert "src/util.py" in report["deleted"]


def test_binary_patch_is_refused_naming_the_file(builder):
    b = builder(BASE)
    series_path = b.write()
    (b.root / "patches" / "0001-bin.patch").write_text(
        "diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..d00491f\n"
        "GIT binary patch\nliteral 1\nIcmZPo000310RR91\n\nliteral 0\nHcmV?d00001\n\n"
    )
    series_path.write_text(series_path.read_text().replace(
        "patches: []", "patches:\n- patch: 0001-bin.patch\n  target: plugin"))
    with pytest.raises(PatchApplyError, match=r"File logo.png: git binary diffs are not supported"):
        materialize(load_series(series_path))


def test_crlf_file_and_missing_newline(builder):
    b = builder({"win.txt": b"one\r\ntwo\r\nthree\r\n", "tail.txt": b"a\nb"})
    b.add_patch("0001-crlf", {"win.txt": b"one\r\nTWO\r\nthree\r\n", "tail.txt": b"a\nB"})
    m = materialize(load_series(b.write()))
    assert tree_files(m, "plugin")["win.txt"] == b"one\r\nTWO\r\nthree\r\n"
    assert tree_files(m, "plugin")["tail.txt"] == b"a\nB"
    assert tree_files(m, "plugin") == gnu_patch_result(b, 1)


def test_compressed_patches_are_read_as_quilt_reads_them(builder):
    import bz2
    import gzip
    import lzma

    b = builder(BASE)
    b.add_patch("0001-edit-app", {"src/app.py": BASE["src/app.py"].replace("line 5\n", "line five\n")})
    b.add_patch("0002-util", {"src/util.py": "def helper():\n    return 2\n"})
    b.add_patch("0003-readme", {"README": "bye\n"})
    plain = materialize(load_series(b.write()))
    for entry, (suffix, compress) in zip(b.patches, [(".gz", gzip.compress), (".bz2", bz2.compress),
                                                     (".xz", lzma.compress)], strict=True):
        path = b.root / "patches" / entry["patch"]
        (path.parent / (path.name + suffix)).write_bytes(compress(path.read_bytes()))
        path.unlink()
        entry["patch"] += suffix
    series = load_series(b.write())
    assert [p.name for p in series.patches] == ["0001-edit-app", "0002-util", "0003-readme"]
    m = materialize(series)
    assert m.id == plain.id and sum(len(r.hunks) for r in m.reports) == 3


def test_reverse_entry_applies_as_patch_R_and_forward_gets_gnus_hint(builder):
    b = builder(BASE)
    b.add_patch("0001-edit", {"README": "bye\n"})
    b.add_patch("0002-undo", {"README": "hello\n"})
    series_path = b.write()
    # 0002 becomes a copy of 0001 marked `reverse: true`: `patch -R` of it undoes 0001.
    import yaml

    doc = yaml.safe_load(series_path.read_text())
    doc["patches"] = [doc["patches"][0], {"patch": "0002-undo.patch", "target": "plugin", "reverse": True}]
    (b.root / "patches" / "0002-undo.patch").write_bytes((b.root / "patches" / "0001-edit.patch").read_bytes())
    series_path.write_text(yaml.safe_dump(doc))
    m = materialize(load_series(series_path))
    assert m.id == materialize(load_series(series_path), upto=0).id
    doc["patches"][1]["reverse"] = False
    series_path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PatchApplyError, match=r"Reversed \(or previously applied\) patch detected"):
        materialize(load_series(series_path))


def test_any_target_name_works(builder):
    b = builder({"kernel/main.c": "int x;\n"}, target="linux")
    b.add_patch("0001-k", {"kernel/main.c": "int y;\n"})
    docs = b.root / "docs-up"
    docs.mkdir()
    (docs / "index.md").write_text("# docs\n")
    series = load_series(b.write(extra_targets={"docs": {"pin": {"kind": "path", "path": "docs-up"}}}))
    m = materialize(series)
    assert set(m.trees) == {"linux", "docs"}
    assert m.store.read_blob(m.trees["linux"], "kernel/main.c") == b"int y;\n"


def test_any_target_name_works_through_the_daily_commands(builder, monkeypatch, capsys):
    """Targets are named by the series only: apply, status and the workspace stack work for `linux`
    and `docs` as they do for the shipped names."""
    import json

    from materialize.cli import main

    b = builder({"kernel/main.c": "int x;\n"}, target="linux")
    b.add_patch("0001-k", {"kernel/main.c": "int y;\n"})
    docs = b.root / "docs-up"
    docs.mkdir()
    (docs / "index.md").write_text("# docs\n")
    series_path = b.write(extra_targets={"docs": {"pin": {"kind": "path", "path": "docs-up"}}})
    monkeypatch.chdir(b.root)
    series = ["--series", str(series_path)]
    assert main(["apply", "--overlay", *series]) == 0
    capsys.readouterr()
    assert main(["status", "--json", *series]) == 0
    status = json.loads(capsys.readouterr().out)
    assert "linux" in json.dumps(status)
    assert main(["push", "-a", *series]) == 0
    pushed = list(b.root.parent.glob("**/work/linux/kernel/main.c"))  # work/ sits beside series/'s folder
    assert [p.read_text() for p in pushed] == ["int y;\n"]
    assert main(["new", "0002-docs", "--target", "docs", *series]) == 0
    assert main(["pop", "-a", *series]) == 0
