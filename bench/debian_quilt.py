"""Identical/total over real Debian quilt series: ours (import-quilt + apply) vs ``quilt push -a``.

Same comparison as ``make test-differential`` (``tests/differential/debian.py``): contents,
symlinks, executable bits, empty files and empty directories, per package, then the total.
Usage: ``.venv/bin/python bench/debian_quilt.py [PACKAGE ...]`` (network once: ``apt-get source``).
Without packages: the list in ``tests/differential/debian.py``. Sources are cached in
``$MATERIALIZE_TEST_DATA/debian`` (default ``~/.cache/materialize-testdata``); a package whose
sources the mirror lacks, or without a series, is "skipped"; run long sweeps under ``nice -n 19``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _debian_module():
    spec = importlib.util.spec_from_file_location("debian_differential", ROOT / "tests" / "differential" / "debian.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(__doc__)
        return 0
    debian = _debian_module()
    packages = argv or debian.PACKAGES
    identical = total = 0
    print(f"{'package':<16}{'patches':>8}  {'result':<10}{'s':>6}  detail")
    with tempfile.TemporaryDirectory(prefix="bench-debian-") as tmp:
        os.environ["MATERIALIZE_CACHE"] = str(Path(tmp) / "cache")
        for package in packages:
            start = time.perf_counter()
            outcome = debian.compare(package, Path(tmp) / package)
            took = time.perf_counter() - start
            if outcome.skipped:
                result, detail = "skipped", outcome.skipped[:70]
            else:
                total += 1
                identical += outcome.identical
                problems = outcome.differences + outcome.dir_differences
                result = "identical" if outcome.identical else "DIFFERS"
                detail = f"{len(problems)}: {problems[0][:60]}" if problems else ""
            print(f"{package:<16}{outcome.patches:>8}  {result:<10}{took:>6.1f}  {detail}")
    print(f"identical/total: {identical}/{total} (contents, symlinks, x bits, empty files, empty dirs)")
    return 0 if identical == total else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
