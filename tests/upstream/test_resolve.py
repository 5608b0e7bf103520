import hashlib
import http.server
import tarfile
import threading
from pathlib import Path

import git
import pytest

from materialize.errors import UnsafePathError, UpstreamError
from materialize.series import GitPin, PypiPin, TarballPin
from materialize.store import Store
from materialize.upstream import parse_spec, resolve


def make_project(root: Path) -> Path:
    (root / "proj-2.0" / "src").mkdir(parents=True)
    (root / "proj-2.0" / "src" / "a.py").write_text("A = 1\n")
    (root / "proj-2.0" / "setup.cfg").write_text("[metadata]\n")
    archive = root / "proj-2.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root / "proj-2.0", arcname="proj-2.0")
    return archive


def test_tarball_is_rooted_at_its_single_top_folder(tmp_path):
    archive = make_project(tmp_path)
    store = Store.open()
    resolved = resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert sorted(store.list_tree(resolved.tree)) == ["setup.cfg", "src/a.py"]
    explicit = resolve(TarballPin(kind="tarball", path=str(archive), root=""), store, base_dir=tmp_path)
    assert sorted(store.list_tree(explicit.tree)) == ["proj-2.0/setup.cfg", "proj-2.0/src/a.py"]


def test_tarball_hash_mismatch(tmp_path):
    archive = make_project(tmp_path)
    with pytest.raises(UpstreamError, match="sha256 mismatch"):
        resolve(TarballPin(kind="tarball", path=str(archive), sha256="0" * 64), Store.open(), base_dir=tmp_path)


def test_git_pin_records_full_sha_and_checks_it(tmp_path):
    repo = git.Repo.init(tmp_path / "upstream")
    (tmp_path / "upstream" / "lib").mkdir()
    (tmp_path / "upstream" / "lib" / "x.py").write_text("X = 1\n")
    repo.index.add(["lib/x.py"])
    first = repo.index.commit("first").hexsha
    repo.create_tag("v1")
    (tmp_path / "upstream" / "lib" / "x.py").write_text("X = 2\n")
    repo.index.add(["lib/x.py"])
    repo.index.commit("second")
    store = Store.open()
    resolved = resolve(GitPin(kind="git", url="upstream", rev="v1", root="lib"), store, base_dir=tmp_path)
    assert resolved.identity["sha"] == first
    assert store.read_blob(resolved.tree, "x.py") == b"X = 1\n"
    # A recorded sha is the lock: on a store that must fetch, a rev that moved away from it is an error.
    fresh = Store.open(tmp_path / "fresh-cache")
    with pytest.raises(UpstreamError, match="resolves to"):
        resolve(GitPin(kind="git", url="upstream", rev="master", sha=first), fresh, base_dir=tmp_path)
    with pytest.raises(UpstreamError, match="fetch failed"):
        resolve(GitPin(kind="git", url="upstream", rev="no-such-rev"), store, base_dir=tmp_path)


class _Index(http.server.BaseHTTPRequestHandler):
    """A minimal PEP 503 index on loopback: one project, one file, a published sha256."""

    files: dict[str, bytes] = {}
    published: dict[str, str] = {}

    def do_GET(self):  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") == "/simple/proj":
            links = "".join(f'<a href="/files/{n}#sha256={self.published[n]}">{n}</a>' for n in self.files)
            body = f"<html><body>{links}</body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
        elif self.path.startswith("/files/") and self.path[7:] in self.files:
            body = self.files[self.path[7:]]
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
        else:
            body = b"not found"
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def index(tmp_path):
    archive = make_project(tmp_path)
    data = archive.read_bytes()
    _Index.files = {"proj-2.0.tar.gz": data}
    _Index.published = {"proj-2.0.tar.gz": hashlib.sha256(data).hexdigest()}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/", data
    server.shutdown()


def test_pypi_pin_through_configured_index(index, tmp_path, monkeypatch):
    url, data = index
    monkeypatch.setenv("MATERIALIZE_INDEX_URL", url)
    pin = parse_spec("pypi:proj==2.0")
    assert pin.file == "proj-2.0.tar.gz" and pin.sha256 == hashlib.sha256(data).hexdigest()
    store = Store.open()
    resolved = resolve(pin, store, base_dir=tmp_path, progress=False)
    assert store.read_blob(resolved.tree, "src/a.py") == b"A = 1\n"
    assert resolved.identity["root_used"] == "proj-2.0"


def test_pypi_hash_mismatch_keeps_nothing(index, tmp_path):
    url, data = index
    wrong = "f" * 64
    pin = PypiPin(kind="pypi", requirement="proj==2.0", file="proj-2.0.tar.gz", sha256=wrong, index_url=url)
    store = Store.open()
    with pytest.raises(UpstreamError, match="sha256"):
        resolve(pin, store, base_dir=tmp_path, progress=False)
    # Served bytes that differ from what the index publishes are refused too, and nothing is cached.
    _Index.published["proj-2.0.tar.gz"] = wrong
    with pytest.raises(UpstreamError, match="mismatch"):
        resolve(pin, store, base_dir=tmp_path, progress=False)
    assert not any(p.is_file() for p in store.artifacts.rglob("*"))


def test_a_tarball_is_hashed_again_only_when_it_changed(tmp_path):
    """The pin's sha256 is remembered against (inode, size, mtime, ctime): an unchanged tarball is not
    re-read, and any rewrite, even one that restores the mtime, is hashed and checked again."""
    import os

    archive = make_project(tmp_path)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    store = Store.open()
    pin = TarballPin(kind="tarball", path=str(archive), sha256=digest)
    first = resolve(pin, store, base_dir=tmp_path)
    memos = list((store.root / "hashes").iterdir())
    assert len(memos) == 1 and digest in memos[0].read_text()
    assert resolve(pin, store, base_dir=tmp_path).tree == first.tree
    before = archive.stat()
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, same inode
    archive.write_bytes(bytes(data))
    os.utime(archive, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime put back; ctime moved
    with pytest.raises(UpstreamError, match="sha256 mismatch"):
        resolve(pin, store, base_dir=tmp_path)


def test_a_path_pin_is_read_again_only_when_it_changed(tmp_path, monkeypatch):
    """A directory pin's tree is remembered against every entry's lstat (inode, mode, size, mtime,
    ctime): unchanged, no file is read; a rewrite that restores size and mtime, a new file, a chmod
    or a removed folder is read again. Entries changed in the last two seconds are never trusted."""
    import importlib
    import os
    import time
    import types

    from materialize.series import PathPin

    module = importlib.import_module("materialize.upstream.resolve")

    up = tmp_path / "up"
    (up / "src" / "deep").mkdir(parents=True)
    (up / "src" / "a.py").write_text("A = 1\n")
    (up / "src" / "deep" / "b.py").write_text("B = 1\n")
    store = Store.open()
    pin = PathPin(kind="path", path="up")
    fresh = resolve(pin, store, base_dir=tmp_path)
    assert not (store.root / "hashes").exists()  # just written: too fresh to remember
    real = time.time_ns
    monkeypatch.setattr(module, "time", types.SimpleNamespace(time_ns=lambda: real() + 10_000_000_000))  # 10 s on
    first = resolve(pin, store, base_dir=tmp_path)
    assert first == fresh and len(list((store.root / "hashes").iterdir())) == 1

    def no_walk(_root):
        raise AssertionError("the pin was read although nothing changed")

    with monkeypatch.context() as m:
        m.setattr(module, "_walk_directory", no_walk)
        assert resolve(pin, store, base_dir=tmp_path) == first

    def changed(edit) -> str:
        edit()
        tree = resolve(pin, store, base_dir=tmp_path).tree
        with monkeypatch.context() as m:  # and remembered again
            m.setattr(module, "_walk_directory", no_walk)
            assert resolve(pin, store, base_dir=tmp_path).tree == tree
        return tree

    a = up / "src" / "a.py"
    before = a.stat()

    def rewrite() -> None:
        a.write_text("A = 2\n")  # same size
        os.utime(a, ns=(before.st_atime_ns, before.st_mtime_ns))

    trees = [first.tree, changed(rewrite)]
    assert store.read_blob(trees[-1], "src/a.py") == b"A = 2\n"
    trees.append(changed(lambda: (up / "src" / "deep" / "c.py").write_text("C\n")))
    trees.append(changed(lambda: a.chmod(0o755)))
    assert store.lookup(trees[-1], "src/a.py").mode == "100755"
    trees.append(changed(lambda: [p.unlink() for p in (up / "src" / "deep").iterdir()]))
    assert len(set(trees)) == len(trees)
    assert resolve(pin, store, base_dir=tmp_path).empty_dirs == ("src/deep",)


def _tar(path: Path, members: list[tuple[str, str | None, str]]) -> Path:
    """(name, link target or None, content) members, written with tarfile."""
    import io

    with tarfile.open(path, "w:gz") as tar:
        for name, link, content in members:
            info = tarfile.TarInfo(name)
            if link is not None:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tar.addfile(info)
            else:
                info.size = len(content.encode())
                tar.addfile(info, io.BytesIO(content.encode()))
    return path


@pytest.mark.parametrize(("root", "members"), [
    # inside the archive, but the tree is rooted at proj/: ../a leaves it
    (None, [("proj/a", None, "A"), ("proj/sub/x", None, "X"), ("proj/l", "../a", "")]),
    (None, [("proj/a", None, "A"), ("proj/sub/l", "../../proj/a", "")]),
    ("proj/sub", [("proj/a", None, "A"), ("proj/sub/x", None, "X"), ("proj/sub/l", "../a", "")]),
])
def test_a_link_is_judged_in_the_tree_rooted_where_the_pin_says(tmp_path, root, members):
    archive = _tar(tmp_path / "proj.tar.gz", members)
    with pytest.raises(UnsafePathError, match=r"symlink .*points outside"):
        resolve(TarballPin(kind="tarball", path=str(archive), root=root), Store.open(), base_dir=tmp_path)


def test_a_hard_link_to_a_symlink_is_judged_where_it_lies_in_the_rooted_tree(tmp_path):
    import io

    archive = tmp_path / "proj.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("proj/s/l")
        info.type, info.linkname = tarfile.SYMTYPE, "../a"  # proj/a: inside
        tar.addfile(info)
        info = tarfile.TarInfo("proj/a")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
        info = tarfile.TarInfo("proj/h")  # the same link one folder up: ../a is outside proj/
        info.type, info.linkname = tarfile.LNKTYPE, "proj/s/l"
        tar.addfile(info)
    with pytest.raises(UnsafePathError, match=r"symlink h -> '../a' points outside"):
        resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)


def test_links_inside_the_rooted_tree_still_import(tmp_path):
    archive = _tar(tmp_path / "proj.tar.gz", [("proj/a", None, "A"), ("proj/sub/l", "../a", "")])
    store = Store.open()
    resolved = resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert sorted(store.list_tree(resolved.tree)) == ["a", "sub/l"]


@pytest.mark.parametrize("field", ["rev", "url"])
def test_a_git_pin_cannot_smuggle_an_option_to_git(tmp_path, field):
    """`rev: "--upload-pack=touch X;"` ran `touch X` at the first apply (git fetch read it as an option).
    The series refuses a url or rev that starts with '-' (exit 2, file:line), and the fetch puts `--`
    before them anyway."""
    from materialize.errors import SeriesError
    from materialize.series import load_series

    repo = git.Repo.init(tmp_path / "r")
    (tmp_path / "r" / "f").write_text("x\n")
    repo.index.add(["f"])
    repo.index.commit("x")
    evil = f"--upload-pack=touch {tmp_path / 'PWNED'};"
    pin = {"url": str(tmp_path / "r"), "rev": "HEAD", field: evil}
    (tmp_path / "s.yaml").write_text(f"version: 1\ntargets:\n  t:\n    pin: {{kind: git, url: '{pin['url']}', "
                                     f"rev: '{pin['rev']}'}}\npatches: []\n")
    with pytest.raises(SeriesError, match=rf"s.yaml:4: targets.t.pin.git.{field}"):
        load_series(tmp_path / "s.yaml")
    if field == "rev":  # past the validator (a library caller): git still reads no option
        smuggled = object.__new__(GitPin)
        for key, value in {"kind": "git", "url": pin["url"], "rev": pin["rev"], "sha": None, "root": ""}.items():
            object.__setattr__(smuggled, key, value)
        with pytest.raises(UpstreamError):
            resolve(smuggled, Store.open(), base_dir=tmp_path)
    assert not (tmp_path / "PWNED").exists()


def test_a_pypi_pin_file_is_a_file_name_never_a_path(tmp_path):
    """`file: ../../../../secret.tar.gz` named the artifact's place in the cache: an existing file there
    was taken as the verified download (no hash checked on that path) and imported into the output."""
    import io

    from materialize.errors import SeriesError
    from materialize.series import load_series
    from materialize.upstream import pypi

    secret = tmp_path / "secret.tar.gz"
    with tarfile.open(secret, "w:gz") as tar:
        info = tarfile.TarInfo("s/key")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"secret"))
    cache = tmp_path / "cache" / "artifacts"
    rel = "../../../secret.tar.gz"
    (tmp_path / "s.yaml").write_text(f"version: 1\ntargets:\n  t:\n    pin: {{kind: pypi, requirement: x==1, file: '{rel}',"
                                     f" sha256: '{'0' * 64}'}}\npatches: []\n")
    with pytest.raises(SeriesError, match=r"s.yaml:4: targets.t.pin.pypi.file"):
        load_series(tmp_path / "s.yaml")
    assert (cache / ("0" * 64) / rel).resolve() == secret  # where it pointed
    with pytest.raises(UpstreamError, match="not a file name of the index"):
        pypi.fetch("x", "1", rel, "0" * 64, cache)


def test_a_path_pin_that_is_a_git_worktree_or_holds_a_submodule_is_read(tmp_path):
    """A `.git` folder is skipped, but a `.git` *file* (the gitfile of a linked worktree or of a
    submodule's checkout: "gitdir: ...") was taken for a file to import and refused as a write into
    .git (exit 4): a path pin on `git worktree add`'s checkout could not be used at all."""
    from materialize.series import PathPin

    up = tmp_path / "up"
    (up / "sub").mkdir(parents=True)
    (up / "a.py").write_text("A = 1\n")
    (up / ".git").write_text("gitdir: /elsewhere/.git/worktrees/up\n")
    (up / "sub" / ".git").write_text("gitdir: ../.git/modules/sub\n")
    (up / "only").mkdir()
    (up / "only" / ".git").write_text("gitdir: x\n")
    resolved = resolve(PathPin(kind="path", path="up"), Store.open(), base_dir=tmp_path)
    assert sorted(Store.open().list_tree(resolved.tree)) == ["a.py"]
    assert resolved.empty_dirs == ("only", "sub")
