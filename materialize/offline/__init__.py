"""Offline validation: extract real patched definitions by AST and test them patched vs control."""

from materialize.offline.errors import ExtractError, MissingDefinition, RefusedImport, StarImportRefused
from materialize.offline.extract import DEFAULT_ALLOW, DEFAULT_HEAVY, extract

__all__ = [
    "DEFAULT_ALLOW",
    "DEFAULT_HEAVY",
    "ExtractError",
    "MissingDefinition",
    "RefusedImport",
    "StarImportRefused",
    "extract",
]
