"""What happened when a patch was applied: per hunk, per file, per patch.

Reports are plain data so they can be stored in the prefix commit message (a cached prefix keeps
its report), written to manifest.json, and printed as a table; nothing here formats for humans.
"""


# No `from __future__ import annotations`: typing compiles a NamedTuple's string annotations, and a
# process's first compile() costs ~10M instructions, 5% of `materialize new` (tests/test_startup.py).
import json
from collections import Counter
from itertools import chain, groupby, islice, repeat
from json.encoder import encode_basestring_ascii as _quote  # json's own string encoder (C)
from operator import itemgetter
from typing import Any, NamedTuple


class HunkReport(NamedTuple):
    """One hunk's outcome. A NamedTuple (one per hunk: a patch may have 100k) that JSON stores as a
    compact array ``[file, header, status, offset, fuzz, applied_at]``."""

    file: str
    header: str
    status: str  # clean | offset | fuzz | failed
    offset: int
    fuzz: int
    applied_at: int | None


_FILE, _HEADER, _STATUS, _OFFSET, _FUZZ, _APPLIED_AT = map(itemgetter, range(6))
_RUN_KEY = itemgetter(0, 2, 3, 4)  # (file, status, offset, fuzz): what a run of rows shares
_NULL = {None: "null"}
_HUNKS_SLOT = '"hunks": []'


def hunks_json(hunks: list[HunkReport], *, objects: bool = False) -> str:
    """Exactly ``json.dumps(hunks)`` (arrays, as commit messages store them) or, with ``objects``,
    ``json.dumps`` of the manifest's ``{"file", "fuzz", "header", "offset", "status"}`` objects.

    Written in C-level passes, not by the encoder walking 100k tuples or dictionaries (for a patch of
    100k hunks that walk, twice: commit message and manifest, cost more than applying the patch).
    A run of hunks with the same file, status, offset and fuzz (a whole file, usually) shares all of
    its row text but the header (and, in arrays, the line): the run is one ``str.join`` of those
    pieces and the shared text between them, with no string made per hunk. Statuses are fixed words
    and numbers ints, so only names and headers need quoting.
    """
    if not hunks:
        return "[]"
    quoted = {name: _quote(name) for name in set(map(_FILE, hunks))}
    parts = []
    for (file, status, offset, fuzz), run in groupby(hunks, _RUN_KEY):
        rows = list(run)
        headers = map(_quote, map(_HEADER, rows))
        name = quoted[file]
        if objects:
            head = f'{{"file": {name}, "fuzz": {fuzz}, "header": '
            tail = f', "offset": {offset}, "status": "{status}"}}'
            parts.append(head + (tail + ", " + head).join(headers) + tail)
            continue
        at = map(str, map(_NULL.get, map(_APPLIED_AT, rows), map(_APPLIED_AT, rows)))
        pieces = chain.from_iterable(zip(headers, repeat(f', "{status}", {offset}, {fuzz}, '), at,
                                         repeat(f"], [{name}, "), strict=False))
        parts.append(f"[{name}, " + "".join(islice(pieces, 4 * len(rows) - 1)) + "]")
    return "[" + ", ".join(parts) + "]"


def with_hunks(document: dict[str, Any], hunks_text: str, **dumps: Any) -> str:
    """``json.dumps(document, **dumps)`` where ``document["hunks"]`` is written as ``hunks_text``:
    the rest is encoded with an empty list in its place, which then takes the text. The slot's text
    cannot occur earlier: a string's own quotes are escaped inside json's output."""
    text = json.dumps({**document, "hunks": []}, **dumps)
    assert _HUNKS_SLOT in text
    return text.replace(_HUNKS_SLOT, f'"hunks": {hunks_text}', 1)


class PatchReport(NamedTuple):
    position: int
    name: str
    target: str
    sha256: str
    files: list[str]
    hunks: list[HunkReport]
    added: int
    removed: int
    reused: bool = False
    deleted: list[str] | tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        """Hunks per status; ``check`` refuses any fuzz so the series stays exact."""
        out = {"clean": 0, "offset": 0, "fuzz": 0, "failed": 0}
        out.update(Counter(map(_STATUS, self.hunks)))  # counted in C: a patch may have 100k hunks
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data; each hunk is an array (``json`` writes a NamedTuple as one)."""
        return {"position": self.position, "name": self.name, "target": self.target, "sha256": self.sha256,
                "files": list(self.files), "hunks": list(self.hunks), "added": self.added,
                "removed": self.removed, "reused": self.reused, "deleted": list(self.deleted)}

    def json_text(self) -> str:
        """``json.dumps(self.to_json(), sort_keys=True)``, hunks written by ``hunks_json``."""
        return with_hunks(self.to_json(), hunks_json(self.hunks), sort_keys=True)

    @classmethod
    def from_json(cls, data: dict[str, Any], *, reused: bool = False) -> "PatchReport":
        """Read ``to_json``'s data back; hunks stored as objects (older caches) are read too."""
        make = HunkReport._make
        hunks = [HunkReport(**h) if isinstance(h, dict) else make(h) for h in data["hunks"]]
        return cls(**{**data, "hunks": hunks, "reused": reused})
