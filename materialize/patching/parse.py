"""Parse unified / git-style patch files into the immutable model.

``unidiff`` finds the structure (file sections, hunks, line kinds and their line numbers); every byte
we keep is then taken from the raw patch lines by line number, so contents stay bytes-exact whatever
the encoding. Git extended headers, paths, ``\\ No newline`` markers and CR handling are read here
with GNU patch's rules, because unidiff's own interpretation of those differs in corner cases.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from unidiff import PatchSet as UnidiffPatchSet
from unidiff import UnidiffParseError
from unidiff.constants import (
    RE_DIFF_GIT_HEADER,
    RE_DIFF_GIT_HEADER_NO_PREFIX,
    RE_DIFF_GIT_HEADER_URI_LIKE,
)
from unidiff.patch import Hunk as UnidiffHunk
from unidiff.patch import PatchedFile

from materialize.errors import PatchFormatError
from materialize.patching.model import FilePatch, Hunk, HunkLine, PatchSet
from materialize.patching.paths import (
    DEV_NULL,
    decode_path,
    is_epoch_timestamp,
    strip_components,
)

# Lines that belong to a plain diff's per-file preamble rather than to the free-text header.
_PREAMBLE = re.compile(rb"^(Index: |=+\r?\n|diff -|RCS file: |retrieving revision )")
_EXT_HEADER = re.compile(
    rb"^(old mode |new mode |deleted file mode |new file mode |copy from |copy to |rename from |rename to "
    rb"|similarity index |dissimilarity index |index )"
)
_MODE = re.compile(rb"^[0-7]{6}$")
_INDEX = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)(?: +([0-7]+))?\s*$")


def split_lines(data: bytes) -> list[bytes]:
    """Split on LF only, keeping terminators (``bytes.splitlines`` would also split on lone CR)."""
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


@dataclass
class _Cursor:
    """Remembers the last line unidiff consumed, so its (line-less) errors can name a line."""

    line: int = 0

    def feed(self, raw: list[bytes]) -> Iterator[str]:
        """Yield latin-1 text lines (a lossless view) with CRLF folded to LF for structure only."""
        for number, line in enumerate(raw, 1):
            self.line = number
            text = line.decode("latin-1")
            if text.endswith("\r\n"):
                text = text[:-2] + "\n"
            if text.startswith("\t"):
                text = " " + text  # GNU: a hunk line starting with TAB is context whose space got eaten
            elif text.startswith("="):
                text = " " + text[1:]  # GNU: '=' marks a context line too
            yield text


@dataclass
class _GitHeaders:
    """What the ``diff --git`` extended header lines say about one file."""

    is_new: bool = False
    is_delete: bool = False
    rename: set[str] = field(default_factory=set)
    copy: set[str] = field(default_factory=set)
    old_mode: str | None = None
    new_mode: str | None = None


def parse_patch(data: bytes, *, source: str, strip: int = 1) -> PatchSet:
    """Parse ``data`` (the bytes of patch file ``source``), stripping ``strip`` path components."""
    raw = split_lines(data)
    # GNU ignores an unterminated last line ("patch unexpectedly ends in middle of line"), except
    # a "\ No newline" marker, which it reads with getc() and accepts without a terminator.
    partial = bool(raw) and not raw[-1].endswith(b"\n") and not raw[-1].startswith(b"\\")
    body = raw[:-1] if partial else raw
    parsed = _unidiff(body, source)
    ctx = _Context(source=source, raw=body, strip=strip)
    files: list[FilePatch] = []
    for pf in parsed:
        fp = ctx.file_patch(pf)
        if fp is not None:
            files.append(fp)
    _reject_other_formats(ctx, parsed)
    first = min((f.patch_line for f in files), default=len(raw) + 1)
    header = b"".join(raw[: first - 1]).decode("utf-8", "surrogateescape")
    return PatchSet(source=source, header=header, files=tuple(files))


def _unidiff(raw: list[bytes], source: str) -> UnidiffPatchSet:
    """Run unidiff over the lines, with GNU's tolerance for chopped blank lines at the very end.

    When the patch ends inside a hunk, GNU assumes up to three trailing blank context lines were
    chopped off (by an editor) and supplies them; anything else is malformed.
    """
    cursor = _Cursor()
    try:
        return UnidiffPatchSet(cursor.feed(raw))
    except (UnidiffParseError, ValueError) as exc:
        error = PatchFormatError(f"{source}:{cursor.line}: malformed patch: {exc}")
        at_end = cursor.line >= len(raw)
    if at_end and "shorter than expected" in str(error):
        for missing in range(1, 4):
            try:
                return UnidiffPatchSet(_Cursor().feed(raw + [b"\n"] * missing))
            except (UnidiffParseError, ValueError):
                continue
    raise error


@dataclass
class _Context:
    """Shared state for turning unidiff objects into model objects."""

    source: str
    raw: list[bytes]
    strip: int

    def error(self, line: int, message: str) -> PatchFormatError:
        """A PatchFormatError naming the patch file and line, as every parse error must."""
        return PatchFormatError(f"{self.source}:{line}: {message}")

    def line(self, number: int) -> bytes:
        """Raw patch line by 1-based number (b"" past the end)."""
        return self.raw[number - 1] if 0 < number <= len(self.raw) else b""

    def file_patch(self, pf: PatchedFile) -> FilePatch | None:
        """Convert one unidiff file section; None for a stray ``---``/``+++`` pair without hunks."""
        start = pf.diff_line_no or 1
        is_git = self.line(start).startswith(b"diff --git ")
        if not is_git and not len(pf) and not pf.is_binary_file:
            return None
        hunks = tuple(self.hunk(h) for h in pf)
        plus_line = self._plus_line(start, is_git, pf)
        strip_cr = plus_line is not None and self.line(plus_line).endswith(b"\r\n")
        if is_git:
            return self._git_file(pf, start, hunks, strip_cr)
        return self._plain_file(pf, start, hunks, strip_cr)

    def _plus_line(self, start: int, is_git: bool, pf: PatchedFile) -> int | None:
        """Line number of this section's ``+++`` header, if it has one."""
        if not is_git:
            return start if self.line(start).startswith(b"+++ ") else None
        end = self._first_hunk_line(pf) or len(self.raw) + 1
        for number in range(start + 1, end):
            if self.line(number).startswith(b"+++ "):
                return number
        return None

    def _first_hunk_line(self, pf: PatchedFile) -> int | None:
        """Line number of the first ``@@`` header of a section, if any."""
        return self._hunk_header_line(pf[0]) if len(pf) else None

    @staticmethod
    def _hunk_header_line(h: UnidiffHunk) -> int:
        """The ``@@`` line sits right before the first body line unidiff numbered."""
        numbered = [ln.diff_line_no for ln in h if ln.diff_line_no]
        # An empty hunk ("@@ -0,0 +0,0 @@") only survives unidiff at the very end of the input.
        return min(numbered) - 1 if numbered else -1

    # -- hunks -----------------------------------------------------------------------------------

    def hunk(self, h: UnidiffHunk) -> Hunk:
        """Convert a hunk, taking every content byte from the raw line."""
        header_line = self._hunk_header_line(h)
        if header_line < 0:
            header_line = len(self.raw)
        body = [ln for ln in h if ln.line_type in (" ", "-", "+") and ln.diff_line_no]
        if not any(ln.line_type != " " for ln in body):
            raise self.error(header_line, "malformed patch: hunk contains no changed lines")
        old_total = sum(1 for ln in body if ln.line_type != "+")
        new_total = sum(1 for ln in body if ln.line_type != "-")
        lines: list[HunkLine] = []
        old_seen = new_seen = 0
        for ln in body:
            kind = ln.line_type
            old_seen += kind != "+"
            new_seen += kind != "-"
            no_newline = self.line(ln.diff_line_no + 1).startswith(b"\\")
            if no_newline and not _may_lack_newline(kind, old_seen == old_total, new_seen == new_total):
                raise self.error(ln.diff_line_no + 1, "malformed patch: misplaced '\\ No newline' marker")
            lines.append(HunkLine(kind, _content(self.line(ln.diff_line_no)), no_newline))
        section = h.section_header.rstrip("\r").encode("latin-1").decode("utf-8", "replace")
        return Hunk(
            source_start=h.source_start,
            source_length=h.source_length,
            target_start=h.target_start,
            target_length=h.target_length,
            section_header=section,
            lines=tuple(lines),
            patch_line=header_line,
        )

    # -- file sections ---------------------------------------------------------------------------

    def _git_file(self, pf: PatchedFile, start: int, hunks: tuple[Hunk, ...], strip_cr: bool) -> FilePatch:
        """A ``diff --git`` section: names from the diff line, semantics from extended headers."""
        git = self._git_headers(start)
        old_raw, new_raw = self._git_names(start)
        old_path = None if git.is_new else self._strip(old_raw, start)
        new_path = None if git.is_delete else self._strip(new_raw, start)
        return FilePatch(
            old_path=old_path,
            new_path=new_path,
            is_new=git.is_new,
            is_delete=git.is_delete,
            is_rename=git.rename == {"from", "to"},
            is_copy=git.copy == {"from", "to"},
            old_mode=git.old_mode,
            new_mode=git.new_mode,
            is_binary=pf.is_binary_file,
            hunks=hunks,
            patch_line=start,
            strip_trailing_cr=strip_cr,
        )

    def _git_names(self, start: int) -> tuple[bytes, bytes]:
        """Old and new names on the ``diff --git`` line, still quoted/prefixed."""
        text = self.line(start).rstrip(b"\r\n").decode("latin-1")
        for regex in (RE_DIFF_GIT_HEADER, RE_DIFF_GIT_HEADER_URI_LIKE, RE_DIFF_GIT_HEADER_NO_PREFIX):
            m = regex.match(text)
            if m:
                return m.group("source").encode("latin-1"), m.group("target").encode("latin-1")
        raise self.error(start, "malformed patch: cannot read file names from 'diff --git' line")

    def _git_headers(self, start: int) -> _GitHeaders:
        """Read the extended header lines that follow ``diff --git``, as GNU patch does."""
        git = _GitHeaders()
        number = start + 1
        while number <= len(self.raw) and _EXT_HEADER.match(self.line(number)):
            _read_git_header(git, self.line(number).rstrip(b"\r\n"))
            number += 1
        return git

    def _plain_file(self, pf: PatchedFile, start: int, hunks: tuple[Hunk, ...], strip_cr: bool) -> FilePatch:
        """A traditional ``---``/``+++`` section (or a lone ``Binary files ... differ`` line)."""
        if pf.is_binary_file and not self.line(start).startswith(b"+++ "):
            minus_line, plus_line = start, start
        else:
            minus_line, plus_line = start - 1, start
        old_name = _header_name(pf.source_file)
        new_name = _header_name(pf.target_file)
        first = hunks[0] if hunks else None
        is_new = old_name == DEV_NULL.encode() or (
            first is not None and first.source_start == 0 and is_epoch_timestamp(pf.source_timestamp)
        )
        is_delete = new_name == DEV_NULL.encode() or (
            first is not None and first.target_start == 0 and is_epoch_timestamp(pf.target_timestamp)
        )
        return FilePatch(
            old_path=None if is_new else self._strip(old_name, minus_line),
            new_path=None if is_delete else self._strip(new_name, plus_line),
            is_new=is_new,
            is_delete=is_delete,
            is_rename=False,
            is_copy=False,
            old_mode=None,
            new_mode=None,
            is_binary=pf.is_binary_file,
            hunks=hunks,
            patch_line=self._preamble_start(minus_line),
            strip_trailing_cr=strip_cr,
            old_timestamp=pf.source_timestamp,
            new_timestamp=pf.target_timestamp,
        )

    def _preamble_start(self, minus_line: int) -> int:
        """Walk back over ``Index:``/``====``/``diff ...`` lines that introduce this file."""
        number = minus_line
        while number > 1 and _PREAMBLE.match(self.line(number - 1)):
            number -= 1
        return number

    def _strip(self, raw_name: bytes, line: int) -> str:
        """Decode and ``-pN``-strip a header name, or fail naming the header line."""
        name = decode_path(raw_name)
        stripped = strip_components(name, self.strip)
        if stripped is None:
            raise self.error(line, f"cannot strip {self.strip} leading path component(s) from {name!r}")
        return stripped


_CONTEXT_HUNK = re.compile(rb"^\*{15}")
_NORMAL_COMMAND = re.compile(rb"^\d+(,\d+)?[acd]\d+(,\d+)?\r?\n")


def _reject_other_formats(ctx: _Context, parsed: UnidiffPatchSet) -> None:
    """Refuse context/normal diffs outside unified hunks instead of silently ignoring them.

    GNU patch would apply those formats; we only support unified diffs, and a patch that silently
    does nothing would be worse than an error.
    """
    in_hunks = {ln.diff_line_no for pf in parsed for h in pf for ln in h if ln.diff_line_no}
    for number, line in enumerate(ctx.raw, 1):
        if number in in_hunks:
            continue
        nxt = ctx.line(number + 1)
        if _CONTEXT_HUNK.match(line) and ctx.line(number + 1).startswith(b"*** "):
            raise ctx.error(
                number, "unsupported patch format: context diff (only unified diffs are supported)"
            )
        if _NORMAL_COMMAND.match(line) and nxt[:2] in (b"< ", b"> ") and number + 1 not in in_hunks:
            raise ctx.error(
                number, "unsupported patch format: normal diff (only unified diffs are supported)"
            )


def _header_name(name: str | None) -> bytes:
    """A ---/+++ file name from unidiff (latin-1 text) back to raw bytes, CR and padding removed."""
    return (name or "").encode("latin-1").rstrip(b"\r\n \t")


def _content(raw_line: bytes) -> bytes:
    """Hunk line content: drop the kind character and the LF.

    An empty line is empty context and a TAB-led line is context in full (GNU assumes the leading
    space was eaten).
    """
    body = raw_line[:-1] if raw_line.endswith(b"\n") else raw_line
    if body in (b"", b"\r") or body.startswith(b"\t"):
        return body
    return body[1:]


def _may_lack_newline(kind: str, last_old: bool, last_new: bool) -> bool:
    """GNU patch accepts the marker only after the last line of the side(s) the line belongs to."""
    if kind == "+":
        return last_new
    return last_old


def _read_git_header(git: _GitHeaders, line: bytes) -> None:
    """Apply one extended header line to ``git``."""
    words = line.split(b" ")
    if line.startswith(b"new file mode "):
        git.is_new = True
        git.new_mode = _mode(words[-1])
    elif line.startswith(b"deleted file mode "):
        git.is_delete = True
        git.old_mode = _mode(words[-1])
    elif line.startswith(b"old mode "):
        git.old_mode = _mode(words[-1])
    elif line.startswith(b"new mode "):
        git.new_mode = _mode(words[-1])
    elif line.startswith((b"rename from ", b"rename to ")):
        git.rename.add(words[1].decode())
    elif line.startswith((b"copy from ", b"copy to ")):
        git.copy.add(words[1].decode())
    elif m := _INDEX.match(line):
        _read_index(git, m)


def _read_index(git: _GitHeaders, m: re.Match[bytes]) -> None:
    """``index a..b [mode]``: all-zero hashes mean a missing side; a trailing mode is unchanged."""
    old_sha, new_sha, mode = m.group(1).decode(), m.group(2).decode(), m.group(3)
    if set(old_sha) == {"0"}:
        git.is_new = True
    if set(new_sha) == {"0"}:
        git.is_delete = True
    if mode is not None and _MODE.match(mode):
        git.old_mode = git.old_mode or mode.decode()
        git.new_mode = git.new_mode or mode.decode()


def _mode(word: bytes) -> str | None:
    """A six-digit octal git mode, or None for anything else."""
    return word.decode() if _MODE.match(word) else None
