"""``materialize test-offline``: run the series' offline tests (patched vs control) from the CLI.

A thin front over pytest, so the CLI and ``make test-offline`` run exactly the same thing: the
tests in the series' ``tests_dir`` with the offline plugin, in a child process with
``PYTHONDONTWRITEBYTECODE=1`` (no ``__pycache__`` anywhere).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from materialize.cliargs import command, option


def run_offline(series_path: Path, *, at: str = "patch", tree_source: str = "auto", extra: tuple[str, ...] = ()) -> int:
    """Run the offline suite for ``series_path``; returns pytest's exit code."""
    # The child's plugin needs libcst: a missing `offline` extra is named here, not in a pytest traceback.
    import libcst  # noqa: F401

    from materialize.series import (
        load_series,  # here, not at import: `test-offline --help` loads its parser only
    )

    series = load_series(series_path)
    tests_dir = series.resolve(series.spec.tests_dir)
    argv = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "materialize.offline.plugin",
        "--series", str(series.path), "--at", at, "--tree-source", tree_source, *extra, str(tests_dir),
    ]  # fmt: skip
    import tempfile

    from materialize.offline.plugin import SEAL_ENV

    with tempfile.TemporaryDirectory(prefix="materialize-offline-") as scratch:
        seal = Path(scratch) / "seal"
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **{SEAL_ENV: str(seal)})
        code = subprocess.run(argv, env=env, check=False).returncode
        sealed = seal.read_text().strip() if seal.exists() else None
    if sealed is None or sealed != str(code):
        why = "no seal" if sealed is None else f"the session's own status was {sealed}"
        print(f"materialize test-offline: the offline session did not finish (pytest exited {code}, {why}): "
              "a test or a test module ended the process early (os._exit, a signal), so the end-of-session "
              "checks never ran", file=sys.stderr)
        return code if code not in (0, None) else 1
    return code


@command("test-offline", rest="pytest_args")
@option("--series", dest="series_path", type=Path, default=Path("series/default.yaml"),
        show_default=True, help="series file")  # fmt: skip
@option("--at", choices=["patch", "tip"], default="patch", show_default=True,
        help="'tip' also re-runs every patch's tests on the full series")  # fmt: skip
@option("--tree-source", choices=["auto", "engine", "overlay", "dirs"], default="auto",
        show_default=True, help="where prefixes come from (see ast_tests/README.md)")  # fmt: skip
def test_offline_command(series_path: Path, at: str, tree_source: str, pytest_args: list[str]) -> int:
    """Each patch's offline tests: patched must pass, control (without the patch) must fail."""
    return run_offline(series_path, at=at, tree_source=tree_source, extra=tuple(pytest_args))
