"""Offline validation: extract real patched definitions by AST and test them patched vs control.

The re-exports below load on first use, not at package import: ``extract`` parses with libcst, and
``materialize test-offline --help`` (or anything importing a sibling module) must not pay for it.
``extract`` is both the submodule and the function; the name always means the function here (as
it did when this file imported it eagerly), whichever module was imported first.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from materialize.offline.errors import ExtractError, MissingDefinition, RefusedImport, StarImportRefused

__all__ = [
    "DEFAULT_ALLOW",
    "DEFAULT_HEAVY",
    "ExtractError",
    "MissingDefinition",
    "RefusedImport",
    "StarImportRefused",
    "extract",
]
_FROM_EXTRACT = {"DEFAULT_ALLOW", "DEFAULT_HEAVY"}


def __getattr__(name: str) -> Any:
    if name in _FROM_EXTRACT:
        return getattr(importlib.import_module(f"{__name__}.extract"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """The package module, with ``extract`` resolved to the function on every access."""

    @property
    def extract(self) -> Any:
        return importlib.import_module(f"{__name__}.extract").extract

    @extract.setter
    def extract(self, module: Any) -> None:
        """The import system binds the submodule here after loading it; the name stays the function."""


sys.modules[__name__].__class__ = _Package
