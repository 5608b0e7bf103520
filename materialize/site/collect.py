"""Gather what the report shows, as plain data: the series, its materialization, the ledger, a bisect,
the serving plans. Nothing here formats HTML; nothing here applies a patch by itself.

The report is a consumer, like serve and bisect: the per-hunk outcomes come from a manifest (an
existing output's ``manifest.json``, or the one ``output.manifest`` builds for the engine's cached
materialization, which is never published and never moves ``latest``); validity of run records
comes from ``bisect.validate`` exactly as ``runs validate`` computes it; bounds from
``bisect.stats.describe_rate``; plans from ``serve.plan.build_plan`` and their differences from
``serve.diff``. Every list is in a fixed order and no clock is read unless asked, so the same inputs
give the same report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from materialize.atomic import read_json
from materialize.errors import MaterializeError, PatchApplyError
from materialize.output import MAX_MANIFEST  # (its results.json too: a checkout's JSON of that size at most)
from materialize.series import PatchEntry, Series

ARMS = ("patched", "control", "tip")


def display(path: str | Path) -> str:
    """A path as the report prints it: relative to the working directory when inside it, so the page
    does not carry the machine's absolute layout (and two checkouts give the same bytes)."""
    p = Path(path)
    if not p.is_absolute():
        return str(p)
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def anchor(text: str) -> str:
    """An HTML id from free text (ledger file:line, ids): letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower()


# ---------------------------------------------------------------------------------------------
# The materialization


@dataclass
class Source:
    """Which materialization the report describes and where its manifest came from."""

    manifest: dict[str, Any] | None
    how: str  # one line for the page: "read from DIR/manifest.json" / "computed by the engine (not published)"
    out_dir: Path | None  # the existing output read (--from-output), else None
    error: str | None = None  # the series does not apply: the patch, file and hunk
    failed_patch: str | None = None


def from_output(directory: Path) -> Source:
    """Read an existing output (e.g. build/materialized/latest): nothing is materialized."""
    path = directory / "manifest.json"
    try:
        manifest = read_json(path, MAX_MANIFEST)
    except FileNotFoundError:
        raise MaterializeError(f"{path}: no manifest (not a materialized output)") from None
    except (ValueError, OSError) as exc:
        raise MaterializeError(f"{path}: not a manifest: {getattr(exc, 'strerror', None) or exc}") from None
    return Source(manifest, f"read from {display(path)}", directory.resolve())


def from_engine(series: Series) -> Source:
    """The whole series through the engine's cache, without publishing an output or moving ``latest``."""
    from materialize.engine import materialize
    from materialize.output import manifest

    try:
        m = materialize(series)
    except PatchApplyError as exc:
        partial = {"id": None, "patches": [_report_entry(r, series) for r in getattr(exc, "reports", [])],
                   "targets": {}}
        failed = getattr(getattr(exc, "entry", None), "name", None)
        return Source(partial, "computed by the engine (not published)", None, str(exc), failed)
    return Source(manifest(m, overlay=False), "computed by the engine from its cache (not published; latest not moved)",
                  None)


def _report_entry(report: Any, series: Series) -> dict[str, Any]:
    """A manifest ``patches[]`` entry from an engine report (for a series that stops applying)."""
    entry = series.find(report.name)
    return {"position": report.position, "name": report.name, "target": report.target, "sha256": report.sha256,
            "flag": entry.flag, "banner": entry.banner, "status": entry.spec.status, "files": report.files,
            "deleted": report.deleted,
            "hunks": [{"file": h.file, "header": h.header, "status": h.status, "offset": h.offset, "fuzz": h.fuzz}
                      for h in report.hunks]}


# ---------------------------------------------------------------------------------------------
# Series rows


@dataclass
class EvidenceLink:
    text: str
    href: str | None  # "#anchor" inside the page, or None when the ledger has no such record
    note: str = ""


@dataclass
class PatchRow:
    position: int
    name: str
    target: str
    status: str
    state: str  # applied | FAILED | not reached | changed since materialization | not in this output
    flag: str | None
    banner: str | None
    clean: int | None
    offset: int | None
    fuzz: int | None
    files: int | None
    added: int
    removed: int
    why: str
    evidence: list[EvidenceLink]
    offline: dict[str, dict[str, Any]] | None  # arm -> {"text": "ok/total", "ok": bool, "title"}; None: no run
    hunks: list[dict[str, Any]]
    diff: str  # the patch text (highlighted by the renderer)
    tests: list[str] = field(default_factory=list)


def line_counts(entry: PatchEntry) -> tuple[int, int]:
    """Lines added and removed, counted on the parsed patch as the engine counts them."""
    from materialize.patching import parse_patch

    patchset = parse_patch(entry.read(), source=str(entry.path), strip=entry.strip)
    added = removed = 0
    for fp in patchset.files:
        for hunk in fp.hunks:
            added += sum(1 for line in hunk.lines if line.kind == "+")
            removed += sum(1 for line in hunk.lines if line.kind == "-")
    return added, removed


def _arm_cell(counts: dict[str, int]) -> dict[str, Any]:
    """One arm's cell: "ok/total", green only when every run met the arm's requirement."""
    notes = [f"{counts[k]} {k}" for k in ("errored", "weak") if counts.get(k)]
    return {"text": f"{counts['ok']}/{counts['total']}", "ok": counts["ok"] == counts["total"] and not counts["errored"],
            "notes": ", ".join(notes)}


def series_rows(series: Series, source: Source, offline: dict[str, dict[str, dict[str, int]]] | None,
                evidence_index: dict[str, str]) -> list[PatchRow]:
    """One row per patch, in series order."""
    applied = {p["name"]: p for p in (source.manifest or {}).get("patches", [])}
    rows = []
    for entry in series.patches:
        got = applied.get(entry.name)
        sha = entry.sha256()
        if got is not None:
            state = "applied" if got.get("sha256") in (None, sha) else "changed since materialization"
        elif entry.name == source.failed_patch:
            state = "FAILED"
        elif source.error:
            state = "not reached"
        else:
            state = "not in this output"
        hunks = list(got.get("hunks", [])) if got else []
        counts = {s: sum(1 for h in hunks if h.get("status") == s) for s in ("clean", "offset", "fuzz")}
        added, removed = line_counts(entry)
        results = (offline or {}).get(entry.name)
        rows.append(PatchRow(
            position=entry.position, name=entry.name, target=entry.target, status=entry.spec.status, state=state,
            flag=entry.flag, banner=entry.banner,
            clean=counts["clean"] if got else None, offset=counts["offset"] if got else None,
            fuzz=counts["fuzz"] if got else None,
            files=len(got.get("files", [])) + len(got.get("deleted", [])) if got else None,
            added=added, removed=removed, why=entry.spec.why.strip(),
            evidence=[_evidence_link(text, evidence_index) for text in entry.spec.evidence],
            offline=None if results is None else {arm: _arm_cell(c) for arm, c in results.items()},
            hunks=hunks, diff=entry.read().decode("utf-8", "replace"), tests=list(entry.spec.tests),
        ))
    return rows


def _evidence_link(text: str, index: dict[str, str]) -> EvidenceLink:
    """A series ``evidence:`` entry: a ledger file:line, a ledger file, or a materialization id prefix."""
    key = text.strip()
    for candidate in (key, key.removeprefix("./")):
        if candidate in index:
            return EvidenceLink(text, index[candidate])
    ids = sorted({v for k, v in index.items() if k.startswith("#mid:") and k[5:].startswith(key)} if key else set())
    if len(ids) == 1:
        return EvidenceLink(text, ids[0])
    return EvidenceLink(text, None, "not in the ledger given to the report")


# ---------------------------------------------------------------------------------------------
# Offline test results


def read_offline(path: Path, series: Series) -> tuple[dict[str, dict[str, dict[str, int]]] | None, str]:
    """Per patch name, per arm, ``{"ok", "total", "errored", "weak"}`` from the offline plugin's JSON
    (``build/offline/results.json``, shape in ast_tests/README.md "Results file"); or None and why.

    ``ok`` counts the runs that met their arm's requirement (a control is ok when it failed by its own
    assertion). A patch the last run did not reach has no arms.
    """
    if not path.is_file():
        return None, f"no recorded run ({display(path)} not found; make test-offline writes it)"
    try:
        data = read_json(path, MAX_MANIFEST)
    except (ValueError, OSError) as exc:
        return None, f"no recorded run ({display(path)} is not JSON: {getattr(exc, 'strerror', None) or exc})"
    rows = data.get("patches") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None, f"no recorded run ({display(path)} has no 'patches' list)"
    recorded = data.get("series")
    if isinstance(recorded, str) and Path(recorded).resolve() != series.path:
        return None, f"no recorded run of this series ({display(path)} is a run of {display(recorded)})"
    from materialize.offline.report import run_inputs

    recorded_inputs = data.get("inputs")
    if not isinstance(recorded_inputs, dict):
        return None, f"no usable run ({display(path)} does not say which code it ran on; run make test-offline)"
    now = run_inputs(series)
    for key, what in (("pins", "the pins"), ("tests", "the offline tests")):
        if recorded_inputs.get(key) != now[key]:
            return None, f"stale run ({display(path)}): {what} changed since it ran; run make test-offline"
    # A row's arms ran on the patches up to it (with --at tip, on all of them): from the first patch
    # that differs from the run's (edited, inserted, removed, moved), later rows are stale.
    ran = [(row.get("name"), row.get("sha256")) for row in rows if isinstance(row, dict)]
    current = [(entry.name, entry.sha256()) for entry in series.patches]
    first = next((k for k, (a, b) in enumerate(zip(ran, current, strict=False)) if a != b), min(len(ran), len(current)))
    if data.get("at") == "tip" and ran != current:
        first = 0
    fresh = {name for name, _ in current[:first]}
    out: dict[str, dict[str, dict[str, int]]] = {}
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("name"), str) or row["name"] not in fresh:
            continue
        arms: dict[str, dict[str, int]] = {}
        given = row.get("arms")
        if isinstance(given, dict):
            for arm in ARMS:
                counts = given.get(arm)
                if isinstance(counts, dict) and counts.get("total"):
                    arms[arm] = {k: int(counts.get(k) or 0) for k in ("ok", "total", "errored", "weak")}
        else:  # counts from the individual runs
            for result in row.get("results") or []:
                if isinstance(result, dict) and result.get("arm") in ARMS:
                    c = arms.setdefault(result["arm"], {"ok": 0, "total": 0, "errored": 0, "weak": 0})
                    c["total"] += 1
                    c["ok"] += bool(result.get("ok"))
                    c["errored"] += result.get("outcome") == "errored"
                    c["weak"] += bool(result.get("weak"))
        out[row["name"]] = arms
    problems = data.get("problems") or []
    how = f"last run recorded in {display(path)}"
    if data.get("at"):
        how += f" (--at {data['at']}, exit status {data.get('exitstatus', '?')})"
    if problems:
        how += f"; {len(problems)} problem(s): " + "; ".join(str(p) for p in problems[:3])
    if first < len(current):
        how += (f"; stale from position {first + 1} ({current[first][0]}): the patches there changed since the "
                "run, so those rows show no result")
    return out, how


# ---------------------------------------------------------------------------------------------
# Evidence (the run ledger)


@dataclass
class RecordView:
    where: str
    anchor: str
    valid: bool
    problems: list[str]
    host: str = ""
    time: str = ""
    profile: str = ""
    position: int | None = None
    gates: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    notes: str = ""


@dataclass
class RecordGroup:
    materialization_id: str
    anchor: str
    position: int | None
    patch: str
    records: list[RecordView]

    @property
    def valid(self) -> int:
        return sum(r.valid for r in self.records)


def evidence(series: Series, runs: list[Path], check_ids: bool) -> tuple[list[RecordGroup], dict[str, str]]:
    """Ledger records grouped by materialization id, each checked as ``runs validate`` checks it."""
    from materialize.bisect.api import id_checker
    from materialize.bisect.candidates import SeriesIndex
    from materialize.bisect.stats import describe_rate
    from materialize.bisect.validate import check_records
    from materialize.ledger import iter_ledger, ledger_files

    files = ledger_files(runs)
    existing = [f for f in files if f.exists()]
    checked = check_records(iter_ledger(existing), SeriesIndex(series), id_checker(series, None, check_ids))
    names = {p.position: p.name for p in series.patches}
    groups: dict[str, RecordGroup] = {}
    index: dict[str, str] = {}
    for c in checked:
        where = f"{display(c.line.source)}:{c.line.line}"
        rec = c.line.record
        raw = c.line.raw or {}
        mid = rec.materialization_id if rec else str(raw.get("materialization_id") or "(no id)")
        view = RecordView(where=where, anchor="rec-" + anchor(where), valid=c.ok, problems=list(c.problems),
                          position=c.position)
        if rec is not None:
            view.host, view.time, view.profile, view.notes = rec.host, rec.time, rec.profile or "", rec.notes
            gate_names = sorted({g.name for g in rec.gates})
            for name in gate_names:
                g = rec.gate(name)
                assert g is not None
                view.gates.append({"name": name, "n": f"{g.failures}/{g.requests}", "censored": g.censored,
                                   "bound": describe_rate(g.failures, g.requests, 0.95)})
            for name in sorted({m.name for m in rec.metrics}):
                m = rec.metric(name)
                assert m is not None
                ordered = sorted(m.samples)
                median = ordered[len(ordered) // 2] if len(ordered) % 2 else (
                    ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
                view.metrics.append({"name": name, "unit": m.unit, "n": len(m.samples), "median": f"{median:.6g}",
                                     "range": f"{ordered[0]:.6g}..{ordered[-1]:.6g}"})
        group = groups.get(mid)
        if group is None:
            position = c.position if c.position is not None else (rec.position if rec else None)
            group = groups[mid] = RecordGroup(mid, "mid-" + anchor(mid), position,
                                              "(upstream alone)" if position == 0 else names.get(position or -1, ""),
                                              [])
        group.records.append(view)
        index.setdefault(where, "#" + view.anchor)
        index.setdefault(display(c.line.source), "#" + group.anchor)
        index.setdefault("#mid:" + mid, "#" + group.anchor)
    ordered = sorted(groups.values(), key=lambda g: (g.position is None, g.position or 0, g.materialization_id))
    return ordered, index


# ---------------------------------------------------------------------------------------------
# Bisect


@dataclass
class BisectView:
    mode: str
    what: str
    status_text: str
    log: str
    chart: str
    verdict: str
    series: str
    table: list[dict[str, str]]


def bisect_view(series: Series, work_dir: Path) -> BisectView | None:
    """The bisect in ``work_dir/bisect`` (in progress or finished), or None when there is none."""
    from materialize.bisect import session
    from materialize.bisect.api import position_evidence
    from materialize.bisect.candidates import patch_names
    from materialize.bisect.report import render
    from materialize.bisect.state import StateStore, render_log
    from materialize.site import svg

    store = StateStore(work_dir)
    if not store.exists():
        return None
    state = store.load()
    step = session.decide(state)
    names = patch_names(series)
    table: list[dict[str, str]] = []
    if state.mode == "gate" and step.posterior is not None:
        post = step.posterior
        probs = {int(c): float(p) for c, p in zip(post.culprits, post.probs, strict=True)}
        bars = [svg.Bar(str(k), probs[k], f"position {k} {names.get(k, '')}: P(first bad) = {probs[k]:.3f}",
                        "bar best" if k == step.culprit else "bar") for k in sorted(probs)]
        chart = svg.bar_chart(bars, y_label="P(first bad patch)", x_label="series position (prefix length)",
                              threshold=state.confidence, threshold_label=f"confidence {state.confidence:g}",
                              chart_id="bisect-chart")
        for k in range(state.good, state.bad + 1):
            table.append({"position": str(k), "patch": names.get(k, "(upstream alone)" if k == 0 else ""),
                          "p": f"{probs[k]:.3f}" if k in probs else "-",
                          "evidence": position_evidence(state, k) or ("skipped" if k in state.skipped else "")})
        what = f"gate {state.gate}"
    else:
        samples = session.metric_samples(state)
        verdicts = step.metric.verdicts if step.metric else {}
        good = sorted(samples.get(state.good, []))
        band = None
        if good:
            med = good[len(good) // 2] if len(good) % 2 else (good[len(good) // 2 - 1] + good[len(good) // 2]) / 2
            band = (med * (1 - state.threshold), med * (1 + state.threshold))
        columns = []
        for k in sorted(samples):
            verdict = {state.good: "good", state.bad: "bad"}.get(k, verdicts.get(k, ""))
            columns.append(svg.Column(str(k), samples[k], f"sample {verdict}".strip()))
            table.append({"position": str(k), "patch": names.get(k, "(upstream alone)" if k == 0 else ""),
                          "p": str(len(samples[k])), "evidence": verdict})
        chart = svg.samples_chart(columns, band=band, y_label=state.metric or "metric",
                                  x_label="series position (prefix length)",
                                  band_label=f"noise band: good end's median ± {state.threshold * 100:g}%",
                                  chart_id="bisect-chart")
        what = f"metric {state.metric} ({state.direction} is better, band ±{state.threshold * 100:g}%)"
    if step.status == "found":
        verdict = f"position {step.culprit} {names.get(step.culprit or 0, '')} is the first bad patch"
        if step.probability is not None:
            verdict += f" (P={step.probability:.3f})"
    elif step.status == "run":
        verdict = "in progress: next " + ", ".join(f"position {p} x{r}" for p, r in step.runs)
    else:
        verdict = f"{step.status}: {step.message}"
    return BisectView(mode=state.mode, what=what, status_text=render(state, step, names),
                      log=render_log(state), chart=chart, verdict=verdict, series=display(state.series), table=table)


# ---------------------------------------------------------------------------------------------
# Serving


@dataclass
class PlanView:
    profile: str
    path: str
    description: str
    error: str | None = None
    plan: dict[str, Any] | None = None
    argv: str = ""
    plan_hash: str = ""


@dataclass
class PlanDiff:
    a: str
    b: str
    lines: list[str]


def serving(series: Series, source: Source, profiles_dir: Path) -> tuple[list[PlanView], list[PlanDiff]]:
    """Each profile of this series: its plan and how the plans differ. The plan is ``serve plan``'s own
    (``serve.up.prepare``: in memory, nothing written; ``--from-output`` as ``serve plan --from-output``),
    so the plan hash on the page is the one ``serve plan`` prints and ``serve up`` records."""
    import shlex

    from materialize.serve.diff import diff_plans
    from materialize.serve.profile import load_profile
    from materialize.serve.up import prepare

    views: list[PlanView] = []
    if not profiles_dir.is_dir():
        return views, []
    for path in sorted(profiles_dir.glob("*.y*ml")):
        try:
            profile = load_profile(path)
        except MaterializeError as exc:
            views.append(PlanView(path.stem, display(path), "", error=str(exc)))
            continue
        if profile.series_path != series.path:
            continue
        view = PlanView(profile.name, display(path), profile.spec.description or "")
        try:
            plan = prepare(path, manifest_dir=source.out_dir).plan
        except MaterializeError as exc:
            view.error = str(exc)
        else:
            data = plan.to_dict()
            data["series"] = display(data["series"])
            view.plan = data
            view.argv = " ".join(shlex.quote(a) for a in plan.argv)
            view.plan_hash = plan.hash()[:16]
        views.append(view)
    planned = [v for v in views if v.plan is not None]
    diffs = [PlanDiff(a.profile, b.profile, diff_plans(a.plan or {}, b.plan or {}))
             for i, a in enumerate(planned) for b in planned[i + 1:]]
    return views, diffs


# ---------------------------------------------------------------------------------------------


@dataclass
class Report:
    series: str
    materialization_id: str | None
    source: str
    error: str | None
    targets: list[dict[str, str]]
    rows: list[PatchRow]
    offline_note: str
    groups: list[RecordGroup]
    runs: list[str]
    bisect: BisectView | None
    work_dir: str
    plans: list[PlanView]
    plan_diffs: list[PlanDiff]
    profiles_dir: str
    generated: str | None


def collect(series: Series, source: Source, *, runs: list[Path], work_dir: Path, profiles_dir: Path,
            offline_path: Path, check_ids: bool = True, generated: str | None = None) -> Report:
    """Everything the page shows; ``generated`` is a timestamp only when the user asked for one."""
    offline, offline_note = read_offline(offline_path, series)
    groups, index = evidence(series, runs, check_ids)
    manifest = source.manifest or {}
    targets = []
    for name, spec in series.targets.items():  # as the series file declares them
        info = manifest.get("targets", {}).get(name, {})
        pin = spec.pin.model_dump()
        label = pin.get("requirement") or pin.get("url") or pin.get("path") or ""
        rev = pin.get("rev")
        targets.append({"name": name, "pin": f"{pin['kind']}: {label}{'@' + rev if rev else ''}",
                        "tree": str(info.get("tree", ""))[:12],
                        "changed": str(len(info.get("changed", []))) if info else "-"})
    plans, diffs = serving(series, source, profiles_dir)
    how = source.how
    if manifest.get("series") and Path(manifest["series"]).resolve() != series.path:
        how += f"; NOTE: that output is of {display(manifest['series'])}, not of this series"
    return Report(
        series=display(series.path), materialization_id=manifest.get("id"), source=how, error=source.error,
        targets=targets, rows=series_rows(series, source, offline, index), offline_note=offline_note,
        groups=groups, runs=[display(p) for p in runs], bisect=bisect_view(series, work_dir),
        work_dir=display(work_dir), plans=plans, plan_diffs=diffs, profiles_dir=display(profiles_dir),
        generated=generated,
    )

