"""Errors raised while extracting definitions from a tree.

They are separate classes because the pytest plugin treats them differently: a
``MissingDefinition`` in a control run means "the control only failed because the patched code is
not there" (a *weak* control), every other ``ExtractError`` is a real failure of the test.
"""

from __future__ import annotations

from materialize.errors import MaterializeError

OBSERVERS: list = []
"""Told of every ExtractError that leaves the extractor for the caller's code (``observed``): the pytest
plugin learns of one a test caught and hid."""


def observed(exc: BaseException) -> BaseException:
    """``exc``, after telling the observers it is on its way to the caller."""
    for observer in OBSERVERS:
        observer(exc)
    return exc


class ExtractError(MaterializeError):
    """The definitions cannot be extracted; the message names file, line and definition."""

    exit_code = 1


class MissingDefinition(ExtractError):
    """A requested definition (or the whole file) does not exist in this tree."""

    def __init__(self, message: str, *, name: str, path: str) -> None:
        super().__init__(message)
        self.name = name
        self.path = path


class RefusedImport(ExtractError, ImportError):
    """An import the extracted code needs is heavy (ttnn, torch, vllm…) or not allowed, and no stub was given."""


class StarImportRefused(ExtractError):
    """A needed name could only come from ``from x import *``, which the extractor cannot follow."""
