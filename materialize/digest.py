"""sha1 and sha256 for the commands that run at the prompt, without loading OpenSSL for small inputs.

``import hashlib`` loads OpenSSL's libcrypto (~11M instructions, ~5% of ``materialize add``), although
a workspace command hashes a series file and a patch or two of a few KiB. CPython's own
implementations (``_sha1``, ``_sha256``; ``_sha2`` from 3.12) cost nothing to import but are ~9× slower
per byte, so an input of ``SMALL`` bytes or more, or any input once ``hashlib`` is loaded anyway, goes
to OpenSSL. Both give the same digest: which one ran never shows.
"""

from __future__ import annotations

import sys
from typing import Any

SMALL = 1 << 16


def _builtin(name: str) -> Any:
    try:
        if name == "sha1":
            from _sha1 import sha1 as made
        else:
            try:
                from _sha256 import sha256 as made
            except ImportError:  # Python 3.12+
                from _sha2 import sha256 as made
        return made
    except ImportError:
        return None


_BUILTIN = {name: _builtin(name) for name in ("sha1", "sha256")}


def _new(name: str, data: bytes, size: int | None) -> Any:
    made = _BUILTIN[name]
    if made is None or "_hashlib" in sys.modules or (len(data) if size is None else size) >= SMALL:
        import hashlib

        return hashlib.new(name, data)
    return made(data)


def sha1(data: bytes = b"", *, size: int | None = None) -> Any:
    """A sha1 hash object of ``data``; ``size``: the bytes it will have seen in all, when more are to be
    ``update``d in (a git object's header, then its body)."""
    return _new("sha1", data, size)


def sha256(data: bytes = b"", *, size: int | None = None) -> Any:
    """A sha256 hash object of ``data`` (``size`` as for ``sha1``)."""
    return _new("sha256", data, size)
