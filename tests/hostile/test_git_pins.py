"""Git pins: a missing root is an upstream error (exit 3), and a fetched commit that does not match the
recorded sha leaves nothing in the store (no objects, no ref)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from materialize.errors import UpstreamError
from materialize.series import GitPin
from materialize.store import Store
from materialize.upstream import resolve


def upstream_repo(root: Path) -> tuple[str, str]:
    repo = git.Repo.init(root / "upstream")
    (root / "upstream" / "lib").mkdir()
    (root / "upstream" / "lib" / "x.py").write_text("X = 1\n")
    repo.index.add(["lib/x.py"])
    first = repo.index.commit("first").hexsha
    (root / "upstream" / "lib" / "y.py").write_text("Y = 2\n" * 50)
    repo.index.add(["lib/y.py"])
    second = repo.index.commit("second").hexsha
    return first, second


def object_files(store: Store) -> set[str]:
    objects = store.git_dir / "objects"
    return {str(p.relative_to(objects)) for p in objects.rglob("*") if p.is_file()}


def test_missing_root_is_exit_3(tmp_path):
    upstream_repo(tmp_path)
    with pytest.raises(UpstreamError, match="root 'no/such/dir' does not exist") as info:
        resolve(GitPin(kind="git", url="upstream", rev="master", root="no/such/dir"), Store.open(), base_dir=tmp_path)
    assert info.value.exit_code == 3


def test_sha_mismatch_keeps_nothing(tmp_path):
    first, second = upstream_repo(tmp_path)
    store = Store.open()
    before = object_files(store)
    with pytest.raises(UpstreamError, match="resolves to .*nothing was kept"):
        resolve(GitPin(kind="git", url="upstream", rev="master", sha=first), store, base_dir=tmp_path)
    assert object_files(store) == before
    assert store.read_refs("refs/") == {}
    assert not list(store.root.glob(".incoming-*"))
    # The right sha is fetched and kept, and the store stays consistent.
    resolved = resolve(GitPin(kind="git", url="upstream", rev="master", sha=second, root="lib"), store,
                       base_dir=tmp_path)
    assert store.read_blob(resolved.tree, "y.py").startswith(b"Y = 2")
    assert store.read_refs("refs/materialize/git/") == {f"refs/materialize/git/{second}": second}
    fsck = subprocess.run(["git", "--git-dir", str(store.git_dir), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def _repo_with_links(root: Path, links: dict[str, str]) -> str:
    import os

    repo = git.Repo.init(root / "linked")
    (root / "linked" / "pkg" / "a" / "b").mkdir(parents=True)
    (root / "linked" / "pkg" / "a" / "b" / "f.py").write_text("F = 1\n")
    for name, target in links.items():
        os.symlink(target, root / "linked" / "pkg" / name)
    repo.git.add("-A")
    return repo.index.commit("links").hexsha


@pytest.mark.parametrize("links", [{"out": "../../etc"}, {"x": "a/b", "y": "x/../../../.."}])
def test_git_pin_with_a_link_out_is_refused(tmp_path, links):
    """A git tree arrives whole (no member-by-member check as archives get): its links, chains
    included, are checked at import, relative to the pin's root."""
    from materialize.errors import UnsafePathError

    sha = _repo_with_links(tmp_path, links)
    with pytest.raises(UnsafePathError, match="points outside the tree") as info:
        resolve(GitPin(kind="git", url="linked", rev=sha, root="pkg"), Store.open(), base_dir=tmp_path)
    assert info.value.exit_code == 4


def test_git_pin_with_links_inside_is_checked_once(tmp_path):
    sha = _repo_with_links(tmp_path, {"x": "a/b", "y": "x/f.py"})
    store = Store.open()
    first = resolve(GitPin(kind="git", url="linked", rev=sha, root="pkg"), store, base_dir=tmp_path)
    assert store.read_refs("refs/materialize/links-ok/") == {f"refs/materialize/links-ok/{first.tree}": sha}
    again = resolve(GitPin(kind="git", url="linked", rev=sha, root="pkg"), store, base_dir=tmp_path)
    assert again.tree == first.tree
