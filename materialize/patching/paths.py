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


_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                        "nov", "dec"), 1)}
_TIME = r"(\d\d?):(\d\d)(?::(\d\d)(?:[.,](\d{1,9}))?)?"
_TIME_S = r"(\d\d?):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"  # seconds required
_ZONE = r"(?: *(?:([+-])(\d\d)(?::?(\d\d))?|(utc|gmt|ut|z)))?"
# The formats of parse_datetime (GNU patch's get_date) read here exactly: ISO 8601 as diff -u writes
# it, ctime as old diffs write it (a zone only by name, "UTC" before or after the year: "... 1970
# +0000" does not parse in GNU), and CVS's "1 Jan 1970 00:00:00 -0000". Anything else is "unknown" (see ``stamp_says_nonexistent``).
_STAMP_FORMATS = (
    (re.compile(rf"(\d{{4}})-(\d\d?)-(\d\d?)(?:T| +){_TIME}{_ZONE}", re.I), "ymd"),
    (re.compile(rf"(?:(?:sun|mon|tue|wed|thu|fri|sat) +)?([a-z]{{3}}) +(\d\d?) +{_TIME_S}(?: +(utc|gmt|ut|z))? +(\d{{4}})"
                rf"(?: +(utc|gmt|ut|z))?", re.I), "mdy"),
    (re.compile(rf"(\d\d?) +([a-z]{{3}}) +(\d{{4}}) +{_TIME_S}{_ZONE}", re.I), "dmy"),
)
# Text that parse_datetime might read as a time near the epoch: a year 1969/1970 (or 69/70), a
# YYYYMMDD/YYMMDD number of those years, or "@seconds".
_EPOCHISH = re.compile(r"@|(?<!\d)(?:19)?(?:69|70)(?:\d{4})?(?!\d)")
_LOWER, _UPPER = -25 * 3600 * 10**9, 26 * 3600 * 10**9  # GNU: -25:00 < stamp < +26:00, exclusive
_LOCAL_WEST, _LOCAL_EAST = -12 * 3600 * 10**9, 14 * 3600 * 10**9  # the UTC offsets of real time zones


def _drop_comments(text: str) -> str:
    """parse_datetime ignores ``(...)`` comments (nested; an unclosed one runs to the end)."""
    out = []
    depth = 0
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(c)
    return "".join(out)


def parse_stamp(stamp: str) -> tuple[bool | None, bool | None]:
    """How GNU patch's ``fetchname`` reads a header timestamp: (parses, says "no such file").

    A timestamp says "no such file" (``diff -N``) when get_date reads it as a time strictly within
    -25h..+26h of 1970-01-01 00:00 UTC. A time without a zone is local time, so it depends on the
    time zone GNU runs in: decided only when every real zone (UTC-12..UTC+14) agrees. None stands
    for "cannot tell": a format we do not read, or a local time whose answer depends on the zone.
    A format we do not read is still certainly not the epoch when it names no year 1969/1970.
    """
    text = _drop_comments(stamp).strip()
    if not text:
        return True, False  # (get_date reads an empty date as now)
    for pattern, order in _STAMP_FORMATS:
        m = pattern.fullmatch(text)
        if m is None:
            continue
        g = m.groups()
        if order == "ymd":
            year, month, day, rest = int(g[0]), int(g[1]), int(g[2]), g[3:]
        elif order == "mdy":
            if g[6] and g[8]:  # (one zone at most)
                break
            zname = g[6] or g[8]
            month, day, year, rest = _MONTHS.get(g[0].lower(), 0), int(g[1]), int(g[7]), (*g[2:6], None, None, None, zname)
        else:
            day, month, year, rest = int(g[0]), _MONTHS.get(g[1].lower(), 0), int(g[2]), g[3:]
        hour, minute, second, fraction, sign, zh, zm, zname = rest
        try:
            wall = datetime(year, month, day, int(hour), int(minute), int(second or 0), tzinfo=UTC)
        except ValueError:
            break  # (get_date refuses it too, but "unknown" is the safe answer)
        ns = int(wall.timestamp()) * 10**9 + int((fraction or "0").ljust(9, "0"))
        if sign:
            offset = (int(zh) * 60 + int(zm or 0)) * 60 * 10**9
            if offset > 24 * 3600 * 10**9:
                break
            ns -= offset if sign == "+" else -offset
        elif not zname:  # local time: the answer of every real time zone, if they agree
            always = ns - _LOCAL_EAST > _LOWER and ns - _LOCAL_WEST < _UPPER
            never = ns - _LOCAL_WEST <= _LOWER or ns - _LOCAL_EAST >= _UPPER
            return True, (True if always else False if never else None)
        return True, _LOWER < ns < _UPPER
    return None, (None if _EPOCHISH.search(text) else False)


def is_epoch_timestamp(stamp: str | None) -> bool:
    """True for a header timestamp GNU reads as "no such file" (``parse_stamp``; "cannot tell": False)."""
    return bool(stamp) and parse_stamp(stamp)[1] is True
