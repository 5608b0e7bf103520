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

    def drop_field(self, index: int, key: str) -> None:
        """Remove ``key`` from an entry (its default applies again); nothing when it is not there."""
        self.patches[index].pop(key, None)

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
# A field ``insert_entry`` can step over: one line, a plain key, a value of plain words (or none of the
# characters that start quoting, flow, block scalars, anchors, aliases or tags), maybe a comment.
_SIMPLE_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*: +[A-Za-z0-9_./+=~][A-Za-z0-9_./+=~-]*( +#.*)?")


def _scalar(value: str) -> str:
    """``value`` as a YAML scalar: plain when nothing could misread it, else double-quoted (JSON's
    quoting is valid YAML)."""
    if _PLAIN.fullmatch(value) and not _NOT_A_STRING.fullmatch(value):
        return value
    return json.dumps(value)


def _insertion(text: str, index: int, entry: dict[str, str]) -> tuple[str, int, int] | None:
    """(new text, 0-based line where the entry's lines go, how many) for ``insert_entry``."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _PATCHES_KEY.fullmatch(line.rstrip("\r\n"))), None)
    if start is None:
        return None
    items: list[int] = []  # line index of each "- " item
    last = start  # the last line that belongs to the list (comments and blank lines after it do not)
    indent = key_indent = None
    for i in range(start + 1, len(lines)):
        body = lines[i].rstrip("\r\n")
        stripped = body.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        column = len(body) - len(stripped)
        if indent is None:
            indent = column
        if column < indent:
            break  # the next top-level key
        if column == indent and stripped.startswith("- ") and _SIMPLE_FIELD.fullmatch(stripped[2:]):
            items.append(i)
        elif column > indent and (key_indent is None or column == key_indent) and _SIMPLE_FIELD.fullmatch(stripped):
            key_indent = column
        elif column == indent and indent == 0 and not stripped.startswith("-"):
            break  # the next top-level key after a list at column 0
        else:
            return None  # nested values, flow or block scalars, anchors, quoting: ruamel's job
        last = i
    if not items or not 0 <= index <= len(items) or indent is None:
        return None
    key_indent = indent + 2 if key_indent is None else key_indent
    newline = "\r\n" if lines[items[0]].endswith("\r\n") else "\n"
    block = []
    for n, (key, value) in enumerate(entry.items()):
        lead = " " * indent + "- " if n == 0 else " " * key_indent
        block.append(f"{lead}{key}: {_scalar(value)}{newline}")
    at = items[index] if index < len(items) else last + 1
    if at == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += newline
    return "".join(lines[:at] + block + lines[at:]), at, len(block)


def insert_entry(text: str, index: int, entry: dict[str, str]) -> str | None:
    """``text`` with ``entry`` added as the ``index``-th patch, as lines of the file's own list style;
    every other byte stays. None unless ``patches:`` is a non-empty block list whose items hold only
    one-line ``key: value`` fields of plain words (then the caller edits through :class:`SeriesDoc`,
    whose ruamel import and round trip cost ~0.1 s: ``new`` is a daily command).
    """
    found = _insertion(text, index, entry)
    return None if found is None else found[0]


def with_entry(path: Path, index: int, entry: dict[str, str]) -> bytes:
    """The series file's new bytes with ``entry`` as its ``index``-th patch (``new``).

    Added as lines when ``insert_entry`` can; then what the new bytes parse to is known without a
    parser (the old parse, the entry inserted, later lines moved down), and is kept as their parse
    (``yamlpos.remember``): the reload after writing imports no YAML library. Else ruamel's round trip.
    """
    from materialize.yamlpos import load_located, remember

    raw = path.read_bytes()
    found = _insertion(raw.decode("utf-8"), index, entry)
    if found is None:
        doc = SeriesDoc(path, raw.decode("utf-8").replace("\r\n", "\n"))
        doc.insert(index, entry)
        return doc.render()
    text, at, count = found
    old = load_located(path)
    first = at + 1  # the 1-based line of the entry's first line
    lines = {}
    for key, line in old.lines.items():
        if key[:1] == ("patches",) and len(key) > 1 and isinstance(key[1], int) and key[1] >= index:
            key = ("patches", key[1] + 1, *key[2:])
        lines[key] = line + count if line >= first else line
    lines[("patches", index)] = first
    for n, field in enumerate(entry):
        lines[("patches", index, field)] = first + n
    data = dict(old.data)
    data["patches"] = [*old.data["patches"][:index], dict(entry), *old.data["patches"][index:]]
    new = text.encode("utf-8")
    remember(path, new, data, lines)
    return new
