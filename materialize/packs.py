"""git's pack format, in-process: write a pack of new objects, read objects out of any pack.

Reading is here so that a command which needs a few packed objects (a tree on a path, a blob for
``add``, the prefix commits a cached run looks up) does not start ``git cat-file``: that process, with
the ``setpriv`` and shell that tie it to our life, cost more than the rest of ``materialize add``.
Every pin import is a pack (git fast-import, which stores deltas), and so is every fetched git pin,
so the reader follows both kinds of delta. The format is git's Documentation/gitformat-pack.txt:
version-2 indexes only; anything else is left to git (``Unsupported``).
"""

from __future__ import annotations

import itertools
import mmap
import os
import struct
import zlib
from collections.abc import Mapping
from pathlib import Path

from materialize import digest
from materialize.errors import MaterializeError

PACK_TYPES = {"commit": 1, "tree": 2, "blob": 3, "tag": 4}
_TYPE_NAMES = {number: name for name, number in PACK_TYPES.items()}
_OFS_DELTA, _REF_DELTA = 6, 7
_INDEX_MAGIC = b"\xfftOc\x00\x00\x00\x02"
_BASES_BYTES = 32 << 20  # delta bases kept for the rest of a run: trees of one path share theirs


class Unsupported(Exception):
    """A pack or index this reader does not follow (git reads it instead)."""


def write_pack(folder: Path, objects: Mapping[str, tuple[str, bytes]], root: Path) -> str:
    """Write ``objects`` (sha -> (type, content)) as one version-2 pack and its version-2 index.

    Each object a type-and-size header and its zlib stream, no deltas; the index lists the shas
    sorted, with a CRC-32 and an offset each. The pack is renamed into place before its index, and
    git only reads packs that have one, so a kill at any moment leaves either nothing new or a
    complete pack. Returns the pack's name.
    """
    from materialize.store import cache_errors

    body = bytearray(b"PACK" + struct.pack(">II", 2, len(objects)))
    entries: list[tuple[bytes, int, int]] = []  # (sha, crc32, offset)
    for sha, (kind, data) in objects.items():
        size = len(data)
        byte = (PACK_TYPES[kind] << 4) | (size & 0x0F)
        size >>= 4
        header = bytearray()
        while size:
            header.append(byte | 0x80)
            byte = size & 0x7F
            size >>= 7
        header.append(byte)
        packed = bytes(header) + zlib.compress(data, 1)
        entries.append((bytes.fromhex(sha), zlib.crc32(packed), len(body)))
        body += packed
    if len(body) >= 1 << 31:
        raise MaterializeError(f"{folder}: a batch of {len(body)} bytes is too large for one pack")
    checksum = digest.sha1(body).digest()
    body += checksum
    entries.sort()
    fanout = [0] * 256
    for sha, _crc, _offset in entries:
        fanout[sha[0]] += 1
    index = bytearray(_INDEX_MAGIC)
    index += struct.pack(">256I", *itertools.accumulate(fanout))
    index += b"".join(sha for sha, _crc, _offset in entries)
    index += struct.pack(f">{len(entries)}I", *(crc for _sha, crc, _offset in entries))
    index += struct.pack(f">{len(entries)}I", *(offset for _sha, _crc, offset in entries))
    index += checksum
    index += digest.sha1(index).digest()
    name = f"pack-{checksum.hex()}"
    with cache_errors(root):
        folder.mkdir(parents=True, exist_ok=True)
        for suffix, content in ((".pack", body), (".idx", index)):
            tmp = folder / f"tmp_{name}{suffix}_{os.getpid()}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o444)
                with open(fd, "wb") as handle:
                    handle.write(content)
                os.replace(tmp, folder / f"{name}{suffix}")
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    return name


def _map(path: Path) -> mmap.mmap:
    with open(path, "rb") as handle:
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


class _Pack:
    """One pack and its version-2 index, mapped (the kernel pages in what a lookup touches)."""

    def __init__(self, index_path: Path) -> None:
        index = _map(index_path)
        if index[:8] != _INDEX_MAGIC:
            raise Unsupported(f"{index_path}: not a version-2 pack index")
        self.index = index
        self.fanout = struct.unpack_from(">256I", index, 8)
        self.count = self.fanout[255]
        self.pack_path = index_path.with_suffix(".pack")
        self._pack: mmap.mmap | None = None

    @property
    def pack(self) -> mmap.mmap:
        if self._pack is None:
            try:
                self._pack = _map(self.pack_path)
            except OSError as exc:  # repacked away by a gc since the index was read: git looks again
                raise Unsupported(f"{self.pack_path}: {exc.strerror or exc}") from None
        return self._pack

    def offset(self, sha: bytes) -> int | None:
        """Where ``sha`` starts in the pack (a binary search within its first byte's fan-out slice)."""
        index, first = self.index, sha[0]
        lo, hi = (self.fanout[first - 1] if first else 0), self.fanout[first]
        while lo < hi:
            mid = (lo + hi) // 2
            at = 1032 + 20 * mid
            found = index[at:at + 20]
            if found < sha:
                lo = mid + 1
            elif found > sha:
                hi = mid
            else:
                (offset,) = struct.unpack_from(">I", index, 1032 + 24 * self.count + 4 * mid)
                if offset & 0x80000000:  # a pack over 2 GiB: the index's table of 8-byte offsets
                    (offset,) = struct.unpack_from(">Q", index, 1032 + 28 * self.count + 8 * (offset & 0x7FFFFFFF))
                return offset
        return None

    def entry(self, offset: int) -> tuple[int, int, int | bytes | None, bytes]:
        """(type number, size, delta base: its offset or sha, or None, inflated data) at ``offset``."""
        pack = self.pack
        byte = pack[offset]
        kind, size, shift, pos = (byte >> 4) & 7, byte & 0x0F, 4, offset + 1
        while byte & 0x80:
            byte = pack[pos]
            size |= (byte & 0x7F) << shift
            shift, pos = shift + 7, pos + 1
        base: int | bytes | None = None
        if kind == _OFS_DELTA:
            byte = pack[pos]
            back, pos = byte & 0x7F, pos + 1
            while byte & 0x80:
                byte = pack[pos]
                back, pos = ((back + 1) << 7) | (byte & 0x7F), pos + 1
            base = offset - back
        elif kind == _REF_DELTA:
            base, pos = pack[pos:pos + 20], pos + 20
        elif kind not in _TYPE_NAMES:
            raise Unsupported(f"{self.pack_path}: object type {kind} at offset {offset}")
        inflate = zlib.decompressobj()
        data, step = b"", max(size + 64, 4096)
        while not inflate.eof:
            chunk = pack[pos:pos + step]
            if not chunk:
                raise Unsupported(f"{self.pack_path}: object at offset {offset} is cut short")
            data += inflate.decompress(chunk)
            pos += len(chunk)
        if len(data) != size:
            raise Unsupported(f"{self.pack_path}: object at offset {offset} inflates to {len(data)}, not {size}")
        return kind, size, base, data


def apply_delta(base: bytes, delta: bytes) -> bytes:
    """git's delta: the sizes of source and result, then copies from the base and literal inserts."""
    pos = 0
    sizes = []
    for _ in range(2):
        value = shift = 0
        while True:
            byte = delta[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        sizes.append(value)
    if sizes[0] != len(base):
        raise Unsupported(f"delta expects a base of {sizes[0]} bytes, not {len(base)}")
    out = bytearray()
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:  # copy from the base: which offset and size bytes follow is in the op's bits
            start = length = 0
            for bit in range(4):
                if op & (1 << bit):
                    start |= delta[pos] << (8 * bit)
                    pos += 1
            for bit in range(3):
                if op & (0x10 << bit):
                    length |= delta[pos] << (8 * bit)
                    pos += 1
            out += base[start:start + (length or 0x10000)]
        elif op:
            out += delta[pos:pos + op]
            pos += op
        else:
            raise Unsupported("delta opcode 0 is reserved")
    if len(out) != sizes[1]:
        raise Unsupported(f"delta gives {len(out)} bytes, not {sizes[1]}")
    return bytes(out)


class PackReader:
    """Objects out of every pack of one ``objects/pack`` folder.

    Packs written after it was made (a batch of this run, another process's import) are found by
    looking at the folder again when an object is missing, as git does.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._packs: dict[str, _Pack] = {}
        self._bases: dict[tuple[str, int], tuple[int, bytes]] = {}
        self._bases_bytes = 0

    def _scan(self) -> bool:
        """Open the packs not seen yet; True when there were any."""
        try:
            names = [n for n in os.listdir(self.folder) if n.endswith(".idx") and n not in self._packs]
        except FileNotFoundError:
            return False
        opened = False
        for name in names:
            try:
                self._packs[name] = _Pack(self.folder / name)
                opened = True
            except (OSError, ValueError):  # removed by a gc meanwhile, or empty: not ours to read
                continue
        return opened

    def get(self, sha: str) -> tuple[str, bytes] | None:
        """(type, content) of ``sha``, or None when no pack holds it."""
        raw = bytes.fromhex(sha)
        if not self._packs:
            self._scan()
        while True:
            for name, pack in self._packs.items():
                offset = pack.offset(raw)
                if offset is not None:
                    kind, data = self._resolve(name, pack, offset)
                    return _TYPE_NAMES[kind], data
            if not self._scan():
                return None

    def _resolve(self, name: str, pack: _Pack, offset: int) -> tuple[int, bytes]:
        """An object's type and content, its chain of deltas applied from the base up."""
        start, chain = offset, []
        while True:
            known = self._bases.get((name, offset))
            if known is not None:
                kind, data = known
                break
            kind, _size, base, data = pack.entry(offset)
            if base is None:
                if chain:  # the base of a chain: its siblings (the versions of one file) share it
                    self._remember((name, offset), kind, data)
                break
            chain.append(data)
            if isinstance(base, int):
                offset = base
                continue
            found = self.get(base.hex())  # a REF_DELTA's base may sit in any pack
            if found is None:
                raise Unsupported(f"{pack.pack_path}: delta base {base.hex()} is missing")
            kind, data = PACK_TYPES[found[0]], found[1]
            break
        for delta in reversed(chain):
            data = apply_delta(data, delta)
        if chain:
            self._remember((name, start), kind, data)
        return kind, data

    def _remember(self, key: tuple[str, int], kind: int, data: bytes) -> None:
        if self._bases_bytes + len(data) > _BASES_BYTES:
            self._bases.clear()
            self._bases_bytes = 0
        self._bases[key] = (kind, data)
        self._bases_bytes += len(data)
