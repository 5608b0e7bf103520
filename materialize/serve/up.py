"""``serve up``: rules, preflight, materialize, plan, launch, readiness, banners, gates, run record.

Fail closed at every step: a broken rule or a failed preflight starts nothing; a server that never
becomes ready, misses a banner or fails a gate is stopped and the command exits non-zero, naming
what was not observed. Every launched run appends one record to ``bench/runs/<profile>.jsonl`` with
the materialization id, so a number can always be traced to the code that produced it.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from materialize.series import Series, load_series
from materialize.serve import gates as gates_mod
from materialize.serve import preflight
from materialize.serve.launch import Running, banners_seen, launch, wait_banners, wait_ready
from materialize.serve.plan import Plan, build_plan
from materialize.serve.profile import Profile, load_profile
from materialize.tree import Tree

Echo = Callable[[str], None]


@dataclass
class Prepared:
    """A profile made concrete: its series, the materialization it will serve, and the plan."""

    profile: Profile
    series: Series
    manifest: dict[str, Any] | None
    out_dir: Path | None
    plan: Plan
    plugin_tree: Tree | None = None


def materialize_for(profile: Profile, series: Series, out_root: Path | None) -> tuple[dict[str, Any], Path, Tree | None]:
    """Apply the whole series and publish it (overlay for mounts, full for PYTHONPATH)."""
    from materialize.engine import materialize
    from materialize.output import write_output

    overlay = profile.spec.launcher.sources == "mounts"
    m = materialize(series)
    out = None if out_root is None else out_root / (m.id + ("-overlay" if overlay else ""))
    out_dir = write_output(m, out, overlay=overlay)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    plugin_tree = m.tree("plugin") if "plugin" in m.trees else None
    return manifest, out_dir, plugin_tree


def prepare(profile_path: Path, *, materialize: bool = True, out_root: Path | None = None,
            manifest_dir: Path | None = None) -> Prepared:
    """Load the profile and its series; materialize (or read ``manifest_dir``); derive the plan."""
    profile = load_profile(profile_path)
    series = load_series(profile.series_path)
    manifest = out_dir = plugin_tree = None
    if manifest_dir is not None:
        out_dir = manifest_dir.resolve()
        manifest = json.loads((out_dir / "manifest.json").read_text())
    elif materialize:
        manifest, out_dir, plugin_tree = materialize_for(profile, series, out_root)
    plan = build_plan(profile, series, manifest, out_dir, plugin_tree)
    return Prepared(profile, series, manifest, out_dir, plan, plugin_tree)


@dataclass
class UpResult:
    exit_code: int
    reason: str
    record: dict[str, Any] | None = None
    log_path: Path | None = None
    pid: int | None = None
    gate_results: list[gates_mod.GateResult] = field(default_factory=list)


def run_record(prep: Prepared, *, ready: bool, ready_s: float, banners: tuple[list, list],
               gate_results: list[gates_mod.GateResult], notes: list[str], log_path: Path) -> dict[str, Any]:
    """The ledger line for one launched run (schema 1, see materialize/ledger.py)."""
    plan, manifest = prep.plan, prep.manifest or {}
    seen, missing = banners
    gates: list[dict[str, Any]] = [{"name": "ready", "requests": 1, "failures": 0 if ready else 1}]
    if plan.banners and ready:
        gates.append({"name": "banners", "requests": len(plan.banners), "failures": len(missing)})
    gates += [g.record() for g in gate_results if g.requests]
    metrics = [{"name": "time_to_ready", "unit": "s", "samples": [round(ready_s, 3)]}]
    for g in gate_results:
        if g.latencies_s:
            metrics.append({"name": f"{g.name}_latency", "unit": "s", "samples": [round(x, 4) for x in g.latencies_s]})
    return {
        "schema": 1,
        "materialization_id": plan.materialization_id,
        "series_prefix": [{"name": p["name"], "sha256": p["sha256"]} for p in manifest.get("patches", [])],
        "flags": {k: plan.env[k] for k in sorted(plan.env) if _is_flag(prep, k)},
        "profile": plan.profile,
        "profile_hash": plan.profile_hash,
        "host": socket.gethostname(),
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gates": gates,
        "metrics": metrics,
        "banners_seen": [b.banner for b in seen],
        "notes": "; ".join(notes),
        "x_plan_hash": plan.hash(),
        "x_log": str(log_path),
        "x_gate_details": {g.name: g.details for g in gate_results},
    }


def _is_flag(prep: Prepared, key: str) -> bool:
    return any(p.flag == key for p in prep.series.patches)


def append_run(ledger_dir: Path, record: dict[str, Any]) -> Path:
    """Append through the ledger module (validates the schema); if it is absent, one locked line."""
    path = ledger_dir / f"{record['profile']}.jsonl"
    try:
        from materialize.ledger import append_record
    except ImportError:  # the ledger module is owned elsewhere; the record is a plain schema-1 dict
        from filelock import FileLock

        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"), open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        return path
    append_record(path, record)
    return path


def serve_up(prep: Prepared, *, log_dir: Path, ledger_dir: Path | None, echo: Echo = print,
             keep_running: bool = False) -> UpResult:
    """Launch the prepared plan and judge it. Stops the server on any failure (and at the end unless
    ``keep_running``); appends the run record when ``ledger_dir`` is given."""
    plan = prep.plan
    preflight.require(preflight.check_sources(plan), plan.profile)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = log_dir / f"{plan.profile}-{stamp}.log"
    echo(f"launch {plan.launcher} for profile {plan.profile} (materialization {plan.materialization_id}); "
         f"log: {log_path}")
    running = launch(plan, log_path)
    notes: list[str] = []
    gate_results: list[gates_mod.GateResult] = []
    seen: list = []
    missing: list = []
    exit_code, reason = 1, ""
    try:
        readiness = wait_ready(running, plan.readiness["timeout_s"], plan.readiness["poll_interval_s"])
        if not readiness.ready:
            reason = f"server not ready: {readiness.reason}"
        else:
            echo(f"ready after {readiness.elapsed_s:.1f}s")
            missing = wait_banners(running, plan.banners, plan.readiness.get("banner_grace_s", 0.0))
            seen, missing = banners_seen(running.log_text(), plan.banners)
            if missing:
                reason = "expected banner(s) did not appear, so their patches did not engage: " + "; ".join(
                    f"{b.flag} ({b.patch}) -> {b.banner!r}" for b in missing)
            else:
                for b in seen:
                    echo(f"banner seen: {b.banner}")
                gate_results = gates_mod.run_gates(plan.url, plan.served_model, plan.gates)
                failed = [g for g in gate_results if not g.passed]
                for g in gate_results:
                    echo(f"gate {g.name}: {g.requests - g.failures}/{g.requests} passed; {g.details[-1] if g.details else ''}")
                if failed:
                    reason = "gate(s) failed: " + ", ".join(f"{g.name} {g.failures}/{g.requests}" for g in failed)
                else:
                    exit_code, reason = 0, "all gates passed"
        if reason and exit_code:
            notes.append(reason)
        record = run_record(prep, ready=readiness.ready, ready_s=readiness.elapsed_s, banners=(seen, missing),
                            gate_results=gate_results, notes=notes, log_path=log_path)
        if ledger_dir is not None and plan.materialization_id:
            path = append_run(ledger_dir, record)
            echo(f"run record appended to {path}")
    finally:
        if exit_code != 0 or not keep_running:
            code = running.stop()
            if exit_code != 0:
                echo(f"server stopped (exit {code})")
    if keep_running and exit_code == 0:
        _serve_forever(running, echo)
    return UpResult(exit_code, reason, record, log_path, running.pid, gate_results)


def _serve_forever(running: Running, echo: Echo) -> None:
    """Stay in the foreground like a service until the server exits or we are interrupted."""
    echo(f"serving at {running.plan.url} (pid {running.pid}); Ctrl-C stops it")
    try:
        while running.exit_code() is None:
            time.sleep(1)
        echo(f"server exited with code {running.exit_code()}")
    finally:
        running.stop()
