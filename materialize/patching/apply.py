"""Apply one FilePatch to file bytes with GNU patch 2.7 semantics, byte for byte.

This is a deliberate transliteration of GNU patch's ``locate_hunk``/``patch_match``/``apply_hunk``/
``copy_till`` (patch.c), including its quirks: offsets carry over from hunk to hunk, fuzz trims
context asymmetrically for hunks that GNU believes sit at the start or end of a file, a hunk that lands
before the last line an earlier hunk consumed fails ("misordered hunks"), and missing final newlines are
handled exactly as GNU does. Behaviour is pinned by a differential test against ``/usr/bin/patch``.
"""

from __future__ import annotations

import io
from itertools import accumulate, chain, compress, islice, repeat
from operator import add, ge, itemgetter, sub

from materialize.errors import PatchApplyError
from materialize.patching.model import FilePatch, FileResult, Hunk, HunkResult, HunkStatus, split_lines
from materialize.patching.reject import format_reject

_TAIL = itemgetter(slice(1, None))  # a body line without its kind character: the line of the file
_OLD_SIDE = bytes.maketrans(b" -+", b"\x01\x01\x00")  # kinds -> selectors for itertools.compress
_NEW_SIDE = bytes.maketrans(b" -+", b"\x01\x00\x01")
_PLUS = bytes.maketrans(b" -+", b"\x00\x00\x01")
_BODY = itemgetter(5)  # Hunk.body, Hunk.kinds, Hunk.unterminated: C-level field access for map()
_KINDS = itemgetter(6)
_UNTERMINATED = itemgetter(8)
_CONTEXT_COUNTS = itemgetter(10)  # Hunk.context_counts
_SOURCE_START = itemgetter(0)
_new_tuple = tuple.__new__
_DIRECT_OFFSETS = 64  # offsets the hunk search tries one by one before it asks the line index
_BULK_CHUNK = 4096  # hunks the bulk applier checks and writes at once
_JOIN_SLICE = 16384  # output lines joined at once (see _Applier.finish)


class _Prepared:
    """A hunk in GNU's internal shape: pattern/replacement lines with their kinds and contexts."""

    __slots__ = ("first", "old", "old_kinds", "new", "new_kinds", "prefix_context", "suffix_context", "terminated")

    def __init__(self, hunk: Hunk, strip_cr: bool) -> None:
        """Split a hunk into GNU's pattern (old) and replacement (new) sides with bytes operations."""
        body, kinds = hunk.body_lines, hunk.kinds
        if strip_cr:
            body = tuple(_strip_cr(text) for text in body)
        self.old = tuple(map(_TAIL, compress(body, kinds.translate(_OLD_SIDE))))
        self.new = tuple(map(_TAIL, compress(body, kinds.translate(_NEW_SIDE))))
        self.old_kinds = kinds.translate(None, b"+")  # bytes: compare with ord("-") / ord("+")
        self.new_kinds = kinds.translate(None, b"-")
        count = len(kinds)
        prefix = count - len(kinds.lstrip(b" "))
        self.prefix_context = prefix
        self.suffix_context = count - len(kinds.rstrip(b" ")) if prefix < count else 0
        if hunk.context_counts is not None:  # a context hunk GNU counts otherwise (see Hunk)
            self.prefix_context, self.suffix_context = hunk.context_counts
        # Every line ends in a newline (no "\\ No newline" marker): only a side's last line can lack one.
        self.terminated = all(side[-1].endswith(b"\n") for side in (self.old, self.new) if side)
        self.first = hunk.source_start + (1 if not self.old else 0)

    @property
    def context(self) -> int:
        return max(self.prefix_context, self.suffix_context)


def _strip_cr(text: bytes) -> bytes:
    """GNU's CRLF-mangled section: one trailing CR goes from every hunk line."""
    if text.endswith(b"\r\n"):
        return text[:-2] + b"\n"
    return text[:-1] if text.endswith(b"\r") else text


class _Misordered(Exception):
    """GNU's "misordered hunks! output would be garbled": the hunk fails, nothing is written."""


class _GnuAbort(Exception):
    """GNU's ``assert (outstate->after_newline)`` in apply_hunk fails: patch aborts, nothing changes.

    It happens when a hunk removes lines after the output already ended in a line without newline
    (only possible for hunks located before an earlier one). GNU dies with SIGABRT and leaves the
    file untouched; we report the whole file as failed with its content unchanged.
    """


class _Sides:
    """Every hunk's old side and added lines of one file, split off in C-level passes.

    ``exact_in_place`` compares and copies slices of these instead of splitting each hunk on its
    own; ``old_at``/``plus_at`` index the current hunk and advance after every hunk, applied or not.
    """

    __slots__ = ("old", "plus", "old_at", "plus_at")

    def __init__(self, hunks: tuple[Hunk, ...]) -> None:
        kinds = b"".join(map(_KINDS, hunks))
        lines = split_lines(b"".join(map(_BODY, hunks)))  # every body line ends in "\n": one per kind
        self.old = list(map(_TAIL, compress(lines, kinds.translate(_OLD_SIDE))))
        self.plus = list(map(_TAIL, compress(lines, kinds.translate(_PLUS))))
        self.old_at = self.plus_at = 0


class _Applier:
    """Mutable state of one GNU patch run over one file."""

    def __init__(self, data: bytes) -> None:
        self.input = split_lines(data)  # the last line may lack "\n", as in GNU's inp.c
        self.out: list[bytes] = []
        self.after_newline = True
        self.zero_output = True
        self.last_frozen = 0
        self.in_offset = 0
        self.out_offset = 0
        self._index: dict[bytes, list[int]] | None = None  # input line -> its 1-based line numbers

    def _lines_equal_to(self, text: bytes) -> list[int]:
        """The 1-based numbers of the input lines equal to ``text`` (the index is built on first use)."""
        if self._index is None:
            index: dict[bytes, list[int]] = {}
            for number, line in enumerate(self.input, 1):
                index.setdefault(line, []).append(number)
            self._index = index
        return self._index.get(text, [])

    # -- matching --------------------------------------------------------------------------------

    def _fetch(self, line: int) -> bytes:
        return self.input[line - 1] if 0 < line <= len(self.input) else b""

    def _match(self, h: _Prepared, base: int, prefix_fuzz: int, suffix_fuzz: int) -> bool:
        """GNU ``patch_match``: compare pattern lines minus the fuzzed ends at ``base``."""
        start = base + prefix_fuzz
        count = len(h.old) - suffix_fuzz - prefix_fuzz
        if count <= 0:
            return True
        if start >= 1 and start + count - 1 <= len(self.input):
            if self.input[start - 1] != h.old[prefix_fuzz]:
                return False  # cheap reject: most candidate positions fail on the first line
            return self.input[start - 1 : start - 1 + count] == list(h.old[prefix_fuzz : prefix_fuzz + count])
        return all(self._fetch(start + i) == h.old[prefix_fuzz + i] for i in range(count))

    def locate(self, h: _Prepared, fuzz: int) -> int:
        """GNU ``locate_hunk``: the 1-based line where the pattern matches, or 0."""
        first_guess = h.first + self.in_offset
        pat_lines = len(h.old)
        input_lines = len(self.input)
        prefix_fuzz = fuzz + h.prefix_context - h.context
        suffix_fuzz = fuzz + h.suffix_context - h.context
        max_where = input_lines - (pat_lines - suffix_fuzz) + 1
        # Debian's 2.7.6-7 carries the upstream fix that stopped subtracting the fuzzed prefix here
        # (2.7.3 had ``last_frozen + 1 - (prefix_context - prefix_fuzz)``); /usr/bin/patch is the oracle.
        min_where = self.last_frozen + 1
        max_pos_offset = max_where - first_guess
        max_neg_offset = first_guess - min_where
        max_offset = max(max_pos_offset, max_neg_offset)

        if not pat_lines:
            return first_guess
        if first_guess <= max_neg_offset:
            max_neg_offset = first_guess - 1

        if prefix_fuzz < 0 and h.first <= 1:
            return self._locate_at_start(h, first_guess, max_pos_offset, suffix_fuzz)
        prefix_fuzz = max(prefix_fuzz, 0)

        if suffix_fuzz < 0:
            offset = first_guess - (input_lines - pat_lines + 1)
            if offset <= max_neg_offset and self._match(h, first_guess - offset, prefix_fuzz, 0):
                self.in_offset -= offset
                return first_guess - offset
            return 0

        if max_pos_offset < 0:
            min_offset = first_guess - max_where
        elif max_neg_offset < 0:
            min_offset = first_guess - min_where
        else:
            min_offset = 0
        near = min(max_offset, min_offset + _DIRECT_OFFSETS - 1)
        for offset in range(min_offset, near + 1):
            if offset <= max_pos_offset and self._match(h, first_guess + offset, prefix_fuzz, suffix_fuzz):
                self.in_offset += offset
                return first_guess + offset
            if offset <= max_neg_offset and self._match(h, first_guess - offset, prefix_fuzz, suffix_fuzz):
                self.in_offset -= offset
                return first_guess - offset
        if near >= max_offset or len(h.old) - suffix_fuzz - prefix_fuzz <= 0:
            return 0
        # Farther out, only a place whose first compared line is equal can match (every place the loop
        # above would try is inside the file there: see max_where/min_where): the candidates come from
        # an index of the input's lines and are tried in the loop's order (nearest first, + before -),
        # so a hunk that matches nowhere costs its candidates, not the file's length. A 2000-hunk patch
        # that fails on a 200k-line file took minutes; GNU patch takes seconds.
        candidates = []
        for number in self._lines_equal_to(h.old[prefix_fuzz]):
            base = number - prefix_fuzz
            forward, backward = base - first_guess, first_guess - base
            if near < forward <= max_pos_offset:
                candidates.append((forward, 0, base))
            if near < backward <= max_neg_offset:
                candidates.append((backward, 1, base))
        for offset, backwards, base in sorted(candidates):
            if self._match(h, base, prefix_fuzz, suffix_fuzz):
                self.in_offset += -offset if backwards else offset
                return base
        return 0

    def _locate_at_start(self, h: _Prepared, first_guess: int, max_pos_offset: int, suffix_fuzz: int) -> int:
        """A hunk with less leading than trailing context can only match at the top of the file."""
        if suffix_fuzz < 0 and (len(h.old) != len(self.input) or h.prefix_context < self.last_frozen):
            return 0
        offset = 1 - first_guess
        if (
            self.last_frozen <= h.prefix_context
            and offset <= max_pos_offset
            and self._match(h, first_guess + offset, 0, suffix_fuzz)
        ):
            self.in_offset += offset
            return first_guess + offset
        return 0

    # -- output ----------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        self.out.append(data)
        self.after_newline = data.endswith(b"\n")
        self.zero_output = False

    def copy_till(self, lastline: int) -> None:
        """Copy input lines up to ``lastline``, adding a newline GNU-style after an incomplete one.

        Copies a run of lines as one slice: inside the input only the very last line can lack its
        newline, so only the first copied line needs GNU's check.
        """
        if self.last_frozen > lastline:
            raise _Misordered
        if self.last_frozen < lastline:
            end = min(lastline, len(self.input))
            if end > self.last_frozen:
                if not self.after_newline:
                    self.out.append(b"\n")
                chunk = self.input[self.last_frozen : end]
                self.out.extend(chunk)
                self.after_newline = chunk[-1].endswith(b"\n")
                self.zero_output = False
            self.last_frozen = lastline

    def apply_exact(self, h: _Prepared, where: int) -> None:
        """``apply`` for a hunk matched with fuzz 0 whose lines all end in a newline, in slices.

        Same output and state as ``apply``: the matched context equals the input, so writing the
        new side up to its last change is what GNU's line-by-line loop writes; the trailing context
        stays unconsumed (``last_frozen`` stops at the last change, as in GNU). The input is copied up
        to the first change, not to the hunk's first line, as GNU's loop copies it: the leading context
        may be lines an earlier hunk already consumed (its change reached into this hunk's context),
        and GNU applies that; copying to the first line called it misordered.
        """
        prefix = h.prefix_context
        self.copy_till(where - 1 + prefix)
        if not self.after_newline:  # the input ended without a newline: GNU's careful path
            self.apply(h, where)
            return
        keep = len(h.new) - h.suffix_context
        if keep > prefix:
            self.out.extend(h.new[prefix:keep])
            self.after_newline = True
            self.zero_output = False
        self.last_frozen = where - 1 + len(h.old) - h.suffix_context
        self.out_offset += len(h.new) - len(h.old)

    def exact_in_place(self, hunk: Hunk, plus: int, sides: _Sides, refuse_top: bool) -> HunkResult | None:
        """GNU's first try for the common hunk, done with list slices; None: take the full path.

        The common hunk has as much context before its changes as after them and no missing newline.
        For it, GNU's ``locate_hunk`` at fuzz 0 first compares the pattern at the guessed line (the
        header's line plus the offset so far), provided that line lies between the last line an
        earlier hunk consumed and the last place the pattern fits; when that matches, ``apply_hunk``
        copies the input up to the changes, writes the new side's changed part and consumes up to
        the trailing context. That one case is done here with slices of ``sides`` (no ``_Prepared``,
        no per-line Python); every other case (an offset search, fuzz, a missing newline, a hunk GNU
        refuses at the top of a new file) returns None and goes through ``locate``/``apply`` unchanged.
        """
        if not self.after_newline or hunk.unterminated or hunk.context_counts is not None:
            return None  # a missing newline, or context GNU counts its own way: GNU's careful path
        kinds = hunk.kinds
        count = len(kinds)
        prefix = count - len(kinds.lstrip(b" "))
        if not prefix or count - len(kinds.rstrip(b" ")) != prefix:
            return None
        inp = self.input
        where = hunk.source_start + self.in_offset
        n_old = count - plus
        if where <= self.last_frozen or where > len(inp) - n_old + 1 or (where == 1 and refuse_top):
            return None
        at = sides.old_at
        if inp[where - 1 : where - 1 + n_old] != sides.old[at : at + n_old]:
            return None
        stop = where - 1 + prefix  # the leading context is the input's own lines: copy them from there
        out = self.out
        out.extend(inp[self.last_frozen : stop])
        end = count - prefix
        changes = kinds[prefix:end]
        if 32 in changes:  # context between two changes: the middle's own lines
            out.extend(map(_TAIL, compress(split_lines(hunk.body)[prefix:end], changes.translate(_NEW_SIDE))))
        elif plus:
            at = sides.plus_at
            out.extend(sides.plus[at : at + plus])
        self.zero_output = False
        self.last_frozen = where - 1 + n_old - prefix
        self.out_offset += plus + plus + kinds.count(32) - count  # added minus removed lines
        offset = self.in_offset
        return _new_tuple(HunkResult, (hunk, "offset" if offset else "clean", offset, 0, where))

    def apply(self, h: _Prepared, where: int) -> None:
        """GNU ``apply_hunk`` for unified hunks (no ``!`` lines, no ``#ifdef`` output)."""
        # Only the first copy_till can raise _Misordered, so a failing hunk writes nothing.
        old = new = 0
        n_old, n_new = len(h.old), len(h.new)
        while old < n_old:
            if h.old_kinds[old] == 45:  # "-"
                if not self.after_newline:
                    raise _GnuAbort
                self.copy_till(where + old - 1)
                self.last_frozen += 1
                old += 1
            elif new >= n_new:
                break
            elif h.new_kinds[new] == 43:  # "+"
                self.copy_till(where + old - 1)
                self._write(h.new[new])
                new += 1
            else:
                old += 1
                new += 1
        if new < n_new and h.new_kinds[new] == 43:
            self.copy_till(where + old - 1)
            while new < n_new and h.new_kinds[new] == 43:
                if not self.after_newline:
                    self.out.append(b"\n")
                self._write(h.new[new])
                new += 1
        self.out_offset += n_new - n_old

    def finish(self) -> bytes:
        """GNU ``spew_output``: copy the rest of the input.

        Joined in slices: ``bytes.join`` holds an 80-byte buffer view per piece while it copies,
        80 MiB for a file of a million lines, against ~1 MiB a slice of 16k lines at a time.
        """
        if self.last_frozen < len(self.input):
            self.copy_till(len(self.input))
        out = self.out
        if len(out) <= _JOIN_SLICE:
            return b"".join(out)
        return b"".join([b"".join(out[k : k + _JOIN_SLICE]) for k in range(0, len(out), _JOIN_SLICE)])


def _apply_in_bulk(data: bytes, hunks: tuple[Hunk, ...], refuse_top: bool) -> tuple[bytes, list[HunkResult]] | None:
    """GNU's output and results for a file whose hunks are all the common kind and all match where they say.

    The common hunk (see ``exact_in_place``) with one block of changes, for every hunk of the file,
    each matching at the line its header names (so GNU's offset stays 0 and no hunk is searched
    for): then GNU's run is fixed, and it is checked and written here in C-level passes over
    per-hunk columns (``map``, ``chain``), with no Python code per hunk. Returns None when any hunk
    is not such; the caller then runs GNU's loop hunk by hunk on a fresh ``_Applier``.
    Everything goes ``_BULK_CHUNK`` hunks at a time: their bodies are split into lines, the file's
    lines they reach are read from a stream (``_LineWindow``) and dropped once behind, and their
    output is joined, so a file of a million lines and 100k hunks is never held as a million line
    objects (the peak memory of a large patch was the file's lines, not the patch).
    """
    kinds = list(map(_KINDS, hunks))
    # A hunk's shape follows from its kinds string alone, and a large patch repeats few of them:
    # each distinct one is looked at once, and every hunk's numbers are dictionary look-ups.
    shapes = {k: _common_shape(k) for k in set(kinds)}
    if None in shapes.values():
        return None  # no context, uneven context, or context between two changes
    if any(map(_UNTERMINATED, hunks)) or any(map(_CONTEXT_COUNTS, hunks)):
        return None  # a missing newline, context GNU counts its own way
    prefix_of, old_of, plus_of = ({k: v[i] for k, v in shapes.items() if v} for i in range(3))
    first = hunks[0].source_start - 1  # GNU's where - 1
    if first < 0 or (refuse_top and first == 0):
        return None
    line_count = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    window = _LineWindow(data)
    # Written to a BytesIO, whose getvalue() hands over its own buffer (trimmed in place), rather
    # than joined from pieces at the end: the output is not held twice at the peak.
    output = io.BytesIO()
    results: list[HunkResult] = []
    frozen_before = 0  # GNU's last_frozen after the previous chunk's last hunk
    out_offset = 0
    for a in range(0, len(hunks), _BULK_CHUNK):
        b = a + _BULK_CHUNK
        chunk, chunk_kinds = hunks[a:b], kinds[a:b]
        prefix = list(map(prefix_of.__getitem__, chunk_kinds))
        n_old = list(map(old_of.__getitem__, chunk_kinds))
        plus = list(map(plus_of.__getitem__, chunk_kinds))
        starts = list(map(sub, map(_SOURCE_START, chunk), repeat(1)))
        ends = list(map(add, starts, n_old))
        frozen = list(map(sub, ends, prefix))  # GNU's last_frozen after each hunk (suffix = prefix)
        copy_from = [frozen_before, *frozen[:-1]]  # each hunk copies the input from where the previous stopped
        last = max(ends)  # a hunk may reach less far than the one before it (into its trailing context)
        if not all(map(ge, starts, copy_from)) or last > line_count:  # after what the previous consumed
            return None
        lines = split_lines(b"".join(map(_BODY, chunk)))  # every body line ends in "\n": one per kind
        joined_kinds = b"".join(chunk_kinds)
        old = list(map(_TAIL, compress(lines, joined_kinds.translate(_OLD_SIDE))))
        inp, base = window.lines_until(last, keep_from=frozen_before)
        rel_starts = list(map(sub, starts, repeat(base)))
        if list(chain.from_iterable(map(inp.__getitem__, map(slice, rel_starts, map(sub, ends, repeat(base)))))) != old:
            return None
        added_lines = list(map(_TAIL, compress(lines, joined_kinds.translate(_PLUS))))
        del lines, old
        plus_ends = list(accumulate(plus, initial=0))
        copied = map(inp.__getitem__, map(slice, map(sub, copy_from, repeat(base)), map(add, rel_starts, prefix)))
        added = map(added_lines.__getitem__, map(slice, plus_ends, islice(plus_ends, 1, None)))
        output.write(b"".join(chain.from_iterable(chain.from_iterable(zip(copied, added, strict=True)))))
        frozen_before = frozen[-1]
        out_offset += plus_ends[-1] - (sum(n_old) - 2 * sum(prefix))  # added minus removed lines
        wheres = map(_SOURCE_START, chunk)  # each applied at its header's line: that line's own int object
        results.extend(map(_new_tuple, repeat(HunkResult), zip(chunk, repeat("clean"), repeat(0), repeat(0), wheres)))
    # GNU's spew_output: the rest of the input after the last hunk's frozen line, as it stands.
    output.write(window.rest_from(frozen_before))
    return output.getvalue(), results


class _LineWindow:
    """The lines of a file read forward from a stream, only those not yet behind the caller kept.

    ``io.BytesIO.readlines`` splits on ``\\n`` alone, keeping terminators and an unterminated last
    line, as ``split_lines`` does, in C and a bounded batch at a time.
    """

    __slots__ = ("stream", "lines", "base")
    _BATCH = 1 << 18  # bytes of lines read at once

    def __init__(self, data: bytes) -> None:
        self.stream = io.BytesIO(data)
        self.lines: list[bytes] = []
        self.base = 0  # 0-based number of lines[0] in the file

    def lines_until(self, end: int, *, keep_from: int) -> tuple[list[bytes], int]:
        """The kept lines (from ``keep_from`` on) and the number of the first, reaching line ``end``."""
        if keep_from > self.base:
            del self.lines[: keep_from - self.base]
            self.base = keep_from
        while self.base + len(self.lines) < end:
            batch = self.stream.readlines(self._BATCH)
            if not batch:
                break
            self.lines.extend(batch)
        return self.lines, self.base

    def rest_from(self, line: int) -> bytes:
        """The file's bytes from ``line`` (at or after the kept lines' first) to its end."""
        return b"".join(self.lines[line - self.base :]) + self.stream.read()


def _common_shape(kinds: bytes) -> tuple[int, int, int] | None:
    """(context lines on each side, old lines, added lines) of a hunk whose changes are one block
    with as much context before as after; None for any other hunk."""
    count = len(kinds)
    prefix = count - len(kinds.lstrip(b" "))
    if not prefix or count - len(kinds.rstrip(b" ")) != prefix or kinds.count(b" ") != 2 * prefix:
        return None
    plus = kinds.count(b"+")
    return prefix, count - plus, plus


def _status(fuzz: int, offset: int) -> HunkStatus:
    """GNU's wording: fuzz wins over offset; both numbers are kept in the result."""
    if fuzz:
        return "fuzz"
    return "offset" if offset else "clean"


def creatable(fp: FilePatch) -> bool:
    """GNU creates a missing file when the patch says the old side is missing or empty (a first hunk
    from line 0, or git's index line naming the empty blob)."""
    if fp.is_new or fp.may_be_missing or not fp.hunks or fp.normal:
        return fp.is_new or fp.may_be_missing
    return fp.says_missing[0] if fp.says_missing is not None else fp.hunks[0].source_start == 0


def apply_file(original: bytes | None, fp: FilePatch, *, max_fuzz: int = 0) -> FileResult:
    """Apply ``fp`` to ``original`` (None: the file does not exist) like ``patch -F max_fuzz``.

    Pure: no I/O. Failed hunks are skipped (later hunks are still tried, as GNU does) and collected
    into a GNU-style unified reject text.
    """
    if fp.is_binary:
        raise PatchApplyError(f"{fp.path}: binary patches are not supported")
    if original is None and not (creatable(fp) or fp.is_delete):  # GNU deletes a missing file "anyway"
        failed = tuple(HunkResult(h, "failed", 0, 0, None) for h in fp.hunks)
        reject = format_reject(fp, [(h, 0) for h in fp.hunks]) if fp.hunks else None
        return FileResult(None, failed, reject, error=f"{fp.old_path}: file to patch does not exist")

    refuse_top = bool(fp.is_new and original)
    if fp.hunks and not fp.strip_trailing_cr:
        in_bulk = _apply_in_bulk(original or b"", fp.hunks, refuse_top)
        if in_bulk is not None:  # every hunk clean where it says: nothing written is ever empty
            return _file_result(fp, original, in_bulk[0], False, tuple(in_bulk[1]), [])
    state = _Applier(original or b"")
    results: list[HunkResult] = []
    rejected: list[tuple[Hunk, int]] = []
    sides = None if fp.strip_trailing_cr or not fp.hunks else _Sides(fp.hunks)
    try:
        for hunk in fp.hunks:
            result = None
            if sides is not None:
                plus = hunk.kinds.count(43)
                result = state.exact_in_place(hunk, plus, sides, refuse_top)
                sides.old_at += len(hunk.kinds) - plus
                sides.plus_at += plus
            if result is None:
                result = _apply_hunk(state, hunk, fp, original, max_fuzz)
            if result.status == "failed":
                rejected.append((hunk, state.out_offset))
            results.append(result)
    except _GnuAbort:
        return _aborted(fp, original, len(results) + 1)
    output = state.finish()
    return _file_result(fp, original, output, state.zero_output, tuple(results), rejected)


def _aborted(fp: FilePatch, original: bytes | None, hunk_number: int) -> FileResult:
    """The whole file fails and stays unchanged, as when GNU patch aborts mid-file."""
    failed = tuple(HunkResult(h, "failed", 0, 0, None) for h in fp.hunks)
    reject = format_reject(fp, [(h, 0) for h in fp.hunks])
    message = (
        f"{fp.path}: hunk #{hunk_number} removes lines after output that ends without a newline "
        "(GNU patch aborts here); nothing applied"
    )
    return FileResult(original, failed, reject, error=message)


def _apply_hunk(
    state: _Applier, hunk: Hunk, fp: FilePatch, original: bytes | None, max_fuzz: int
) -> HunkResult:
    """Locate (with increasing fuzz) and apply one hunk, exactly like GNU's main loop."""
    h = _Prepared(hunk, fp.strip_trailing_cr)
    my_max_fuzz = min(max_fuzz, h.context)
    fuzz = 0
    where = state.locate(h, fuzz)
    while not where and fuzz < my_max_fuzz:
        fuzz += 1
        where = state.locate(h, fuzz)
    if not where or (where == 1 and fp.is_new and original):
        return HunkResult(hunk, "failed", 0, 0, None)
    offset = state.in_offset
    try:
        if fuzz == 0 and h.terminated and state.after_newline and hunk.context_counts is None:
            state.apply_exact(h, where)
        else:
            state.apply(h, where)
    except _Misordered:
        return HunkResult(hunk, "failed", 0, 0, None)
    return HunkResult(hunk, _status(fuzz, offset), offset, fuzz, where)


def _file_result(
    fp: FilePatch,
    original: bytes | None,
    output: bytes,
    zero_output: bool,
    results: tuple[HunkResult, ...],
    rejected: list[tuple[Hunk, int]],
) -> FileResult:
    """Decide the final content like GNU: deletions need an empty result; all-failed leaves the file."""
    reject = format_reject(fp, rejected) if rejected else None
    content = original if results and len(rejected) == len(results) else output
    error = None
    if fp.is_delete:
        if zero_output:
            content = None
        else:
            error = f"not deleting file {fp.old_path} as content differs from patch"
    return FileResult(content, results, reject, error)
