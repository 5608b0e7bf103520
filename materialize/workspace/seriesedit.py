"""Round-trip edits of the series YAML: comments, key order and quoting survive.

The series file is reviewed like code, so ``new``, ``rename``, ``move``, ``delete`` and ``rebase``
change only the lines they must. ``ruamel.yaml`` keeps comments and layout; the result is validated
by ``load_series`` before anyone relies on it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from materialize.errors import SeriesError


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


class SeriesDoc:
    """An editable series document; ``render()`` gives the new file bytes."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self._yaml = _yaml()
        self.doc = self._yaml.load(text)
        if not isinstance(self.doc, CommentedMap):
            raise SeriesError(f"{path}:1: a series file is a mapping")
        self._guess_indent(text)

    @classmethod
    def load(cls, path: Path) -> SeriesDoc:
        return cls(path, path.read_text(encoding="utf-8"))

    def _guess_indent(self, text: str) -> None:
        """Follow the file's own list style (``- patch:`` at column 0 or indented under ``patches:``)."""
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("patches:"):
                for follow in lines[i + 1 :]:
                    stripped = follow.lstrip()
                    if stripped.startswith("- "):
                        offset = len(follow) - len(stripped)
                        self._yaml.indent(mapping=2, sequence=offset + 2, offset=offset)
                        return
                    if stripped and not stripped.startswith("#"):
                        return

    @property
    def patches(self) -> CommentedSeq:
        seq = self.doc.get("patches")
        if seq is None or not isinstance(seq, CommentedSeq):
            seq = CommentedSeq()
            self.doc["patches"] = seq
        return seq

    def index_of(self, patch_file: str) -> int:
        for i, item in enumerate(self.patches):
            if item.get("patch") == patch_file:
                return i
        raise SeriesError(f"{self.path}: no entry with patch: {patch_file}")

    def insert(self, index: int, entry: dict[str, Any]) -> None:
        item = CommentedMap()
        for key, value in entry.items():
            item[key] = value
        self.patches.insert(index, item)

    def remove(self, index: int) -> dict[str, Any]:
        item = self.patches[index]
        del self.patches[index]
        return item

    def move(self, index: int, new_index: int) -> None:
        item = self.patches[index]
        del self.patches[index]
        self.patches.insert(new_index, item)

    def set_field(self, index: int, key: str, value: Any) -> None:
        self.patches[index][key] = value

    def set_pin(self, target: str, pin: dict[str, Any]) -> None:
        """Replace a target's pin, keeping the comments above it."""
        spec = self.doc["targets"][target]
        old = spec["pin"]
        new = CommentedMap()
        for key, value in pin.items():
            if value is not None:
                new[key] = value
        if getattr(old, "ca", None) is not None:
            new.ca.comment = old.ca.comment
        spec["pin"] = new

    def render(self) -> bytes:
        buf = io.StringIO()
        self._yaml.dump(self.doc, buf)
        return buf.getvalue().encode("utf-8")
