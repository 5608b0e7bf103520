"""What happened when a patch was applied: per hunk, per file, per patch.

Reports are plain data so they can be stored in the prefix commit message (a cached prefix keeps
its report), written to manifest.json, and printed as a table; nothing here formats for humans.
"""

from __future__ import annotations

from collections import Counter
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


_STATUS = itemgetter(2)  # HunkReport.status


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

    @classmethod
    def from_json(cls, data: dict[str, Any], *, reused: bool = False) -> PatchReport:
        """Read ``to_json``'s data back; hunks stored as objects (older caches) are read too."""
        make = HunkReport._make
        hunks = [HunkReport(**h) if isinstance(h, dict) else make(h) for h in data["hunks"]]
        return cls(**{**data, "hunks": hunks, "reused": reused})
