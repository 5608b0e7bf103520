"""Fixtures for the offline-validation tests: the real pinned trees, read from the engine's store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.dont_write_bytecode = True

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def upstream():
    """Upstream trees (position 0 of the shipped series): {"tt-metal": Tree, "plugin": Tree}."""
    from materialize.engine import materialize
    from materialize.series import load_series

    m = materialize(load_series(REPO / "series" / "default.yaml"), upto=0)
    return {target: m.tree(target) for target in m.trees}
