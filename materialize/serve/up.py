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

from materialize.atomic import read_json
from materialize.errors import MaterializeError
from materialize.output import MAX_MANIFEST
from materialize.series import Series, load_series
from materialize.serve import gates as gates_mod
from materialize.serve import preflight
from materialize.serve.launch import (
    Running,
    banners_seen,
    describe_unexpected,
    launch,
    unexpected_banners,
    wait_banners,
    wait_ready,
)
from materialize.serve.plan import (
    Plan,
    PlanError,
    build_plan,
    check_full_output,
    check_manifest,
    check_output,
    require_delivered,
    same_series,
)
from materialize.serve.profile import Profile, load_profile
from materialize.tree import Tree

Echo = Callable[[str], None]


DEFAULT_SOURCES_DIR = Path("/var/lib/materialize/serve/sources")


@dataclass
class Prepared:
    """A profile made concrete: its series, the materialization it will serve, and the plan.

    Preparing writes nothing: the manifest is computed in memory (or read from ``--from-output``) and
    ``out_dir`` is where the sources *will* be, a content-addressed folder under the sources dir. Only
    ``publish_sources`` (called by ``up`` and ``install``) writes it, and never repoints
    ``build/materialized/latest``, which belongs to ``materialize apply``.
    """

    profile: Profile
    series: Series
    manifest: dict[str, Any] | None
    out_dir: Path | None
    plan: Plan
    plugin_tree: Tree | None = None
    materialization: Any = None


def sources_folder(sources_dir: Path, materialization_id: str, overlay: bool) -> Path:
    """The content-addressed folder of one materialization's sources (the id names the trees)."""
    return sources_dir / (materialization_id + ("-overlay" if overlay else ""))


def materialize_for(profile: Profile, series: Series) -> tuple[Any, dict[str, Any], Tree | None]:
    """Apply the whole series in the store (cached prefixes) and compute its manifest in memory."""
    from materialize.engine import materialize
    from materialize.output import manifest as make_manifest

    overlay = profile.spec.launcher.sources == "mounts"
    m = materialize(series)
    manifest = json.loads(json.dumps(make_manifest(m, overlay=overlay)))
    from materialize.serve.names import find_vllm_target, store_has_vllm

    target = find_vllm_target(m.trees, lambda t: store_has_vllm(m.store, m.trees[t]))
    plugin_tree = m.tree(target) if target is not None else None
    return m, manifest, plugin_tree


def prepare(profile_path: Path, *, materialize: bool = True, sources_dir: Path | None = None,
            manifest_dir: Path | None = None) -> Prepared:
    """Load the profile and its series; materialize in memory (or read ``manifest_dir``); derive the
    plan. Writes nothing."""
    profile = load_profile(profile_path)
    series = load_series(profile.series_path)
    manifest = out_dir = plugin_tree = m = None
    if manifest_dir is not None:
        out_dir = manifest_dir.resolve()
        try:  # (an output folder is a checkout's: its manifest a link to /dev/zero, [[[... 100k deep)
            manifest = read_json(out_dir / "manifest.json", MAX_MANIFEST)
        except (OSError, ValueError) as exc:
            raise MaterializeError(f"{out_dir / 'manifest.json'}: not a manifest of an output: "
                                   f"{getattr(exc, 'strerror', None) or exc}") from None
        if not isinstance(manifest, dict):
            raise MaterializeError(f"{out_dir / 'manifest.json'}: not a manifest of an output (not a JSON object)")
        from materialize.serve.names import find_vllm_target
        from materialize.tree import DirTree

        target = find_vllm_target(manifest.get("targets", {}), lambda t: (out_dir / t / "vllm").is_dir())
        plugin_tree = DirTree(out_dir / target, target) if target is not None else None
    elif materialize:
        m, manifest, plugin_tree = materialize_for(profile, series)
        base = (sources_dir or DEFAULT_SOURCES_DIR).absolute()
        out_dir = sources_folder(base, manifest["id"], bool(manifest.get("overlay")))
    index = None
    if manifest is not None:
        from materialize.serve.names import index_for
        from materialize.store import Store

        if m is None and out_dir is not None:
            # --from-output: the manifest on disk is checked against the series materialized now (a
            # cached lookup), then every file it lists against the store: nothing read is trusted.
            from materialize.engine import materialize as apply_series
            from materialize.output import manifest as make_manifest

            computed = json.loads(json.dumps(make_manifest(apply_series(series),
                                                           overlay=bool(manifest.get("overlay")))))
            same_series(series, manifest)
            check_manifest(manifest, computed, str(out_dir / "manifest.json"))
        store = m.store if m is not None else Store.open()
        index = index_for(store, manifest)
        if index is None:
            raise PlanError(f"profile {profile.name}: the store does not hold the trees of materialization "
                            f"{manifest.get('id')}: the names of the plan cannot be checked against the pinned "
                            "source; materialize again")
        if m is None and out_dir is not None:
            check_output(manifest, out_dir, store.read_blob)
            if profile.spec.launcher.sources == "pythonpath" and not manifest.get("overlay"):
                check_full_output(manifest, out_dir, store.list_tree)
    plan = build_plan(profile, series, manifest, out_dir, plugin_tree, index)
    return Prepared(profile, series, manifest, out_dir, plan, plugin_tree, m)


def publish_sources(prep: Prepared, root: Path | None = None) -> Path:
    """Write the prepared sources to their content-addressed folder (under ``root`` when staging an
    install) and return it. An existing folder for the same id is left as it is; nothing else moves."""
    from materialize.output import write_output

    if prep.materialization is None or prep.out_dir is None:
        raise PlanError(f"profile {prep.profile.name}: no materialization to publish (planned from a manifest?)")
    target = prep.out_dir if root is None else root / prep.out_dir.relative_to(prep.out_dir.anchor)
    written = write_output(prep.materialization, target, overlay=bool(prep.manifest and prep.manifest.get("overlay")))
    return written


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
    require_delivered(plan, prep.manifest, prep.series)  # never a record naming code that was not served
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
        "notes": "; ".join(notes + [f"engagement of {u['flag']} ({u['patch']}) cannot be observed: banner: none "
                                    f"({u['reason']})" for u in plan.unobservable]),
        "x_unobservable": [u["flag"] for u in plan.unobservable],
        "x_plan_hash": plan.hash(),
        "x_log": str(log_path),
        "x_gate_details": {g.name: g.details for g in gate_results},
    }


def _is_flag(prep: Prepared, key: str) -> bool:
    return any(p.flag == key for p in prep.series.patches)


def append_run(ledger_dir: Path, record: dict[str, Any]) -> Path:
    """Append through the ledger module: it validates the schema and takes the ledger's lock."""
    from materialize.ledger import append_record

    path = ledger_dir / f"{record['profile']}.jsonl"
    append_record(path, record)
    return path


def serve_up(prep: Prepared, *, log_dir: Path, ledger_dir: Path | None, echo: Echo = print,
             keep_running: bool = False) -> UpResult:
    """Launch the prepared plan and judge it. Stops the server on any failure (and at the end unless
    ``keep_running``); appends the run record when ``ledger_dir`` is given."""
    plan = prep.plan
    require_delivered(plan, prep.manifest, prep.series)
    if prep.materialization is not None:
        publish_sources(prep)
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
            elif unexpected_banners(running.log_text(), plan):
                reason = describe_unexpected(unexpected_banners(running.log_text(), plan))
            else:
                for b in seen:
                    echo(f"banner seen: {b.banner}")
                gate_results = gates_mod.run_gates(plan.url, plan.served_model, plan.gates)
                failed = [g for g in gate_results if not g.passed]
                for g in gate_results:
                    echo(gates_mod.describe(g))
                late = unexpected_banners(running.log_text(), plan)  # a banner printed on a first request
                if failed:
                    reason = "gate(s) failed: " + ", ".join(f"{g.name} {g.failures}/{g.requests}" for g in failed)
                elif late:
                    reason = describe_unexpected(late)
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
