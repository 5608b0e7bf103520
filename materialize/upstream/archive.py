"""Read tar and zip archives member by member, refusing anything that would escape the tree.

Archives are never extracted to disk: members stream straight into the store as blobs, so a zip
slip, a link out of the tree or a device file is refused before a single byte lands anywhere.
"""

from __future__ import annotations

import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from materialize.errors import UnsafePathError, UpstreamError
from materialize.paths import link_stays_inside, safe_relpath
from materialize.store import EXECUTABLE, REGULAR, SYMLINK


@dataclass(frozen=True)
class Member:
    path: str
    mode: str
    data: bytes


def _git_mode(unix_mode: int) -> str:
    return EXECUTABLE if unix_mode & 0o111 else REGULAR


def _tar_members(archive: Path) -> Iterator[Member]:
    origin = str(archive)
    try:
        tar = tarfile.open(archive, "r:*")  # noqa: SIM115 - closed by the with-block below
    except (tarfile.TarError, OSError) as exc:
        raise UpstreamError(f"{origin}: not a readable tar archive ({exc})") from None
    with tar:
        for info in tar:
            where = f"{origin}: member {info.name!r}"
            if info.isdir():
                if info.name.strip("./"):
                    safe_relpath(info.name, origin=where)  # a "../x/" folder entry is refused too
                continue
            path = safe_relpath(info.name, origin=where)
            if info.issym():
                if not link_stays_inside(path, info.linkname):
                    raise UnsafePathError(f"{where}: symlink to {info.linkname!r} points outside the tree")
                yield Member(path, SYMLINK, info.linkname.encode())
            elif info.islnk():
                raise UnsafePathError(f"{where}: hard links are not supported (link to {info.linkname!r})")
            elif info.isreg():
                handle = tar.extractfile(info)
                assert handle is not None
                yield Member(path, _git_mode(info.mode), handle.read())
            else:
                raise UnsafePathError(f"{where}: device, fifo or special file refused")


def _zip_members(archive: Path) -> Iterator[Member]:
    origin = str(archive)
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UpstreamError(f"{origin}: not a readable zip archive ({exc})") from None
    with zf:
        for info in zf.infolist():
            where = f"{origin}: member {info.filename!r}"
            if info.is_dir():
                continue
            path = safe_relpath(info.filename, origin=where)
            unix_mode = info.external_attr >> 16
            data = zf.read(info)
            if stat.S_ISLNK(unix_mode):
                target = data.decode("utf-8", "surrogateescape")
                if not link_stays_inside(path, target):
                    raise UnsafePathError(f"{where}: symlink to {target!r} points outside the tree")
                yield Member(path, SYMLINK, data)
            elif stat.S_IFMT(unix_mode) not in (0, stat.S_IFREG):  # 0: zip tools that record no file type
                raise UnsafePathError(f"{where}: device, fifo or special file refused")
            else:
                yield Member(path, _git_mode(unix_mode), data)


def read_archive(archive: Path) -> list[Member]:
    """All file members of a .tar(.gz|.xz|.bz2) or .zip/.whl archive, checked for safety."""
    name = archive.name.lower()
    if name.endswith((".zip", ".whl")):
        members = list(_zip_members(archive))
    elif tarfile.is_tarfile(archive):
        members = list(_tar_members(archive))
    else:
        raise UpstreamError(f"{archive}: unsupported archive type (expected .tar.gz, .tar.xz, .zip or .whl)")
    seen: set[str] = set()
    for member in members:
        if member.path in seen:
            raise UpstreamError(f"{archive}: member {member.path!r} appears twice")
        seen.add(member.path)
    return members


def single_top_folder(members: list[Member]) -> str:
    """The one folder every member sits under ('' if none): archives are rooted there, like pip does."""
    tops = {m.path.split("/", 1)[0] for m in members}
    if len(tops) == 1 and all("/" in m.path for m in members):
        return tops.pop()
    return ""
