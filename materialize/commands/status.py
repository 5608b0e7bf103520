"""``materialize status`` and ``materialize check``: where the series stands on its pins.

Like ``apply``, a long series prints a summary line and only the rows worth a look (a patch that
failed, was not reached, or needs offsets or fuzz); ``-v`` prints every row, ``--json`` everything.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from materialize.commands import printable
from materialize.commands.apply import SHORT_SERIES
from materialize.console import columns, emit_json, progress_wanted, write
from materialize.errors import PatchApplyError

if TYPE_CHECKING:
    from materialize.report import PatchReport
    from materialize.series import Series


def _apply_all(series: Series) -> tuple[list[PatchReport], PatchApplyError | None]:
    from materialize.engine import materialize

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


def _worth_a_look(row: dict) -> bool:
    return row["state"] != "applied" or bool(row["offset"] or row["fuzz"])


def _table(rows: list[dict]) -> str:
    cells, colors = [], []
    for r in rows:
        hunks = "-" if r["clean"] is None else f"{r['clean']}/{r['offset']}/{r['fuzz']}"
        lines = "-" if r["added"] is None else f"+{r['added']}/-{r['removed']}"
        cells.append([str(r["position"]), r["patch"], r["target"], r["state"], hunks, str(r["files"] or "-"), lines,
                      r["flag"] or "", str(len(r["tests"]))])
        tint = {"applied": "green", "FAILED": "red"}.get(r["state"])
        hunk_tint = "red" if r["fuzz"] else ("yellow" if r["offset"] else None)
        colors.append([None, None, None, tint, hunk_tint, None, None, None, None])
    headers = ("#", "patch", "target", "state", "clean/offset/fuzz", "files", "lines +/-", "flag", "tests")
    return columns(headers, cells, right=frozenset({0, 5}), colors=colors)


def _summary(rows: list[dict]) -> str:
    applied = [r for r in rows if r["state"] == "applied"]
    fuzz = sum(1 for r in applied if r["fuzz"])
    offsets = sum(1 for r in applied if r["offset"] and not r["fuzz"])
    failed = sum(1 for r in rows if r["state"] == "FAILED")
    return (f"{len(rows)} patches: {len(applied)} applied ({len(applied) - offsets - fuzz} clean, {offsets} with "
            f"offsets, {fuzz} with fuzz), {failed} failed, {len(rows) - len(applied) - failed} not reached")


def status(series_path: Path, as_json: bool, verbose: bool = False) -> int:
    from materialize.series import load_series

    series = load_series(series_path)
    reports, failure = _apply_all(series)
    rows = _rows(series, reports, failure)
    if as_json:
        emit_json({"series": str(series.path), "patches": rows, "error": str(failure) if failure else None})
    else:
        every_row = verbose or len(rows) <= SHORT_SERIES
        shown = rows if every_row else [r for r in rows if _worth_a_look(r)]
        text = _table(shown) if shown else ""
        if len(rows) > SHORT_SERIES:
            text += _summary(rows) + "\n"
        write(text or "the series is empty")
        if failure:
            write(printable(str(failure)), stderr=True)
    return 1 if failure else 0


def check(series_path: Path, as_json: bool) -> int:
    """Exit 1 when any patch fails or needs fuzz: a checked series is exact."""
    from materialize.series import load_series

    series = load_series(series_path)
    reports, failure = _apply_all(series)
    problems = [printable(str(failure))] if failure else []
    warnings = []
    for r in reports:
        for h in r.hunks:
            if h.status == "fuzz":
                problems.append(f"{r.name}: {printable(h.file)} {h.header}: needs fuzz {h.fuzz} (offset {h.offset:+d})")
            elif h.status == "offset":
                warnings.append(f"{r.name}: {printable(h.file)} {h.header}: applies at offset {h.offset:+d}")
    if as_json:
        emit_json({"ok": not problems, "problems": problems, "warnings": warnings})
    else:
        lines = [f"warning: {w}" for w in warnings] + [f"error: {p}" for p in problems]
        if lines:
            write("\n".join(lines), stderr=True)
        if not problems:
            write(f"ok: {len(reports)} patches apply exactly ({len(warnings)} with offsets)")
    return 1 if problems else 0
