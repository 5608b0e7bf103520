"""The in-process pack reader against git itself, on packs git wrote with both kinds of delta."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from materialize.packs import PackReader, Unsupported, apply_delta, write_pack
from materialize.store import Store, blob_id


def _git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, check=True).stdout


def _history(repo: Path, seed: int = 3) -> None:
    """A repository whose files change a little in each of 40 commits: git's packs delta them."""
    rng = random.Random(seed)
    _git(repo.parent, "init", "-q", str(repo))
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    lines = {f"f{i}.txt": [f"line {k} of file {i} {rng.random()}\n" for k in range(300)] for i in range(6)}
    (repo / "big.bin").write_bytes(rng.randbytes(300_000))  # incompressible: inflated in several reads
    for commit in range(40):
        for name, body in lines.items():
            body[rng.randrange(len(body))] = f"changed in {commit} {rng.random()}\n"
            (repo / name).write_text("".join(body))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"c{commit}")


def _every_object(repo: Path) -> dict[str, tuple[str, bytes]]:
    git_dir = repo / ".git"
    listing = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch-all-objects", "--batch-check"],
                             capture_output=True, check=True).stdout.decode().split("\n")
    shas = [line.split()[0] for line in listing if line]
    out = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "--batch"],
                         input="".join(s + "\n" for s in shas).encode(), capture_output=True, check=True).stdout
    objects, pos = {}, 0
    for sha in shas:
        end = out.index(b"\n", pos)
        _sha, kind, size = out[pos:end].decode().split()
        objects[sha] = (kind, out[end + 1:end + 1 + int(size)])
        pos = end + 2 + int(size)
    return objects


@pytest.mark.parametrize("offset_deltas", [True, False], ids=["ofs-delta", "ref-delta"])
def test_every_object_of_a_repacked_history_reads_as_git_reads_it(tmp_path: Path, offset_deltas: bool) -> None:
    repo = tmp_path / "repo"
    _history(repo)
    _git(repo, "config", "repack.useDeltaBaseOffset", "true" if offset_deltas else "false")
    _git(repo, "repack", "-a", "-d", "-q", "--depth=50", "--window=50")
    stats = _git(repo, "verify-pack", "-v", *[str(p) for p in (repo / ".git/objects/pack").glob("*.idx")])
    assert b"chain length = 2" in stats  # deltas of deltas: the chains are followed, not just one step
    expected = _every_object(repo)
    reader = PackReader(repo / ".git" / "objects" / "pack")
    assert {sha: reader.get(sha) for sha in expected} == expected
    assert reader.get("0" * 40) is None


def test_a_fast_import_pack_reads_as_git_reads_it(tmp_path: Path) -> None:
    """Pin imports are git fast-import packs, which delta blobs against the previous version."""
    repo = tmp_path / "repo"
    _git(tmp_path, "init", "-q", "--bare", str(repo))
    rng = random.Random(5)
    body = [f"{k} {rng.random()}\n" for k in range(500)]
    stream = bytearray()
    for mark in range(1, 151):  # more than fastimport.unpackLimit (100): a pack, not loose objects
        body[rng.randrange(len(body))] = f"edit {mark}\n"
        data = "".join(body).encode()
        stream += b"blob\nmark :%d\ndata %d\n" % (mark, len(data)) + data + b"\n"
    subprocess.run(["git", "--git-dir", str(repo), "fast-import", "--quiet"], input=bytes(stream), check=True)
    listing = _git(repo, "cat-file", "--batch-all-objects", "--batch-check").decode().split("\n")
    assert len([line for line in listing if line]) == 150
    assert list((repo / "objects" / "pack").glob("*.idx"))
    git_dir_repo = tmp_path / "as-worktree"
    git_dir_repo.mkdir()
    (git_dir_repo / ".git").symlink_to(repo)
    expected = _every_object(git_dir_repo)
    reader = PackReader(repo / "objects" / "pack")
    assert {sha: reader.get(sha) for sha in expected} == expected


def test_our_own_packs_and_packs_written_after_the_reader_started(tmp_path: Path) -> None:
    folder = tmp_path / "pack"
    reader = PackReader(folder)
    assert reader.get(blob_id(b"x")) is None  # no folder yet
    first = {blob_id(b"one\n"): ("blob", b"one\n")}
    write_pack(folder, first, tmp_path)
    assert reader.get(blob_id(b"one\n")) == ("blob", b"one\n")
    later = {blob_id(b"two" * 1000): ("blob", b"two" * 1000)}
    write_pack(folder, later, tmp_path)  # another run's pack: found by looking at the folder again
    assert reader.get(blob_id(b"two" * 1000)) == ("blob", b"two" * 1000)


def test_the_store_reads_packed_objects_without_starting_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(tmp_path / "cache")
    with store.batch():
        shas = [store.write_blob(f"blob {i}\n".encode()) for i in range(100)]  # >= PACK_AT: one pack
    assert list((store.git_dir / "objects" / "pack").glob("*.pack"))

    def no_git() -> None:
        raise AssertionError("git cat-file was started for a packed object")

    monkeypatch.setattr(store, "_reader", no_git)
    assert [store.read_blob_by_id(sha) for sha in shas] == [f"blob {i}\n".encode() for i in range(100)]


def test_a_missing_object_is_still_named_by_the_store(tmp_path: Path) -> None:
    from materialize.errors import MaterializeError

    store = Store.open(tmp_path / "cache")
    with pytest.raises(MaterializeError, match="object 0{40} is missing"):
        store.read_object("0" * 40)


def test_delta_copy_and_insert_instructions() -> None:
    base = b"0123456789" * 10
    # sizes 100 -> 14; copy 10 bytes from offset 20; insert "abcd"
    delta = bytes([100, 14, 0x80 | 0x01 | 0x10, 20, 10, 4]) + b"abcd"
    assert apply_delta(base, delta) == b"0123456789abcd"


def test_a_pack_removed_under_the_reader_is_left_to_git(tmp_path: Path) -> None:
    """A gc that repacks while a command runs removes the pack it had found: the store asks git."""
    store = Store.open(tmp_path / "cache")
    with store.batch():
        shas = [store.write_blob(f"blob {i}\n".encode()) for i in range(100)]
    folder = store.git_dir / "objects" / "pack"
    reader = store._packs
    reader._scan()  # it has read the index, not yet opened the pack
    (old_idx,) = folder.glob("*.idx")
    renamed = "pack-" + "f" * 40
    for suffix in (".pack", ".idx"):  # as a repack would: the objects now live in a pack of another name
        old_idx.with_suffix(suffix).rename(folder / (renamed + suffix))
    with pytest.raises(Unsupported):
        reader.get(shas[0])
    assert store.read_blob_by_id(shas[1]) == b"blob 1\n"
    assert PackReader(folder).get(shas[2]) == ("blob", b"blob 2\n")
