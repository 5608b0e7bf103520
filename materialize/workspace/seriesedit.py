"""Round-trip edits of the series YAML: comments, key order and quoting survive.

The series file is reviewed like code, so ``new``, ``rename``, ``move``, ``delete`` and ``rebase``
change only the lines they must. ``ruamel.yaml`` keeps comments and layout; the result is validated
by ``load_series`` before anyone relies on it.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from materialize.errors import SeriesError

if TYPE_CHECKING:  # ruamel loads when a SeriesDoc is made: `new` edits by lines (insert_entry)
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedSeq


def _yaml() -> YAML:
    from ruamel.yaml import YAML

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
        from ruamel.yaml.comments import CommentedMap

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
        from ruamel.yaml.comments import CommentedSeq

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
        from ruamel.yaml.comments import CommentedMap

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
        from ruamel.yaml.comments import CommentedMap

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


_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+/-]*")
# Plain scalars YAML 1.1 would read as something else than a string (bools, nulls, numbers, dates).
_NOT_A_STRING = re.compile(r"(?i)(y|n|yes|no|true|false|on|off|null|~|[-+]?[0-9._]+([eE][-+]?[0-9]+)?|[0-9]+[-:].*)")
_PATCHES_KEY = re.compile(r"patches:[ \t]*(#.*)?")


def _scalar(value: str) -> str:
    """``value`` as a YAML scalar: plain when nothing could misread it, else double-quoted (JSON's
    quoting is valid YAML)."""
    if _PLAIN.fullmatch(value) and not _NOT_A_STRING.fullmatch(value):
        return value
    return json.dumps(value)


def insert_entry(text: str, index: int, entry: dict[str, str]) -> str | None:
    """``text`` with ``entry`` added as the ``index``-th patch, as lines of the file's own list style;
    every other byte stays. None unless ``patches:`` is a plain, non-empty block list (then the caller
    edits through :class:`SeriesDoc`, whose ruamel import and round trip cost ~0.1 s: ``new`` is a
    daily command). The caller checks the result parses to the intended series.
    """
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _PATCHES_KEY.fullmatch(line.rstrip("\r\n"))), None)
    if start is None:
        return None
    items: list[int] = []  # line index of each "- " item
    last = start  # the last line that belongs to the list (comments and blank lines after it do not)
    indent = None
    for i in range(start + 1, len(lines)):
        body = lines[i].rstrip("\r\n")
        stripped = body.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        column = len(body) - len(stripped)
        if indent is None:
            if not stripped.startswith("- "):
                return None
            indent = column
        if column == indent and stripped.startswith("- "):
            items.append(i)
        elif column <= indent:
            break  # the next top-level key
        if "\t" in body[:column]:
            return None
        last = i
    if not items or not 0 <= index <= len(items):
        return None
    key_indent = indent + 2
    for line in lines[items[0] + 1 : (items[1] if len(items) > 1 else last + 1)]:
        stripped = line.lstrip(" ")
        if stripped.strip() and not stripped.startswith("#"):
            key_indent = len(line) - len(stripped)
            break
    newline = "\r\n" if lines[items[0]].endswith("\r\n") else "\n"
    block = []
    for n, (key, value) in enumerate(entry.items()):
        lead = " " * indent + "- " if n == 0 else " " * key_indent
        block.append(f"{lead}{key}: {_scalar(value)}{newline}")
    at = items[index] if index < len(items) else last + 1
    if at == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += newline
    return "".join(lines[:at] + block + lines[at:])


def with_entry(path: Path, index: int, entry: dict[str, str]) -> bytes:
    """The series file's new bytes with ``entry`` as its ``index``-th patch (``new``): added as lines
    when the layout allows and the result parses to exactly the old document plus the entry, else
    through :class:`SeriesDoc`."""
    text = path.read_bytes().decode("utf-8")
    lines = insert_entry(text, index, entry)
    if lines is not None and _adds_only(text, lines, index, entry):
        return lines.encode("utf-8")
    doc = SeriesDoc(path, text.replace("\r\n", "\n"))
    doc.insert(index, entry)
    return doc.render()


def _adds_only(old_text: str, new_text: str, index: int, entry: dict[str, str]) -> bool:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        old = yaml.load(old_text, Loader=loader)  # noqa: S506 - a safe loader
        new = yaml.load(new_text, Loader=loader)  # noqa: S506
    except yaml.YAMLError:
        return False
    if not isinstance(old, dict) or not isinstance(old.get("patches"), list):
        return False
    return new == {**old, "patches": [*old["patches"][:index], dict(entry), *old["patches"][index:]]}
