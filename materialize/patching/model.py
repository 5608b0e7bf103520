"""Immutable data model shared by the patch parser, the hunk applier and their callers.

Everything is bytes-exact: hunk line contents are the raw bytes of the patch line (minus the leading
kind character and the final ``\\n``), so that applying a patch reproduces GNU patch byte for byte.
"""


# No `from __future__ import annotations`: typing compiles a NamedTuple's string annotations, and a
# process's first compile() costs ~10M instructions (tests/test_startup.py).
from operator import itemgetter
from typing import Literal, NamedTuple

HunkLineKind = Literal[" ", "-", "+"]
HunkStatus = Literal["clean", "offset", "fuzz", "failed"]


class HunkLine(NamedTuple):
    """One body line of a hunk.

    ``content`` excludes the kind character and the ``\\n`` terminator but keeps a ``\\r`` when the
    patch line ended in CRLF; ``no_newline`` is set when a ``\\ No newline at end of file`` marker
    follows the line, i.e. the line has no terminator at all. A NamedTuple rather than a frozen
    dataclass: a 100k-hunk patch makes a million of these, and tuples are several times cheaper.
    """

    kind: HunkLineKind
    content: bytes
    no_newline: bool = False

    def text(self, strip_trailing_cr: bool = False) -> bytes:
        """The line as it appears in the old/new file, with its terminator (if any)."""
        body = self.content
        if strip_trailing_cr and body.endswith(b"\r"):
            body = body[:-1]
        return body if self.no_newline else body + b"\n"


def split_lines(data: bytes) -> list[bytes]:
    """Split on LF only, keeping terminators (``bytes.splitlines`` would also split on lone CR)."""
    if b"\r" not in data:
        return data.splitlines(keepends=True)  # the same split without CRs, done in C
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


class Hunk(NamedTuple):
    """One ``@@`` hunk; line numbers are as written in the header (1-based, 0 for empty ranges).

    ``body`` is the hunk's lines as they stand in the patch (kind character, content, ``\\n``),
    joined into one bytes object: one allocation per hunk instead of one per line, so once parsed,
    a 100k-hunk patch no longer holds its ~1M line objects (``body_lines`` splits it again, and the
    bulk applier splits a whole file's hunks at once). Every line in ``body`` ends in ``\\n``;
    ``unterminated`` holds the (rare) indices of lines that a ``\\ No newline at end of file``
    marker followed, which have no terminator at all. GNU's eaten-space context lines (TAB-led or
    empty) are stored with their `` `` restored. ``kinds`` is the string of kind characters
    (``b" --+ "``): counting, context lengths and the old/new sides are computed from it with
    C-level bytes operations. A NamedTuple rather than a frozen dataclass: a 100k-hunk patch makes
    100k of these, and tuples are several times cheaper.
    """

    source_start: int
    source_length: int
    target_start: int
    target_length: int
    section_header: str
    body: bytes
    kinds: bytes
    patch_line: int
    unterminated: tuple[int, ...] = ()
    # A context diff's hunk whose two sides show a context line differently (a TAB-led line, whose
    # newline GNU drops, or a "\\ No newline" marker, on one side only): GNU matches the pattern side
    # and copies context from the file, so ``body`` holds the old side's context lines and this the
    # (body, unterminated) whose context lines are the new side's, which ``patch -R`` matches instead.
    reverse_body: tuple[bytes, tuple[int, ...]] | None = None
    # A context diff's hunk whose context GNU counts otherwise than its lines (an omitted replacing side
    # whose count a later "--" line reset): GNU's (prefix, suffix) context, which decides where
    # ``locate_hunk`` may put the hunk and how much fuzz it may use; None: the lines' own counts.
    context_counts: tuple[int, int] | None = None

    @property
    def body_lines(self) -> list[bytes]:
        """The body's lines as in the patch, an unterminated one without its ``\\n``."""
        lines = split_lines(self.body)
        for k in self.unterminated:
            lines[k] = lines[k][:-1]
        return lines

    @property
    def lines(self) -> tuple[HunkLine, ...]:
        """The body as HunkLine tuples (built on each call: for messages, rejects and tests)."""
        out = []
        for text in self.body_lines:
            terminated = text.endswith(b"\n")
            out.append(HunkLine(chr(text[0]), text[1:-1] if terminated else text[1:], not terminated))  # type: ignore[arg-type]
        return tuple(out)

    @property
    def header(self) -> str:
        """The hunk header in canonical form, used in messages and reject files."""
        text = f"@@ -{self.source_start},{self.source_length} +{self.target_start},{self.target_length} @@"
        return f"{text} {self.section_header}" if self.section_header else text

    @property
    def old_lines(self) -> tuple[HunkLine, ...]:
        """Lines the hunk expects in the original file (context and removed)."""
        return tuple(line for line in self.lines if line.kind != "+")

    @property
    def new_lines(self) -> tuple[HunkLine, ...]:
        """Lines the hunk leaves in the patched file (context and added)."""
        return tuple(line for line in self.lines if line.kind != "-")


class FilePatch(NamedTuple):
    """All changes a patch makes to one file.

    ``strip_trailing_cr`` mirrors GNU patch: when the ``+++`` header line itself ends in CRLF the whole
    file section is taken to be CRLF-mangled, and one trailing CR is dropped from every hunk line.
    ``old_timestamp``/``new_timestamp`` are the raw header timestamps (used only in reject headers).
    For a plain (non-git) section ``old_path``/``new_path`` are only the candidates GNU chooses from
    (None where a name is ``/dev/null`` or cannot be stripped); ``patching.tree.choose_name`` picks
    the file from the tree, as GNU does, and the section then reads and writes that one file. So for
    a git section that creates (deletes) a file and names another on its old (new) side: its
    ``diff --git`` and ---/+++ lines disagree, and GNU creates (deletes) the best of the two.
    ``is_binary`` means a ``GIT binary patch`` payload (refused, like GNU 2.7).
    """

    old_path: str | None
    new_path: str | None
    is_new: bool
    is_delete: bool
    is_rename: bool
    is_copy: bool
    old_mode: str | None
    new_mode: str | None
    is_binary: bool
    hunks: tuple[Hunk, ...]
    patch_line: int
    strip_trailing_cr: bool = False
    old_timestamp: str | None = None
    new_timestamp: str | None = None
    is_git: bool = False
    index_path: str | None = None  # a plain section's ``Index:`` name: GNU's last resort when ---/+++ name none
    normal: bool = False  # a normal diff's section (``2c2``): GNU never takes its file to be missing or new
    may_be_missing: bool = False  # git's index line names the empty blob: a missing file is patched as empty
    may_be_missing_after: bool = False  # ... on the new side (what -R reads)
    # A context section's first hunk starts from nothing / ends in nothing by GNU's own tests ("*** 0",
    # an empty replacing side before line 1), which its unified line numbers do not tell ("*** 1,0 ****"
    # starts at unified line 0 too); None: a first side from line 0 does.
    says_missing: tuple[bool, bool] | None = None

    @property
    def path(self) -> str | None:
        """The path the result lives at (new path unless the file is deleted)."""
        return self.new_path if self.new_path is not None else self.old_path


class PatchSet(NamedTuple):
    """A parsed patch file: its free-text header and the per-file patches, in order."""

    source: str
    header: str
    files: tuple[FilePatch, ...]


_STATUS = itemgetter(1)  # HunkResult.status


class HunkResult(NamedTuple):
    """How one hunk applied. ``offset`` is GNU patch's cumulative offset, as GNU reports it.

    A NamedTuple for the same reason as Hunk: one per hunk.
    """

    hunk: Hunk
    status: HunkStatus
    offset: int
    fuzz: int
    applied_at: int | None


class FileResult(NamedTuple):
    """Outcome of applying one FilePatch.

    ``content`` is None when the file does not exist afterwards. ``error`` carries a file-level
    failure that is not a hunk failure (e.g. a deletion whose content does not match, or a missing
    file), as GNU patch reports those separately from rejected hunks.
    """

    content: bytes | None
    hunks: tuple[HunkResult, ...]
    reject: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when every hunk applied and the file-level operation succeeded."""
        # "in" over a map compares in C: this runs per file on every hunk (a patch may have 100k).
        return self.reject is None and self.error is None and "failed" not in map(_STATUS, self.hunks)
