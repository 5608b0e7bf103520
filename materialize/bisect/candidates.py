"""Turning a series position into code to run: the only place bisect touches the engine.

Kept to one small function (``prepare``) so the state machine, statistics and runner can be tested
with any callable of the same shape, and the real engine is used end to end once it exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from materialize.series import Series


@dataclass(frozen=True)
class Candidate:
    position: int
    materialization_id: str
    directory: Path


def prepare(series: Series, position: int, root: Path, *, overlay: bool = True) -> Candidate:
    """Materialize the prefix of ``position`` patches into the bisect's own ``root`` (cached by the store).

    Candidates never go to the project's ``build/materialized`` and never move its ``latest``: a
    bisect of another series (or of an old prefix) must not change what the checkout serves. The
    default is an overlay (only the files the prefix changes, plus ``manifest.json``).
    """
    from materialize.engine import materialize
    from materialize.output import write_output

    m = materialize(series, upto=position)
    out = write_output(m, root / (m.id + ("-overlay" if overlay else "")), overlay=overlay)
    return Candidate(position, m.id, Path(out))


def series_hash(series: Series) -> str:
    """What a bisect was started on: the series file and every patch's content, hashed."""
    return hash_of(series.path.read_bytes(), [(p.name, p.sha256()) for p in series.patches])


def hash_of(series_text: bytes, patches: list[tuple[str, str]]) -> str:
    """``series_hash`` of a series file's bytes and its (name, sha256) patches."""
    import hashlib

    h = hashlib.sha256(series_text)
    for name, sha in patches:
        h.update(f"\0{name}\0{sha}".encode())
    return h.hexdigest()


def describe_change(before: list[tuple[str, str]], after: list[tuple[str, str]]) -> str:
    """What differs between two (name, sha256) lists of a series, in words naming the patches."""
    old, new = dict(before), dict(after)
    parts = []
    if edited := [n for n, _ in after if n in old and old[n] != new[n]]:
        parts.append("edited: " + ", ".join(edited))
    if added := [n for n, _ in after if n not in old]:
        parts.append("added: " + ", ".join(added))
    if removed := [n for n, _ in before if n not in new]:
        parts.append("removed: " + ", ".join(removed))
    if not parts and [n for n, _ in before] != [n for n, _ in after]:
        parts.append("patches reordered")
    return "; ".join(parts) or "the series file itself was edited (patch options, targets or pins)"


def patch_names(series: Series) -> dict[int, str]:
    return {p.position: p.name for p in series.patches}


class SeriesIndex:
    """Names and sha256 of every patch, hashed once (validation looks at many records)."""

    def __init__(self, series: Series) -> None:
        self.series = series
        self.names = [p.name for p in series.patches]
        self.shas = [p.sha256() for p in series.patches]

    def position_of_prefix(self, prefix: list[tuple[str, str]]) -> int | None:
        """The position a recorded prefix corresponds to, or None if it is not a prefix of this series.

        Names and sha256 must match patch for patch: a record made before patch 3 was edited is about
        different code and must not count as evidence for today's position 3.
        """
        if len(prefix) > len(self.names):
            return None
        for (name, sha), n, h in zip(prefix, self.names, self.shas, strict=False):
            if name != n or sha != h:
                return None
        return len(prefix)

    def prefix_entries(self, position: int) -> list[dict[str, str]]:
        return [
            {"name": n, "sha256": h} for n, h in zip(self.names[:position], self.shas[:position], strict=True)
        ]
