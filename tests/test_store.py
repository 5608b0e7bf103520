import subprocess
from pathlib import Path

from materialize.store import EMPTY_TREE, Store


def fsck(store: Store) -> None:
    proc = subprocess.run(["git", "--git-dir", str(store.git_dir), "fsck", "--strict"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_trees_are_valid_git_objects_with_git_ordering(tmp_path):
    store = Store.open(tmp_path)
    # "a-b" sorts before "a/" in git's order but after "a" as a plain string: a classic tree-sort trap.
    tree = store.write_tree(EMPTY_TREE, {"a/b.txt": ("100644", b"x\n"), "a-b": ("100644", b"y"),
                                         "run": ("100755", b"#!/bin/sh\n"), "a/c/link": ("120000", b"../b.txt")})
    fsck(store)
    assert sorted(store.list_tree(tree)) == ["a-b", "a/b.txt", "a/c/link", "run"]
    assert store.git("ls-tree", "-r", "--name-only", tree).decode().split() == ["a-b", "a/b.txt", "a/c/link", "run"]
    assert store.lookup(tree, "a") is None and store.lookup(tree, "a/c/link").mode == "120000"


def test_writing_on_a_base_never_changes_the_base(tmp_path):
    store = Store.open(tmp_path)
    base = store.write_tree(EMPTY_TREE, {"d/a": ("100644", b"1\n")})
    store.write_tree(base, {"d/a": ("100644", b"2\n"), "d/b": ("100644", b"3\n")})
    assert store.read_blob(base, "d/a") == b"1\n"
    assert store.lookup(base, "d/b") is None
    emptied = store.write_tree(base, {"d/a": None})
    assert emptied == EMPTY_TREE and store.read_blob(base, "d/a") == b"1\n"


def test_commits_are_deterministic_and_git_readable(tmp_path):
    one, two = Store.open(tmp_path / "one"), Store.open(tmp_path / "two")
    commits = []
    for store in (one, two):
        tree = store.write_tree(EMPTY_TREE, {"f": ("100644", b"same\n")})
        commits.append(store.commit(tree, [], "prefix 1\n\n{}\n"))
        fsck(store)
    assert commits[0] == commits[1]
    assert one.git("log", "--format=%s", commits[0]).decode().strip() == "prefix 1"
    assert one.commit_message(commits[0]) == "prefix 1\n\n{}\n"


def test_a_file_deleted_to_make_room_for_a_directory_in_either_order(tmp_path):
    """A patch that deletes the link (or file) ``s`` and creates ``s/f``: both orders of the changes
    give the directory, and a deletion never removes a directory the same changes create."""
    store = Store.open(tmp_path / "c")
    base = store.write_tree(EMPTY_TREE, {"s": ("120000", b"a"), "a/x": ("100644", b"x\n")})
    for changes in ({"s": None, "s/f": ("100644", b"f\n")}, {"s/f": ("100644", b"f\n"), "s": None}):
        tree = store.write_tree(base, changes)
        assert sorted(store.list_tree(tree)) == ["a/x", "s/f"]
    import pytest

    from materialize.errors import MaterializeError

    with pytest.raises(MaterializeError, match="a file and a directory would share the name 's'"):
        store.write_tree(base, {"s": ("100644", b"file\n"), "s/f": ("100644", b"f\n")})


def test_git_children_die_with_a_killed_materialize(tmp_path):
    """A ``kill -9`` of materialize takes its git processes with it (the parent-death signal, set by
    ``setpriv`` where it works, else by a preexec_fn), whichever way they were started."""
    import os
    import signal
    import sys
    import time

    script = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "from materialize.store import Store, dying_with_parent\n"
        "import subprocess\n"
        "store = Store.open(Path(sys.argv[1]))\n"
        "reader = store._reader()\n"
        "argv, preexec = dying_with_parent(['sleep', '60'])\n"
        "sleeper = subprocess.Popen(argv, preexec_fn=preexec)\n"
        "print(reader.pid, sleeper.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "cache")], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    children = [int(pid) for pid in proc.stdout.readline().split()]
    assert len(children) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    alive = children
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = []
        for pid in children:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            if state != "Z":  # a zombie is dead (its parent, killed, never reaped it)
                alive.append(pid)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running after their parent was killed: {alive}"


def test_that_setpriv_works_is_checked_once_per_binary(tmp_path, monkeypatch):
    """The check runs setpriv once; later commands read the answer from the cache (keyed by the
    binary's identity) instead of starting one more process."""
    import shutil
    import subprocess

    import pytest

    from materialize import store as module

    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv here: children die through the preexec_fn")
    module._setpriv.cache_clear()
    path = module._setpriv(tmp_path)
    assert path is not None and (tmp_path / "setpriv-works").read_text().startswith(str(Path(path).resolve()))
    module._setpriv.cache_clear()

    def no_check(*_args, **_kwargs):
        raise AssertionError("setpriv was run again")

    monkeypatch.setattr(subprocess, "run", no_check)
    assert module._setpriv(tmp_path) == path
    (tmp_path / "setpriv-works").write_text("another binary\n")
    module._setpriv.cache_clear()
    with pytest.raises(AssertionError, match="run again"):
        module._setpriv(tmp_path)
    module._setpriv.cache_clear()


def _loose(store: Store) -> list[Path]:
    return [p for p in (store.git_dir / "objects").glob("??/*")]


def _packs(store: Store) -> list[Path]:
    return sorted((store.git_dir / "objects" / "pack").glob("pack-*.idx"))


def test_a_batch_writes_many_objects_as_one_pack_that_git_verifies(tmp_path):
    """Sizes that need 1, 2 and 3 header bytes, an empty blob, 1 MiB: git must read each back as is."""
    store = Store.open(tmp_path)
    blobs = [b"", b"x", b"y" * 15, b"z" * 16, b"w" * 2047, b"v" * 2048, bytes(range(256)) * 4096]
    blobs += [b"file %d\n" % i for i in range(100)]
    with store.batch():
        shas = [store.write_object("blob", data) for data in blobs]
        tree = store.write_tree(EMPTY_TREE, {f"d{i % 7}/f{i}": ("100644", data) for i, data in enumerate(blobs)})
        commit = store.commit(tree, [], "batch\n")
        assert _loose(store) == [] and _packs(store) == []  # held in memory meanwhile...
        assert store.read_object(shas[6]) == ("blob", blobs[6])  # ...and read from there
    assert _loose(store) == [] and len(_packs(store)) == 1
    for idx in _packs(store):
        subprocess.run(["git", "verify-pack", str(idx)], check=True, capture_output=True)
    fsck(store)
    for sha, data in zip(shas, blobs, strict=True):
        expected = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True)
        assert sha == expected.stdout.decode().strip()
        assert subprocess.run(["git", "--git-dir", str(store.git_dir), "cat-file", "blob", sha],
                              capture_output=True, check=True).stdout == data
    assert store.tree_of(commit) == tree


def test_a_small_batch_stays_loose_and_a_ref_never_names_an_object_not_on_disk(tmp_path):
    store = Store.open(tmp_path)
    with store.batch():
        commit = store.commit(store.write_tree(EMPTY_TREE, {"f": ("100644", b"one\n")}), [], "one\n")
        store.set_refs({"refs/materialize/test": commit})  # writes what the batch holds first
        check = subprocess.run(["git", "--git-dir", str(store.git_dir), "cat-file", "-e", "refs/materialize/test^{tree}"])
        assert check.returncode == 0
    assert _packs(store) == [] and len(_loose(store)) == 3
    fsck(store)


def test_a_batch_interrupted_by_an_error_still_stores_what_it_held(tmp_path):
    store = Store.open(tmp_path)
    try:
        with store.batch():
            sha = store.write_object("blob", b"kept\n")
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert store.git("cat-file", "blob", sha) == b"kept\n"
    assert not list((store.git_dir / "objects").rglob("tmp_*"))


def test_refs_are_looked_up_loose_or_packed_as_git_would(tmp_path):
    store = Store.open(tmp_path)
    one = store.commit(store.write_tree(EMPTY_TREE, {"f": ("100644", b"1\n")}), [], "one\n")
    two = store.commit(store.write_tree(EMPTY_TREE, {"f": ("100644", b"2\n")}), [], "two\n")
    store.set_refs({"refs/materialize/prefix/a": one, "refs/materialize/prefix/b": one})
    subprocess.run(["git", "--git-dir", str(store.git_dir), "pack-refs", "--all"], check=True)
    store.set_refs({"refs/materialize/prefix/b": two})  # loose again, over its packed value
    wanted = ["refs/materialize/prefix/a", "refs/materialize/prefix/b", "refs/materialize/prefix/none"]
    assert store.lookup_refs(wanted) == {wanted[0]: one, wanted[1]: two}
    for ref, sha in store.lookup_refs(wanted).items():
        assert store.git("rev-parse", ref).decode().strip() == sha


def test_a_pack_whose_index_never_arrived_is_swept_by_the_next_batch(tmp_path):
    """A kill between the pack's rename and its index's leaves a pack git ignores: disk only."""
    store = Store.open(tmp_path)
    folder = store.git_dir / "objects" / "pack"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pack-0123.pack").write_bytes(b"PACK half")
    (folder / "tmp_pack-0456.idx_99").write_bytes(b"half")
    with store.batch():
        for i in range(100):
            store.write_object("blob", b"%d\n" % i)
    assert sorted(p.suffix for p in folder.iterdir()) == [".idx", ".pack"]
    fsck(store)


def test_get_ref_names_only_a_commit_the_store_still_has(tmp_path):
    """A pin's ref is read in-process; a ref to a lost or damaged object, or to no commit, is no ref
    (the pin is imported again), as `git rev-parse --verify REF^{commit}` answered."""
    store = Store.open(tmp_path)
    commit = store.commit(store.write_tree(EMPTY_TREE, {"a": ("100644", b"a\n")}), [], "pin\n")
    blob = store.write_blob(b"not a commit\n")
    lost = store.commit(EMPTY_TREE, [], "lost\n")
    store.set_refs({"refs/materialize/pins/ok": commit, "refs/materialize/pins/blob": blob,
                    "refs/materialize/pins/lost": lost})
    Path(store._loose_path(lost)).unlink()
    subprocess.run(["git", "--git-dir", str(store.git_dir), "pack-refs", "--all"], check=True)
    assert store.get_ref("refs/materialize/pins/ok") == commit
    for ref in ("refs/materialize/pins/blob", "refs/materialize/pins/lost", "refs/materialize/pins/none"):
        assert store.get_ref(ref) is None, ref


def test_refs_written_in_process_are_what_git_reads_and_override_packed_ones(tmp_path, monkeypatch):
    store = Store.open(tmp_path / "cache")
    one = store.commit(store.write_tree(EMPTY_TREE, {"f": ("100644", b"1\n")}), [], "one\n")
    two = store.commit(store.write_tree(EMPTY_TREE, {"f": ("100644", b"2\n")}), [one], "two\n")
    store.set_refs({"refs/materialize/prefix/abc": one, "refs/materialize/workspace/t-1": one})
    assert store.git("for-each-ref", "--format=%(refname) %(objectname)").decode().split("\n")[:2] == [
        f"refs/materialize/prefix/abc {one}", f"refs/materialize/workspace/t-1 {one}"]
    store.git("pack-refs", "--all")
    assert not (store.git_dir / "refs/materialize/prefix/abc").exists()
    git_started = []
    real_git = Store.git
    monkeypatch.setattr(Store, "git", lambda self, *a, **k: git_started.append(a) or real_git(self, *a, **k))
    store.set_refs({"refs/materialize/prefix/abc": two})  # over the packed line: the loose ref wins
    assert git_started == []
    assert store.lookup_refs(["refs/materialize/prefix/abc"]) == {"refs/materialize/prefix/abc": two}
    assert real_git(store, "rev-parse", "refs/materialize/prefix/abc").decode().strip() == two
    assert not list(store.git_dir.rglob("*.lock"))
    # deleting, and names git must judge, are git's
    store.set_refs({"refs/materialize/prefix/abc": None, "refs/materialize/workspace/t.x": two})
    assert len(git_started) == 1
    assert store.lookup_refs(["refs/materialize/prefix/abc", "refs/materialize/workspace/t.x"]) == {
        "refs/materialize/workspace/t.x": two}
    subprocess.run(["git", "--git-dir", str(store.git_dir), "fsck", "--no-progress"], check=True, capture_output=True)


def test_changed_paths_between_a_tree_and_itself_asks_no_git(tmp_path, monkeypatch):
    store = Store.open(tmp_path)
    tree = store.write_tree(EMPTY_TREE, {"f": ("100644", b"1\n")})
    other = store.write_tree(tree, {"f": None, "d/g": ("100755", b"2\n")})
    assert store.changed_paths(tree, other) == (["d/g"], ["f"])
    monkeypatch.setattr(Store, "git", lambda *a, **k: (_ for _ in ()).throw(AssertionError("git ran")))
    assert store.changed_paths(other, other) == ([], [])


def test_a_trees_links_are_listed_once_remembered_and_carried_through_changes(tmp_path, monkeypatch):
    """``links_of`` lists a tree once (then its memo file answers, in this process or the next), and
    a tree written from a known one learns its links from the changes; a damaged memo is listed again."""
    store = Store.open(tmp_path / "cache")
    base = store.write_tree(EMPTY_TREE, {"a/f": ("100644", b"f\n"), "l": ("120000", b"a/f"),
                                         "a/m": ("120000", b"../l")})
    assert store.links_of(base) == {"l": "a/f", "a/m": "../l"}
    assert Store.open(tmp_path / "cache").links_of(base) == {"l": "a/f", "a/m": "../l"}  # from the memo file
    changes = {"a/m": None, "b/n": ("120000", b"../a"), "l": ("120000", b"a")}
    new = store.write_tree(base, changes)
    store.derive_links(base, new, changes)

    def no_listing(_tree):  # noqa: ANN001, ANN202
        raise AssertionError("a derived tree's links need no listing")

    monkeypatch.setattr(store, "list_tree", no_listing)
    assert store.links_of(new) == {"l": "a", "b/n": "../a"}
    monkeypatch.undo()
    fresh = Store.open(tmp_path / "cache")
    (tmp_path / "cache" / "links" / base).write_text("{not json")
    assert fresh.links_of(base) == {"l": "a/f", "a/m": "../l"}


def test_a_tree_as_deep_as_path_max_allows_is_written_and_changed(tmp_path):
    """write_tree rebuilt folders recursively, one Python frame per level: a path pin (or a patch)
    with a file 1,500 folders deep (3 KB, inside PATH_MAX) was a RecursionError traceback."""
    store = Store(tmp_path / "cache")
    store._ensure()
    deep = "/".join(["a"] * 1500)
    tree = store.write_tree(EMPTY_TREE, {f"{deep}/f": ("100644", b"x\n"), "top": ("100644", b"t\n")})
    assert store.read_blob(tree, f"{deep}/f") == b"x\n"
    changed = store.write_tree(tree, {f"{deep}/f": None, f"{deep}/g": ("100755", b"g\n")})
    assert store.lookup(changed, f"{deep}/f") is None and store.read_blob(changed, f"{deep}/g") == b"g\n"
    assert store.write_tree(changed, {f"{deep}/g": None, "top": None}) == EMPTY_TREE
    listed = subprocess.run(["git", "--git-dir", str(store.git_dir), "ls-tree", "-r", "--name-only", tree],
                            capture_output=True, text=True, check=True).stdout.split()
    assert listed == [f"{deep}/f", "top"]
