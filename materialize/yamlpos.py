"""Safe YAML loading that remembers where each value came from.

A validator (the series' own, or pydantic for a profile) tells us *which* field is wrong (a path such
as ``patches.3.strip``); users need to know *where* it is. We compose the YAML node graph once (safe loader only: no tags, no Python objects),
build plain data from it, and keep a map from each path to its line so errors can say file:line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from materialize.errors import MaterializeError, SeriesError

if TYPE_CHECKING:  # pydantic loads only for the documents validated with it (profiles), not for series
    from pydantic import BaseModel

PathKey = tuple[str | int, ...]
ModelT = TypeVar("ModelT", bound="BaseModel")
# libyaml's parser when PyYAML was built with it (the pure-Python one is ~10x slower on a 109-patch
# series); both give the same events, nodes and marks.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PLAIN_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")}
# A series or profile is a few hundred nodes. Aliases may share a value, but a document that expands
# past these bounds is a bomb ("billion laughs", a self-referencing alias, 20,000 nested "["): refused
# with its line before it costs memory or ends in a RecursionError.
MAX_DEPTH = 64
MAX_NODES = 100_000


@dataclass
class LocatedYaml:
    """Plain data plus the 1-based line of every mapping key / sequence item."""

    data: Any
    source: str
    lines: dict[PathKey, int] = field(default_factory=dict)

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
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
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


def _build(node: yaml.Node, path: PathKey, lines: dict[PathKey, int], source: str, budget: _Budget,
           scalars: yaml.constructor.SafeConstructor) -> Any:
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
    # Scalars: let the safe constructor resolve ints, bools, nulls exactly as YAML 1.1 says.
    return scalars.construct_object(node)


def load_located(path: Path) -> LocatedYaml:
    """Parse ``path`` with the safe loader; syntax errors name the file and line."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SeriesError(f"{source}: no such file") from None
    except UnicodeDecodeError as exc:
        raise SeriesError(f"{source}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        _check_depth(text, source)
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise SeriesError(f"{where}: invalid YAML: {exc.problem or exc}") from None
    lines: dict[PathKey, int] = {}
    scalars = yaml.constructor.SafeConstructor()
    data = _build(node, (), lines, source, _Budget(source), scalars) if node is not None else None
    return LocatedYaml(data=data, source=source, lines=lines)
