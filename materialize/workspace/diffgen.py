"""Regenerate a patch from file contents with minimal churn.

Reviewers read the diff of a patch file. If ``refresh`` rewrote every hunk each time, a one-line edit
to one function would show up as a rewrite of the whole patch. So a refreshed patch keeps, byte for
byte, the description/header, each file section's header and every old hunk whose lines the edit did
not touch; only the hunks around the edit are regenerated (and the ``@@`` numbers of later hunks in the
same file, when the edit changed the line count). A hunk survives when it still matches the base and
the previous patch result exactly and no edit falls inside it or within ``context`` lines of it.

Regenerated hunks are what the patch's own tool would write (``diffscript``: git for git-style and new
patches, GNU diff for quilt/GNU ones), with the ``@@`` function context the patch had (or the tool's
own rule, or none when the patch never had any): an edit plus its revert gives back the same bytes.
"""


# No `from __future__ import annotations`: typing compiles a NamedTuple's string annotations, and a
# process's first compile() costs ~10M instructions (tests/test_startup.py).
import difflib
import re
from typing import NamedTuple

from materialize.errors import PatchApplyError, PatchFormatError
from materialize.store import SYMLINK, blob_id
from materialize.workspace.diffscript import GIT, GNU, Block, edit_scripts
from materialize.workspace.patchtext import (
    NO_NEWLINE,
    FileSection,
    Hunk,
    PatchText,
    hunk_header,
    split_lines,
)

CONTEXT = 3
_FUNCNAME = re.compile(rb"^[A-Za-z_$]")


class FileChange(NamedTuple):
    """One file the patch should cover: content before the patch (``base``) and now (``cur``).

    ``prev`` is what the old patch produced for this file (to recognise hunks the edit left alone);
    ``old_path`` differs from ``path`` for a rename; None contents mean "absent".
    """

    path: str
    base: bytes | None
    cur: bytes | None
    prev: bytes | None = None
    old_path: str | None = None
    old_mode: str | None = "100644"
    new_mode: str | None = "100644"

    @property
    def source_path(self) -> str:
        return self.old_path or self.path

    def is_noop(self) -> bool:
        """Nothing to write: the same bytes and mode under the same name, or no file on either side (a
        "rename" of nothing into nothing was written as a bare ``new file mode None``)."""
        if self.base is None and self.cur is None:
            return True
        return self.base == self.cur and self.source_path == self.path and self.old_mode == self.new_mode


class _Piece(NamedTuple):
    b0: int  # base line index where the hunk's old side starts
    b1: int
    c0: int  # cur line index where the hunk's new side starts
    c1: int
    hunk: Hunk | None = None  # kept old hunk (raw bytes reused)
    lines: list[bytes] | None = None  # fresh hunk body
    section: bytes = b"\n"
    p0: int = 0  # where a kept hunk's new side starts in the previous patch result


def _start(index: int, length: int) -> int:
    """Unified-diff start number for a 0-based index (an empty range names the line before it)."""
    return index if length == 0 else index + 1


def _loc(start: int, length: int) -> int:
    return start if length == 0 else start - 1


def _funcname(base: list[bytes], before: int, style: str) -> bytes:
    """The ``@@`` line's function context for a hunk starting at ``before``, as the patch's own tool
    writes it: git's default (nearest earlier line starting with a letter, ``_`` or ``$``, cut to 80
    bytes, trailing blanks dropped), GNU ``diff -p`` (same rule, 40 characters), or none."""
    if style == "none":
        return b"\n"
    width = 80 if style == GIT else 40
    for i in range(min(before, len(base)) - 1, -1, -1):
        if _FUNCNAME.match(base[i]):
            return b" " + base[i].rstrip(b"\n")[:width].rstrip() + b"\n"
    return b"\n"


def _emit(prefix: bytes, line: bytes) -> list[bytes]:
    if line.endswith(b"\n"):
        return [prefix + line]
    return [prefix + line + b"\n", NO_NEWLINE]


def _group(blocks: list[Block], context: int) -> list[list[Block]]:
    """Blocks whose unchanged gap is at most 2 x context share a hunk (git's and GNU diff's rule)."""
    groups: list[list[Block]] = []
    for block in blocks:
        if groups and block[0] - groups[-1][-1][1] <= 2 * context:
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


def _fresh_hunks(base: list[bytes], cur: list[bytes], blocks: list[Block], lo: tuple[int, int],
                 hi: tuple[int, int], context: int, sections: dict[int, bytes], style: str) -> list[_Piece]:
    """Unified-diff hunks for ``blocks`` (the tool's own placement), context clipped to ``lo``..``hi``."""
    pieces: list[_Piece] = []
    for group in _group(blocks, context):
        first, last = group[0], group[-1]
        lead = min(context, first[0] - lo[0], first[2] - lo[1])
        trail = min(context, hi[0] - last[1], hi[1] - last[3])
        b0, c0 = first[0] - lead, first[2] - lead
        b1, c1 = last[1] + trail, last[3] + trail
        body: list[bytes] = []
        at = b0
        for i1, i2, j1, j2 in group:
            for line in base[at:i1]:
                body += _emit(b" ", line)
            for line in base[i1:i2]:
                body += _emit(b"-", line)
            for line in cur[j1:j2]:
                body += _emit(b"+", line)
            at = i2
        for line in base[at:b1]:
            body += _emit(b" ", line)
        section = sections.get(b0)
        pieces.append(_Piece(b0, b1, c0, c1, lines=body,
                             section=section if section is not None else _funcname(base, b0, style)))
    return pieces


def _on_path(blocks: list[Block], b: int, c: int) -> bool:
    """Does the tool's alignment pass through (b, c), i.e. can a kept hunk begin or end there?"""
    pi, pj = 0, 0
    for i1, i2, j1, j2 in blocks:
        if pi <= b <= i1 and c - b == pj - pi:
            return True
        if b < i1 or c < j1:
            return False
        pi, pj = i2, j2
    return b >= pi and c - b == pj - pi


def _context(h: Hunk) -> tuple[int, int]:
    """(leading, trailing) unchanged lines of a hunk."""
    kinds = [line[:1] for line in h.body if not line.startswith(b"\\")]
    changed = [k for k, kind in enumerate(kinds) if kind in (b"-", b"+")]
    if not changed:
        return len(kinds), len(kinds)
    return changed[0], len(kinds) - 1 - changed[-1]


def _find(lines: list[bytes], pattern: list[bytes], near: int, reach: int = 5000) -> int | None:
    """Index of ``pattern`` in ``lines`` closest to ``near`` (None when absent): hunks move with offsets."""
    n = len(pattern)
    for distance in range(reach):
        for at in (near - distance, near + distance) if distance else (near,):
            if 0 <= at <= len(lines) - n and lines[at : at + n] == pattern:
                return at
        if near - distance < 0 and near + distance > len(lines):
            return None
    return None


def _anchor_holds(p: _Piece, base_len: int) -> bool:
    """A hunk with less context after its changes than before them applies only at the end of the file
    (less before: only at its start), GNU patch's rule at fuzz 0: a kept hunk still has to sit there.
    ``abc`` + "append a line" kept its bytes when the new upstream grew a line at the end, and the
    rebase died on its own regenerated patch (it no longer applied), half-way, with no conflict to
    resolve."""
    assert p.hunk is not None
    lead, trail = _context(p.hunk)
    return (lead == trail or (trail < lead and p.b1 == base_len) or (lead < trail and p.b0 == 0))


def _kept_candidates(old: FileSection | None, base, prev, cur) -> list[_Piece]:
    """Old hunks that still match base and prev exactly (possibly moved) and that the prev→cur edit
    leaves alone. Moved hunks keep their bytes; only their ``@@`` numbers are rewritten."""
    if old is None or prev is None or old.binary:
        return []
    equal_blocks = [
        op for op in difflib.SequenceMatcher(None, prev, cur, autojunk=False).get_opcodes() if op[0] == "equal"
    ]
    out: list[_Piece] = []
    for h in old.hunks:
        if h.old_len == 0 or h.new_len == 0:
            b0, n0 = _loc(h.old_start, h.old_len), _loc(h.new_start, h.new_len)
            if base[b0 : b0 + h.old_len] != h.old_lines() or prev[n0 : n0 + h.new_len] != h.new_lines():
                continue
        else:
            found_b = _find(base, h.old_lines(), _loc(h.old_start, h.old_len))
            found_n = _find(prev, h.new_lines(), _loc(h.new_start, h.new_len) + (found_b or 0) - _loc(h.old_start, h.old_len))
            if found_b is None or found_n is None:
                continue
            b0, n0 = found_b, found_n
        if out and (b0 < out[-1].b1 or n0 < out[-1].p0 + (out[-1].c1 - out[-1].c0)):
            continue  # moved onto (or before) the previous kept hunk: regenerate instead
        for _tag, i1, i2, j1, _j2 in equal_blocks:
            if i1 <= n0 and n0 + h.new_len <= i2 and (h.new_len > 0 or i1 < n0 < i2):
                c0 = j1 + (n0 - i1)
                out.append(_Piece(b0, b0 + h.old_len, c0, c0 + h.new_len, hunk=h, p0=n0))
                break
    return out


def _file_hunks(old: FileSection | None, base: list[bytes], prev, cur: list[bytes], context: int,
                blocks: list[Block], style: str) -> list[_Piece]:
    """Old hunks the edit left alone (byte for byte), fresh hunks from the tool's ``blocks`` elsewhere.

    A kept hunk must begin and end on the tool's alignment; it is regenerated instead when a change
    comes closer to it than the tool would leave between two hunks, so the result is what the tool
    would write wherever the old patch was written by it, and the old bytes wherever they still hold.
    """
    kept = [p for p in _kept_candidates(old, base, prev, cur)
            if _on_path(blocks, p.b0, p.c0) and _on_path(blocks, p.b1, p.c1) and _anchor_holds(p, len(base))]
    sections = {_loc(h.old_start, h.old_len): h.section for h in (old.hunks if old else [])}
    while True:
        demote: set[int] = set()
        pieces: list[_Piece] = []
        lo = (0, 0)
        for k in range(len(kept) + 1):
            nxt = kept[k] if k < len(kept) else None
            hi = (nxt.b0, nxt.c0) if nxt else (len(base), len(cur))
            inside = [bl for bl in blocks if lo[0] <= bl[0] and bl[1] <= hi[0] and lo[1] <= bl[2] and bl[3] <= hi[1]]
            prev_trail = _context(kept[k - 1].hunk)[1] if k > 0 and kept[k - 1].hunk else 0
            next_lead = _context(nxt.hunk)[0] if nxt is not None and nxt.hunk else 0
            if inside:
                head, tail = inside[0][0] - lo[0], hi[0] - inside[-1][1]
                if k > 0 and (head < context or prev_trail + head <= 2 * context):
                    demote.add(k - 1)
                if nxt is not None and (tail < context or tail + next_lead <= 2 * context):
                    demote.add(k)
                pieces += _fresh_hunks(base, cur, inside, lo, hi, context, sections, style)
            elif k > 0 and nxt is not None and prev_trail + (hi[0] - lo[0]) + next_lead <= 2 * context:
                demote.update((k - 1, k))  # the tool would have made one hunk of the two
            if nxt is not None:
                pieces.append(nxt)
                lo = (nxt.b1, nxt.c1)
        if not demote:
            return pieces
        kept = [p for i, p in enumerate(kept) if i not in demote]


def _render_hunk(p: _Piece) -> bytes:
    old_len, new_len = p.b1 - p.b0, p.c1 - p.c0
    old_start, new_start = _start(p.b0, old_len), _start(p.c0, new_len)
    if p.hunk is not None:
        h = p.hunk
        if (h.old_start, h.old_len, h.new_start, h.new_len) == (old_start, old_len, new_start, new_len):
            return h.raw
        return hunk_header(old_start, old_len, new_start, new_len, h.section) + b"".join(h.body)
    assert p.lines is not None
    return hunk_header(old_start, old_len, new_start, new_len, p.section) + b"".join(p.lines)


def _lines(data: bytes | None) -> list[bytes]:
    return split_lines(data) if data else []


def _similarity(a: bytes | None, b: bytes | None) -> int:
    if a == b:
        return 100
    ratio = difflib.SequenceMatcher(None, _lines(a), _lines(b), autojunk=False).ratio()
    return int(ratio * 100)


def _kind(sec: FileSection) -> tuple:
    modes = sec.old_mode is not None and sec.new_mode is not None and sec.old_mode != sec.new_mode
    return (sec.old_path is None, sec.new_path is None, sec.rename, modes)


def _change_kind(ch: FileChange) -> tuple:
    rename = ch.old_path is not None and ch.old_path != ch.path and ch.base is not None and ch.cur is not None
    modes = ch.base is not None and ch.cur is not None and ch.old_mode != ch.new_mode
    return (ch.base is None, ch.cur is None, rename, modes)


_C_ESCAPES = {0x07: b"\\a", 0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0B: b"\\v", 0x0C: b"\\f",
              0x0D: b"\\r", 0x22: b'\\"', 0x5C: b"\\\\"}


def git_quote(name: bytes) -> bytes:
    """A name as git writes it with core.quotePath at its default: C-quoted in double quotes when it
    holds a control character, ``"``, ``\\`` or a byte outside ASCII, else as it is."""
    if not any(c < 0x20 or c in (0x22, 0x5C) or c >= 0x7F for c in name):
        return name
    out = bytearray(b'"')
    for c in name:
        if c in _C_ESCAPES:
            out += _C_ESCAPES[c]
        elif c < 0x20 or c >= 0x7F:
            out += b"\\%03o" % c
        else:
            out.append(c)
    return bytes(out + b'"')


def _file_line(mark: bytes, prefix: str, path: str | None) -> bytes:
    """git's ``---``/``+++`` line: the quoted name, and a TAB after a name with a space in it (GNU
    patch reads an unquoted name up to the first blank unless a TAB follows later on the line)."""
    if path is None:
        return mark + b" /dev/null\n"
    raw = (prefix + path).encode("utf-8", "surrogateescape")
    return mark + b" " + git_quote(raw) + (b"\t" if b" " in raw else b"") + b"\n"


def _git_header(ch: FileChange, prefixes: tuple[str, str]) -> list[bytes]:
    a, b = prefixes
    src, dst = ch.source_path, ch.path

    def q(name: str) -> str:
        return git_quote(name.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")

    out = [f"diff --git {q(a + src)} {q(b + dst)}\n"]
    if ch.base is None:
        out.append(f"new file mode {ch.new_mode}\n")
    elif ch.cur is None:
        out.append(f"deleted file mode {ch.old_mode}\n")
    else:
        if ch.old_mode != ch.new_mode:
            out += [f"old mode {ch.old_mode}\n", f"new mode {ch.new_mode}\n"]
        if src != dst:
            out += [f"similarity index {_similarity(ch.base, ch.cur)}%\n", f"rename from {q(src)}\n",
                    f"rename to {q(dst)}\n"]
        if ch.base != ch.cur and _is_link(ch.old_mode) and _is_link(ch.new_mode):
            # a symlink's new target: without the mode GNU patch takes the section for a regular file's
            out.append(f"index {blob_id(ch.base)[:7]}..{blob_id(ch.cur)[:7]} {ch.new_mode}\n")
    lines = [line.encode("utf-8", "surrogateescape") for line in out]
    if ch.base != ch.cur:
        lines.append(_file_line(b"---", a, None if ch.base is None else src))
        lines.append(_file_line(b"+++", b, None if ch.cur is None else dst))
    return lines


def _refresh_header(old: FileSection, ch: FileChange) -> list[bytes]:
    """The old section's header lines, with a git ``index`` line updated to the new blob ids."""
    out: list[bytes] = []
    for line in old.header:
        m = re.match(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$", line, re.S)
        if m:
            width = len(m.group(1))
            old_id = (blob_id(ch.base) if ch.base is not None else "0" * 40)[:width].encode()
            new_id = (blob_id(ch.cur) if ch.cur is not None else "0" * 40)[:width].encode()
            if (old_id, new_id) != (m.group(1), m.group(2)[:width]):
                line = b"index " + old_id + b".." + new_id + m.group(3)
        out.append(line)
    return out


def _prefixes(old: PatchText | None, strip: int) -> tuple[str, str]:
    """The a/ b/ path prefixes new sections get: "a/" "b/" for -p1, else copied from an old section."""
    if strip == 0:
        return "", ""
    if strip == 1:
        return "a/", "b/"
    for sec in (old.sections if old else []):
        for line in sec.header:
            if line.startswith((b"--- ", b"+++ ")):
                text = line[4:].decode("utf-8", "surrogateescape").split("\t")[0].strip()
                if text != "/dev/null":
                    parts = text.split("/")
                    prefix = "/".join(parts[:strip]) + "/"
                    return prefix, prefix
    raise PatchFormatError(f"cannot invent path prefixes for a new file in a patch with strip level {strip}")


def _style(old: PatchText | None) -> tuple[str, str]:
    """(diff engine, ``@@`` context style) the patch was written with: git for git-style patches and
    new ones; GNU diff for quilt/GNU ones, with ``-p`` function context only if the patch has any."""
    if old is None or not old.sections or any(sec.header[:1] and sec.header[0].startswith(b"diff --git ")
                                              for sec in old.sections):
        return GIT, GIT
    named = any(h.section.strip() for sec in old.sections for h in sec.hunks)
    return GNU, GNU if named else "none"


def regenerate(
    old: PatchText | None,
    changes: list[FileChange],
    *,
    strip: int = 1,
    header: bytes = b"",
    context: int = CONTEXT,
    source: str = "<patch>",
) -> bytes:
    """The patch text that turns every ``base`` into ``cur``, reusing ``old``'s bytes wherever possible.

    Sections keep the old patch's order; files new to the patch follow in path order. Files whose
    ``cur`` equals ``base`` (same mode, no rename) drop out of the patch. A ``GIT binary patch``
    payload in ``old`` is refused (PatchApplyError naming ``source``, its line and file): nothing
    applies it, so the workspace never holds its result and a refresh would drop it.
    """
    _refuse_binary_payloads(old, source)
    by_path = {ch.path: ch for ch in changes}
    prefixes = _prefixes(old, strip)
    matched: list[tuple[FileSection | None, FileChange]] = []
    used: set[str] = set()
    for sec in old.sections if old else []:
        key = sec.path()
        ch = by_path.get(key)
        if ch is None or key in used:
            continue
        used.add(key)
        matched.append((sec, ch))
    matched += [(None, by_path[p]) for p in sorted(by_path) if p not in used]

    # (garbage lines kept before the section, old section, change)
    ordered: list[tuple[list[bytes], FileSection | None, FileChange]] = []
    for sec, ch in matched:
        if _type_change(ch):
            ordered += _split_type_change(old, sec, ch)
        elif not ch.is_noop():
            ordered.append((sec.lead if sec is not None else [], sec, ch))
    for _lead, _sec, ch in ordered:
        if (ch.base is not None and b"\0" in ch.base) or (ch.cur is not None and b"\0" in ch.cur):
            raise PatchFormatError(f"{ch.path}: binary files cannot go into a text patch")
    engine, names = _style(old)
    scripts = edit_scripts([(ch.base or b"", ch.cur or b"") for _lead, _sec, ch in ordered], engine, context)
    out = [old.header if old else header]
    for (lead, sec, ch), blocks in zip(ordered, scripts, strict=True):
        keep_header = (sec is not None and _kind(sec) == _change_kind(ch) and (ch.base != ch.cur) == bool(sec.hunks)
                       and _types_hold(sec, ch) and _new_mode_holds(sec, ch))
        head = _refresh_header(sec, ch) if keep_header and sec is not None else _git_header(ch, prefixes)
        out += lead + head  # the garbage lines before a section stay with it
        if ch.base != ch.cur:
            pieces = _file_hunks(sec if keep_header else None, _lines(ch.base), _lines(ch.prev), _lines(ch.cur),
                                 context, blocks, names)
            out += [_render_hunk(p) for p in pieces]
    out.append(old.trailer if old else b"")
    return b"".join(out)


def _is_link(mode: str | None) -> bool:
    return mode == SYMLINK


def _type_change(ch: FileChange) -> bool:
    """A regular file that became a symlink or the reverse (GNU patch: "can't change file type")."""
    return ch.base is not None and ch.cur is not None and _is_link(ch.old_mode) != _is_link(ch.new_mode)


def _split_type_change(old: PatchText | None, sec: FileSection | None,
                       ch: FileChange) -> list[tuple[list[bytes], FileSection | None, FileChange]]:
    """What git writes for a change of file type, the only form GNU patch and quilt apply: the old
    file's deletion, then the new one's creation (each keeps an old section of its own kind)."""
    gone = ch._replace(path=ch.source_path, old_path=None, cur=None, prev=None, new_mode=None)
    made = ch._replace(old_path=None, base=None, old_mode=None)
    sections = old.sections if old else []
    s_gone = next((s for s in sections if s.new_path is None and s.old_path == gone.path), None)
    s_made = next((s for s in sections if s.old_path is None and s.new_path == made.path), None)
    lead = sec.lead if sec is not None else []
    return [(lead, s_gone, gone), (s_made.lead if s_made is not None and s_made is not sec else [], s_made, made)]


def _new_mode_holds(sec: FileSection, ch: FileChange) -> bool:
    """Does the old header give the file the mode it has in work/ (a new file made executable after
    the first refresh kept ``new file mode 100644``, and the self-check refused)?"""
    if ch.cur is None:
        return True
    if sec.new_mode is not None:
        return sec.new_mode == ch.new_mode
    return ch.base is not None or ch.new_mode == "100644"  # a plain section creates a file 0644


def _types_hold(sec: FileSection, ch: FileChange) -> bool:
    """Does the old header tell GNU patch a symlink is one (a mode line or git's ``index`` line with
    120000) on each side the file exists, and a regular file is not?"""
    return ((ch.base is None or _is_link(sec.old_mode) == _is_link(ch.old_mode))
            and (ch.cur is None or _is_link(sec.new_mode) == _is_link(ch.new_mode)))


def _refuse_binary_payloads(old: PatchText | None, source: str) -> None:
    """``push -f`` takes a patch with a GIT binary section in (its file goes to a .rej); regenerating it
    from the workspace emptied the section out of the patch for good (a patch of one binary file became
    an empty file)."""
    if old is None:
        return
    line = 1 + old.header.count(b"\n")
    for sec in old.sections:
        line += len(sec.lead)
        for offset, text in enumerate(sec.header):
            if text.startswith(b"GIT binary patch"):
                raise PatchApplyError(
                    f"{source}:{line + offset}: {sec.path()}: a GIT binary patch, which materialize neither applies "
                    "nor writes: regenerating the patch would drop it; nothing was written. Move it out of the "
                    "patch by hand (or leave the patch as it is and pop)"
                )
        line += sec.raw.count(b"\n") - len(sec.lead)


def diff_files(changes: list[FileChange], *, strip: int = 1, context: int = CONTEXT) -> bytes:
    """A fresh patch (no old bytes to keep): what ``materialize diff`` shows and new patches start from."""
    return regenerate(None, changes, strip=strip, context=context)
