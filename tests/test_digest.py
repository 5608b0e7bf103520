"""``digest`` gives hashlib's digests whichever implementation ran (CPython's own below ``SMALL``,
OpenSSL's above it or once hashlib is loaded)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from materialize import digest


@pytest.mark.parametrize("size", [0, 1, 63, 64, digest.SMALL - 1, digest.SMALL, 3 * digest.SMALL + 5])
@pytest.mark.parametrize("name", ["sha1", "sha256"])
def test_every_size_gives_hashlibs_digest(name, size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert getattr(digest, name)(data).hexdigest() == hashlib.new(name, data).hexdigest()


@pytest.mark.parametrize("name", ["sha1", "sha256"])
def test_a_header_then_a_large_body_gives_hashlibs_digest(name):
    """A git object is hashed as its header, then its body: ``size`` says how much will come."""
    body = b"x" * (2 * digest.SMALL)
    made = getattr(digest, name)(b"blob %d\0" % len(body), size=len(body) + 16)
    made.update(body)
    assert made.hexdigest() == hashlib.new(name, b"blob %d\0" % len(body) + body).hexdigest()


def test_a_small_input_does_not_load_openssl():
    code = ("import sys; from materialize import digest; digest.sha256(b'series'); digest.sha1(b'blob 1\\0x');"
            "print('_hashlib' in sys.modules, 'hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
