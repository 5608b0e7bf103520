"""Upstream pins: resolve a pin (git, PyPI file, local directory, local archive) to a base tree."""

from materialize.upstream.resolve import ResolvedPin, resolve
from materialize.upstream.spec import parse_spec

__all__ = ["ResolvedPin", "resolve", "parse_spec"]
