"""``materialize apply``: materialize a selection of the series and publish it with a manifest."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from materialize.console import emit_json, err, out, progress_wanted
from materialize.engine import materialize
from materialize.output import manifest, write_output
from materialize.report import PatchReport
from materialize.series import load_series


def hunk_table(reports: list[PatchReport]) -> Table:
    """One row per patch with hunk outcomes; fuzz and offsets are visible at a glance."""
    table = Table(title="applied patches", show_lines=False)
    for column in ("#", "patch", "target", "clean", "offset", "fuzz", "files", "+/-", "cache"):
        table.add_column(column, justify="right" if column in ("#", "clean", "offset", "fuzz", "files") else "left")
    for r in reports:
        c = r.counts()
        table.add_row(str(r.position), r.name, r.target, str(c["clean"]),
                      f"[yellow]{c['offset']}[/]" if c["offset"] else "0",
                      f"[red]{c['fuzz']}[/]" if c["fuzz"] else "0", str(len(r.files) + len(r.deleted)),
                      f"+{r.added}/-{r.removed}", "reused" if r.reused else "applied")
    return table


def hunk_details(reports: list[PatchReport]) -> list[str]:
    lines = []
    for r in reports:
        for h in r.hunks:
            note = h.status if h.status == "clean" else f"{h.status} (offset {h.offset:+d}, fuzz {h.fuzz})"
            lines.append(f"{r.name}: {h.file} {h.header}: {note}")
    return lines


def run(series_path: Path, upto: str | None, without: tuple[str, ...], overlay: bool, out_dir: Path | None,
        as_json: bool, verbose: bool) -> int:
    series = load_series(series_path)
    m = materialize(series, upto=upto, without=without, progress=progress_wanted())
    directory = write_output(m, out_dir, overlay=overlay)
    if as_json:
        emit_json({**manifest(m, overlay=overlay), "directory": str(directory)})
        return 0
    out.print(hunk_table(m.reports))
    if verbose:
        for line in hunk_details(m.reports):
            out.print(line)
    err.print(f"materialized {len(m.applied)} of {len(series.patches)} patches into {directory}")
    out.print(f"materialization id: [bold]{m.id}[/]")
    return 0
