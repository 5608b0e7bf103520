"""Hostile and damaged archives: bombs are refused while being read (exit 4), damage is exit 3 (never
"interrupted", never a zlib traceback), members stream in bounded memory, and a cold import writes one
pack instead of a loose object per file."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from materialize.errors import UnsafePathError, UpstreamError
from materialize.series import TarballPin
from materialize.store import Store
from materialize.upstream import resolve


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def tar_with(path: Path, members: dict[str, bytes], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


class Zeros(io.RawIOBase):
    """``size`` zero bytes, produced lazily: builds a bomb without holding it in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def zero_tar(path: Path, size: int, level: int = 1) -> Path:
    with tarfile.open(path, "w:gz", compresslevel=level) as tar:
        info = tarfile.TarInfo("pkg-1/big.bin")
        info.size = size
        tar.addfile(info, io.BufferedReader(Zeros(size), 1 << 20))
        small = tarfile.TarInfo("pkg-1/a.py")
        small.size = 2
        tar.addfile(small, io.BytesIO(b"x\n"))
    return path


def series_for(tmp_path: Path, archive: Path, **pin) -> Path:
    doc = {"version": 1, "targets": {"plugin": {"pin": {"kind": "tarball", "path": str(archive), **pin}}}, "patches": []}
    path = tmp_path / "series.yaml"
    path.write_text(json.dumps(doc))
    return path


def test_compression_bomb_is_refused_while_reading(tmp_path):
    archive = zero_tar(tmp_path / "bomb.tar.gz", 512 << 20, level=9)  # 512 MB of zeros in ~0.5 MB
    assert archive.stat().st_size < 4 << 20
    with pytest.raises(UnsafePathError, match="compression bomb"):
        resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)
    proc = run_cli("apply", "--series", str(series_for(tmp_path, archive)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stderr
    assert "bomb.tar.gz" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_zip_bomb_is_refused(tmp_path):
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf, zf.open("big.bin", "w") as out:
        for _ in range(300):
            out.write(bytes(1 << 20))
    with pytest.raises(UnsafePathError, match="compression bomb"):
        resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)


def test_members_stream_in_bounded_memory(tmp_path):
    """A 200 MB member (allowed by raising the expansion cap) is imported without holding it in memory."""
    archive = zero_tar(tmp_path / "big.tar.gz", 200 << 20)
    code = ("import resource, sys; from pathlib import Path;"
            "from materialize.series import TarballPin; from materialize.store import Store;"
            "from materialize.upstream import resolve;"
            "r = resolve(TarballPin(kind='tarball', path=sys.argv[1]), Store.open(), base_dir=Path('.'));"
            # VmHWM, not RUSAGE_SELF: Linux carries the forking parent's peak across exec into ru_maxrss.
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1];"
            "print(hwm, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    proc = subprocess.run([sys.executable, "-c", code, str(archive)], capture_output=True, text=True,
                          env={**os.environ, "MATERIALIZE_MAX_EXPANSION": "100000"}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    own_kb, children_kb = map(int, proc.stdout.split()[-2:])  # children: git fast-import, gzip
    assert own_kb < 150 << 10, f"python peaked at {own_kb} kB"
    assert children_kb < 400 << 10


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_truncated_tar_gz_is_exit_3_not_interrupted(tmp_path, cut):
    good = tar_with(tmp_path / "good.tar.gz", {f"pkg/f{i}.txt": os.urandom(3000) for i in range(20)})
    data = good.read_bytes()
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(data[: int(len(data) * cut)])
    proc = run_cli("apply", "--series", str(series_for(tmp_path, bad)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    assert "bad.tar.gz" in proc.stderr and "interrupted" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("suffix", "mode", "says"), [
    ("tar.bz2", "w:bz2", "bzip2: compressed file ends unexpectedly"),
    ("tar.xz", "w:xz", "unexpected end of"),  # some bytes came out: tarfile or xz says it, either is true
    ("tar.gz", "w:gz", "unexpected end of"),
])
def test_a_cut_archive_that_yields_no_byte_says_what_its_tool_said(tmp_path, suffix, mode, says):
    """A .tar.bz2 cut before its first block ends gives bzip2 no byte to write: tarfile's "empty file"
    was reported (a 30 KB file, not empty), the decompressor's own error unread. It is the message now,
    its first line (bzip2's last is advice on recovering data)."""
    good = tar_with(tmp_path / f"good.{suffix}", {f"pkg/f{i}.txt": os.urandom(3000) for i in range(20)}, mode)
    bad = tmp_path / f"bad.{suffix}"
    bad.write_bytes(good.read_bytes()[:200])
    proc = run_cli("apply", "--series", str(series_for(tmp_path, bad)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    assert f"bad.{suffix}: corrupt or truncated archive" in proc.stderr and says in proc.stderr.lower(), proc.stderr
    assert "empty file" not in proc.stderr and not (tmp_path / "out").exists()


def test_corrupt_zip_member_is_exit_3(tmp_path):
    archive = tmp_path / "c.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("pkg/a.txt", os.urandom(1000) + b"text " * 4000)
    data = bytearray(archive.read_bytes())
    start = data.index(b"pkg/a.txt") + 9 + 200  # inside the first member's deflate stream
    data[start:start + 64] = os.urandom(64)
    archive.write_bytes(bytes(data))
    proc = run_cli("apply", "--series", str(series_for(tmp_path, archive)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    assert "c.zip" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("decompressor", ["gzip tool", "python codec"])
def test_corrupted_gzip_body_without_sha256_is_refused(tmp_path, monkeypatch, decompressor):
    """Without a pinned sha256, gzip's own CRC is the only integrity check: it must be read and enforced,
    whether the stream is decompressed by the gzip tool (the pipeline) or by Python (no tool installed)."""
    if decompressor == "python codec":
        monkeypatch.setattr("materialize.upstream.archive.shutil.which", lambda _name: None)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("pkg/a.txt")
        payload = b"A = 1\n" * 10
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    body = gzip.compress(raw.getvalue(), compresslevel=0)  # stored blocks: a flipped byte still inflates
    index = body.index(b"A = 1")
    damaged = body[:index] + b"B" + body[index + 1:]
    archive = tmp_path / "flip.tar.gz"
    archive.write_bytes(damaged)
    with pytest.raises(UpstreamError, match="corrupt or truncated"):
        resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)
    store = Store.open()
    assert not store.read_refs("refs/materialize/pins/")
    assert not list((store.git_dir / "objects").rglob("tmp_*")), "a half-written pack stayed in the store"


def test_cold_import_writes_one_pack_not_loose_objects(tmp_path):
    files = {f"proj-1/d{i % 40}/f{i}.c": f"int f{i};\n".encode() for i in range(2000)}
    archive = tar_with(tmp_path / "proj-1.tar.gz", files)
    store = Store.open()
    resolved = resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert len(store.list_tree(resolved.tree)) == 2000
    assert store.read_blob(resolved.tree, "d7/f7.c") == b"int f7;\n"
    loose = [p for p in (store.git_dir / "objects").glob("[0-9a-f][0-9a-f]/*")]
    assert len(loose) < 10, f"{len(loose)} loose objects"
    assert len(list((store.git_dir / "objects" / "pack").glob("*.pack"))) == 1
    assert not store.read_refs("refs/materialize/import/")
    fsck = subprocess.run(["git", "--git-dir", str(store.git_dir), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def _encrypted_zip(path: Path, link: bool = False) -> Path:
    """A zip whose members carry the "encrypted" flag (general purpose bit 0), as the red team made it."""
    import stat

    with zipfile.ZipFile(path, "w") as zf:
        if link:  # first, so that it is the member refused
            info = zipfile.ZipInfo("p/l")
            info.external_attr, info.create_system = (stat.S_IFLNK | 0o777) << 16, 3
            zf.writestr(info, b"g")
        zf.writestr("p/f", b"x")
        zf.writestr("p/g", b"y")
    data = bytearray(path.read_bytes())
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        while at >= 0:
            data[at + flag_at] |= 1
            at = data.find(signature, at + 4)
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("link", [False, True])
def test_an_encrypted_zip_member_is_exit_3_naming_it(tmp_path, link):
    archive = _encrypted_zip(tmp_path / "enc.zip", link)
    first = "p/l" if link else "p/f"
    store = Store.open()
    with pytest.raises(UpstreamError, match=rf"enc\.zip: member '{first}': encrypted"):
        resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert store.read_refs("refs/materialize/pins/") == {}
    proc = run_cli("apply", "--series", str(series_for(tmp_path, archive)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "enc.zip" in lines[0] and first in lines[0], proc.stderr


def _damaged_header_tar(tmp_path: Path, damage: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for i in range(20):
            info = tarfile.TarInfo(f"proj/f{i:02d}.txt")
            info.size = 8
            tar.addfile(info, io.BytesIO(b"file %02d\n" % i))
    data = bytearray(raw.getvalue())
    at = 10 * 1024  # the 11th member's header (each member: a header block and a data block)
    if damage == "checksum":
        data[at:at + 10] = b"GARBAGE!!!"
        return bytes(data)
    return bytes(data[:at + 100])  # the archive ends inside a header


@pytest.mark.parametrize("compression", ["", ".gz", ".xz"])
@pytest.mark.parametrize("damage", ["checksum", "cut inside a header"])
def test_a_damaged_header_mid_archive_is_refused_not_a_shorter_tree(tmp_path, compression, damage):
    """tarfile ends its member list quietly at a bad header after the first (GNU tar: "Skipping to
    next header", exit 2): the import must fail naming the archive and the byte, not publish the
    members before it as the whole tree."""
    data = _damaged_header_tar(tmp_path, damage)
    archive = tmp_path / f"bad.tar{compression}"
    archive.write_bytes({"": lambda d: d, ".gz": gzip.compress, ".xz": lambda d: __import__("lzma").compress(d)}
                        [compression](data))
    proc = run_cli("apply", "--series", str(series_for(tmp_path, archive)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "bad.tar" in proc.stderr and "10240" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("compression", ["", ".gz"])
def test_a_negative_pax_size_is_a_damaged_archive(tmp_path, compression):
    """A pax ``size=-1536`` made tarfile step its offset backward (a member's data "ended after 0 of
    its -1536 bytes", exit 1, as if the work failed); GNU tar says "Malformed extended header" and
    exits 2. It is a damaged archive: exit 3 naming it, nothing published."""
    raw = tmp_path / "neg.tar"
    with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("p/a.txt")
        info.size = 6
        info.pax_headers = {"size": "-1536"}
        tar.addfile(info, io.BytesIO(b"hello\n"))
    archive = tmp_path / f"neg.tar{compression}"
    archive.write_bytes(gzip.compress(raw.read_bytes()) if compression else raw.read_bytes())
    proc = run_cli("apply", "--series", str(series_for(tmp_path, archive)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "neg.tar" in proc.stderr and "negative size" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(120)
def test_a_bzip2_bomb_after_the_last_member_is_refused_while_read(tmp_path):
    """The stream is read to its end after tarfile stops at the end marker (so the codec checks its
    checksum), and that tail was never charged: 113 bytes of bzip2 are 100 MB of zeros, so a 1 KB
    .tar.bz2 expanded to 1 GB (12 s) and a 1 MB one to 900 GB (hours). Now a bomb, exit 4."""
    import bz2

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("p/a.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"a\n"))
    archive = tmp_path / "tail.tar.bz2"
    archive.write_bytes(bz2.compress(buf.getvalue()) + bz2.compress(bytes(100 << 20), 9) * 1000)  # 100 GB
    assert archive.stat().st_size < 200_000
    proc = run_cli("apply", "--series", str(series_for(tmp_path, archive)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "tail.tar.bz2" in proc.stderr and "compression bomb" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(120)
def test_a_million_empty_members_count_against_the_budget(tmp_path):
    """Header blocks were free: identical empty members compress to nothing, and tarfile keeps a
    TarInfo per member. Each header now counts its 512 bytes, so a small archive holds at most the
    floor's worth (64 MB: 131k members)."""
    import bz2

    header = tarfile.TarInfo("p/a.txt").tobuf(tarfile.GNU_FORMAT)
    archive = tmp_path / "many.tar.bz2"
    archive.write_bytes(bz2.compress(header * 140_000 + bytes(1024), 9))
    assert archive.stat().st_size < 10_000
    proc = run_cli("apply", "--series", str(series_for(tmp_path, archive)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "many.tar.bz2" in proc.stderr and "compression bomb" in proc.stderr


@pytest.mark.timeout(120)
def test_a_tarball_replaced_between_its_hash_and_its_import_is_not_cached_under_the_old_hash(tmp_path):
    """Two runs at once: the second hashes the tarball, then waits for the store lock while the first
    imports. A `make dist` that replaced the tarball meanwhile had its new content imported and cached
    under the *old* sha256: that run exited 0 with the wrong tree, and so did every later run on the
    original file (the cache was poisoned). Now the file's stamp is checked again after the import."""
    import time

    from materialize.locking import exclusive

    old = tar_with(tmp_path / "old.tar.gz", {"pkg/a.txt": b"old\n"})
    new = tar_with(tmp_path / "new.tar.gz", {"pkg/a.txt": b"new\n"})
    pinned = tmp_path / "up.tar.gz"
    pinned.write_bytes(old.read_bytes())
    series = series_for(tmp_path, pinned)
    store = Store.open()
    memo = store.root / "hashes"
    with exclusive(str(store.root / ".lock")):  # the first run, importing
        proc = subprocess.Popen([sys.executable, "-m", "materialize", "apply", "--series", str(series), "--out",
                                 str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while not (memo.is_dir() and any(memo.iterdir())):  # hashed, now waiting for the lock
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        os.replace(new, pinned)  # `make dist` rewrites it
    _out, err = proc.communicate(timeout=100)
    assert proc.returncode == 3, err
    assert "up.tar.gz" in err and "changed while" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    pinned.write_bytes(old.read_bytes())  # the original again
    again = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "out" / "plugin" / "a.txt").read_text() == "old\n"
