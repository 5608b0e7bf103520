"""Parse the short upstream SPEC strings of the CLI into pins.

``pypi:NAME==VERSION`` (the sdist, looked up with its sha256 on the configured index),
``pypi:NAME==VERSION:FILE`` (one exact file), ``git+PATH_OR_URL@REV``, a local directory, or a
local .tar.gz / .tar.xz / .zip file.
"""

from __future__ import annotations

from pathlib import Path

from materialize.errors import MaterializeError
from materialize.series import GitPin, PathPin, PypiPin, TarballPin
from materialize.upstream.resolve import sha256_file

_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar", ".zip", ".whl")


class SpecError(MaterializeError):
    exit_code = 2


def parse_spec(spec: str, *, index: str | None = None) -> GitPin | PypiPin | PathPin | TarballPin:
    if spec.startswith("pypi:"):
        body = spec[len("pypi:"):]
        requirement, _, filename = body.partition(":")
        if "==" not in requirement:
            raise SpecError(f"{spec}: expected pypi:NAME==VERSION[:FILE]")
        name, version = requirement.split("==", 1)
        from materialize.upstream import pypi  # the index client loads only when asked for

        found_name, _url, sha = pypi.find_file(name, version, filename or None, index=index)
        return PypiPin(kind="pypi", requirement=requirement, file=found_name, sha256=sha, index_url=index)
    if spec.startswith("git+"):
        body = spec[len("git+"):]
        url, sep, rev = body.rpartition("@")
        if not sep or not url:
            raise SpecError(f"{spec}: expected git+PATH_OR_URL@REV")
        return GitPin(kind="git", url=url, rev=rev)
    path = Path(spec)
    if path.is_dir():
        return PathPin(kind="path", path=str(path.resolve()))
    if path.is_file() and spec.lower().endswith(_ARCHIVE_SUFFIXES):
        return TarballPin(kind="tarball", path=str(path.resolve()), sha256=sha256_file(path))
    raise SpecError(f"{spec}: not a directory, archive, git+URL@REV or pypi:NAME==VERSION")
