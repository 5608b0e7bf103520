"""GNU-patch-style unified ``.rej`` text for hunks that did not apply.

Matches GNU patch 2.7's layout (file header once, then each hunk renumbered by the offset of the
hunks that did apply before it), with one deliberate difference: a line without a final newline is
followed by ``\\ No newline at end of file`` instead of running into the next line, so the reject
stays readable and re-appliable.
"""

from __future__ import annotations

from materialize.patching.model import FilePatch, Hunk

_NO_NEWLINE = b"\\ No newline at end of file\n"


def _range(start: int, count: int) -> str:
    """GNU ``print_unidiff_range``: start is the 'first line' GNU uses internally."""
    if count == 0:
        return f"{start - 1},0"
    if count == 1:
        return str(start)
    return f"{start},{count}"


def _header_line(tag: str, path: str | None, stamp: str | None) -> str:
    name = path if path is not None else "/dev/null"
    return f"{tag} {name}\t{stamp}\n" if stamp else f"{tag} {name}\n"


def _hunk_text(fp: FilePatch, hunk: Hunk, out_offset: int) -> bytes:
    """One rejected hunk, renumbered like GNU (``first + out_offset``)."""
    n_old = sum(1 for ln in hunk.lines if ln.kind != "+")
    n_new = sum(1 for ln in hunk.lines if ln.kind != "-")
    first = hunk.source_start + (0 if n_old else 1) + out_offset
    newfirst = hunk.target_start + (0 if n_new else 1) + out_offset
    section = f" {hunk.section_header}" if hunk.section_header else ""
    head = f"@@ -{_range(first, n_old)} +{_range(newfirst, n_new)} @@{section}\n"
    body = bytearray(head.encode("utf-8", "surrogateescape"))
    for ln in hunk.lines:
        text = ln.text(fp.strip_trailing_cr)
        body += ln.kind.encode() + text
        if ln.no_newline:
            body += b"\n" + _NO_NEWLINE
    return bytes(body)


def format_reject(fp: FilePatch, rejected: list[tuple[Hunk, int]]) -> str:
    """Reject text for ``rejected`` (hunk, GNU out_offset at the time it failed) pairs."""
    head = _header_line("---", fp.old_path, fp.old_timestamp) + _header_line(
        "+++", fp.new_path, fp.new_timestamp
    )
    parts = [head.encode("utf-8", "surrogateescape")]
    parts.extend(_hunk_text(fp, hunk, offset) for hunk, offset in rejected)
    return b"".join(parts).decode("utf-8", "surrogateescape")
