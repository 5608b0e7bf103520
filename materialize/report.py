"""What happened when a patch was applied: per hunk, per file, per patch.

Reports are plain data so they can be stored in the prefix commit message (a cached prefix keeps
its report), written to manifest.json, and printed as a table; nothing here formats for humans.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class HunkReport:
    file: str
    header: str
    status: str  # clean | offset | fuzz | failed
    offset: int
    fuzz: int
    applied_at: int | None


@dataclass(frozen=True)
class PatchReport:
    position: int
    name: str
    target: str
    sha256: str
    files: list[str]
    hunks: list[HunkReport]
    added: int
    removed: int
    reused: bool = False
    deleted: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Hunks per status; ``check`` refuses any fuzz so the series stays exact."""
        out = {"clean": 0, "offset": 0, "fuzz": 0, "failed": 0}
        for hunk in self.hunks:
            out[hunk.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], *, reused: bool = False) -> PatchReport:
        hunks = [HunkReport(**h) for h in data["hunks"]]
        return cls(**{**data, "hunks": hunks, "reused": reused})
