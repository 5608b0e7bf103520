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


def test_a_cold_import_warms_the_cache_as_it_streams(tmp_path, monkeypatch):
    """With ``warming``, a tarball import writes every file's cache entry (right bytes, right bit)
    while it streams, so the full output that follows only links: nothing is read back from git."""
    import json
    import tarfile

    src = tmp_path / "proj-1"
    files = {f"d{i % 5}/f{i}.py": f"V = {i}\n" * (i + 1) for i in range(40)}
    files["bin/run"] = "#!/bin/sh\n"
    files["big.bin"] = "x" * 300_000
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    (src / "bin" / "run").chmod(0o755)
    (src / "link").symlink_to("d0/f0.py")
    with tarfile.open(tmp_path / "proj-1.tar.xz", "w:xz") as tar:
        tar.add(src, arcname="proj-1")
    series_path = tmp_path / "series.yaml"
    series_path.write_text(json.dumps({"version": 1, "targets": {"plugin": {"pin": {
        "kind": "tarball", "path": "proj-1.tar.xz"}}}, "patches": []}))
    store = Store.open(tmp_path / "cache")
    cache = FileCache(store)
    with cache.warming():
        m = materialize(load_series(series_path), store=store)
    listing = store.list_tree(m.trees["plugin"])
    for rel, entry in listing.items():
        if entry.mode == "120000":
            continue
        path = cache.path(entry.sha, entry.mode)
        assert path.read_bytes() == files[rel].encode()
        assert stat.S_IMODE(os.stat(path).st_mode) == (0o555 if rel == "bin/run" else 0o444)

    def no_reads(*_args, **_kwargs):
        raise AssertionError("the warmed cache must not be read back from git")

    monkeypatch.setattr(store, "read_blobs", no_reads)
    out = write_output(m, tmp_path / "out")
    assert (out / "plugin" / "big.bin").read_text() == files["big.bin"]
    assert os.readlink(out / "plugin" / "link") == "d0/f0.py"
    assert store.blob_sink is None
