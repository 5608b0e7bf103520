"""Header path handling with GNU patch's exact rules (``-pN`` stripping, git C-style quoting)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

DEV_NULL = "/dev/null"

_ESCAPES = {
    ord("a"): 7,
    ord("b"): 8,
    ord("t"): 9,
    ord("n"): 10,
    ord("v"): 11,
    ord("f"): 12,
    ord("r"): 13,
    ord('"'): 34,
    ord("\\"): 92,
}


def unquote_c(raw: bytes) -> bytes:
    """Undo git's C-style quoting (``"a/f\\303\\266"``); unquoted names are returned unchanged."""
    if len(raw) < 2 or not (raw.startswith(b'"') and raw.endswith(b'"')):
        return raw
    body = raw[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != 0x5C or i + 1 >= len(body):
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if 0x30 <= nxt <= 0x37:
            digits = re.match(rb"[0-7]{1,3}", body[i + 1 :])
            assert digits is not None
            out.append(int(digits.group(), 8) & 0xFF)
            i += 1 + len(digits.group())
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return bytes(out)


def decode_path(raw: bytes) -> str:
    """Bytes of a header path to str, losslessly (undecodable bytes survive as surrogates)."""
    return unquote_c(raw.strip()).decode("utf-8", "surrogateescape")


def strip_components(name: str, strip: int) -> str | None:
    """Strip ``strip`` leading components like ``patch -pN``; None when that is impossible.

    Mirrors GNU ``strip_leading_slashes``: runs of slashes count as one separator, and an empty
    remainder is a failure. ``..`` is deliberately left alone (path safety is checked elsewhere).
    """
    remaining = strip
    start = 0
    i = 0
    while i < len(name):
        if name[i] == "/":
            while i + 1 < len(name) and name[i + 1] == "/":
                i += 1
            remaining -= 1
            if remaining >= 0:
                start = i + 1
        i += 1
    result = name[start:]
    if remaining > 0 or not result:
        return None
    return result


_ISO_STAMP = re.compile(
    r"^\s*(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.\d+)?\s*(?:([+-])(\d\d):?(\d\d))?\s*$"
)


def is_epoch_timestamp(stamp: str | None) -> bool:
    """True for a header timestamp at the Unix epoch, which ``diff -N`` uses to mean "no such file"."""
    if not stamp:
        return False
    m = _ISO_STAMP.match(stamp)
    if m:
        year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
        when = datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
        if m.group(7):
            sign = 1 if m.group(7) == "+" else -1
            when -= sign * (int(m.group(8)) * 3600 + int(m.group(9)) * 60)
        return when == 0
    try:
        when = datetime.strptime(stamp.strip(), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return False
    return when == 0
