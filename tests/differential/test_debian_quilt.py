"""The differential suite (``make test-differential``): real Debian quilt series, ours vs ``quilt push -a``.

Every package of ``debian.PACKAGES`` is imported with ``import-quilt`` and materialized, and the
tree must equal quilt's on the same orig tarball: contents, symlinks, executable bits, empty
files and empty directories (jq's orig tarball has some; outputs recreate them). Runs only when ``MATERIALIZE_DIFFERENTIAL=1`` (the Makefile target sets
it; ``.ci/run`` calls it), because it downloads ~20 MB of sources once and takes a few minutes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .debian import PACKAGES, compare

pytestmark = [
    pytest.mark.skipif(not os.environ.get("MATERIALIZE_DIFFERENTIAL"),
                       reason="set MATERIALIZE_DIFFERENTIAL=1 (make test-differential)"),
    pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed (.ci/run installs it)"),
]


@pytest.mark.parametrize("package", PACKAGES)
def test_debian_package_matches_quilt(package: str, tmp_path: Path) -> None:
    outcome = compare(package, tmp_path)
    if outcome.skipped:
        pytest.skip(f"{package}: {outcome.skipped}")
    assert outcome.differences == [], f"{package}: {len(outcome.differences)} differences"
    assert outcome.dir_differences == [], f"{package}: empty directories differ"
