"""Full outputs are hard links into a read-only, content-addressed file cache: a second output shares
every file's inode (no new bytes), the executable bit survives, an entry tampered with through a link
is never handed out again, and gc removes entries no output uses."""

from __future__ import annotations

import os
import shutil
import stat

from materialize.cli import main
from materialize.engine import materialize
from materialize.filecache import FileCache
from materialize.output import write_output
from materialize.series import load_series
from materialize.store import Store

BASE = {"pkg/mod.py": "X = 1\n", "pkg/same.py": "S = 0\n", "pkg/same2.py": "S = 0\n", "bin/tool": "#!/bin/sh\n"}


def make_series(builder):
    b = builder(BASE)
    os.chmod(b.upstream / "bin" / "tool", 0o755)
    b.add_patch("0001-x", {"pkg/mod.py": "X = 10\n"})
    return load_series(b.write())


def files_of(root):
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def test_second_full_output_shares_every_file(builder, tmp_path):
    series = make_series(builder)
    first = write_output(materialize(series, upto=1), tmp_path / "one")
    second = write_output(materialize(series, upto=0), tmp_path / "two")
    a, b = files_of(first / "plugin"), files_of(second / "plugin")
    assert sorted(a) == sorted(b) == ["bin/tool", "pkg/mod.py", "pkg/same.py", "pkg/same2.py"]
    shared = [rel for rel in a if os.stat(a[rel]).st_ino == os.stat(b[rel]).st_ino]
    assert sorted(shared) == ["bin/tool", "pkg/same.py", "pkg/same2.py"]  # mod.py differs between them
    assert os.stat(a["pkg/same.py"]).st_ino == os.stat(a["pkg/same2.py"]).st_ino  # same content, one file
    assert (a["pkg/mod.py"].read_text(), b["pkg/mod.py"].read_text()) == ("X = 10\n", "X = 1\n")
    assert stat.S_IMODE(os.stat(a["bin/tool"]).st_mode) == 0o555
    assert stat.S_IMODE(os.stat(a["pkg/mod.py"]).st_mode) == 0o444
    assert not (first / "manifest.json").stat().st_nlink > 1  # the manifest is the output's own file


def test_a_file_edited_through_a_link_is_not_reused(builder, tmp_path):
    series = make_series(builder)
    m = materialize(series)
    first = write_output(m, tmp_path / "one")
    victim = first / "plugin" / "pkg" / "same.py"
    with open(victim, "a") as handle:  # root ignores the 0444 mode: the cache entry is now wrong
        handle.write("TAMPERED = 1\n")
    second = write_output(m, tmp_path / "two")
    assert (second / "plugin" / "pkg" / "same.py").read_text() == "S = 0\n"
    assert os.stat(second / "plugin" / "pkg" / "same.py").st_ino != os.stat(victim).st_ino


def test_gc_prunes_entries_no_output_uses(builder, tmp_path, monkeypatch):
    series = make_series(builder)
    monkeypatch.chdir(tmp_path)
    old = write_output(materialize(series, upto=0))
    new = write_output(materialize(series, upto=1))
    cache = FileCache(Store.open())
    before = {p for p in cache.root.rglob("*") if p.is_file()}
    assert len(before) == 4  # mod.py twice (two contents), same.py once, tool once
    assert main(["gc", "--keep", "1"]) == 0
    assert not old.exists() and new.exists()
    after = {p for p in cache.root.rglob("*") if p.is_file()}
    assert len(after) == 3  # the old mod.py content is gone; everything `new` uses stays
    shutil.rmtree(new)
    assert cache.prune()[0] == 3
