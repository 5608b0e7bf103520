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


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    """The torture suite's counts (extracted / refused by reason) in the test report."""
    module = sys.modules.get("tests.offline.test_torture") or sys.modules.get("test_torture")
    results = getattr(module, "RESULTS", None)
    if not results:
        return
    terminalreporter.section("offline torture: the extractor over real definitions")
    for target, result in results.items():
        counts = result["counts"]
        terminalreporter.write_line(
            f"{target}: {counts.get('modules', 0)} modules, {counts.get('definitions', 0)} definitions: "
            f"{counts.get('extracted', 0)} extracted, {counts.get('refused', 0)} refused, "
            f"{len(result['problems'])} problems"
        )
        for reason, n in result["reasons"].items():
            terminalreporter.write_line(f"    refused {n:4d}  {reason}")
