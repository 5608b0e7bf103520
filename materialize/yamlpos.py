"""Safe YAML loading that remembers where each value came from.

A validator (the series' own, or pydantic for a profile) tells us *which* field is wrong (a path such
as ``patches.3.strip``); users need to know *where* it is. We compose the YAML node graph once (safe
loader only: no tags, no Python objects), build plain data from it, and keep a map from each path to
its line so errors can say file:line.

Every command loads the series, and importing PyYAML alone costs more than the rest of `materialize
top`: the plain result of a parse is kept in the cache (``<cache>/parsed/``, one small ``marshal``
file per document path, valid only for the exact bytes it was parsed from), so an unchanged series
is read without importing yaml. Only documents that parsed cleanly are kept; a refusal is redone.
"""

from __future__ import annotations

import contextlib
import marshal
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from materialize import digest
from materialize.atomic import atomic_write, read_regular
from materialize.errors import MaterializeError, SeriesError

if TYPE_CHECKING:  # pydantic loads only for the documents validated with it (profiles), not for series
    import yaml
    from pydantic import BaseModel

    # Only for the checker: at run time a bound given as a string is compiled by typing (ForwardRef),
    # and that first compile() woke the parser: ~10M instructions, 5% of `materialize new`.
    ModelT = TypeVar("ModelT", bound=BaseModel)

PathKey = tuple[str | int, ...]
_PARSED_FORMAT = 1  # bump when what _build returns changes: older cache files are then ignored
_PLAIN_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")}
# A series or profile is a few hundred nodes. Aliases may share a value, but a document that expands
# past these bounds is a bomb ("billion laughs", a self-referencing alias, 20,000 nested "["): refused
# with its line before it costs memory or ends in a RecursionError.
MAX_DEPTH = 64
MAX_NODES = 100_000
# A number in a series or profile is a strip level, a count, a port: a few digits. YAML 1.1 reads
# "1:2:3" as base 60, which PyYAML builds by repeated big-int multiplication (quadratic: 450 KB of
# "59:59:..." took 13 s), and a long decimal int or float ends in Python's ValueError (4300 digits)
# or OverflowError: a scalar resolved as a number longer than this is refused with its line.
MAX_NUMBER = 100
# A series or profile is kilobytes (a 1,000-patch quilt import is ~100 KB). Without a cap, one 300 MB
# ``why:`` string took 8 s and 1.7 GB before the node budget could say anything: a file past this size
# is refused before it is read whole, naming the file.
MAX_BYTES = 16 << 20
_NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}


class LocatedYaml:
    """Plain data plus the 1-based line of every mapping key / sequence item."""

    __slots__ = ("data", "source", "lines")

    def __init__(self, data: Any, source: str, lines: dict[PathKey, int] | None = None) -> None:
        self.data = data
        self.source = source
        self.lines = lines if lines is not None else {}

    def validate(self, model: type[ModelT], error: type[MaterializeError], what: str, fields: str) -> ModelT:
        """Validate the document against ``model``; every problem becomes one ``file:line: field`` line."""
        from pydantic import ValidationError

        if not isinstance(self.data, dict):
            raise error(f"{self.source}:1: a {what} is a mapping with {fields}")
        try:
            return model.model_validate(self.data)
        except ValidationError as exc:
            problems = [self.describe(e) for e in exc.errors()]
            raise error(f"invalid {what}:\n  " + "\n  ".join(problems)) from None

    def describe(self, error: dict[str, Any]) -> str:
        """One pydantic error as ``file:line: field: message``.

        Pydantic's ``loc`` mixes data keys with validator names (a discriminated union's tag,
        ``function-after[...]``); only the parts that are real keys at that depth locate the line.
        """
        located: PathKey = ()
        for part in error["loc"]:
            if located + (part,) in self.lines:
                located += (part,)
        field = ".".join(str(p) for p in error["loc"]) or "(top level)"
        message = {"extra_forbidden": "unknown field (typo?)", "missing": "required field is missing"}.get(
            error["type"], error["msg"]
        )
        if error["type"] == "string_type" and isinstance(error.get("input"), int | float):
            # An unquoted all-digit SHA or version is a YAML number (leading zeros lost): say so.
            message += f"; YAML read an unquoted number ({error['input']!r}): put the value in quotes"
        return f"{self.source}:{self.line_of(located)}: {field}: {message}"

    def line_of(self, path: PathKey) -> int:
        """Line of the deepest known ancestor of ``path`` (a missing field points at its parent)."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:cut]))
            if line is not None:
                return line
        return 1


class _Budget:
    """Nodes left to build: aliases make the node graph a DAG (or a cycle) that expands on building."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.left = MAX_NODES

    def spend(self, node: yaml.Node, depth: int) -> None:
        self.left -= 1
        line = node.start_mark.line + 1
        if self.left < 0:
            raise SeriesError(f"{self.source}:{line}: the document expands to more than {MAX_NODES} values "
                              "(YAML aliases expanding without bound?); refused")
        if depth > MAX_DEPTH:
            raise SeriesError(f"{self.source}:{line}: nested deeper than {MAX_DEPTH} levels "
                              "(a YAML alias that contains itself?); refused")


def _check_depth(text: str, source: str) -> None:
    """Refuse deep nesting from the event stream (iterative) before the recursive composer sees it."""
    import yaml

    depth = 0
    try:
        for event in yaml.parse(text, Loader=_loader()):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise SeriesError(f"{source}:{event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} "
                                      "levels; refused")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        # libyaml's scanner looks ahead in flow collections and stops at its own limit (1,000) before
        # the event past ours is seen: the same refusal, said the same way.
        if "maximum nesting depth" not in str(exc.problem):
            raise
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise SeriesError(f"{source}:{line}: nested deeper than {MAX_DEPTH} levels; refused") from None


def _loader() -> type:
    """libyaml's parser when PyYAML was built with it (the pure-Python one is ~10x slower on a
    109-patch series); both give the same events, nodes and marks."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _build(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], source: str, budget: _Budget,
           scalars: yaml.constructor.SafeConstructor) -> Any:
    import yaml

    budget.spend(node, len(path))
    lines.setdefault(path, node.start_mark.line + 1)
    if node.tag not in _PLAIN_TAGS:
        raise SeriesError(f"{source}:{node.start_mark.line + 1}: YAML tag {node.tag!r} is not allowed (safe YAML only)")
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise SeriesError(f"{source}:{key_node.start_mark.line + 1}: mapping keys must be plain strings")
            key = str(key_node.value)
            if key in out:
                raise SeriesError(f"{source}:{key_node.start_mark.line + 1}: duplicate key {key!r}")
            lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = _build(value_node, path + (key,), lines, source, budget, scalars)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, path + (i,), lines, source, budget, scalars) for i, item in enumerate(node.value)]
    # Scalars: let the safe constructor resolve ints, bools, nulls exactly as YAML 1.1 says, once a
    # number is known to be short enough to build in bounded time.
    line = node.start_mark.line + 1
    if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER:
        raise SeriesError(f"{source}:{line}: a number of {len(node.value)} characters (more than {MAX_NUMBER});"
                          " refused (put it in quotes if it is text)")
    try:
        return scalars.construct_object(node)
    except (ValueError, OverflowError, KeyError, IndexError, TypeError, yaml.YAMLError) as exc:
        # an explicit tag on a value it cannot build: `!!int "-"` (IndexError), `!!bool "maybe"` (KeyError)
        what = "a number" if node.tag in _NUMBER_TAGS else f"a {node.tag.rsplit(':', 1)[-1]}"
        raise SeriesError(f"{source}:{line}: {what} that cannot be read ({type(exc).__name__}: {exc}); refused") from None


def _parsed_file(source: str) -> Path:
    from materialize.store import default_cache_dir

    name = digest.sha256(os.fsencode(source)).hexdigest()[:32]
    return default_cache_dir() / "parsed" / f"{name}.marshal"


def _read_parsed(cache: Path, digest: str) -> tuple[Any, dict[PathKey, int]] | None:
    """The kept parse of exactly these bytes, or None (absent, stale, damaged: parse again)."""
    try:
        with open(cache, "rb") as handle:
            kept = marshal.load(handle)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not (isinstance(kept, tuple) and len(kept) == 4 and kept[:2] == (_PARSED_FORMAT, digest)):
        return None
    return kept[2], kept[3]


def _keep_parsed(cache: Path, digest: str, data: Any, lines: dict[PathKey, int]) -> None:
    """Best effort: a cache that cannot be written only means the next run parses again."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: marshal of an unexpected value
        atomic_write(cache, marshal.dumps((_PARSED_FORMAT, digest, data, lines)))


def remember(path: Path, raw: bytes, data: Any, lines: dict[PathKey, int]) -> None:
    """Keep ``data``/``lines`` as the parse of ``raw``, the bytes about to be written at ``path``, for a
    writer that knows the result without parsing (the workspace's ``new`` adds one series entry as
    lines): the next ``load_located`` of those bytes imports no YAML library."""
    _keep_parsed(_parsed_file(str(path)), digest.sha256(raw).hexdigest(), data, lines)


def load_located(path: Path, raw: bytes | None = None) -> LocatedYaml:
    """Parse ``path`` with the safe loader; syntax errors name the file and line. ``raw``: bytes about
    to be written at ``path``, parsed as its content (a writer checks them before it writes)."""
    source = str(path)
    if raw is None:
        try:
            # a regular file only, opened without blocking: a series or profile that is a link to
            # /dev/tty or a fifo (a checkout's symlink) waited forever to be read
            raw = read_regular(source, MAX_BYTES)
        except FileNotFoundError:
            raise SeriesError(f"{source}: no such file") from None
        except OSError as exc:  # a folder, no permission: one line naming the file, not a traceback
            raise SeriesError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise SeriesError(f"{source}: larger than {MAX_BYTES >> 20} MiB; a series or profile file is refused"
                          " (it is kilobytes: move long text into the patches)")
    raw_digest = digest.sha256(raw).hexdigest()
    cache = _parsed_file(source)
    kept = _read_parsed(cache, raw_digest)
    if kept is not None:
        return LocatedYaml(data=kept[0], source=source, lines=kept[1])
    try:
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text: universal newlines
    except UnicodeDecodeError as exc:
        raise SeriesError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    import yaml

    try:
        _check_depth(text, source)
        node = yaml.compose(text, Loader=_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise SeriesError(f"{where}: invalid YAML: {exc.problem or exc}") from None
    except yaml.reader.ReaderError as exc:
        # a character YAML's reader refuses (NUL, other controls, U+FFFE) carries no mark, only its
        # character offset in the text: the line is counted from it
        line = text.count("\n", 0, exc.position) + 1
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        raise SeriesError(f"{source}:{line}: invalid YAML: unacceptable character {char!r}"
                          " (control characters are not allowed)") from None
    lines: dict[PathKey, int] = {}
    scalars = yaml.constructor.SafeConstructor()
    data = _build(node, (), lines, source, _Budget(source), scalars) if node is not None else None
    _keep_parsed(cache, raw_digest, data, lines)
    return LocatedYaml(data=data, source=source, lines=lines)
