"""``materialize status`` and ``materialize check``: where the series stands on its pins."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from materialize.console import emit_json, err, out, progress_wanted
from materialize.engine import materialize
from materialize.errors import PatchApplyError
from materialize.report import PatchReport
from materialize.series import Series, load_series


def _apply_all(series: Series) -> tuple[list[PatchReport], PatchApplyError | None]:
    try:
        return materialize(series, progress=progress_wanted()).reports, None
    except PatchApplyError as exc:
        return list(getattr(exc, "reports", [])), exc


def _rows(series: Series, reports: list[PatchReport], failure: PatchApplyError | None) -> list[dict]:
    by_name = {r.name: r for r in reports}
    failed_name = getattr(getattr(failure, "entry", None), "name", None)
    rows = []
    for entry in series.patches:
        report = by_name.get(entry.name)
        state = "applied" if report else ("FAILED" if entry.name == failed_name else "not reached")
        counts = report.counts() if report else {}
        rows.append({
            "position": entry.position, "patch": entry.name, "target": entry.target, "state": state,
            "clean": counts.get("clean"), "offset": counts.get("offset"), "fuzz": counts.get("fuzz"),
            "files": len(report.files) + len(report.deleted) if report else None,
            "added": report.added if report else None, "removed": report.removed if report else None,
            "flag": entry.flag, "tests": list(entry.spec.tests), "status": entry.spec.status,
        })
    return rows


def _table(rows: list[dict]) -> Table:
    table = Table(title="series status")
    for column in ("#", "patch", "target", "state", "clean/offset/fuzz", "files", "lines +/-", "flag", "tests"):
        table.add_column(column)
    for r in rows:
        hunks = "-" if r["clean"] is None else f"{r['clean']}/{r['offset']}/{r['fuzz']}"
        lines = "-" if r["added"] is None else f"+{r['added']}/-{r['removed']}"
        state = {"applied": "[green]applied[/]", "FAILED": "[red]FAILED[/]"}.get(r["state"], r["state"])
        table.add_row(str(r["position"]), r["patch"], r["target"], state, hunks, str(r["files"] or "-"), lines,
                      r["flag"] or "", str(len(r["tests"])))
    return table


def status(series_path: Path, as_json: bool) -> int:
    series = load_series(series_path)
    reports, failure = _apply_all(series)
    rows = _rows(series, reports, failure)
    if as_json:
        emit_json({"series": str(series.path), "patches": rows, "error": str(failure) if failure else None})
    else:
        out.print(_table(rows))
        if failure:
            err.print(str(failure), markup=False)
    return 1 if failure else 0


def check(series_path: Path, as_json: bool) -> int:
    """Exit 1 when any patch fails or needs fuzz: a checked series is exact."""
    series = load_series(series_path)
    reports, failure = _apply_all(series)
    problems = [str(failure)] if failure else []
    warnings = []
    for r in reports:
        for h in r.hunks:
            if h.status == "fuzz":
                problems.append(f"{r.name}: {h.file} {h.header}: needs fuzz {h.fuzz} (offset {h.offset:+d})")
            elif h.status == "offset":
                warnings.append(f"{r.name}: {h.file} {h.header}: applies at offset {h.offset:+d}")
    if as_json:
        emit_json({"ok": not problems, "problems": problems, "warnings": warnings})
    else:
        for w in warnings:
            err.print(f"warning: {w}", markup=False)
        for p in problems:
            err.print(f"error: {p}", markup=False)
        if not problems:
            out.print(f"ok: {len(reports)} patches apply exactly ({len(warnings)} with offsets)")
    return 1 if problems else 0
