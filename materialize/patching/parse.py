"""Parse unified, context and git-style patch files into the immutable model, with GNU patch 2.7's
rules (a context hunk becomes the unified hunk ``diff -u`` would write: one model, one applier).

One linear pass over the raw lines (no regex per body line, no intermediate objects), so a
100k-hunk patch parses in time and memory proportional to its size. Every byte we keep is taken
from the raw lines, so contents stay bytes-exact whatever the encoding.

GNU's rules that decide *what* a patch does are followed here, because a divergence is a silently
wrong tree:

* ``---``/``+++`` names end at the first whitespace unless a TAB follows later on the line
  (``fetchname``); git's ``"quoted"`` names are unquoted. Backslashes and colons are plain bytes.
* Text between file sections is garbage and ignored (``Binary files … differ`` of a plain diff
  included); a patch that holds only garbage is an error ("Only garbage was found in the patch
  input."; blank lines only are garbage too), a zero-byte file is an empty patch (quilt skips those
  without running patch), and so is a bare mail header
  (``git format-patch`` of an empty commit, or a patch ``materialize new`` just created).
* In a ``diff --git`` section, ``Binary files … differ`` without a payload changes no content (GNU
  creates an empty new file, leaves an existing one alone); a ``GIT binary patch`` payload is
  refused at apply time with GNU's wording.
* Which file a plain section patches is decided at apply time from the tree (``choose_name``).
* Only the git modes 100644, 100755 and 120000 are accepted; anything else (a tree, a submodule, a
  setuid bit) is a format error naming the line, before anything is written. A mode GNU's
  ``fetchmode`` cannot read (a trailing blank, seven digits) is no mode, as to GNU.
* Lines that start with ``#`` are not lines at all (``pget_line``), inside hunks too.
* A section is read past the indent of its first hunk line (``p_indent``) and past the RFC 934 ``- ``
  prefixes its last timed ``---`` line had (``p_rfc934_nesting``); header lines past any indent.
* A normal diff after a header line applies as the ``-U0`` hunks it is; an ed script (GNU runs ed)
  is refused, found as ``intuit_diff_type`` finds one.
* A context hunk is read as ``another_hunk`` reads it (a side left out is the other's context; a
  replacing side that could be left out is taken as missing at the first line that cannot be one
  of its lines, a blank line or the next file's ``---`` included; a "\\ No newline" marker only
  after a side's last line); one whose context GNU counts otherwise than its lines is located by GNU's counts.
* A header time within -25h..+26h of the epoch says "no such file" (``paths.parse_stamp``); one we
  cannot tell GNU's answer for, where it matters, is refused.
"""

from __future__ import annotations

import re
from functools import partial
from itertools import accumulate, repeat
from operator import add, eq, itemgetter, lt, sub
from typing import TYPE_CHECKING

from materialize.errors import PatchFormatError
from materialize.patching.model import FilePatch, Hunk, PatchSet, split_lines
from materialize.patching.paths import (
    DEV_NULL,
    decode_path,
    parse_stamp,
    strip_components,
    unquote_c,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    _T = TypeVar("_T")

# Lines that belong to a plain diff's per-file preamble rather than to the free-text header.
_PREAMBLE = re.compile(rb"^(Index: |=+\r?\n|diff -|RCS file: |retrieving revision )")
# The extended header lines GNU reads in a git region (anywhere in it); "similarity index" and a
# "Binary files … differ" line are garbage to it.
_GIT_EXT_HEADER = (
    b"old mode ", b"new mode ", b"deleted file mode ", b"new file mode ", b"copy from ", b"copy to ",
    b"rename from ", b"rename to ", b"index ", b"GIT binary patch",
)
ALLOWED_MODES = frozenset({"100644", "100755", "120000"})
_EMPTY_BLOB = b"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
# GNU's reading of an index line: hex digits, "..", hex digits, then the end or a blank; what follows the
# blanks after it (if anything) is a mode, read by fetchmode
_INDEX = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?=\s|$)\s*")
# Line numbers of at most 18 digits: GNU keeps them in a ptrdiff_t and refuses a larger one ("line
# number ... is too large"); an unbounded Python int would instead be "found" at a huge offset.
# GNU's reading of a unified hunk header: "@@ -" N[,M], at most one space, "+" N[,M], at most one space,
# then "@"; only "@@ " begins the section text ("@@ -1 +1 @" and "@@ -1 +1@@x" apply as well).
_HUNK = re.compile(rb"^@@ -(\d{1,18})(?:,(\d{1,18}))? ?\+(\d{1,18})(?:,(\d{1,18}))? ?@(?:@ (.*?)|.*?)\r?\n?$", re.S)
# The same reading over many header lines joined (each ends in "\n"): ``findall`` gives every header's
# groups in one C call, an absent group as b"" (not None). No match can cross a line, so as many
# matches as lines means every line matched, in order.
_HUNK_LINES = re.compile(
    rb"^@@ -(\d{1,18})(?:,(\d{1,18}))? ?\+(\d{1,18})(?:,(\d{1,18}))? ?@(?:@ ([^\n]*?)|[^\n]*?)\r?\n", re.M
)
_LONG_NUMBER = re.compile(rb"^@@ -[\d,]*? ?\+?[\d,]*?(\d{19,})")
_CONTEXT_HUNK = re.compile(rb"^\*{8}")  # GNU: a line of 8 stars or more
_CONTEXT_OLD = re.compile(rb"^\*\*\* (\d{1,18})(?:,(\d{1,18}))? \*\*\*\*")
_CONTEXT_NEW = re.compile(rb"^--- (\d{1,18})(?:,(\d{1,18}))? ----")
_NORMAL_COMMAND = re.compile(rb"^\d+(,\d+)?[acd]\d+(,\d+)?\r?\n")
# GNU's shape of a normal-diff command line: digits and commas, a/c/d, digits and commas, blanks, newline
_COMMAND_SHAPE = re.compile(rb"\d[\d,]*[acd]")
_COMMAND_END = re.compile(rb"[\d,]*[ \t]*\r?\n")
# GNU's get_ed_command_letter: "N[,M]c", "Nd", "Na", "Ni" (no range), "s/.//"; then blanks, newline
_ED_COMMAND = re.compile(rb"(?:(?:\d+(?:,\d+)?)?(?:[cd]|s/\.//)|\d*[ai])[ \t]*\n")
# A normal diff's hunk header as we read it (GNU reads any digits and commas; we refuse the rest)
_NORMAL_HUNK = re.compile(rb"(\d+)(?:,(\d+))?([acd])(\d+)(?:,(\d+))?[ \t]*\r?\n")
_SECTION_BYTES = frozenset(b" +-=\t\n\r@\\#*!")  # the first bytes of the lines of a hunk section
# The first bytes of a line that may be a command, an ed command or an ed script's ".", past its indent
_COMMAND_START = frozenset(b"0123456789 \tXacdis.")
_DIGITS_B = (b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9")
_WS = b" \t\n\r\v\f"
# A run of ordinary hunk body lines, by kind character: it ends at anything else ("@@", "\\", ...).
_BODY_RUN = re.compile(rb"[ +\-]*")
_BLOCK = re.compile(rb"(?:@[ +\-]*)+")  # "@" lines and body runs: the hunks of one file section
_FIRST = itemgetter(slice(0, 1))
_FIRST_BYTE = itemgetter(0)
_new_hunk = tuple.__new__
_BLOCK_HUNKS = 4096  # hunks parsed in one go by _hunk_block (bounds the lines and lists it holds)


class _Region:
    """The header lines (1-based numbers, 0: none yet) seen since the last section, as GNU's
    ``intuit_diff_type`` keeps them: the last line of each kind names that side. (Plain classes
    here and in the rest of the applier: ``dataclasses`` cost ~10 ms of every ``apply``.)"""

    __slots__ = ("first", "minus", "plus", "index", "cr", "stars_last", "stars_line", "stars_indent", "last",
                 "command", "first_command", "ed", "nestings", "nesting_unknown", "earlier")

    def __init__(self) -> None:
        self.first = 0  # the first header line: a hunk after no header line is garbage
        self.minus = 0  # "--- "
        self.plus = 0  # "+++ ", or "*** " not after a line of stars
        self.index = 0  # "Index:"
        self.cr = 0  # the last "--- ", "+++ " or "Index:" line: its CRLF strips the patch's CRs
        self.stars_last = False  # the previous line began with "********"
        self.stars_line = 0  # the previous line ("#" lines are not lines to GNU)
        self.stars_indent = 0  # its indent (GNU: a context hunk's "*** " line must have the same)
        self.last = 0  # likewise (the same line, under the name the normal diff reads it by)
        # GNU's p_rfc934_nesting (the "- " prefixes of the last "--- " line with a time), and after it every
        # value it may have when "--- " lines came whose time we cannot tell GNU reads (none of them read:
        # the first); ``nesting_unknown`` is the last such line.
        self.nestings: tuple[int, ...] = (0,)
        self.nesting_unknown = 0
        self.earlier: list[int] = []  # header lines a later one of the same kind followed (rare)
        self.command = False  # GNU's this_is_a_command: the last line of a command's shape is one
        self.first_command = 0  # after a header line, the first that reads as an ed or normal command
        self.ed = False  # ... and it reads as an ed command


class _GitHeaders:
    """What the ``diff --git`` extended header lines say about one file."""

    __slots__ = ("is_new", "is_delete", "old_empty", "new_empty", "rename", "copy", "old_mode", "new_mode",
                 "binary_payload")

    def __init__(self) -> None:
        self.is_new = False
        self.is_delete = False
        self.old_empty = self.new_empty = False  # the index line names the empty blob on that side
        self.rename: set[str] = set()
        self.copy: set[str] = set()
        self.old_mode: str | None = None
        self.new_mode: str | None = None
        self.binary_payload = False


def parse_patch(data: bytes, *, source: str, strip: int = 1) -> PatchSet:
    """Parse ``data`` (the bytes of patch file ``source``), stripping ``strip`` path components."""
    raw = split_lines(data)
    # GNU ignores an unterminated last line ("patch unexpectedly ends in middle of line"), except
    # a "\ No newline" marker, which it reads with getc() and accepts without a terminator.
    if raw and not raw[-1].endswith(b"\n") and not raw[-1].startswith(b"\\"):
        raw = raw[:-1]
    parser = _Parser(source, raw, strip, data)
    files = parser.run()
    first = min((f.patch_line for f in files), default=len(raw) + 1)
    header = b"".join(raw[: first - 1]).decode("utf-8", "surrogateescape")
    if not files and data and not _is_mail_header(raw):  # whitespace only is garbage to GNU too
        hint = (f" (line {parser.unheaded_normal}: a normal diff, which GNU patch reads only after an Index:, "
                "--- or +++ line naming its file)" if parser.unheaded_normal else "")
        raise PatchFormatError(f"{source}:1: Only garbage was found in the patch input.{hint}")
    return PatchSet(source=source, header=header, files=tuple(files))


class _Parser:
    """One pass over the lines: file sections, their hunks, and the garbage in between."""

    def __init__(self, source: str, raw: list[bytes], strip: int, data: bytes) -> None:
        self.source = source
        self.raw = raw
        self.strip = strip
        self.n = len(raw)
        # The first byte of every line (no line is empty: each ends in "\n" or is a non-empty last line),
        # so a hunk's extent is found and checked with bytes operations instead of a loop per line.
        kinds = bytearray(map(_FIRST_BYTE, raw))
        # A "--- " line is marked "F": blocks of hunks stop at the next file's header. A removed line
        # whose text starts with "-- " is marked too, which only sends its hunk down the slow path.
        if data.startswith(b"--- ") and self.n:
            kinds[0] = 70
        line = pos = 0
        at = data.find(b"\n--- ")
        while at >= 0:
            line += data.count(b"\n", pos, at + 1)
            pos = at + 1
            if line < self.n:
                kinds[line] = 70
            at = data.find(b"\n--- ", pos)
        self.kinds = bytes(kinds)
        # Hunks of the same shape share one kinds string: a large patch repeats a few shapes.
        self.kinds_seen: dict[bytes, bytes] = {}
        self.unheaded_normal = 0  # the first line of a normal diff with no header line before it
        # The last line GNU's pget_line reads: a "\ No newline" line cut off by the end of the file is
        # read only by incomplete_line (after a side's last line); read as a line, it is the end.
        self.eof = self.n - 1 if raw and not raw[-1].endswith(b"\n") else self.n

    def error(self, line: int, message: str) -> PatchFormatError:
        """A PatchFormatError naming the patch file and line, as every parse error must."""
        return PatchFormatError(f"{self.source}:{line}: {message}")

    def line(self, number: int) -> bytes:
        """Raw patch line by 1-based number (b"" past the end)."""
        return self.raw[number - 1] if 0 < number <= self.n else b""

    def run(self) -> list[FilePatch]:
        """The file sections, found as GNU's ``intuit_diff_type`` finds them.

        After each section (or at the start) a region begins. Its header lines name the file, the
        last of each kind winning: ``--- `` gives the old name of a unified diff (the new of a context
        diff), ``+++ `` and ``*** `` the other, ``Index:`` the last resort; any other line between
        them is garbage, blank lines included. The first ``@@ -`` line after at least one of them
        starts a unified section, and a ``*** `` line after a line of stars a context one; a hunk with
        no header line before it in its region is garbage. A ``diff --git`` line starts a git section.
        """
        files: list[FilePatch] = []
        i = 1
        region = _Region()
        while i <= self.n:
            text = self.raw[i - 1]
            if text[0] == 35:  # "#": GNU's pget_line drops the line, as if it were not there
                i += 1
                continue
            if text.startswith(b"diff --git ") or (text[0] in b" \tX" and _unindent(text).startswith(b"diff --git ")):
                git_fp, i = self._git_section(i, region)  # (GNU reads it past an indent too)
                if git_fp is not None:
                    files.append(git_fp)
                region = _Region()
                continue
            stars_last = region.stars_last
            command_last = region.command
            if region.command or text[0] in _COMMAND_START:  # (only then can a command matter)
                self._commands(region, i, text)
            head = _unindent(text)  # GNU reads a header line past blanks (and X), "--- " past "- " pairs
            if not stars_last and head.startswith(b"*** "):
                region.first = region.first or i
                if region.plus:
                    region.earlier.append(region.plus)
                region.plus = i
            elif head.startswith(b"+++ "):
                region.first = region.first or i
                if region.plus:
                    region.earlier.append(region.plus)
                region.plus = region.cr = i
            elif head.startswith(b"Index:"):
                region.first = region.first or i
                if region.index:
                    region.earlier.append(region.index)
                region.index = region.cr = i
            elif head.startswith(b"--- "):
                region.first = region.first or i
                if region.minus:
                    region.earlier.append(region.minus)
                region.minus = region.cr = i
                if any(region.nestings) or not text.startswith(b"--- "):
                    self._rfc934(region, i)
            elif region.first and head.startswith(b"@@ -"):
                if text is head and not any(region.nestings):
                    hunks, end = self._hunks(i)
                else:  # GNU strips the indent and the RFC 934 prefixes from every line of the section
                    hunks, end = self._each_nesting(
                        region, partial(self._in_view, i, _indent_columns(text), parse=self._hunks))
                files.append(self._traditional(region, region.minus, region.plus, hunks, region.cr))
                region = _Region()
                i = end
                continue
            elif region.first and stars_last and head.startswith(b"*** ") and (
                    region.stars_indent == _indent_columns(text)):
                fp, i = self._each_nesting(region, partial(self._context_at, region))
                files.append(fp)
                region = _Region()
                continue
            elif region.first and command_last and head[:2] in (b"< ", b"> "):
                fp, i = self._normal_section(region, i)
                files.append(fp)
                region = _Region()
                continue
            # GNU notes a line of stars only once a header line was seen (before, it reads none)
            region.stars_last = bool(region.first) and head.startswith(b"********")
            region.stars_line = region.last = i
            if region.stars_last:
                region.stars_indent = _indent_columns(text)
            if not region.stars_last:  # (stars after a header: a context hunk may follow)
                self._refuse_other_formats(i, text, headed=bool(region.first))
            i += 1
        if region.ed:
            raise self._ed_script(region.first_command)
        return files

    def _commands(self, region: _Region, i: int, text: bytes) -> None:
        """GNU's notes of ed and normal-diff commands (``intuit_diff_type``): whether the last line with
        a command's shape (``2c3``) is one (a line that is not such leaves that as it was), and after
        a header line the first line that reads as an ed or normal command. An ed script (that line,
        then a lone "." line, or an ed command and the end of the patch with no hunk) is refused."""
        s = text.lstrip(b" \tX") if text[0] in b" \tX" else text
        if s[:1] in _DIGITS_B and (m := _COMMAND_SHAPE.match(s)):
            region.command = _COMMAND_END.fullmatch(s, m.end()) is not None
        if region.first:
            if not region.first_command and (region.command or _ED_COMMAND.fullmatch(s)):
                region.first_command = region.cr = i  # (GNU takes the line's CR as the section's, too)
                region.ed = _ED_COMMAND.fullmatch(s) is not None
            elif region.first_command and s == b".\n":
                raise self._ed_script(region.first_command)

    def _normal_section(self, region: _Region, lines_at: int) -> tuple[FilePatch, int]:
        """A normal diff (``2c2``, ``< old``, ``---``, ``> new``) after a header line, as GNU reads it: its
        hunks become the unified hunks ``diff -U0`` would write (``_normal_hunks``)."""
        hunks, i = self._normal_hunks(region, lines_at)
        return self._traditional(region, region.plus, region.minus, hunks, region.last, plain=True), i

    def _context_at(self, region: _Region, nesting: int) -> tuple[FilePatch, int]:
        """The context section at the region's line of stars, read past its indent and ``nesting``."""
        if region.stars_indent or nesting:
            return self._in_view(region.stars_line, region.stars_indent, nesting,
                                 partial(self._context_section, region))
        return self._context_section(region, region.stars_line)

    def _normal_hunks(self, region: _Region, lines_at: int) -> tuple[tuple[Hunk, ...], int]:
        return self._each_nesting(region, partial(self._normal_hunks_nested, region, lines_at))

    def _normal_hunks_nested(self, region: _Region, lines_at: int, nesting: int) -> tuple[tuple[Hunk, ...], int]:
        """A normal diff's hunks, from the command line before line ``lines_at`` ("< " or "> " right
        after a command line, where GNU found it); the indent of that line and the region's RFC 934
        nesting are stripped from every line of the section. Anything GNU reads in a way of its own
        is refused. Returns the hunks and the line after them."""
        command = region.last
        if region.first_command != command:  # GNU would start from a line that is no command
            raise self.error(region.first_command or command, "unsupported patch format: a normal diff "
                             "after a line GNU patch reads as another command; make it a unified diff")
        indent = _indent_columns(self.raw[lines_at - 1])
        hunks: list[Hunk] = []
        i = command
        while True:
            i, text = self._gnu_line(i, indent, nesting)
            if text[:1] not in _DIGITS_B:
                break
            m = _NORMAL_HUNK.fullmatch(text)
            kind = m.group(3) if m else b""
            if m is None or (kind == b"a" and m.group(2)) or (kind == b"d" and m.group(5)):
                raise self.error(i, f"unsupported normal diff command {text.rstrip()[:40]!r} (GNU patch reads it "
                                    "in a way of its own); make it a unified diff")
            first, new_first = int(m.group(1)), int(m.group(4))
            old_count = 0 if kind == b"a" else int(m.group(2) or first) - first + 1
            new_count = 0 if kind == b"d" else int(m.group(5) or new_first) - new_first + 1
            if (kind != b"a" and old_count < 1) or (kind != b"d" and new_count < 1):
                raise self.error(i, "malformed patch: bad normal diff command")
            header = i
            body: list[bytes] = []
            unterminated: list[int] = []
            i += 1
            for mark, count in ((b"<", old_count), (b">", new_count)):
                if mark == b">" and kind == b"c":
                    i, text = self._gnu_line(i, indent, nesting)
                    if text[:1] != b"-":
                        raise self.error(min(i, self.n), "malformed patch: '---' expected in a normal diff")
                    i += 1
                for k in range(count):
                    i, text = self._gnu_line(i, indent, nesting)
                    if text[:1] != mark or text[1:2] not in (b" ", b"\t"):
                        raise self.error(min(i, self.n), f"malformed patch: '{mark.decode()}' followed by a space "
                                                          "or TAB expected in a normal diff")
                    content = text[2:]
                    if k == count - 1 and self.line(i + 1).startswith(b"\\"):  # (GNU reads it unindented)
                        unterminated.append(len(body))
                        content = content[:-1] if content.endswith(b"\n") else content
                        i += 1
                    body.append((b"-" if mark == b"<" else b"+") + (content if content.endswith(b"\n") else content + b"\n"))
                    i += 1
            kinds = b"-" * old_count + b"+" * new_count
            hunks.append(Hunk(first, old_count, new_first, new_count, "", b"".join(body), kinds, header,
                              tuple(unterminated)))
        if not hunks:  # GNU found it at a line that is no command (after one, which it still counts)
            raise self.error(command, "unsupported patch format: a normal diff GNU patch would read from a "
                                      "line that is no command; make it a unified diff")
        return tuple(hunks), i

    def _gnu_line(self, i: int, indent: int, nesting: int) -> tuple[int, bytes]:
        """GNU's next line from line ``i`` of a section indented ``indent`` columns and forwarded
        ``nesting`` times (RFC 934): past the indent and the "- " prefixes, "#" lines dropped.
        Returns its number and its text (b"" past the end)."""
        while i <= self.n:
            text = _strip_indent(self.raw[i - 1], indent) if indent else self.raw[i - 1]
            for _ in range(nesting):
                if not text.startswith(b"- "):
                    break
                text = text[2:]
            if text[:1] != b"#":
                return i, text
            i += 1
        return i, b""

    def _ed_script(self, number: int) -> PatchFormatError:
        return self.error(number, "unsupported patch format: an ed script (GNU patch would run ed on it); "
                                  "make it a unified diff")

    def _refuse_other_formats(self, number: int, line: bytes, *, headed: bool) -> None:
        """Refuse a context hunk in a git region without its ``***``/``---`` file lines (GNU applies it to
        the ``diff --git`` names; we do not read it), and name a normal diff before any header line
        (GNU: garbage, prose quoting a diff) if the patch holds nothing else ("Only garbage"). A context
        hunk with no header line before it in a plain region is garbage to GNU, which notes a line of
        stars only after a header line, as a unified hunk there is: ignored, as GNU ignores it."""
        nxt = self.line(number + 1)
        if headed and _CONTEXT_HUNK.match(line) and _CONTEXT_OLD.match(nxt):
            raise self.error(number, "unsupported patch format: a context diff hunk in a 'diff --git' section "
                                     "without '*** '/'--- ' file lines; make it a unified diff")
        if not headed and not self.unheaded_normal and _NORMAL_COMMAND.match(line) and nxt[:2] in (b"< ", b"> "):
            self.unheaded_normal = number  # named if nothing else is found ("Only garbage")

    # -- sections --------------------------------------------------------------------------------

    def _git_section(self, start: int, commands: _Region) -> tuple[FilePatch | None, int]:
        """A ``diff --git`` line and its region, as GNU's ``intuit_diff_type`` reads them.

        Up to the first ``@@ -`` line (the hunks), the next ``diff --git`` or the end, every line is
        garbage unless it is an extended header (``index``, modes, renames, copies, anywhere in the
        region) or a ``---``/``+++`` line, whose names replace the ``diff --git`` line's (the last
        of each kind wins, as in a plain region). A region with no hunks and no extended header is
        no section (GNU reads on into the next ``diff --git`` line's region, None here).
        """
        git = _GitHeaders()
        extended = False
        old_raw, new_raw = self._git_names(start)
        minus = plus = 0
        normal: tuple[Hunk, ...] = ()  # a normal diff's hunks
        names: list[int] = []  # the ---, +++ and *** lines, in order
        stars_last = False
        # GNU's notes of commands, CRs and RFC 934 nesting run on from the lines before (``commands``:
        # the region the ``diff --git`` line ends); a diff --git line is a header line.
        commands.first = commands.first or start
        i = start + 1
        while i <= self.n:
            line = self.raw[i - 1]
            if line.startswith((b"diff --git ", b"@@ -")):
                break
            if line[0] == 35:  # "#": not a line to GNU
                i += 1
                continue
            command_last = commands.command
            self._commands(commands, i, line)
            text = _unindent(line)  # GNU reads header lines past an indent of blanks (and X)
            if text.startswith((b"@@ -", b"diff --git ")):  # indented: a hunk (GNU strips the indent from
                break  # its section), or the next git section
            if text.startswith(_GIT_EXT_HEADER):
                self._git_header(git, i, text)
                # an "index" line counts only when it parses (GNU: hex..hex, then an optional mode)
                extended = extended or not text.startswith(b"index ") or bool(_INDEX.match(text))
                i += 1
                if git.binary_payload:
                    i = self._skip_binary_payload(i)
                continue
            if not stars_last and text.startswith(b"*** "):
                plus = i
                names.append(i)
            elif text.startswith(b"+++ "):
                plus = commands.cr = i
                names.append(i)
            elif text.startswith(b"Index:"):  # (its name is never used in a git section; its CR is)
                commands.cr = i
            elif text.startswith(b"--- "):
                minus = commands.cr = i
                names.append(i)
                if any(commands.nestings) or not line.startswith(b"--- "):
                    self._rfc934(commands, i)
            elif command_last and text[:2] in (b"< ", b"> "):  # a normal diff: its hunks end the region
                normal, i = self._normal_hunks(commands, i)
                break
            else:
                self._refuse_other_formats(i, line, headed=True)
            stars_last = text.startswith(b"********")
            commands.last = i
            i += 1
        if i > self.n and commands.ed:  # GNU: an ed command and then the end of the patch
            raise self._ed_script(commands.first_command)
        hunks: tuple[Hunk, ...] = ()
        if normal:
            hunks, after = normal, i
        elif self.line(i).startswith(b"@@ -") and not any(commands.nestings):
            hunks, after = self._hunks(i)
        elif _unindent(self.line(i)).startswith(b"@@ -"):  # indented or RFC 934 forwarded: past both
            hunks, after = self._each_nesting(
                commands, partial(self._in_view, i, _indent_columns(self.line(i)), parse=self._hunks))
        elif not extended:
            return None, i
        else:
            after = i
        # GNU keeps the names in two slots: the ``diff --git`` line fills both, ``---`` the second and
        # ``+++`` the first, and a region that reaches a hunk swaps them (as for a plain diff), so a
        # hunk after ``diff --git a/f b/g`` alone reads g first, f second.
        # (a name that is /dev/null or cannot be stripped leaves the slot as it was: GNU's fetchname)
        for line in names:
            name = _fetchname(self._header_text(line))[0]
            if name and name != DEV_NULL.encode() and self._strip(name) is not None:
                if line == minus or _unindent(self.raw[line - 1]).startswith(b"--- "):
                    new_raw = name
                else:
                    old_raw = name
        # Whether a side is missing: what the extended headers say (``new file mode``, ``deleted file
        # mode``, an all-zero ``index``), unless the first hunk starts (ends) at line 0: then, as for a
        # plain diff, what the time of the ---/+++ lines says (/dev/null or the epoch: missing; a name
        # alone: an empty file, patched in place). So "deleted file mode" above "+++ b/f" empties f.
        is_new, is_delete = git.is_new, git.is_delete
        if hunks and not normal:  # (GNU swaps them at an "@@ -" line only)
            old_raw, new_raw = new_raw, old_raw
            if hunks[0].source_start == 0:
                is_new = self._slot_of(names, b"-")[3]
            if hunks[0].target_start == 0:
                is_delete = self._slot_of(names, b"+")[3]
        if not (is_new or is_delete or git.rename or git.copy) and (old_raw is None) != (new_raw is None):
            old_raw = new_raw = old_raw or new_raw  # GNU patches the one file a ---/+++ line named
        if (old_raw is None and not is_new) or (new_raw is None and not is_delete):
            raise self.error(start, "cannot read file names from the 'diff --git' line (unquoted names with "
                                    "spaces) and no ---/+++ lines name the file: GNU patch cannot find it either")
        strip_cr = bool(commands.cr) and self.raw[commands.cr - 1].endswith(b"\r\n")
        # A new (deleted) file keeps its old (new) name where it differs: GNU creates (deletes) the best of
        # the two, as for a plain section (``tree.choose_name``), which may be the ``diff --git`` line's
        # name, not the +++ line's.
        old_path = self._strip(old_raw) if is_new else self._strip_or_fail(old_raw, minus or start)
        new_path = self._strip(new_raw) if is_delete else self._strip_or_fail(new_raw, plus or start)
        if is_new and old_path == new_path:
            old_path = None
        if is_delete and new_path == old_path:
            new_path = None
        fp = FilePatch(
            old_path=old_path,
            new_path=new_path,
            is_new=is_new,
            is_delete=is_delete,
            may_be_missing=git.old_empty,
            may_be_missing_after=git.new_empty,
            is_rename=git.rename == {"from", "to"},
            is_copy=git.copy == {"from", "to"},
            old_mode=git.old_mode,
            new_mode=git.new_mode,
            is_binary=git.binary_payload,
            hunks=hunks,
            patch_line=start,
            strip_trailing_cr=strip_cr,
            is_git=True,
            normal=bool(normal),
        )
        return fp, after

    def _rfc934(self, region: _Region, number: int) -> None:
        """GNU's RFC 934 nesting at a ``--- `` line: its count of ``- `` prefixes, when the line's name is
        followed by a time get_date reads (or is /dev/null); otherwise the nesting stays as it was."""
        s = self.raw[number - 1].lstrip(b" \tX")
        k = 0
        while s.startswith(b"- "):
            s = s[2:]
            k += 1
        rest = s[4:].lstrip(_WS)
        if rest.startswith(b'"'):
            name, after = _quoted(rest)
        else:
            end = _name_end(rest, b"\t")
            name, after = rest[:end], rest[end:]
        if name == DEV_NULL.encode():
            parses: bool | None = True
        elif not name or self._strip(name) is None or after[:1] in (b"\n", b""):
            parses = False
        else:
            parses = parse_stamp(after.decode("latin-1"))[0]
        if parses:
            region.nestings, region.nesting_unknown = (k,), 0
        elif parses is None and k not in region.nestings:
            region.nestings += (k,)
            region.nesting_unknown = number

    def _each_nesting(self, region: _Region, parse: Callable[[int], _T]) -> _T:
        """``parse(nesting)`` under the region's RFC 934 nesting. When a "--- " line's time decides it and
        we cannot tell whether GNU reads that time, the section is parsed under every nesting GNU may
        have: the nesting only strips "- " from lines that begin so, so most sections read the same
        either way (found: a "- --- a/f" line before hunks with no "- " line, refused, which GNU
        applied). Only when the readings differ is the patch refused."""
        if not region.nesting_unknown:
            return parse(region.nestings[0])
        readings: list[tuple[Any, PatchFormatError | None]] = []
        for nesting in region.nestings:
            try:
                readings.append((parse(nesting), None))
            except PatchFormatError as exc:
                readings.append((None, exc))
        same = [(result, str(error)) for result, error in readings]  # errors alike when their texts are
        if all(reading == same[0] for reading in same):
            result, error = readings[0]
            if error is not None:
                raise error
            return result
        raise self.error(region.nesting_unknown, "cannot tell whether GNU patch reads this line's timestamp, "
                                                 "which decides whether it strips RFC 934 '- ' prefixes from "
                                                 "the hunks (they read differently either way); remove the "
                                                 "'- ' prefixes")

    def _in_view(self, i: int, indent: int, nesting: int, parse):  # type: ignore[no-untyped-def]
        """``parse(i)`` run on the lines from ``i`` as GNU's ``pget_line`` reads an indented (``p_indent``
        columns) or RFC 934 forwarded (``nesting`` "- " prefixes) section: past the indent and the
        prefixes. The view reaches as far as the section can (to the first line no hunk line begins
        like); a "\\ No newline" marker is one only unindented (GNU reads it raw), else it is garbage."""
        raw = self.raw
        view: list[bytes] = []
        j = i
        while j <= self.n:
            line = raw[j - 1]
            t = _strip_indent(line, indent) if indent else line
            for _ in range(nesting):
                if not t.startswith(b"- "):
                    break
                t = t[2:]
            if (t[:1] == b"\\" and line[:1] != b"\\") or not t:
                t = b"\0" + t  # (a line no parser reads: the hunk ends, or is malformed, as in GNU)
            view.append(t)
            j += 1
            if t[0] not in _SECTION_BYTES:
                break
        saved, saved_kinds = raw[i - 1 : j - 1], self.kinds
        kinds = bytearray(saved_kinds)
        kinds[i - 1 : j - 1] = bytes(70 if t.startswith(b"--- ") else t[0] for t in view)
        raw[i - 1 : j - 1] = view
        self.kinds = bytes(kinds)
        try:
            return parse(i)
        finally:
            raw[i - 1 : j - 1] = saved
            self.kinds = saved_kinds

    def _header_text(self, number: int) -> bytes:
        """A ``---``/``+++``/``*** `` line past its indent and the four bytes of its kind."""
        return _unindent(self.raw[number - 1])[4:]

    def _skip_binary_payload(self, i: int) -> int:
        """Skip the base85 ``literal``/``delta`` blocks of a ``GIT binary patch``."""
        while i <= self.n:
            line = self.raw[i - 1]
            if line.startswith(b"diff --git ") or (line.startswith(b"--- ") and self.line(i + 1).startswith(b"+++ ")):
                break
            i += 1
        return i

    def _context_section(self, region: _Region, stars: int) -> tuple[FilePatch, int]:
        """A context diff section: its hunks, each after ``***************``, named by ``region``.

        Each hunk gives the lines it expects (``*** first,last ****``: context, ``-`` and ``!``) and
        the lines that replace them (``--- first,last ----``: context, ``+`` and ``!``); a side
        without changes may be left out, and is then the other side's context. It becomes the same
        unified hunk ``diff -u`` would write, so one applier serves both formats. Here ``*** ``
        (or ``+++ ``) names the old file and ``--- `` the new, unlike a unified diff.
        """
        hunks: list[Hunk] = []
        i = stars
        while _CONTEXT_HUNK.match(self.line(i)):
            hunk, i = self._context_hunk(i)
            hunks.append(hunk)
            i = self._past_comments(i)
        # GNU: the first "*** " line starts from nothing when it reads "0" then no digit; the first hunk ends
        # in nothing when its replacing side is empty and goes before line 1
        head = self.line(self._past_comments(stars + 1))[4:]
        sides_gone = (head[:1] == b"0" and head[1:2] not in _DIGITS_B,
                      hunks[0].target_length == 0 and hunks[0].target_start == 0)
        return self._traditional(region, region.plus, region.minus, tuple(hunks), self._past_comments(stars + 1),
                                 sides_gone=sides_gone), i

    def _context_hunk(self, stars: int) -> tuple[Hunk, int]:
        """One context hunk after its line of stars, read as GNU's ``another_hunk`` reads it.

        GNU's ``repl_could_be_missing`` reads the previous hunk's prefix context (a global); we do not
        track it across formats, so a hunk whose reading depends on it is read both ways and refused
        when the two differ.
        """
        hunk, after, consulted = self._context_hunk_as(stars, previous_prefix_zero=True)
        if consulted:
            other = self._context_hunk_as(stars, previous_prefix_zero=False)[:2]
            if other != (hunk, after):
                raise self.error(stars, "unsupported context hunk: GNU patch reads it one way or another "
                                        "depending on the hunk before it; make it a unified diff")
        return hunk, after

    def _context_hunk_as(self, stars: int, *, previous_prefix_zero: bool) -> tuple[Hunk, int, bool]:
        """``another_hunk`` for a new-style context diff, step by step: the ``*** a,b ****`` side, the
        ``--- c,d ----`` line, the replacing side; a side may be left out (its lines are then the other
        side's context), and a replacing side that could be missing is taken to be missing at the first
        line that cannot be one of its lines (a blank line, the next file's ``---``, the end). Returns
        the unified hunk, the line after it, and whether the previous hunk's prefix context was read."""
        raw, n = self.raw, self.n
        header = self._past_comments(stars + 1)
        old_first, old_length = self._context_range(header, _CONTEXT_OLD)
        slots: list[tuple[bytes, bytes] | None] = [(b"*", b"")]  # GNU's p_Char and line, by p_end
        repl_beginning = 0  # the slot of the ``---`` line (0: not yet)
        new_first = new_length = 0
        p_max: int | None = None  # the last slot of the hunk, known from the ``---`` line on
        could_be_missing, repl_missing, ptrn_missing, some_context, consulted = True, False, False, False, False
        context, repl_context, after_repl = 0, 0, 0
        ptrn_prefix = ptrn_suffix = repl_prefix = -1
        copiable = [0, 0]  # context lines of the expected and of the replacing side
        i = header + 1

        def ends_here(reason: str, line: int) -> bool:
            """GNU: the replacing side is missing if it could be; otherwise this line is an error."""
            if repl_beginning and could_be_missing:
                return True
            raise self.error(line, f"malformed patch: {reason} in the context hunk at line {header}")

        while p_max is None or len(slots) - 1 < p_max:
            i = self._past_comments(i)
            p_end = len(slots)
            if i > self.eof:
                if repl_beginning and could_be_missing:
                    repl_missing = True
                    break
                if p_max is None or p_max - (p_end - 1) >= 4:
                    raise self.error(n, f"malformed patch: unexpected end of the patch in the context hunk at "
                                        f"line {header}")
                text, line = b"  \n", n  # GNU: blank lines an editor chopped off the end
            else:
                text, line = raw[i - 1], i
                i += 1
            c = text[:1]
            if c == b"*":
                if ends_here("unexpected '***' line", line):
                    repl_missing = True
                    break
            elif c == b"-" and text[1:2] == b"-":
                if ptrn_prefix < 0:
                    ptrn_prefix = context
                ptrn_suffix = context
                previous = slots[p_end - 1]
                if repl_beginning or p_end != old_length + 1 + (previous is not None and previous[0] == b"\n"):
                    if p_end == 1:  # the expected side left out: filled from the replacing side's context
                        ptrn_missing = True
                        slots.extend([None] * old_length)
                        p_end = len(slots)
                        ptrn_prefix = ptrn_suffix = -1
                    elif not repl_beginning:
                        raise self.error(line, f"malformed patch: {'premature' if p_end <= old_length else 'overdue'} "
                                               f"'---' line: check the line numbers of the hunk at line {header}")
                    elif not could_be_missing:
                        raise self.error(line, f"malformed patch: a second '---' line in the hunk at line {header}")
                    else:
                        repl_missing = True
                        break
                repl_beginning, after_repl, repl_context = p_end, i, context
                new_first, new_length = self._context_range(line, _CONTEXT_NEW)
                slots.append((b"=", b""))
                p_max = new_length + p_end
                if new_length != copiable[0] and context == 0 and new_length == 1:
                    consulted = True  # GNU: ``p_prefix_context != 0 ||`` (the previous hunk's)
                    if not previous_prefix_zero:
                        could_be_missing = False
                elif new_length != copiable[0]:
                    could_be_missing = False
                context = 0
            elif c in (b"+", b"!", b"-"):
                if c != b"-":
                    could_be_missing = False
                body = text[1:]
                if body[:1] in (b" ", b"\t"):
                    body = body[1:]
                elif repl_beginning and could_be_missing:  # (otherwise GNU takes the rest as the line)
                    repl_missing = True
                    break
                if not repl_beginning:
                    ptrn_prefix = context if ptrn_prefix < 0 else ptrn_prefix
                elif repl_prefix < 0:
                    repl_prefix = context
                body, i = self._context_incomplete(body, i, p_end == (p_max if repl_beginning else old_length))
                slots.append((c, body))
                context = 0
            elif c in (b"\n", b"\t") or text == b"\r\n":  # a context line whose spaces were eaten
                if repl_beginning and could_be_missing:
                    repl_missing = True
                    break
                # GNU keeps a TAB-led line's TAB and drops its last byte (its newline) instead
                body = text[:-1] if c == b"\t" else text
                body, i = self._context_incomplete(body, i, p_end == (p_max if repl_beginning else old_length))
                if c == b"\t" and p_end == old_length + 1:  # no line at all, and no blank one: "Overdue '---'"
                    slots.append((c, body))
                elif p_end != old_length + 1:
                    some_context = True
                    context += 1
                    copiable[bool(repl_beginning)] += 1
                    slots.append((b" ", body))
                else:  # GNU keeps a blank line right after the expected side as no line at all
                    slots.append((b"\n", body))
            elif c == b" ":
                body = text[1:]
                if body[:1] in (b" ", b"\t"):
                    body = body[1:]
                elif repl_beginning and could_be_missing:
                    repl_missing = True
                    break
                some_context = True
                context += 1
                copiable[bool(repl_beginning)] += 1
                body, i = self._context_incomplete(body, i, p_end == (p_max if repl_beginning else old_length))
                slots.append((b" ", body))
            elif ends_here(f"unexpected line {text[:40]!r}", line):
                repl_missing = True
                break
        if not repl_beginning:
            raise self.error(header, "malformed patch: no '---' line in the context hunk")
        old = [x for x in slots[1:repl_beginning] if x is None or x[0] != b"\n"]
        if repl_missing:  # the replacing side left out: the expected side's context, as GNU fills it
            i, context = after_repl, repl_context
            new = [x for x in old if x is not None and x[0] == b" "]
            if len(new) != new_length:
                raise self.error(header, "malformed patch: replacement text or line numbers mangled in the "
                                         "context hunk")
        else:
            new = [x for x in slots[repl_beginning + 1 :] if x is not None and x[0] != b"\n"]
            if ptrn_missing:
                fill = [x for x in new if x[0] == b" "]
                if not some_context and old_length == 1:  # GNU: "*** 3 ****" alone inserts after line 3
                    old, old_length, old_first = [], 0, old_first + 1
                elif len(fill) != old_length:
                    raise self.error(header, "malformed patch: replacement text or line numbers mangled in "
                                             "the context hunk")
                else:
                    old = fill
            elif copiable[0] != copiable[1]:
                raise self.error(header, "malformed patch: context mangled in the hunk")
        prefix = ptrn_prefix if repl_prefix < 0 or 0 <= ptrn_prefix < repl_prefix else repl_prefix
        suffix = ptrn_suffix if 0 <= ptrn_suffix < context else context
        if prefix < 0 or suffix < 0:
            raise self.error(header, "malformed patch: replacement text or line numbers mangled in the "
                                     "context hunk")
        # GNU's first line of an empty side is the line it goes before, a unified header's the one it follows
        hunk = self._unified_from_sides(stars, old_first - (not old_length), old_length,
                                        new_first - (not new_length), new_length,
                                        [k + t for k, t in old], [k + t for k, t in new])  # type: ignore[misc]
        kinds = hunk.kinds
        lead, trail = len(kinds) - len(kinds.lstrip(b" ")), len(kinds) - len(kinds.rstrip(b" "))
        if (lead, trail) != (prefix, suffix):  # GNU locates the hunk by its own counts (see Hunk)
            hunk = hunk._replace(context_counts=(prefix, suffix))
        return hunk, i, consulted

    def _context_incomplete(self, body: bytes, i: int, last: bool) -> tuple[bytes, int]:
        """GNU's ``incomplete_line``: only a side's last line of more than one byte may be followed by
        a "\\ No newline" marker, which it consumes, cutting the line's last byte (its newline, or the
        last of a TAB-led line's text); after any other line, the marker is read as a line of its
        own, and a malformed one."""
        if last and len(body) > 1 and i <= self.n and self.raw[i - 1][:1] == b"\\":
            return body[:-1], i + 1
        return body, i

    def _unified_from_sides(self, stars: int, old_first: int, old_length: int, new_first: int, new_length: int,
                            old: list[bytes], new: list[bytes]) -> Hunk:
        """The unified hunk ``diff -u`` writes for a context hunk's two sides (kind byte + text each)."""
        body: list[bytes] = []
        other: list[bytes] = []  # the body with the new side's context lines (GNU's pattern under -R)
        a = b = 0
        while a < len(old) or b < len(new):
            if a < len(old) and old[a][0] == 45:  # "-"
                body.append(old[a])
                a += 1
            elif b < len(new) and new[b][0] == 43:  # "+"
                body.append(new[b])
                b += 1
            elif (a < len(old) and old[a][0] == 33) or (b < len(new) and new[b][0] == 33):  # "!" runs
                while a < len(old) and old[a][0] == 33:
                    body.append(b"-" + old[a][1:])
                    a += 1
                while b < len(new) and new[b][0] == 33:
                    body.append(b"+" + new[b][1:])
                    b += 1
            elif a < len(old) and b < len(new) and old[a][0] == new[b][0] == 32:  # context on both sides
                # GNU matches the pattern side's line and copies the file's: when the sides show it
                # differently (a TAB-led line, a "\\ No newline" marker on one side), each direction
                # has its own pattern
                body.append(old[a])
                other.append(new[b])
                a += 1
                b += 1
                continue
            else:  # GNU applies each side as it stands; one unified hunk cannot say that: refused
                raise self.error(stars, "unsupported context hunk: its two sides' context lines differ "
                                        "(a final newline shown as context); make it a unified diff")
            other.extend(body[len(other):])
        unterminated = tuple(k for k, line in enumerate(body) if not line.endswith(b"\n"))
        lines = [line if line.endswith(b"\n") else line + b"\n" for line in body]
        if not any(line[0] != 32 for line in lines):
            raise self.error(stars, "malformed patch: hunk contains no changed lines")
        reverse_body = None
        if other != body:
            reverse_body = (b"".join(line if line.endswith(b"\n") else line + b"\n" for line in other),
                            tuple(k for k, line in enumerate(other) if not line.endswith(b"\n")))
        # An empty side's first line is the one it follows, as in a unified header ("*** 3 ****" -> -3,0).
        return Hunk(old_first, old_length, new_first, new_length, "", b"".join(lines),
                    b"".join(map(_FIRST, lines)), stars + 1, unterminated, reverse_body)

    def _past_comments(self, i: int) -> int:
        """The first line from ``i`` on that does not start with ``#`` (GNU's pget_line drops those)."""
        while i <= self.n and self.raw[i - 1][:1] == b"#":
            i += 1
        return i

    def _context_range(self, number: int, pattern: re.Pattern[bytes]) -> tuple[int, int]:
        """(first line, number of lines) of a context hunk side's ``*** a,b ****``/``--- a,b ----``, as
        GNU's ``another_hunk`` reads them: "N" is one line (none for 0, then "before line 1"), "a,b" the
        lines a..b (none for b = a-1: the side goes before line a, unlike a unified "-a,0"), and the
        expected side's "0,0" is read as "0" (GNU drops "0," there)."""
        m = pattern.match(self.line(number))
        if m is None:
            raise self.error(number, "malformed patch: bad context hunk header")
        first_text, last_text = m.group(1), m.group(2)
        if pattern is _CONTEXT_OLD and first_text == b"0" and last_text is not None and last_text[:1] == b"0":
            first_text, last_text = last_text[1:] or b"0", None
        first = int(first_text)
        if last_text is None:
            return (first, 1) if first else (1, 0)
        last = int(last_text)
        if last < first - 1:
            raise self.error(number, "malformed patch: bad context hunk header")
        return first, last - first + 1

    def _traditional(self, region: _Region, old_line: int, new_line: int, hunks: tuple[Hunk, ...],
                     cr_line: int, *, plain: bool = False, sides_gone: tuple[bool, bool] | None = None) -> FilePatch:
        """The file section named by a region's header lines (0: no such line); ``cr_line`` is the
        header line whose CRLF says the patch's CRs are stripped (GNU: the last one that sets it).
        ``sides_gone``: whether the first hunk starts from nothing and ends in nothing, where that is
        not what its unified line numbers say (a context hunk's, by GNU's own tests)."""
        first = hunks[0]
        from_nothing, to_nothing = sides_gone or (first.source_start == 0, first.target_start == 0)
        if region.earlier:  # several header lines of a kind: GNU's slots, line by line
            old_line, old_name, old_stamp, old_gone = self._slot(region, old_line)
            new_line, new_name, new_stamp, new_gone = self._slot(region, new_line)
            old_path, new_path = self._strip(old_name), self._strip(new_name)
            is_new = not plain and from_nothing and old_gone
            is_delete = not plain and to_nothing and new_gone
        else:
            old_name, old_stamp = _fetchname(self._header_text(old_line)) if old_line else (None, None)
            new_name, new_stamp = _fetchname(self._header_text(new_line)) if new_line else (None, None)
            # Both names stay candidates even for a new or deleted file: GNU creates (or deletes) the best
            # of them (``choose_name``: an existing file, else the fewest new folders), not always the new one.
            old_path = None if old_name == DEV_NULL.encode() else self._strip(old_name)
            new_path = None if new_name == DEV_NULL.encode() else self._strip(new_name)
            # A new (deleted) file: /dev/null, or the epoch beside a usable name, on its old (new) side, AND
            # a first hunk that starts from nothing (ends in nothing); otherwise GNU patches a file in place.
            is_new = not plain and from_nothing and (
                old_name == DEV_NULL.encode() or (old_path is not None and self._epoch(old_stamp, old_line)))
            is_delete = not plain and to_nothing and (
                new_name == DEV_NULL.encode() or (new_path is not None and self._epoch(new_stamp, new_line)))
        start = self._preamble_start(region.first)
        # GNU: the rest of the last ``Index:`` line of the region that names a file (not /dev/null)
        index_path = None
        for line in [k for k in region.earlier if self._kind(k) == b"I"] + [region.index]:
            name = _index_name(_unindent(self.raw[line - 1])[6:]) if line else None
            if name and name != DEV_NULL.encode() and self._strip(name) is not None:
                index_path = self._strip(name)
        if old_path is None and new_path is None and index_path is None:
            line, raw_name = (new_line, new_name) if is_new or not old_line else (old_line, old_name)
            if not line:
                line, raw_name = region.index, _index_name(_unindent(self.raw[region.index - 1])[6:])
            name = decode_path(raw_name or b"")
            raise self.error(line, f"cannot strip {self.strip} leading path component(s) from {name!r}")
        fp = FilePatch(
            old_path=old_path,
            new_path=new_path,
            is_new=is_new,
            is_delete=is_delete,
            is_rename=False,
            is_copy=False,
            old_mode=None,
            new_mode=None,
            is_binary=False,
            hunks=hunks,
            patch_line=start,
            strip_trailing_cr=bool(cr_line) and self.raw[cr_line - 1].endswith(b"\r\n"),
            old_timestamp=old_stamp,
            new_timestamp=new_stamp,
            index_path=index_path,
            normal=plain,
            says_missing=sides_gone,
        )
        return fp

    def _kind(self, line: int) -> bytes:
        """The slot of header line ``line``: b"+" ("+++ " or "*** "), b"-" ("--- ") or b"I" ("Index:")."""
        head = _unindent(self.raw[line - 1])
        return b"I" if head.startswith(b"Index:") else head[:1].replace(b"*", b"+")

    def _slot(self, region: _Region, last: int) -> tuple[int, bytes | None, str | None, bool]:
        """GNU's name and time slot filled by the header lines of ``last``'s kind (``fetchname``): a
        name only from a line whose name is not /dev/null and strips; /dev/null sets the time to the
        epoch, a usable "+++ "/"*** " line sets it to its own (none: no time), a usable "--- " line only
        when it has one. Returns (the name's line, raw name, its time, the time says "no such file")."""
        if not last:
            return 0, None, None, False
        kind = self._kind(last)
        return self._slot_of([k for k in region.earlier if self._kind(k) == kind and k < last] + [last], kind)

    def _slot_of(self, headers: list[int], kind: bytes) -> tuple[int, bytes | None, str | None, bool]:
        """``_slot`` over the header lines ``headers`` of the region, in order: those of ``kind`` fill it."""
        lines = [k for k in headers if self._kind(k) == kind]
        if not lines:
            return 0, None, None, False
        last = lines[-1]
        name_line, name, stamp = 0, None, None
        gone = False
        for line in lines:
            raw_name, line_stamp = _fetchname(self._header_text(line))
            if raw_name == DEV_NULL.encode():
                gone = True
                continue
            if not raw_name or self._strip(raw_name) is None:
                continue
            name_line, name, stamp = line, raw_name, line_stamp
            parses = parse_stamp(line_stamp)[0] if kind == b"-" and line_stamp else None
            if parses is None and kind == b"-" and line_stamp and gone:
                raise self.error(line, f"cannot tell whether GNU patch reads the timestamp {line_stamp!r} (which "
                                       "would undo the /dev/null before it)")
            if kind != b"-" or parses is not False:
                gone = self._epoch(line_stamp, line)
        return name_line or last, name, stamp, gone

    def _epoch(self, stamp: str | None, line: int) -> bool:
        """Whether header line ``line``'s timestamp says "no such file" to GNU (``parse_stamp``); a
        timestamp whose answer we cannot tell is refused, naming the line."""
        if not stamp:
            return False
        says = parse_stamp(stamp)[1]
        if says is None:
            raise self.error(line, f"cannot tell whether the timestamp {stamp!r} means 'no such file' to GNU "
                                   "patch (a time within -25h..+26h of the Unix epoch does; a time without a "
                                   "zone is local time, and that depends on the time zone); write /dev/null, "
                                   "or a time as 'YYYY-MM-DD HH:MM:SS +ZZZZ'")
        return says

    def _preamble_start(self, minus_line: int) -> int:
        """Walk back over ``Index:``/``====``/``diff ...`` lines that introduce this file."""
        number = minus_line
        while number > 1 and _PREAMBLE.match(self.line(number - 1)):
            number -= 1
        return number

    def _strip(self, raw_name: bytes | None) -> str | None:
        """Decode and ``-pN``-strip a header name; None when it cannot be stripped (GNU skips it)."""
        if not raw_name:
            return None
        return strip_components(decode_path(raw_name), self.strip)

    def _strip_or_fail(self, raw_name: bytes, line: int) -> str:
        name = decode_path(raw_name)
        stripped = strip_components(name, self.strip)
        if stripped is None:
            raise self.error(line, f"cannot strip {self.strip} leading path component(s) from {name!r}")
        return stripped

    # -- git headers -----------------------------------------------------------------------------

    def _git_names(self, start: int) -> tuple[bytes | None, bytes | None]:
        """Old and new names on the ``diff --git`` line, unquoted but still prefixed, as GNU patch
        reads them: exactly two names, each C-quoted or free of whitespace; anything else (names
        with unquoted spaces) gives none, and the ``---``/``+++`` lines must name the file."""
        rest = _unindent(self.raw[start - 1])[len(b"diff --git ") :].rstrip(b"\r\n")
        names: list[bytes] = []
        while rest and len(names) < 3:
            rest = rest.lstrip(_WS)
            if rest.startswith(b'"'):
                name, rest = _quoted(rest)
                if name is None:
                    return None, None
            else:
                end = next((k for k, c in enumerate(rest) if c in _WS), len(rest))
                name, rest = rest[:end], rest[end:]
            if name:
                names.append(name)
        if len(names) != 2 or rest.strip(_WS):
            return None, None
        return names[0], names[1]

    def _git_header(self, git: _GitHeaders, number: int, text: bytes) -> None:
        """Apply one extended header line (``text``, line ``number`` past its indent) to ``git``; modes
        are checked here, before any write."""
        line = text.rstrip(b"\r\n")
        words = line.split(b" ")
        if line.startswith(b"new file mode "):
            git.is_new = True
            git.new_mode = self._mode(text[14:], number)
        elif line.startswith(b"deleted file mode "):
            git.is_delete = True
            git.old_mode = self._mode(text[18:], number)
        elif line.startswith(b"old mode "):
            git.old_mode = self._mode(text[9:], number)
        elif line.startswith(b"new mode "):
            git.new_mode = self._mode(text[9:], number)
        elif line.startswith((b"rename from ", b"rename to ")):
            git.rename.add(words[1].decode())
        elif line.startswith((b"copy from ", b"copy to ")):
            git.copy.add(words[1].decode())
        elif line.startswith(b"GIT binary patch"):
            git.binary_payload = True
        elif m := _INDEX.match(text):
            old_sha, new_sha, mode = m.group(1), m.group(2), text[m.end():]
            # GNU sets both sides from the hashes, over what a mode line before it said
            git.is_new = set(old_sha) == {ord("0")}
            git.is_delete = set(new_sha) == {ord("0")}
            # GNU: the empty blob's hash says "empty or missing" (a missing file is patched as empty)
            git.old_empty, git.new_empty = _EMPTY_BLOB.startswith(old_sha), _EMPTY_BLOB.startswith(new_sha)
            if mode:  # the mode of both sides, over any line before it (GNU 2.7's order)
                git.old_mode = git.new_mode = self._mode(mode, number)

    def _mode(self, rest: bytes, number: int) -> str | None:
        """The mode GNU's ``fetchmode`` reads from the ``rest`` of a header line (its newline kept): blanks,
        then exactly six octal digits, then the line's end ("\\n" or "\\r\\n"); anything else is mode 0,
        no mode at all (None). A mode it reads must be one we accept."""
        rest = rest.lstrip(_WS)
        digits, end = rest[:6], rest[6:]
        if len(digits) < 6 or not all(48 <= c <= 55 for c in digits) or end not in (b"\n", b"\r\n"):
            return None
        text = digits.decode()
        if int(text, 8) == 0:
            return None
        if text not in ALLOWED_MODES:
            raise self.error(
                number, f"unsupported file mode {text!r} (only 100644, 100755 and 120000 are accepted)"
            )
        return text

    # -- hunks -----------------------------------------------------------------------------------

    def _hunks(self, i: int) -> tuple[tuple[Hunk, ...], int]:
        """Consecutive ``@@`` hunks starting at line ``i``; returns them and the next line number.

        Fast path, inline because it runs once per hunk: the run of " ", "-", "+" lines after the
        header holds exactly the announced numbers of old and new lines. Then the line-by-line walk
        of ``_hunk`` would consume exactly that run (each line counts on at least one side, so no
        count can overrun before the end, and the counts meet only at its end) and stop there: the
        run is the body. Anything else (a "\\ No newline" marker, GNU's "=", TAB-led or empty
        context, a run into the next file's "---"/"+++", an error) takes the walk.
        """
        hunks: list[Hunk] = []
        append = hunks.append
        raw, kinds, n = self.raw, self.kinds, self.n
        while i <= n:
            if not raw[i - 1].startswith(b"@@ -"):
                if raw[i - 1][:1] != b"#":
                    break
                i = self._past_comments(i)  # GNU drops "#" lines: another hunk may follow them
                continue
            block, after = self._hunk_block(i)
            if block:
                hunks.extend(block)
                # The block's lines now live on joined in its hunks' bodies: drop them from ``raw`` as
                # the parse goes, so a large patch is not held twice (b"" matches nothing behind us).
                raw[i - 1 : after - 1] = repeat(b"", after - i)
                i = after
                continue
            m = _HUNK.match(raw[i - 1])
            if m is None:
                long_number = _LONG_NUMBER.match(raw[i - 1])
                if long_number:
                    raise self.error(i, f"malformed patch: line number {long_number.group(1).decode()} is too large")
                raise self.error(i, "malformed patch: bad hunk header")
            start, length, new_start, new_length, section = m.groups()
            old_count = int(length) if length is not None else 1
            new_count = int(new_length) if new_length is not None else 1
            end = _BODY_RUN.match(kinds, i).end()  # type: ignore[union-attr]  # matches the empty run too
            run = kinds[i:end]
            both = run.count(32)
            minus = run.count(45)
            if both + minus == old_count and len(run) - minus == new_count and both < len(run) and (
                end >= n or kinds[end] != 92
            ):
                append(_new_hunk(Hunk, (int(start), old_count, int(new_start), new_count,
                                        section.decode("utf-8", "replace") if section else "",
                                        b"".join(raw[i:end]), run, i, (), None, None)))
                i = end + 1
            else:
                hunk, i = self._hunk(i, m)
                append(hunk)
        return tuple(hunks), i

    def _hunk_block(self, i: int) -> tuple[list[Hunk], int]:
        """The fast path of ``_hunks`` for all the hunks of a file section at once, in C-level passes.

        Takes the block of "@" lines and body runs at line ``i`` from the kinds string (it ends at
        the next file's ``---`` line, marked "F" there, or at any other line), splits its first
        ``_BLOCK_HUNKS`` off into runs (the run after them starts with an "@": no marker can follow),
        and accepts the leading hunks whose header parses and whose run holds exactly the announced
        counts (the last one also not followed by a "\\ No newline" marker). Returns them and the
        line after them; an empty list when the first hunk is not such (``_hunks`` takes it alone).
        """
        raw, kinds = self.raw, self.kinds
        block = _BLOCK.match(kinds, i - 1).group()  # type: ignore[union-attr]  # kinds[i - 1] is "@"
        # At most _BLOCK_HUNKS at a time: ``_hunks`` drops their lines before taking the next ones.
        runs = block.split(b"@", _BLOCK_HUNKS + 1)[1 : _BLOCK_HUNKS + 1]
        lengths = list(map(len, runs))
        heads = list(accumulate(map(add, lengths, repeat(1)), initial=i - 1))  # 0-based header lines
        after = heads.pop()
        header_lines = list(map(raw.__getitem__, heads))
        groups = _HUNK_LINES.findall(b"".join(header_lines))
        if len(groups) != len(header_lines):  # some header is not one: the leading ones that are
            matches = list(map(_HUNK.match, header_lines))
            if None in matches:
                del matches[matches.index(None):]
            if not matches:
                return [], i
            groups = list(map(re.Match.groups, matches))
        starts, olds, new_starts, news, sections = zip(*groups, strict=True)
        # An absent count is 1 (None from a match, b"" from findall).
        old_counts = list(map(int, olds)) if all(olds) else [int(x) if x else 1 for x in olds]
        new_counts = list(map(int, news)) if all(news) else [int(x) if x else 1 for x in news]
        both = list(map(bytes.count, runs, repeat(b" ")))
        minus = list(map(bytes.count, runs, repeat(b"-")))
        good = list(map(all, zip(map(eq, map(add, both, minus), old_counts),
                                 map(eq, map(sub, lengths, minus), new_counts), map(lt, both, lengths), strict=False)))
        k = good.index(False) if False in good else len(good)
        if k == len(runs) and after < self.n and kinds[after] == 92:  # "\\ No newline" after the last run
            k -= 1
        if not k:
            return [], i
        firsts = [h + 1 for h in heads[:k]]  # 0-based first body line = 1-based header line
        bodies = map(b"".join, map(raw.__getitem__, map(slice, firsts, map(add, firsts, lengths))))
        texts = [x.decode("utf-8", "replace") if x else "" for x in sections[:k]] if any(sections[:k]) else repeat("")
        shared = map(self.kinds_seen.setdefault, runs, runs)
        hunks = list(map(_new_hunk, repeat(Hunk), zip(map(int, starts[:k]), old_counts, map(int, new_starts[:k]),
                                                       new_counts, texts, bodies, shared, firsts, repeat(()),
                                                       repeat(None), repeat(None), strict=False)))
        return hunks, (after + 1 if k == len(runs) else heads[k] + 1)

    def _hunk(self, header_line: int, m: re.Match[bytes]) -> tuple[Hunk, int]:
        """One hunk, line by line: header, then exactly as many old/new lines as the header announces."""
        source_start = int(m.group(1))
        source_length = int(m.group(2)) if m.group(2) is not None else 1
        target_start = int(m.group(3))
        target_length = int(m.group(4)) if m.group(4) is not None else 1
        section = (m.group(5) or b"").decode("utf-8", "replace")
        old_left, new_left = source_length, target_length
        lines: list[bytes] = []  # every one ends in "\n"; ``unterminated`` says which have none
        unterminated: list[int] = []
        changed = False
        i = header_line + 1
        raw = self.raw
        n = self.n
        while old_left > 0 or new_left > 0:
            if i > self.eof:
                if old_left == new_left and old_left <= 3:
                    # GNU assumes up to three blank context lines were chopped off the end (by an editor).
                    lines.extend(b" \n" for _ in range(old_left))
                    old_left = new_left = 0
                    break
                raise self.error(n, "malformed patch: hunk is shorter than its header says")
            text = raw[i - 1]
            c = text[0]
            if c == 35:  # "#": GNU drops the line
                i += 1
                continue
            if c == 32 or c == 61:  # " ", and GNU's "=" context
                if old_left <= 0 or new_left <= 0:
                    raise self.error(i, "malformed patch: hunk is longer than its header says")
                kind_s = " "
                old_left -= 1
                new_left -= 1
                content = text[1:-1] if text[-1] == 10 else text[1:]
            elif c == 45:  # "-"
                if old_left <= 0:
                    raise self.error(i, "malformed patch: hunk removes more lines than its header says")
                kind_s = "-"
                old_left -= 1
                changed = True
                content = text[1:-1] if text[-1] == 10 else text[1:]
            elif c == 43:  # "+"
                if new_left <= 0:
                    raise self.error(i, "malformed patch: hunk adds more lines than its header says")
                kind_s = "+"
                new_left -= 1
                changed = True
                content = text[1:-1] if text[-1] == 10 else text[1:]
            elif c == 9 or text in (b"\n", b"\r\n", b"\r"):
                # GNU: a TAB-led or empty line is context whose leading space got eaten.
                if old_left <= 0 or new_left <= 0:
                    raise self.error(i, "malformed patch: hunk is longer than its header says")
                kind_s = " "
                old_left -= 1
                new_left -= 1
                content = text[:-1] if text[-1] == 10 else text
            else:
                raise self.error(i, f"malformed patch: unexpected line in hunk: {text[:40]!r}")
            if i < n and raw[i][0] == 92:  # "\\ No newline at end of file"
                last_of_side = new_left == 0 if kind_s == "+" else old_left == 0
                if not last_of_side and i >= self.eof:  # cut off by the end of the patch: the end, to GNU
                    i += 1
                    lines.append(kind_s.encode() + content + b"\n")
                    continue
                if not last_of_side:
                    raise self.error(i + 1, "malformed patch: misplaced '\\ No newline' marker")
                unterminated.append(len(lines))
                i += 2
            else:
                i += 1
            lines.append(kind_s.encode() + content + b"\n")
        if not changed:
            raise self.error(header_line, "malformed patch: hunk contains no changed lines")
        hunk = Hunk(source_start, source_length, target_start, target_length, section, b"".join(lines),
                    b"".join(map(_FIRST, lines)), header_line, tuple(unterminated))
        return hunk, i


def _name_end(text: bytes, more: bytes) -> int:
    """Where GNU's ``fetchname`` ends a name: at the first blank, unless the run of blanks from it
    holds no TAB and ``more`` (a timestamp's TAB, or the line's end where there is no timestamp)
    still comes later in the line: then the blank is inside the name. One loop for both callers."""
    for t in range(len(text)):
        if text[t] in _WS:
            u = t
            while text[u] != 9 and u + 1 < len(text) and text[u + 1] in _WS:
                u += 1
            if text[u] != 9 and more in text[u + 1 :]:
                continue
            return t
    return len(text)


def _index_name(rest: bytes) -> bytes | None:
    """GNU ``fetchname`` for an ``Index:`` line (no timestamp): the rest of the line, spaces inside
    it kept, but only when the name ends the line; a trailing blank, TAB or CR (a CRLF patch) makes
    GNU drop the name. A C-quoted name likewise."""
    text = rest.lstrip(_WS)
    if text.startswith(b'"'):
        name, after = _quoted(text)
        return name if name is not None and after == b"\n" else None
    end = _name_end(text, b"\n")
    if end == len(text) or text[end] != 10:  # (GNU: *t != '\n' without a timestamp to read)
        return None
    return text[:end] or None


def _indent_span(line: bytes, limit: int = 1 << 30) -> tuple[int, int]:
    """(columns, bytes) of a line's indent as GNU counts it, up to ``limit`` columns: a blank or X is
    one column, a TAB runs to a multiple of 8 (``pget_line``)."""
    col = k = 0
    while col < limit and k < len(line):
        c = line[k]
        if c == 32 or c == 88:
            col += 1
        elif c == 9:
            col = (col + 8) & ~7
        else:
            break
        k += 1
    return col, k


def _indent_columns(line: bytes) -> int:
    """The columns of a line's indent as GNU counts them."""
    return _indent_span(line)[0]


def _strip_indent(line: bytes, indent: int) -> bytes:
    """``line`` past at most ``indent`` columns of blanks, X's and TABs (GNU's ``pget_line``)."""
    return line[_indent_span(line, indent)[1]:]


def _unindent(line: bytes) -> bytes:
    """``line`` as GNU's ``intuit_diff_type`` matches header lines: past an indent of spaces, TABs
    and X's, and a ``--- `` line past RFC 934's ``- `` prefixes (a forwarded mail's)."""
    if line[:1] in (b" ", b"\t", b"X"):
        line = line.lstrip(b" \tX")
    if line.startswith(b"- "):
        t = line
        while t.startswith(b"- "):
            t = t[2:]
        if t.startswith(b"--- "):
            return t
    return line


def _is_mail_header(raw: list[bytes]) -> bool:
    """A ``git format-patch`` of an empty commit (or ``materialize new``'s header): an empty patch.

    This is the one deliberate exception to GNU's "Only garbage" error: the workspace writes such a
    header when a patch is created, before it has a diff (quilt has no file at that point). It holds
    only for a header and prose: a mail header above a diff we found no section in (a broken ``@``
    line, a quoted diff) is the garbage GNU says it is, never a patch that changes nothing.
    """
    first = next((line for line in raw if line.strip()), b"")
    if not (first.startswith((b"From: ", b"Subject: ", b"Date: ")) or (
        first.startswith(b"From ") and len(first.split(b" ")[1]) == 40
    )):
        return False
    return not any(map(_DIFF_LIKE.match, raw))


# A line that tries to be part of a diff (a file header, a hunk header of any kind, a normal diff's
# command, a git extended header, a binary file's line), also when indented or quoted as mail quotes
# it ("> "): not prose. "---" alone is format-patch's separator and "- item" a list, so a header line
# needs its name or numbers.
_DIFF_LIKE = re.compile(
    rb"^[ \t>]*(?:(?:---|\+\+\+|\*\*\*) \S|@@? |@@$|diff |Index: |\*{8}|\d+(?:,\d+)?[acd]\d+(?:,\d+)?\s*$"
    rb"|Binary files |GIT binary patch|(?:new|deleted) file mode |(?:old|new) mode |index [0-9a-f]+\.\.|"
    rb"(?:rename|copy) (?:from|to) |(?:dis)?similarity index )"
)


def _quoted(text: bytes) -> tuple[bytes | None, bytes]:
    """Split a leading C-quoted name off ``text``: (unquoted name, rest) or (None, text)."""
    i = 1
    while i < len(text):
        c = text[i : i + 1]
        if c == b"\\":
            i += 2
            continue
        if c == b'"':
            return unquote_c(text[: i + 1]), text[i + 1 :]
        i += 1
    return None, text


def _fetchname(rest: bytes) -> tuple[bytes | None, str | None]:
    """GNU ``fetchname`` for a ``---``/``+++`` line: (raw name, timestamp text or None).

    A name ends at the first whitespace, unless a TAB comes later on the line (then the TAB ends
    it): "allow file names with internal spaces, but only if a tab separates the file name from
    the date". A C-quoted name ends at its closing quote.
    """
    text = rest.rstrip(b"\r\n")
    text = text.lstrip(b" \t")
    if text.startswith(b'"'):
        name, after = _quoted(text)
        if name is not None:
            stamp = after.strip(_WS).decode("latin-1") or None
            return name, stamp
    end = _name_end(text, b"\t")
    name = text[:end]
    stamp = text[end:].strip(_WS).decode("latin-1") or None
    return (name or None), stamp
