"""Read tar and zip archives member by member, refusing anything that would escape the tree.

Archives are never extracted to disk: members stream straight into the store as blobs, in chunks, so
memory stays bounded whatever a member's size, and a zip slip, a link out of the tree or a device file
is refused before a single byte lands anywhere. The bytes an archive expands to are capped relative to
its own size (``MATERIALIZE_MAX_EXPANSION``), so a compression bomb is refused (exit 4) while it is
being read, not after it filled the disk. A truncated or corrupt archive is an upstream error (exit 3):
every stream is read to its end so gzip's, xz's and bzip2's checksums are verified even when the
pin records no sha256.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from materialize.errors import UnsafePathError, UpstreamError
from materialize.paths import MAX_LINK_TARGET, check_links, link_stays_inside, safe_relpath
from materialize.series import DEFAULT_EXPANSION, EXPANSION_ENV, EXPANSION_FLOOR
from materialize.store import EXECUTABLE, PIPE_BUFFER, REGULAR, SYMLINK, TREE, die_with_parent, widen_pipe

# EXPANSION_*: real sdists and wheels expand 3-15x, gzip's own ceiling is ~1000x; small archives may
# always expand to EXPANSION_FLOOR. One rule with compressed patch files (series.py reads them).
CHUNK = 1 << 20
# tarfile reads a GNU long name/link or a pax header whole into memory, before any member data: one
# larger than this is refused unread (real ones hold a name, a link, a few attributes: kilobytes).
MAX_EXTENDED_HEADER = 1 << 20
SHOWN_NAME = 160  # characters of a member's name a message prints
# What a damaged compressed stream raises, depending on where the damage is and which codec reads it.
_CORRUPT = (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError)


@dataclass(frozen=True)
class Member:
    """A member read whole (small archives, tests); imports use :class:`StreamMember` instead."""

    path: str
    mode: str
    data: bytes


@dataclass(frozen=True)
class StreamMember:
    """A member whose bytes are read from ``reader`` (exactly ``size`` of them) before the next one.

    A directory entry has mode ``TREE`` and no bytes: git trees cannot hold an empty directory, so
    the import records the empty ones beside the tree and outputs recreate them (as ``tar -x`` would).
    """

    path: str
    mode: str
    size: int
    reader: BinaryIO
    same_as: str | None = None  # a tar hard link: the earlier member whose content and mode it shares


class _Budget:
    """Bytes an archive may still expand to; exceeding it is a bomb, refused while reading."""

    def __init__(self, archive: Path) -> None:
        ratio = float(os.environ.get(EXPANSION_ENV) or DEFAULT_EXPANSION)
        self.archive = archive
        self.limit = max(EXPANSION_FLOOR, int(archive.stat().st_size * ratio))
        self.used = 0

    def spend(self, amount: int, where: str) -> None:
        self.used += amount
        if self.used > self.limit:
            raise UnsafePathError(
                f"{where}: the archive expands past {self.limit} bytes ({self.limit // max(1, self.archive.stat().st_size)}x"
                f" its size): refused as a compression bomb (raise {EXPANSION_ENV} if it is genuine)"
            )


    def declared(self, size: int, where: str) -> None:
        """Refuse early on what the member header declares, before decompressing any of it."""
        if self.used + size > self.limit:
            self.spend(size, where)


def shown(name: str) -> str:
    """``name`` for a one-line message: its repr, cut short (with its full length) when it is long."""
    if len(name) <= SHOWN_NAME:
        return repr(name)
    return f"{name[:SHOWN_NAME]!r}... ({_nbytes(name)} bytes)"


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogateescape"))


_HIGH_BYTES = bytes(range(128, 256))


def _calc_chksums(buf: bytes) -> tuple[int, int]:
    """``tarfile.calc_chksums``, the same two numbers: a header's bytes summed unsigned and signed,
    its checksum field counted as spaces. tarfile unpacks the 512 bytes into two tuples of numbers for
    every member header (11% of a cold import's own CPU on glibc's 22k members); here each sum is one
    pass in C and the signed one follows from how many bytes have their high bit set."""
    head, tail = buf[:148], buf[156:]
    unsigned = 256 + sum(head) + sum(tail)
    high = len(head) + len(tail) - len(head.translate(None, _HIGH_BYTES)) - len(tail.translate(None, _HIGH_BYTES))
    return unsigned, unsigned - 256 * high


# tarfile looks the function up in its module at each header. Replaced for the whole process (the
# results are identical: tests/upstream/test_archive.py checks them against tarfile's own).
_TARFILE_CALC_CHKSUMS = tarfile.calc_chksums
tarfile.calc_chksums = _calc_chksums


def _guarded_tarinfo(budget: _Budget) -> type[tarfile.TarInfo]:
    """A TarInfo class that judges a GNU long name/link or pax header by its declared size before
    tarfile reads it whole into memory: over MAX_EXTENDED_HEADER it is refused unread (exit 4), and
    what it holds counts against the expansion budget like member data."""

    class _Guarded(tarfile.TarInfo):
        def _guard(self, kind: str) -> None:
            where = f"{budget.archive}: {kind} header {shown(self.name)} at byte {self.offset}"
            if self.size > MAX_EXTENDED_HEADER:
                raise UnsafePathError(f"{where} declares {self.size} bytes (more than {MAX_EXTENDED_HEADER});"
                                      " refused before reading it")
            budget.spend(self._block(self.size), where)

        @classmethod
        def fromtarfile(cls, tar: tarfile.TarFile) -> tarfile.TarInfo:  # tarfile's hooks
            # tarfile ends its member list without a word at a damaged or cut header after the first
            # (TarFile.next), which would make the members before it the whole tree; GNU tar says
            # "Skipping to next header" and exits 2. (At byte 0 tarfile raises: not a tar at all.)
            at = tar.offset
            try:
                info = super().fromtarfile(tar)
            except (tarfile.InvalidHeaderError, tarfile.TruncatedHeaderError) as exc:
                if at == 0:
                    raise
                raise UpstreamError(f"{budget.archive}: corrupt or truncated archive: damaged member header at"
                                    f" byte {at} ({exc})") from None
            # Every header block counts too: a million identical empty members compress to almost
            # nothing, and tarfile keeps a TarInfo for each (memory), as we keep a path.
            budget.spend(tarfile.BLOCKSIZE, f"{budget.archive}: member {shown(info.name)} at byte {at}")
            # A pax "size" is any integer: a negative one steps tarfile's offset backward (the same
            # header read again, or a member's data "ending" at once). GNU tar: "Malformed extended header".
            if info.size < 0:
                raise UpstreamError(f"{budget.archive}: corrupt archive: member {shown(info.name)} at byte {at}"
                                    f" declares a negative size ({info.size})")
            return info

        def _proc_gnulong(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
            self._guard("GNU long name" if self.type == tarfile.GNUTYPE_LONGNAME else "GNU long link")
            return super()._proc_gnulong(tar)  # type: ignore[misc]

        def _proc_pax(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
            self._guard("pax global" if self.type == tarfile.XGLTYPE else "pax extended")
            return super()._proc_pax(tar)  # type: ignore[misc]

    return _Guarded


def _corrupt(archive: Path, exc: BaseException) -> UpstreamError:
    return UpstreamError(f"{archive}: corrupt or truncated archive ({type(exc).__name__}: {exc})")


class _Counted:
    """A member reader that charges every byte to the budget and reports damage as UpstreamError."""

    def __init__(self, raw: BinaryIO, budget: _Budget, where: str) -> None:
        self.raw, self.budget, self.where = raw, budget, where

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.raw.read(size)
        except _CORRUPT as exc:
            raise _corrupt(self.budget.archive, exc) from None
        self.budget.spend(len(data), self.where)
        return data


def _git_mode(unix_mode: int) -> str:
    return EXECUTABLE if unix_mode & 0o111 else REGULAR


# Compressed tarballs are decompressed by the codec's own tool in a separate process: the import is a
# pipeline (decompressor | our checks | git fast-import) that keeps both cores busy. The tool checks
# the stream's checksum and exits non-zero on damage; without it, Python's codec does the same work.
_DECOMPRESSORS = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bzip2"))


@contextlib.contextmanager
def _open_tar(archive: Path, budget: _Budget) -> Iterator[tarfile.TarFile]:
    origin = str(archive)
    guarded = _guarded_tarinfo(budget)
    with archive.open("rb") as handle:
        magic = handle.read(6)
    tool = next((t for m, t in _DECOMPRESSORS if magic.startswith(m) and shutil.which(t)), None)
    if tool is None:
        try:
            # "r:*", read strictly in order: the codec's file object (GzipFile, LZMAFile) verifies
            # its checksum at the end (read below), which tarfile's "r|*" stream reader never does.
            tar = tarfile.open(archive, "r:*", tarinfo=guarded)  # noqa: SIM115 - closed by the with-block below
        except _CORRUPT as exc:
            raise UpstreamError(f"{origin}: not a readable archive (expected .tar.gz, .tar.xz, .tar.bz2, .zip or"
                                f" .whl): {exc}") from None
        with tar:
            yield tar
            if tar.fileobj is not None:
                _drain(tar.fileobj, budget)
        return
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen([tool, "-dc", str(archive)], stdout=subprocess.PIPE, stderr=errors,
                                preexec_fn=die_with_parent, bufsize=PIPE_BUFFER)
        assert proc.stdout is not None
        widen_pipe(proc.stdout)
        try:
            try:
                # "r:" over a forward-only view of the pipe, not the stream mode "r|": tarfile's stream
                # copies its 10 KiB buffer twice on every read (a header, a member's data, its padding),
                # ~1 GB of copying for glibc's 22k members.
                tar = tarfile.open(fileobj=_ForwardReader(proc.stdout), mode="r:",  # noqa: SIM115 - closed below
                                   tarinfo=guarded)
            except _CORRUPT as exc:
                # nothing came out of a cut or damaged stream (bzip2 writes nothing before its first
                # 900 KB block is whole): the tool's own error says so, not tarfile's "empty file"
                _drain(proc.stdout, budget)
                _check_tool(proc, tool, errors, origin)
                raise UpstreamError(f"{origin}: not a readable tar archive: {exc}") from None
            with tar:
                yield tar
            _drain(proc.stdout, budget)  # to the end, so the tool checks the trailing checksum
            _check_tool(proc, tool, errors, origin)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
            proc.wait()


def _check_tool(proc: subprocess.Popen, tool: str, errors: BinaryIO, origin: str) -> None:
    """Wait for the decompressor; a non-zero exit is a damaged or truncated archive, said in its words."""
    if proc.wait() != 0:
        errors.seek(0)
        detail = errors.read().decode(errors="replace").strip().splitlines()
        raise UpstreamError(f"{origin}: corrupt or truncated archive ({tool}: "
                            f"{detail[0] if detail else f'exit {proc.returncode}'})")


def _drain(stream: BinaryIO, budget: _Budget) -> None:
    """Read what follows the archive's end marker, to the end of the compressed stream (its checksum
    is checked there), charging it to the budget: 113 bytes of bzip2 are 100 MB of zeros, so 1 KB of
    concatenated streams after a tar's last member took 12 s to read (a megabyte: hours)."""
    where = f"{budget.archive}: the data after the last member"
    while chunk := stream.read(CHUNK):
        budget.spend(len(chunk), where)


class _ForwardReader:
    """A pipe as the seekable file tarfile's "r:" mode reads: it reads members strictly in order, so
    every seek it makes is forward (skipping is reading); a backward one is refused, never faked."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.pos = raw, 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.pos += len(data)
        return data

    def tell(self) -> int:
        return self.pos

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence != 0 or pos < self.pos:
            raise io.UnsupportedOperation(f"backward seek to {pos} in a stream at {self.pos}")
        while self.pos < pos and self.read(min(pos - self.pos, CHUNK)):
            pass
        return self.pos


class _MemberData:
    """A plain member's bytes read straight from the archive, in order: what ``extractfile`` gives
    (exactly ``size`` bytes at the member's data offset, ReadError when the archive ends first) without
    its two objects and 8 KiB buffer per member (glibc has 22k). Sparse members take ``extractfile``."""

    def __init__(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        self.fileobj, self.pos, self.left = tar.fileobj, info.offset_data, info.size

    def read(self, size: int = -1) -> bytes:
        count = self.left if size < 0 else min(size, self.left)
        if count <= 0:
            return b""
        self.fileobj.seek(self.pos)  # where the last read stopped: no move in a stream read in order
        data = self.fileobj.read(count)
        if len(data) != count:
            raise tarfile.ReadError("unexpected end of data")
        self.pos += count
        self.left -= count
        return data


def _tar_members(archive: Path, budget: _Budget) -> Iterator[StreamMember]:
    origin = str(archive)
    modes: dict[str, str] = {}  # files and links read so far (what a hard link may name)
    with _open_tar(archive, budget) as tar:
        for info in tar:
            where = f"{origin}: member {shown(info.name)}"
            if info.isdir():
                if info.name.strip("./"):
                    # a "../x/" folder entry is refused too
                    yield StreamMember(safe_relpath(info.name.rstrip("/"), origin=where), TREE, 0, _BytesReader(b""))
                continue
            path = safe_relpath(info.name, origin=where)
            if info.issym():
                if len(info.linkname.encode("utf-8", "surrogateescape")) > MAX_LINK_TARGET:
                    raise UnsafePathError(f"{where}: symlink target longer than {MAX_LINK_TARGET} bytes")
                if not link_stays_inside(path, info.linkname):
                    raise UnsafePathError(f"{where}: symlink to {info.linkname!r} points outside the tree")
                target_bytes = info.linkname.encode("utf-8", "surrogateescape")
                modes[path] = SYMLINK
                yield StreamMember(path, SYMLINK, len(target_bytes), _BytesReader(target_bytes))
            elif info.islnk():
                # tar stores a second name for a file as a hard link to the first: inside the tree it
                # is that member's content again (``tar -x`` links it; GNU patch breaks the link when it
                # patches either name). Its target must be a member read before it.
                target = safe_relpath(info.linkname, origin=f"{where}: hard link target")
                if target not in modes:
                    raise UpstreamError(f"{where}: hard link to {shown(info.linkname)}, which is not an earlier member")
                yield StreamMember(path, modes[target], 0, _BytesReader(b""), same_as=target)
                modes[path] = modes[target]
                continue
            elif info.isreg():
                budget.declared(info.size, where)
                handle = tar.extractfile(info) if info.sparse is not None else _MemberData(tar, info)
                assert handle is not None
                modes[path] = _git_mode(info.mode)
                yield StreamMember(path, modes[path], info.size, _Counted(handle, budget, where))  # type: ignore[arg-type]
            else:
                raise UnsafePathError(f"{where}: device, fifo or special file refused")


_ZIP_ENCRYPTED = 0x1  # general purpose bit 0 of a zip member's header


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size < 0 else self.pos + size
        chunk, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return chunk


def _zip_members(archive: Path, budget: _Budget) -> Iterator[StreamMember]:
    origin = str(archive)
    try:
        zf = zipfile.ZipFile(archive)
    except _CORRUPT as exc:
        raise UpstreamError(f"{origin}: not a readable zip archive ({exc})") from None
    with zf:
        for info in zf.infolist():
            where = f"{origin}: member {shown(info.filename)}"
            if info.is_dir():
                if info.filename.strip("./"):
                    yield StreamMember(safe_relpath(info.filename.rstrip("/"), origin=where), TREE, 0, _BytesReader(b""))
                continue
            path = safe_relpath(info.filename, origin=where)
            if info.flag_bits & _ZIP_ENCRYPTED:  # zipfile would raise RuntimeError asking for a password
                raise UpstreamError(f"{where}: encrypted (zip flag 0x1); an upstream archive needs no password")
            unix_mode = info.external_attr >> 16
            if stat.S_ISLNK(unix_mode):
                if info.file_size > MAX_LINK_TARGET:
                    raise UnsafePathError(f"{where}: symlink target longer than {MAX_LINK_TARGET} bytes")
                data = zf.read(info)
                target = data.decode("utf-8", "surrogateescape")
                if not link_stays_inside(path, target):
                    raise UnsafePathError(f"{where}: symlink to {target!r} points outside the tree")
                yield StreamMember(path, SYMLINK, len(data), _BytesReader(data))
            elif stat.S_IFMT(unix_mode) not in (0, stat.S_IFREG):  # 0: zip tools that record no file type
                raise UnsafePathError(f"{where}: device, fifo or special file refused")
            else:
                budget.declared(info.file_size, where)
                with zf.open(info) as handle:  # checks the CRC when the member is read to its end
                    yield StreamMember(path, _git_mode(unix_mode), info.file_size, _Counted(handle, budget, where))  # type: ignore[arg-type]


def stream_archive(archive: Path) -> Iterator[StreamMember]:
    """Members of a .tar(.gz|.xz|.bz2) or .zip/.whl archive, checked for safety, in bounded memory.

    Files and links, plus directory entries (mode ``TREE``, no bytes) so that empty directories can
    be recreated.

    Each member's ``reader`` must be consumed before the next member is asked for. Damage anywhere in
    the archive (a truncated download, a corrupt deflate stream, a CRC mismatch) raises UpstreamError
    naming the archive. A member that appears again replaces the earlier one, as ``tar -x``,
    ``unzip`` and pip write it over the first.
    """
    name = archive.name.lower()
    budget = _Budget(archive)
    members = _zip_members(archive, budget) if name.endswith((".zip", ".whl")) else _tar_members(archive, budget)
    seen: set[str] = set()
    links: dict[str, str] = {}
    try:
        for member in members:
            if member.mode == TREE:
                yield member
                continue
            if member.path in seen:
                # A member that appears again is written over the first, by tar -x (samba's orig
                # tarball repeats 27 files) as by unzip and pip: the last one is the file. Its
                # links are judged anew below.
                links.pop(member.path, None)
            seen.add(member.path)
            if member.mode == SYMLINK and member.same_as is not None:
                links[member.path] = links[member.same_as]
            elif member.mode == SYMLINK and isinstance(member.reader, _BytesReader):
                links[member.path] = member.reader.data.decode("utf-8", "surrogateescape")
            yield member
    except _CORRUPT as exc:
        raise _corrupt(archive, exc) from None
    # Each link was judged alone above; chains (x -> ../.., y -> x/../../..) only once all are known.
    check_links(links, seen - links.keys(), origin=str(archive))


def read_archive(archive: Path) -> list[Member]:
    """All file members with their bytes (for small archives; imports stream instead)."""
    members: dict[str, Member] = {}
    for m in stream_archive(archive):
        if m.mode != TREE:
            data = members[m.same_as].data if m.same_as is not None else read_exact(m)
            members[m.path] = Member(m.path, m.mode, data)
    return list(members.values())


def read_exact(member: StreamMember) -> bytes:
    data = member.reader.read()
    if len(data) != member.size:
        raise UpstreamError(f"member {member.path!r}: {len(data)} bytes, the archive declares {member.size}")
    return data


def single_top_folder(paths: list[str] | list[Member]) -> str:
    """The one folder every member sits under ('' if none): archives are rooted there, like pip does."""
    names = [p if isinstance(p, str) else p.path for p in paths]
    tops = {n.split("/", 1)[0] for n in names}
    if len(tops) == 1 and all("/" in n for n in names):
        return tops.pop()
    return ""
