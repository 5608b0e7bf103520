"""Byte-exact anatomy of a patch file: header, per-file sections, hunks, trailer.

Refresh and import must leave every piece the user did not change byte-identical, so we keep the raw
bytes of each piece next to its parsed meaning instead of round-tripping through a diff library.
Accepts git (``diff --git``), quilt/GNU (``--- a/x`` / ``+++ b/x``, optional ``Index:``) and
``git format-patch`` files (mail header, diffstat and ``-- `` signature survive as header/trailer).
"""

from __future__ import annotations

import re

from materialize.errors import PatchFormatError

_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$", re.S)
NO_NEWLINE = b"\\ No newline at end of file\n"


class Hunk:
    """One hunk: the raw ``@@`` line and body, plus the numbers and lines they mean. (Plain classes
    here: refresh runs daily, and ``dataclasses`` cost ~10 ms of its start-up.)"""

    __slots__ = ("header", "body", "old_start", "old_len", "new_start", "new_len", "section")

    def __init__(self, header: bytes, body: list[bytes], old_start: int, old_len: int, new_start: int,
                 new_len: int, section: bytes) -> None:
        self.header = header
        self.body = body  # raw lines, each ending in b"\n" (including "\ No newline" markers)
        self.old_start = old_start
        self.old_len = old_len
        self.new_start = new_start
        self.new_len = new_len
        self.section = section  # text after the closing "@@" (function context), with its newline

    @property
    def raw(self) -> bytes:
        return self.header + b"".join(self.body)

    def old_lines(self) -> list[bytes]:
        return _side(self.body, b"-")

    def new_lines(self) -> list[bytes]:
        return _side(self.body, b"+")


def _side(body: list[bytes], keep: bytes) -> list[bytes]:
    """The file lines one side of a hunk consists of (a following "\\ No newline" strips the EOL)."""
    out: list[bytes] = []
    prev_in = False
    for line in body:
        if line.startswith(b"\\"):
            if prev_in and out and out[-1].endswith(b"\n"):
                out[-1] = out[-1][:-1]
            continue
        blank = line[:1] in (b"\n", b"\r")
        kind = b" " if blank else line[:1]
        prev_in = kind in (b" ", keep)
        if prev_in:
            out.append(line if blank else line[1:])
    return out


class FileSection:
    """One file's part of a patch: raw header lines (``diff --git``, modes, ``---``/``+++``) and hunks.

    ``lead`` holds the lines between the previous section's last hunk and this header that GNU patch
    skips as garbage (``Only in``, ``Binary files ... differ``, blank lines): kept as they are, with
    the section. A plain diff's own preamble (``diff -Naur a/x b/x``, ``Index:``/``====``, CVS's
    ``RCS file:``) is the start of its header, as the applier reads it."""

    __slots__ = ("lead", "header", "hunks", "old_path", "new_path", "old_mode", "new_mode", "rename", "binary")

    def __init__(self, header: list[bytes], lead: list[bytes] | None = None) -> None:
        self.lead = lead or []
        self.header = header
        self.hunks: list[Hunk] = []
        self.old_path: str | None = None  # None for /dev/null (new file)
        self.new_path: str | None = None  # None for /dev/null (deleted file)
        self.old_mode: str | None = None
        self.new_mode: str | None = None
        self.rename = False
        self.binary = False

    @property
    def raw(self) -> bytes:
        return b"".join(self.lead) + b"".join(self.header) + b"".join(h.raw for h in self.hunks)

    def path(self) -> str:
        return (self.new_path or self.old_path) or ""


class PatchText:
    """A whole patch file: ``header + sections + trailer`` reproduces the input byte for byte."""

    __slots__ = ("header", "sections", "trailer")

    def __init__(self, header: bytes, sections: list[FileSection], trailer: bytes) -> None:
        self.header = header
        self.sections = sections
        self.trailer = trailer

    def render(self) -> bytes:
        return self.header + b"".join(s.raw for s in self.sections) + self.trailer


def _strip_path(raw: bytes, strip: int) -> str | None:
    text = raw.decode("utf-8", "surrogateescape").split("\t", 1)[0].rstrip("\n").rstrip("\r")
    if text.startswith('"') and text.endswith('"'):
        text = text[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode(
            "utf-8", "surrogateescape"
        )
    if text == "/dev/null":
        return None
    parts = text.split("/")
    if strip >= len(parts):
        raise PatchFormatError(f"path {text!r} has fewer than {strip} leading components to strip")
    return "/".join(parts[strip:])


# A plain diff's per-file preamble before its ``---`` line: the applier's ``parse._PREAMBLE``, copied
# because pop and push read patch text here and must not load the patching package (tests/test_startup.py).
_PREAMBLE = re.compile(rb"^(Index: |=+\r?\n|diff -|RCS file: |retrieving revision )")


def _is_file_start(lines: list[bytes], i: int) -> bool:
    line = lines[i]
    if line.startswith(b"diff --git "):
        return True
    if line.startswith(b"Index: ") and i + 1 < len(lines) and lines[i + 1].startswith(b"===="):
        return True
    return line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")


def _next_section(lines: list[bytes], i: int) -> int:
    """Where the next file section begins at or after ``i`` (``len(lines)`` when none does), the way GNU
    patch finds it: lines that start none are garbage it skips (``diff -Naur`` command lines, ``Only
    in``, ``Binary files ... differ``, blank lines). A plain section begins at its preamble."""
    j = i
    while j < len(lines) and not _is_file_start(lines, j):
        j += 1
    if j < len(lines) and not lines[j].startswith(b"diff --git "):
        while j > i and _PREAMBLE.match(lines[j - 1]) and not lines[j - 1].startswith(b"diff --git "):
            j -= 1
    return j


def split_lines(data: bytes) -> list[bytes]:
    """Lines as git, GNU diff and GNU patch see them: ended by LF only (a lone CR is inside a line)."""
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def parse(data: bytes, *, source: str = "<patch>", strip: int = 1) -> PatchText:
    """Split ``data`` into header, file sections and trailer; raise PatchFormatError naming the line."""
    lines = split_lines(data)
    i = _next_section(lines, 0)
    header = b"".join(lines[:i])
    sections: list[FileSection] = []
    while i < len(lines):
        start = _next_section(lines, i)
        if start == len(lines):
            break  # garbage after the last section: the trailer (a format-patch signature, ...)
        section, end = _parse_section(lines, start, source, strip)
        section.lead = lines[i:start]
        sections.append(section)
        i = end
    trailer = b"".join(lines[i:])
    return PatchText(header=header, sections=sections, trailer=trailer)


def _parse_section(lines: list[bytes], i: int, source: str, strip: int) -> tuple[FileSection, int]:
    sec = FileSection(header=[])
    git = lines[i].startswith(b"diff --git ")
    if git:
        m = re.match(rb"^diff --git (\S+) (\S+)\s*$", lines[i])
        if m:
            sec.old_path = _strip_path(m.group(1), strip)
            sec.new_path = _strip_path(m.group(2), strip)
    start = i
    seen_minus = False
    while i < len(lines):
        line = lines[i]
        if i > start and line.startswith(b"diff --git "):
            break
        if line.startswith(b"@@ "):
            break
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            if seen_minus:
                break
            seen_minus = True
            sec.old_path = _strip_path(line[4:], strip)
            sec.new_path = _strip_path(lines[i + 1][4:], strip)
            sec.header += [line, lines[i + 1]]
            i += 2
            continue
        if git and not seen_minus:
            _git_meta(sec, line, strip)
        elif not git and i > start and (seen_minus or not _PREAMBLE.match(line)):
            break
        sec.header.append(line)
        i += 1
    while i < len(lines) and lines[i].startswith(b"@@ "):
        hunk, i = _parse_hunk(lines, i, source)
        sec.hunks.append(hunk)
    if not sec.hunks and not git:
        raise PatchFormatError(f"{source}:{start + 1}: file section without hunks")
    return sec, i


def _git_meta(sec: FileSection, line: bytes, strip: int) -> None:
    text = line.decode("utf-8", "surrogateescape").rstrip("\n")
    if text.startswith("new file mode "):
        sec.old_path, sec.new_mode = None, text.split()[-1]
    elif text.startswith("deleted file mode "):
        sec.new_path, sec.old_mode = None, text.split()[-1]
    elif text.startswith("old mode "):
        sec.old_mode = text.split()[-1]
    elif text.startswith("new mode "):
        sec.new_mode = text.split()[-1]
    elif text.startswith("rename from "):
        sec.rename, sec.old_path = True, text[len("rename from ") :]
    elif text.startswith("rename to "):
        sec.rename, sec.new_path = True, text[len("rename to ") :]
    elif text.startswith("index ") and len(text.split()) == 3:
        sec.old_mode = sec.old_mode or text.split()[2]
        sec.new_mode = sec.new_mode or text.split()[2]
    elif text.startswith(("Binary files ", "GIT binary patch")):
        sec.binary = True


def _parse_hunk(lines: list[bytes], i: int, source: str) -> tuple[Hunk, int]:
    m = _HUNK.match(lines[i])
    if not m:
        raise PatchFormatError(f"{source}:{i + 1}: malformed hunk header {lines[i][:60]!r}")
    old_start, new_start = int(m.group(1)), int(m.group(3))
    old_len = 1 if m.group(2) is None else int(m.group(2))
    new_len = 1 if m.group(4) is None else int(m.group(4))
    hunk = Hunk(lines[i], [], old_start, old_len, new_start, new_len, m.group(5))
    want_old, want_new = old_len, new_len
    i += 1
    while i < len(lines) and (want_old > 0 or want_new > 0):
        line = lines[i]
        kind = line[:1]
        if kind in (b" ", b"\n", b"\r"):
            want_old -= 1
            want_new -= 1
        elif kind == b"-":
            want_old -= 1
        elif kind == b"+":
            want_new -= 1
        elif kind == b"\\":
            pass
        else:
            break
        hunk.body.append(line)
        i += 1
        if want_old < 0 or want_new < 0:
            raise PatchFormatError(f"{source}:{i}: hunk has more lines than its header says")
    if want_old > 0 or want_new > 0:
        raise PatchFormatError(f"{source}:{i + 1}: hunk ends early (header at line {hunk_line(lines, hunk)})")
    if i < len(lines) and lines[i].startswith(b"\\"):
        hunk.body.append(lines[i])
        i += 1
    return hunk, i


def hunk_line(lines: list[bytes], hunk: Hunk) -> int:
    return lines.index(hunk.header) + 1 if hunk.header in lines else 0


def format_range(start: int, length: int) -> str:
    return f"{start}" if length == 1 else f"{start},{length}"


def hunk_header(old_start: int, old_len: int, new_start: int, new_len: int, section: bytes = b"\n") -> bytes:
    return f"@@ -{format_range(old_start, old_len)} +{format_range(new_start, new_len)} @@".encode() + section


_MARKER = re.compile(rb"^(?:(?:<{7}|>{7}|\|{7})(?:[ \t].*)?|={7})\r?\n?$", re.S)


def conflict_markers(base: bytes | None, cur: bytes | None) -> list[int]:
    """1-based lines of ``cur`` that are merge conflict markers (``<<<<<<<``, ``|||||||``, ``=======``,
    ``>>>>>>>``, git's rule) and were not already lines of ``base``: a file of upstream that really
    holds such a line is not a leftover conflict."""
    if not cur:
        return []
    already = set(split_lines(base)) if base else set()
    found, inside = [], False
    for n, line in enumerate(split_lines(cur), 1):
        if not _MARKER.match(line) or line in already:
            continue
        if line.startswith(b"="):  # only between <<<<<<< and >>>>>>>: alone it is a setext or RST underline
            if inside:      # ("Summary" over "=======" in a README), which refresh refused for good
                found.append(n)
            continue
        inside = line.startswith((b"<", b"|"))
        found.append(n)
    return found


def touched(data: bytes, *, source: str = "<patch>", strip: int = 1) -> list[tuple[str, str]]:
    """(source path, destination path) of every file a patch touches."""
    out = []
    for sec in parse(data, source=source, strip=strip).sections:
        dest = sec.new_path or sec.old_path
        if dest:
            out.append((sec.old_path or dest, dest))
    return out


def check_description(description: bytes, diff: bytes, *, source: str, strip: int, what: str) -> None:
    """Refuse a description (``header --set``/``-e``, an imported commit message) that GNU patch would
    read as part of the diff below it: a quoted ``---``/``+++`` pair with a hunk, a ``diff --git`` line,
    an ``Index:`` line or a context diff's ``***`` header would patch files (or change which file the
    real diff patches) on the next push. Decided by the applier's own parser (``parse_patch``, which
    reads headers as GNU's ``intuit_diff_type`` does): the description with the diff must parse to
    exactly the sections the diff alone parses to. Refused (exit 2) naming the first line of the
    description that the parser read as a diff (``what``: the file or commit the text is meant for).
    A ``-- `` or ``---`` line alone (git format-patch's separators), prose and diffstats pass."""
    from materialize.patching.parse import parse_patch

    n = len(split_lines(description))
    try:
        alone = parse_patch(diff, source=source, strip=strip).files if diff.strip() else ()
    except PatchFormatError:
        return  # the diff itself is what it is: no description makes it readable (push names it)
    problem = ""
    try:
        together = parse_patch(description + diff, source=source, strip=strip).files
    except PatchFormatError as exc:
        if not alone and "Only garbage" in str(exc):
            return  # no diff anywhere: prose (a header with nothing else is an empty patch)
        together = None
        problem = f" ({exc})"

    def moved(f):  # a section of the parse of both, as the parse of the diff alone numbers it
        return f._replace(patch_line=f.patch_line - n, hunks=tuple(h._replace(patch_line=h.patch_line - n)
                                                                  for h in f.hunks))

    if together is not None and tuple(moved(f) for f in together) == tuple(alone):
        return
    lines = split_lines(description)
    at = next((f.patch_line for f in together or () if f.patch_line <= n), None)
    if at is None:  # the description changes how the real diff is read: name its first header-like line
        at = next((i + 1 for i, line in enumerate(lines) if _DIFFISH.match(line.lstrip(b" \t"))), n)
    quoted = lines[at - 1].rstrip(b"\r\n").decode("utf-8", "replace") if 0 < at <= n else ""
    raise PatchFormatError(
        f"{what}: the description's line {at} ({quoted!r}) is read by GNU patch as part of the diff{problem}: "
        "the next push would apply it. Quote it with '> ' before each line (indented lines are still read as "
        "diff), or cut it; nothing was written")


# Only to name a line once the parser said the description is read as diff (never to decide it).
_DIFFISH = re.compile(rb"(---|\+\+\+|\*\*\*|@@|diff |Index:|Only in |={5,}|\d+(,\d+)?[acd]\d+)")
