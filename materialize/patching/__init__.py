"""Patch parsing and hunk application, byte-identical to GNU patch 2.7.

``parse_patch`` turns patch bytes into an immutable ``PatchSet``; ``apply_file`` applies one
``FilePatch`` to file bytes as ``patch -pN -F<fuzz>`` would, without touching the filesystem.
"""

from materialize.patching.apply import apply_file
from materialize.patching.model import (
    FilePatch,
    FileResult,
    Hunk,
    HunkLine,
    HunkResult,
    PatchSet,
)
from materialize.patching.parse import parse_patch

__all__ = [
    "FilePatch",
    "FileResult",
    "Hunk",
    "HunkLine",
    "HunkResult",
    "PatchSet",
    "apply_file",
    "parse_patch",
]
