"""``serve boot-check``: the fail-closed checks of ``serve up``, run by the installed unit itself.

Seed 002: the path production really runs is the systemd unit after a reboot, not ``serve up``. A
unit whose ExecStart is a bare ``docker run`` never notices a patch that did not engage. So the
installed unit runs this twice, from the plan it was installed with (a content-addressed JSON file,
no series or repository needed at boot):

  ExecStartPre   ``boot-check --pre PLAN``: the host preflight of ``serve up`` (MemAvailable above the
                 profile's threshold, the devices present), every source the plan mounts (or puts on
                 PYTHONPATH) is there, and a process's working directory holds no package the plan
                 serves; any of them refuses the start.
  ExecStartPost  ``boot-check PLAN --log LOG``: readiness, every expected banner in this start's log
                 (the unit truncates it on each start), then the gates. A failure exits 1, and
                 systemd marks the service failed and stops it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from materialize.serve import gates as gates_mod
from materialize.serve.launch import banners_seen, describe_unexpected, poll_ready, unexpected_banners
from materialize.serve.plan import Plan

Echo = Callable[[str], None]


@dataclass(frozen=True)
class BootResult:
    ok: bool
    reason: str
    gate_results: list[gates_mod.GateResult]


def load_plan(path: Path) -> Plan:
    return Plan.from_dict(json.loads(path.read_text()))


def check_sources(plan: Plan) -> list[str]:
    """Sources the plan needs that are missing (mount files, PYTHONPATH folders)."""
    missing = [m.source for m in plan.mounts if not Path(m.source).is_file()]
    for entry in filter(None, plan.env.get("PYTHONPATH", "").split(":")):
        if not Path(entry).is_dir():
            missing.append(entry)
    return missing


def host_checks(plan: Plan) -> list:
    """The host checks ``serve up`` runs before a launch, from the plan: MemAvailable above the
    profile's threshold, every device a character device. A plan without a threshold (``preflight``
    empty) cannot say the host is safe to boot, so it fails."""
    from materialize.serve.preflight import Check, check_devices, check_memory

    if "min_mem_available_gb" not in plan.preflight:
        return [Check("memory", False, "the plan carries no memory threshold; install again")]
    return [check_memory(float(plan.preflight["min_mem_available_gb"])), *check_devices(plan.devices)]


def importable_names(folder: Path) -> set[str]:
    """Top-level names ``folder`` serves on sys.path: packages (``name/__init__.py``) and modules."""
    names: set[str] = set()
    try:
        entries = list(folder.iterdir())
    except OSError:
        return names
    for entry in entries:
        if entry.is_dir() and (entry / "__init__.py").is_file():
            names.add(entry.name)
        elif entry.suffix in (".py", ".so", ".pyc") and entry.is_file():
            names.add(entry.name.split(".", 1)[0])
    return names


def shadowing(plan: Plan) -> list[str]:
    """Entries of a process's working directory that would shadow the plan's code if the interpreter put
    it first on sys.path (``python -m`` does, before Python 3.11 or without PYTHONSAFEPATH): a package or
    module there named like one on the plan's PYTHONPATH, or ``vllm``."""
    if plan.launcher != "process":
        return []
    wanted = {"vllm"}
    for entry in filter(None, plan.env.get("PYTHONPATH", "").split(":")):
        wanted |= importable_names(Path(entry))
    return sorted(f"{plan.workdir.rstrip('/')}/{n}" for n in wanted & importable_names(Path(plan.workdir)))


def _read(log: Path | None) -> str:
    if log is None:
        return ""
    try:
        return log.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def boot_check(plan: Plan, log: Path | None, echo: Echo = print) -> BootResult:
    """Wait for the server the unit started, then require banners and gates, like ``serve up``."""
    readiness = poll_ready(plan.url, plan.readiness["timeout_s"], plan.readiness["poll_interval_s"])
    if not readiness.ready:
        return BootResult(False, f"server not ready: {readiness.reason}", [])
    echo(f"ready after {readiness.elapsed_s:.1f}s")
    deadline = time.monotonic() + float(plan.readiness.get("banner_grace_s", 0.0))
    while True:
        seen, missing = banners_seen(_read(log), plan.banners)
        if not missing or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if missing:
        where = f"in {log}" if log else "(no log given)"
        return BootResult(False, "expected banner(s) did not appear " + where + ", so their patches did not "
                          "engage: " + "; ".join(f"{b.flag} ({b.patch}) -> {b.banner!r}" for b in missing), [])
    if unexpected_banners(_read(log), plan):
        return BootResult(False, describe_unexpected(unexpected_banners(_read(log), plan)), [])
    for b in seen:
        echo(f"banner seen: {b.banner}")
    for u in plan.unobservable:
        echo(f"unobservable: {u['flag']} ({u['patch']}) has no banner: {u['reason']}")
    results = gates_mod.run_gates(plan.url, plan.served_model, plan.gates)
    for g in results:
        echo(gates_mod.describe(g))
    failed = [g for g in results if not g.passed]
    if failed:
        return BootResult(False, "gate(s) failed: " + ", ".join(f"{g.name} {g.failures}/{g.requests}" for g in failed),
                          results)
    late = unexpected_banners(_read(log), plan)  # a banner printed on a first request
    if late:
        return BootResult(False, describe_unexpected(late), results)
    return BootResult(True, "banners seen and all gates passed", results)
