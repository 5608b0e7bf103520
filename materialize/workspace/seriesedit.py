"""Round-trip edits of the series YAML: comments, key order and quoting survive.

The series file is reviewed like code, so ``new``, ``rename``, ``move``, ``delete`` and ``rebase``
change only the lines they must. ``ruamel.yaml`` keeps comments and layout. ``SeriesDoc.render`` checks
its bytes before it hands them out (``check_render``): they must parse, load as a series
(``load_series``) and say exactly what the edited document says; else the command is refused before
anything is written, so a round-trip bug of ruamel's can never leave a series file nothing reads.

Comment lines at the very end of the file (column 0, after the last entry) belong to no entry: they
are taken off before ruamel reads the file and put back at the end of what it writes, so ``delete``
of the last entry keeps them and ``move`` of the last entry does not carry them along.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from materialize.errors import MaterializeError, SeriesError

if TYPE_CHECKING:  # ruamel loads when a SeriesDoc is made: `new` edits by lines (insert_entry)
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedSeq


def _emitter() -> type:
    """ruamel's round-trip emitter, with one bug fixed (ruamel.yaml 0.19): after a sequence's
    pre-comment (``patches:`` then ``# a comment`` then the first ``-``) the emitter sets
    ``no_newline`` for the first item, and only a block node's first line break clears it. A flow
    mapping or flow sequence as that item (``- {patch: x, target: t}``) never clears it, so the next
    block mapping lost the line break before its second key (``- target: t patch: y``: invalid YAML).
    A flow node starts on the dash's line, which is what the flag asked for: it is cleared there."""
    from ruamel.yaml.emitter import RoundTripEmitter

    class Emitter(RoundTripEmitter):  # type: ignore[misc]
        def expect_flow_sequence(self, *args: Any, **kwargs: Any) -> None:
            self.no_newline = False
            super().expect_flow_sequence(*args, **kwargs)

        def expect_flow_mapping(self, *args: Any, **kwargs: Any) -> None:
            self.no_newline = False
            super().expect_flow_mapping(*args, **kwargs)

    return Emitter


def _yaml() -> YAML:
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.Emitter = _emitter()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


class SeriesDoc:
    """An editable series document; ``render()`` gives the new file bytes."""

    def __init__(self, path: Path, text: str, newline: str = "\n") -> None:
        self.path = path
        self.newline = newline  # the file's own line ending, written back (ruamel writes "\n")
        self._yaml = _yaml()
        text, self._tail = split_tail(text)
        self.doc = self._yaml.load(text)
        from ruamel.yaml.comments import CommentedMap

        if not isinstance(self.doc, CommentedMap):
            raise SeriesError(f"{path}:1: a series file is a mapping")
        self._guess_indent(text)

    @classmethod
    def load(cls, path: Path) -> SeriesDoc:
        """The document at ``path``; a file whose every line ends in CRLF is written back so (a rename
        rewrote all its lines with LF, so a review diff showed the whole file changed)."""
        raw = path.read_bytes()
        crlf = b"\r\n" in raw and raw.count(b"\n") == raw.count(b"\r\n")
        return cls(path, path.read_text(encoding="utf-8"), "\r\n" if crlf else "\n")

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
        """A flow entry's comment (``- {patch: …}   # why``) is the list's, kept by index: it moves too."""
        seq = self.patches
        item = seq[index]
        comment = seq.ca.items.get(index)
        del seq[index]
        seq.insert(new_index, item)
        if comment is not None:
            seq.ca.items[new_index] = comment

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
        if getattr(old, "fa", None) is not None and old.fa.flow_style():
            new.fa.set_flow_style()  # `pin: {kind: path, …}` stays on its line
        spec["pin"] = new

    def render(self, op: str) -> bytes:
        """The new file bytes, checked (``check_render``) for ``op``, the command named when refused."""
        buf = io.StringIO()
        self._yaml.dump(self.doc, buf)
        text = buf.getvalue()
        if self._tail:
            text = (text if text.endswith("\n") else text + "\n") + self._tail
        if self.newline != "\n":
            text = text.replace("\n", self.newline)
        data = text.encode("utf-8")
        check_render(self.path, data, op, _plain(self.doc))
        return data


def split_tail(text: str) -> tuple[str, str]:
    """(``text`` without its trailing comment block, that block): the blank lines and column-0 comment
    lines after the last line of content. An indented comment there stays with the entry above it."""
    lines = text.splitlines(keepends=True)
    cut = len(lines)
    while cut and (not lines[cut - 1].strip() or lines[cut - 1].startswith("#")):
        cut -= 1
    tail = "".join(lines[cut:])
    if not tail.strip():  # blank lines only: ruamel keeps those as they were
        return text, ""
    return "".join(lines[:cut]), tail


def _plain(node: Any) -> Any:
    """A ruamel document as the plain values a safe load gives (comments and styles dropped)."""
    if isinstance(node, dict):
        return {_plain(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _same(meant: Any, got: Any) -> bool:
    """``got`` (the safe loader's YAML 1.1 reading) says what ``meant`` (ruamel's YAML 1.2 document)
    does: the same mappings, keys and lists, and equal strings. A plain scalar the two versions read
    as different types (``yes``, ``0755``) is not a change the edit made."""
    if isinstance(meant, dict) or isinstance(got, dict):
        return (isinstance(meant, dict) and isinstance(got, dict)
                and sorted(map(str, meant)) == sorted(map(str, got))
                and all(_same(v, got[k] if k in got else got.get(str(k))) for k, v in meant.items()))
    if isinstance(meant, list) or isinstance(got, list):
        return (isinstance(meant, list) and isinstance(got, list) and len(meant) == len(got)
                and all(_same(a, b) for a, b in zip(meant, got, strict=True)))
    if isinstance(meant, str) and isinstance(got, str):
        return meant == got
    return meant == got or type(meant) is not type(got)


class RenderError(MaterializeError):
    """A series edit whose bytes would not read back as what was meant: refused, nothing written."""

    exit_code = 1


def check_render(path: Path, data: bytes, op: str, meant: Any = None) -> None:
    """Refuse ``data`` as the new bytes of the series file ``path`` unless they parse, load as a series
    (``load_series``: the model's every rule, names, targets, paths inside patches_dir) and, when
    ``meant`` is given, parse to exactly ``meant``. Called before anything is written (``render`` calls
    it), so a refused edit leaves the file byte-identical.

    The bytes are parsed by the series' own parser as the content of ``path`` (nothing is written to
    parse them), then ``load_series`` validates that parse as the file at ``path`` (its folder is what
    the series' relative paths mean)."""
    from materialize import series as series_module
    from materialize.yamlpos import load_located

    try:
        parsed = load_located(path.resolve(), raw=data)
        series_module.load_series(path, located=parsed)
    except MaterializeError as exc:
        problem = str(exc).replace(str(path.resolve()), f"{path} (as {op} would write it)", 1)
        raise RenderError(f"{op} refused: the series file it would write does not read back, so nothing was "
                          f"written and {path} is as it was (please report this with the file):\n  {problem}"
                          ) from None
    if meant is not None and not _same(meant, parsed.data):
        raise RenderError(f"{op} refused: the series file it would write reads back as something else than the "
                          f"edit meant, so nothing was written and {path} is as it was (please report this "
                          "with the file)")


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
        doc = SeriesDoc.load(path)
        doc.insert(index, entry)
        return doc.render("new")
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
