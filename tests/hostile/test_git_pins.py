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
    assert store.read_refs("refs/materialize/tree-ok/") == {f"refs/materialize/tree-ok/{first.tree}": sha}
    again = resolve(GitPin(kind="git", url="linked", rev=sha, root="pkg"), store, base_dir=tmp_path)
    assert again.tree == first.tree


def _literal_tree(repo: Path, entries: list[tuple[str, bytes, str]]) -> str:
    """A tree object written as given (``git hash-object --literally``): names git itself never writes."""
    body = b"".join(mode.encode() + b" " + name + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries)
    return subprocess.run(["git", "hash-object", "-w", "-t", "tree", "--literally", "--stdin"], cwd=repo, input=body,
                          capture_output=True, check=True).stdout.decode().strip()


def _repo_with_tree(root: Path, make) -> str:  # noqa: ANN001
    repo = root / "evil"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)

    def blob(data: bytes) -> str:
        return subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=data, capture_output=True,
                              check=True).stdout.decode().strip()

    tree = make(lambda entries: _literal_tree(repo, entries), blob)
    commit = subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit-tree", tree, "-m", "x"],
                            cwd=repo, capture_output=True, check=True).stdout.decode().strip()
    subprocess.run(["git", "update-ref", "refs/heads/main", commit], cwd=repo, check=True)
    return commit


@pytest.mark.parametrize("shape", ["dotdot", "dot", "dotgit", "slash", "empty", "duplicate"])
def test_a_git_tree_entry_that_is_not_a_plain_name_is_refused(tmp_path, shape):
    """A git tree arrives whole, not member by member: every path in it passes the same gate as an
    archive member's (no "..", ".", ".git", empty or slashed names, no name twice), or an output would
    be written outside its folder (a tree entry named ".." holding ESCAPED.txt)."""
    from materialize.errors import UnsafePathError

    def make(tree, blob):  # noqa: ANN001, ANN202
        ok, bad = blob(b"ok\n"), blob(b"pwned\n")
        inner = tree([("100644", b"ESCAPED.txt", bad)])
        if shape == "duplicate":
            return tree([("100644", b"f.txt", ok), ("100644", b"f.txt", bad)])
        if shape == "slash":
            return tree([("100644", b"a/../../x.txt", bad), ("100644", b"f.txt", ok)])
        if shape == "empty":
            return tree([("40000", b"", inner), ("100644", b"f.txt", ok)])
        name = {"dotdot": b"..", "dot": b".", "dotgit": b".GIT"}[shape]
        return tree([("40000", name, tree([("40000", name, inner)])), ("100644", b"f.txt", ok)])

    sha = _repo_with_tree(tmp_path, make)
    store = Store.open()
    with pytest.raises((UnsafePathError, UpstreamError), match="git pin evil@main") as info:
        resolve(GitPin(kind="git", url="evil", rev="main", sha=sha), store, base_dir=tmp_path)
    assert info.value.exit_code in (3, 4)
    assert not store.read_refs("refs/materialize/tree-ok/")


def test_a_git_pin_with_a_submodule_names_the_pin_and_path(tmp_path):
    """A submodule is a commit inside the tree (mode 160000) whose files are not in this repository:
    one line naming the pin and the path, not "object ... is missing" from the store later."""

    def make(tree, blob):  # noqa: ANN001, ANN202
        sub = tree([("160000", b"sub", "1" * 40)])
        return tree([("40000", b"third_party", sub), ("100644", b"f.txt", blob(b"ok\n"))])

    sha = _repo_with_tree(tmp_path, make)
    with pytest.raises(UpstreamError, match=r"git pin evil@main: third_party/sub is a submodule") as info:
        resolve(GitPin(kind="git", url="evil", rev="main", sha=sha), Store.open(), base_dir=tmp_path)
    assert info.value.exit_code == 3


@pytest.mark.parametrize("root", ["lib/y.py", "link", "lib//y.py"])
def test_a_root_that_is_a_file_or_a_link_is_exit_3_naming_it(tmp_path, root):
    """`git rev-parse TREE:ROOT` answers a blob for a file or a symlink: that blob was then read as a
    tree ("ValueError: subsection not found", a traceback, exit 1). The root must be a folder."""
    import os

    upstream_repo(tmp_path)
    repo = git.Repo(tmp_path / "upstream")
    os.symlink("lib", tmp_path / "upstream" / "link")
    repo.index.add(["link"])
    repo.index.commit("a link")
    with pytest.raises(UpstreamError, match=rf"root {root!r} (is not a folder|does not exist)") as info:
        resolve(GitPin(kind="git", url="upstream", rev="master", root=root), Store.open(), base_dir=tmp_path)
    assert info.value.exit_code == 3


@pytest.mark.parametrize("kind", ["tree", "blob"])
def test_a_pinned_sha_naming_a_tree_or_a_blob_already_in_the_store_is_exit_3(tmp_path, kind):
    """A pin's `sha` already in the store skipped the fetch and was read as a commit: a tree or blob id
    there (every import leaves trees) was a UnicodeDecodeError or IndexError traceback, exit 1. Only a
    commit is taken as the pinned commit; anything else is fetched and found not to match."""
    first, _second = upstream_repo(tmp_path)
    store = Store.open()
    resolve(GitPin(kind="git", url="upstream", rev="master"), store, base_dir=tmp_path)  # the objects are here
    repo = git.Repo(tmp_path / "upstream")
    sha = repo.commit(first).tree.hexsha if kind == "tree" else repo.commit(first).tree["lib/x.py"].hexsha
    assert store.has_object(sha)
    with pytest.raises(UpstreamError, match=rf"resolves to .*but the series records {sha}") as info:
        resolve(GitPin(kind="git", url="upstream", rev="master", sha=sha), store, base_dir=tmp_path)
    assert info.value.exit_code == 3


@pytest.mark.parametrize("rev", ["master:refs/materialize/prefix/0123456789abcdef", "+master:refs/heads/x",
                                 "refs/heads/*:refs/materialize/pins/*"])
def test_a_rev_that_is_a_refspec_with_a_destination_is_refused_and_writes_no_ref(tmp_path, rev):
    """`git fetch -- URL REV` takes REV as a refspec: `master:refs/materialize/prefix/<key>` made the
    fetch write that ref into the shared store, so one series could plant a prefix (or a pin) that
    another series, on the same cache, would then reuse as its own result: exit 0 with a tree of the
    planter's choosing. No ref name holds ':' (git check-ref-format): a rev with one is refused at
    load (exit 2 with file:line), before any fetch."""
    import os
    import sys

    upstream_repo(tmp_path)
    series = tmp_path / "series.yaml"
    series.write_text(f"version: 1\ntargets:\n  t:\n    pin: {{kind: git, url: upstream, rev: '{rev}'}}\npatches: []\n")
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path, env=os.environ)
    assert proc.returncode == 2, proc.stderr
    assert "series.yaml:4" in proc.stderr and "rev" in proc.stderr and "Traceback" not in proc.stderr
    assert Store.open().read_refs("refs/") == {}
    with pytest.raises(Exception, match="rev"):
        GitPin(kind="git", url="upstream", rev=rev)
