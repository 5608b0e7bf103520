"""``materialize apply``: materialize a selection of the series and publish it with a manifest.

Printing must not cost more than the work (a 109-patch series re-applied from the cache takes well
under a second): a short series prints one row per patch; a long one prints a one-line summary plus
rows only for the patches worth a look (offsets, fuzz, failures). ``-v`` prints every row, ``-vv``
also every hunk, ``--json`` the manifest. Rows are plain aligned text (colored on a terminal only).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from materialize.commands import printable
from materialize.console import columns, emit_json, paint, progress_wanted, write
from materialize.report import PatchReport

# Up to this many patches every row is printed by default; beyond it, only the rows worth a look.
SHORT_SERIES = 20


def worth_a_look(report: PatchReport) -> bool:
    """A patch that did not apply exactly as written: offsets, fuzz or failed hunks."""
    counts = report.counts()
    return bool(counts["offset"] or counts["fuzz"] or counts["failed"])


def patch_rows(reports: list[PatchReport], *, every_row: bool) -> str:
    """The per-patch table: every row, or only the rows worth a look (empty string when none are)."""
    shown = reports if every_row else [r for r in reports if worth_a_look(r)]
    if not shown:
        return ""
    rows, colors = [], []
    for r in shown:
        c = r.counts()
        rows.append([str(r.position), r.name, r.target, str(c["clean"]), str(c["offset"]), str(c["fuzz"]),
                     str(len(r.files) + len(r.deleted)), f"+{r.added}/-{r.removed}",
                     "reused" if r.reused else "applied"])
        colors.append([None, None, None, None, "yellow" if c["offset"] else None, "red" if c["fuzz"] else None,
                       None, None, None])
    headers = ("#", "patch", "target", "clean", "offset", "fuzz", "files", "+/-", "cache")
    return columns(headers, rows, right=frozenset({0, 3, 4, 5, 6}), colors=colors)


def summary(reports: list[PatchReport]) -> str:
    """One line: how many patches applied cleanly, with offsets, with fuzz; how many came from the cache."""
    offsets = sum(1 for r in reports if r.counts()["offset"] and not r.counts()["fuzz"])
    fuzz = sum(1 for r in reports if r.counts()["fuzz"])
    clean = len(reports) - offsets - fuzz
    reused = sum(1 for r in reports if r.reused)
    hunks = sum(len(r.hunks) for r in reports)
    return (f"{len(reports)} patches, {hunks} hunks: {clean} clean, "
            f"{paint(f'{offsets} with offsets', 'yellow' if offsets else None)}, "
            f"{paint(f'{fuzz} with fuzz', 'red' if fuzz else None)}; "
            f"{len(reports) - reused} applied, {reused} reused from the cache")


def hunk_details(reports: list[PatchReport]) -> list[str]:
    lines = []
    for r in reports:
        for h in r.hunks:
            note = h.status if h.status == "clean" else f"{h.status} (offset {h.offset:+d}, fuzz {h.fuzz})"
            lines.append(f"{r.name}: {printable(h.file)} {h.header}: {note}")
    return lines


def report_text(reports: list[PatchReport], verbose: int) -> str:
    """What ``apply`` prints before the id: rows (all of them for a short series or ``-v``) and,
    for a long series, the summary line; ``-vv`` adds one line per hunk."""
    every_row = verbose >= 1 or len(reports) <= SHORT_SERIES
    text = patch_rows(reports, every_row=every_row)
    if not every_row or len(reports) > SHORT_SERIES:
        text += summary(reports) + "\n"
    if verbose >= 2:
        text += "".join(line + "\n" for line in hunk_details(reports))
    return text


def run(series_path: Path, upto: str | None, without: tuple[str, ...], overlay: bool, out_dir: Path | None,
        as_json: bool, verbose: int) -> int:
    from materialize.engine import materialize
    from materialize.filecache import FileCache
    from materialize.output import manifest, write_output
    from materialize.series import load_series
    from materialize.store import Store

    series = load_series(series_path)
    store = Store.open()
    # A full output of a tree imported now: write the file cache while the import streams.
    with contextlib.nullcontext() if overlay else FileCache(store).warming():
        m = materialize(series, upto=upto, without=without, store=store, progress=progress_wanted())
    directory = write_output(m, out_dir, overlay=overlay)
    if as_json:
        emit_json({**manifest(m, overlay=overlay), "directory": str(directory)})
        return 0
    write(report_text(m.reports, verbose) + f"materialization id: {paint(m.id, 'bold')}")
    write(f"materialized {len(m.applied)} of {len(series.patches)} patches into {directory}", stderr=True)
    return 0
