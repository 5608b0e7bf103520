"""Patch descriptions as mail headers (``From:``/``Date:``/``Subject:``), the way git and gbp pq write them.

export-git takes a commit's author, date and message from a patch header; import-git writes one back.
``describe`` reduces any header (mail style, ``git format-patch`` with its ``From <sha>`` line and
diffstat, or a plain quilt description) to the (author, date, message) a commit can carry, so a header
whose meaning did not change can be kept byte for byte.
"""


# No `from __future__ import annotations`: typing compiles a NamedTuple's string annotations, and a
# process's first compile() costs ~10M instructions, 5% of `materialize new` (tests/test_startup.py).
import re
import time
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # a new patch's date is made with ``time`` (datetime's import: ~4M instructions of `new`)
    import datetime as dt

DEFAULT_AUTHOR = "materialize <materialize@localhost>"
DEFAULT_DATE = "Thu, 01 Jan 1970 00:00:00 +0000"
TRAILER = "Materialize-Patch"


class Description(NamedTuple):
    author: str  # "Name <email>"
    date: str  # RFC 2822
    subject: str
    body: str  # without trailing newlines

    @property
    def message(self) -> str:
        return self.subject + ("\n\n" + self.body if self.body else "") + "\n"


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def mail_date(when: "dt.datetime") -> str:
    """RFC 2822's date, exactly as ``email.utils.format_datetime`` writes it (whose import, the email
    package, cost more than the rest of ``materialize new``)."""
    return _rfc2822(when.timetuple(), when.strftime("%z") if when.tzinfo is not None else "-0000")


def date_now(source_date_epoch: str | None = None) -> str:
    """The ``Date:`` of a header written now, as ``mail_date`` writes it: local time with its offset,
    or ``SOURCE_DATE_EPOCH`` (reproducible builds) in UTC."""
    if source_date_epoch:
        at, offset = time.gmtime(int(source_date_epoch)), 0
    else:
        at = time.localtime()
        offset = at.tm_gmtoff
    sign = "-" if offset < 0 else "+"
    minutes, seconds = divmod(abs(offset), 60)
    return _rfc2822(at, f"{sign}{minutes // 60:02d}{minutes % 60:02d}" + (f"{seconds:02d}" if seconds else ""))


def _rfc2822(at: time.struct_time, zone: str) -> str:
    return (f"{_DAYS[at.tm_wday]}, {at.tm_mday:02d} {_MONTHS[at.tm_mon - 1]} {at.tm_year:04d} "
            f"{at.tm_hour:02d}:{at.tm_min:02d}:{at.tm_sec:02d} {zone}")


def _unfold(lines: list[str], i: int) -> tuple[str, int]:
    value = lines[i].split(":", 1)[1].strip()
    i += 1
    while i < len(lines) and lines[i][:1] in (" ", "\t") and lines[i].strip():
        value += " " + lines[i].strip()
        i += 1
    return value, i


def describe(header: bytes) -> Description:
    """What a header says, whatever its style."""
    text = header.decode("utf-8", "replace")
    lines = text.split("\n")
    i = 0
    if lines and re.match(r"^From [0-9a-f]{40} ", lines[0]):
        i = 1
    fields: dict[str, str] = {}
    while i < len(lines) and re.match(r"^(From|Date|Subject):", lines[i]):
        key = lines[i].split(":", 1)[0]
        fields[key], i = _unfold(lines, i)
    if "Subject" in fields:
        subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", fields["Subject"])
        rest = lines[i:]
    else:
        rest = lines[i:]
        while rest and not rest[0].strip():
            rest = rest[1:]
        subject = rest[0].strip() if rest else ""
        rest = rest[1:]
    body_lines: list[str] = []
    for line in rest:
        if line == "---":  # format-patch: diffstat follows
            break
        body_lines.append(line)
    body = "\n".join(body_lines).strip("\n")
    return Description(fields.get("From", DEFAULT_AUTHOR), fields.get("Date", DEFAULT_DATE), subject, body)


def render(desc: Description) -> bytes:
    """The canonical header import-git and new write."""
    text = f"From: {desc.author}\nDate: {desc.date}\nSubject: {desc.subject}\n\n"
    if desc.body:
        text += desc.body + "\n\n"
    return text.encode("utf-8")


def split_message(message: str) -> tuple[str, str, dict[str, str]]:
    """(subject, body, trailers) of a commit message; only our own trailer is lifted out."""
    lines = message.rstrip("\n").split("\n")
    trailers: dict[str, str] = {}
    while lines and lines[-1].startswith(f"{TRAILER}: "):
        key, value = lines.pop().split(": ", 1)
        trailers[key] = value
    while lines and not lines[-1].strip():
        lines.pop()
    subject = lines[0] if lines else ""
    body = "\n".join(lines[1:]).strip("\n")
    return subject, body, trailers
