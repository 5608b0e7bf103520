"""The seeded quilt fuzzer (``quilt_fuzz.py``) over a fixed range of seeds: generated trees and series
of unified, context, normal and git patches (renames, copies, modes, links, strips, -R, -F, CRLF,
compressed patch files), pushed by quilt one at a time and applied by us; trees, the failing patch
and every hunk's offset, fuzz and line must agree. "Soft" results (both refuse, ours with exit 2)
pass. Runs in ``make test-differential``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .quilt_fuzz import run_seed

pytestmark = [
    pytest.mark.skipif(not os.environ.get("MATERIALIZE_DIFFERENTIAL"),
                       reason="set MATERIALIZE_DIFFERENTIAL=1 (make test-differential)"),
    pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed (.ci/run installs it)"),
]

SEEDS = [*range(1000, 1060), *range(20000, 20020)]  # from 20000: the session-15 shapes (quilt_fuzz.NEW_SHAPES)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-cache")


@pytest.mark.parametrize("seed", SEEDS)
def test_quilt_fuzz_seed(seed: int, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MATERIALIZE_CACHE", str(cache))
    finding = run_seed(seed, tmp_path)
    assert finding is None or finding.get("soft"), finding
