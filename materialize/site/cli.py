"""``materialize report``: write the static HTML report of a series (wiring only).

Registered lazily by ``materialize.cli`` (``materialize.site.cli:report_command``); Jinja2, Pygments
and the bisect statistics are imported inside the command, never at ``materialize --help``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from materialize.cliargs import command, existing_dir, option
from materialize.console import write
from materialize.errors import MaterializeError

DEFAULT_SERIES = Path("series/default.yaml")
DEFAULT_RUNS = Path("bench/runs")
DEFAULT_PROFILES = Path("serve/profiles")
DEFAULT_OFFLINE = Path("build/offline/results.json")
DEFAULT_OUT = Path("build/report")


class ReportDependencyError(MaterializeError):
    """The report's rendering libraries are not installed."""

    exit_code = 2


@command("report")
@option("--series", dest="series_path", type=Path, default=DEFAULT_SERIES,
        show_default=True, help="series file")
@option("--runs", dest="runs", type=Path, action="append",
        help=f"ledger files or directories (repeatable; default {DEFAULT_RUNS})")
@option("-o", "--out", dest="out_dir", type=Path, default=DEFAULT_OUT,
        show_default=True, help="directory to write index.html into")
@option("--from-output", dest="output_dir", type=existing_dir,
        help="describe an existing output (e.g. build/materialized/latest) instead of the engine's "
                   "cached materialization of the series")
@option("--profiles", dest="profiles_dir", type=Path,
        default=DEFAULT_PROFILES, show_default=True, help="serving profiles")
@option("--work-dir", default=None,
        help="work directory holding bisect/ (default $MATERIALIZE_WORK, else work/ next to series/)")
@option("--offline-results", dest="offline_path", type=Path,
        default=DEFAULT_OFFLINE, show_default=True, help="JSON the offline test plugin recorded")
@option("--check-ids", action=argparse.BooleanOptionalAction, default=True,
        help="recompute each record's prefix id with the engine (cached), as runs validate does")
@option("--timestamp", action="store_true", help="print the generation time (off: same inputs, same bytes)")
def report_command(series_path: Path, runs: list[Path] | None, out_dir: Path, output_dir: Path | None,
                   profiles_dir: Path, work_dir: str | None, offline_path: Path, check_ids: bool,
                   timestamp: bool) -> int:
    """Write a self-contained static HTML report: series, evidence, bisect, serving."""
    try:
        from materialize.site import render
    except ImportError as exc:
        raise ReportDependencyError(f"materialize report needs Jinja2 and Pygments ({exc.name} is missing): "
                                    f"pip install 'materialize[report]'") from None
    from materialize.bisect.api import work_dir as bisect_work_dir
    from materialize.series import load_series
    from materialize.site import collect

    series = load_series(series_path)
    source = collect.from_output(output_dir) if output_dir else collect.from_engine(series)
    generated = None
    if timestamp:
        from datetime import UTC, datetime

        generated = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = collect.collect(
        series, source, runs=runs or [DEFAULT_RUNS], work_dir=bisect_work_dir(work_dir, str(series_path)),
        profiles_dir=profiles_dir, offline_path=offline_path, check_ids=check_ids, generated=generated,
    )
    path = render.write(report, out_dir)
    bad = sum(1 for g in report.groups for rec in g.records if not rec.valid)
    records = sum(len(g.records) for g in report.groups)
    write(f"materialization {report.materialization_id or '(series does not apply)'}: {len(report.rows)} "
          f"patches, {records} run record(s) ({bad} invalid), bisect: "
          f"{'yes' if report.bisect else 'none'}, {len(report.plans)} profile(s)")
    write(f"wrote {path}")
    return 0
