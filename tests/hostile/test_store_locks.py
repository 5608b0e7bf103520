"""Locks and races on the store's refs: a git killed mid-update leaves a ``*.lock`` file that must not
wedge every later run, and concurrent runs must not lose races on ``update-ref``."""

from __future__ import annotations

import json
import subprocess
import sys

from materialize.store import Store


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_stale_ref_lock_of_a_dead_git_is_cleared(tmp_path):
    store = Store.open()
    commit = store.commit(store.write_tree("4b825dc642cb6eb9a060e54bf8d69288fbee4904", {"a": ("100644", b"a\n")}),
                          [], "x\n")
    lock = store.git_dir / "refs" / "materialize" / "prefix" / "abc.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")  # what a git killed between creating the lock and renaming it leaves
    (store.git_dir / "packed-refs.lock").write_text("")
    store.set_refs({"refs/materialize/prefix/abc": commit})
    assert store.get_ref("refs/materialize/prefix/abc") == commit
    assert not lock.exists() and not (store.git_dir / "packed-refs.lock").exists()


def test_apply_after_a_kill_during_the_ref_update(builder, tmp_path, isolated_cache):
    b = builder({"a.txt": "".join(f"{i}\n" for i in range(30))})
    for i in range(3):
        b.add_patch(f"000{i}-p", {"a.txt": "".join(f"{j}{'x' * (j <= i)}\n" for j in range(30))})
    series = b.write()
    first = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "o1"), "--json")
    assert first.returncode == 0, first.stderr
    store = Store.open(isolated_cache)
    refs = store.read_refs("refs/materialize/prefix/")
    # Simulate the kill: the last ref was never written and its lock file stayed behind.
    victim = sorted(refs)[0]
    subprocess.run(["git", "--git-dir", str(store.git_dir), "update-ref", "-d", victim], check=True)
    (store.git_dir / f"{victim}.lock").write_text(refs[victim] + "\n")
    again = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "o2"), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["id"] == json.loads(first.stdout)["id"]
    assert store.read_refs("refs/materialize/prefix/") == refs
