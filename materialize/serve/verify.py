"""``serve verify``: the plan vs the unit vs the running process vs live requests (seed 002).

A unit-level check proves the override was read, not that the server behaves; a live request proves
behaviour, not which code. So each layer is checked against the same rendered plan:
  unit     the installed unit and env file match the current plan (hash and content); no drop-ins
  process  the running process's real argv and environment (psutil, or ``docker inspect``)
  live     the gates, sent to the URL now
Any mismatch fails; nothing is reported as verified that was not read back.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from materialize.serve import gates as gates_mod
from materialize.serve.diff import argv_options
from materialize.serve.install import (
    UNIT_DIR,
    drop_ins,
    env_path,
    exec_argv,
    parse_env,
    render_env,
    render_unit,
    systemd_unquote,
    unit_fields,
    unit_name,
)
from materialize.serve.plan import Plan


@dataclass(frozen=True)
class Check:
    layer: str
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"[{'ok' if self.ok else 'FAIL'}] {self.layer:<7} {self.name}: {self.detail}"


def _argv_diff(expected: list[str], actual: list[str]) -> str:
    want, have = argv_options(expected), argv_options(actual)
    parts = []
    for key in sorted(set(want) | set(have)):
        if want.get(key) != have.get(key):
            parts.append(f"{key}: plan {want.get(key, '<absent>')!r}, running {have.get(key, '<absent>')!r}")
    return "; ".join(parts) or "same options, different order or words"


def compare_argv(layer: str, expected: list[str], actual: list[str]) -> Check:
    if actual == expected:
        return Check(layer, "argv", True, f"{len(actual)} words match the plan")
    return Check(layer, "argv", False, _argv_diff(expected, actual))


def compare_env(layer: str, plan: Plan, actual: dict[str, str]) -> list[Check]:
    wrong = [f"{k}: plan {v!r}, running {actual.get(k, '<unset>')!r}" for k, v in plan.env.items() if actual.get(k) != v]
    engaged = [f for f in plan.disabled_flags if actual.get(f, "0") not in ("", "0")]
    checks = [Check(layer, "env", not wrong, "; ".join(wrong) or f"{len(plan.env)} variables match the plan")]
    if engaged:
        checks.append(Check(layer, "flags", False, f"set but not enabled by the profile: {', '.join(engaged)}"))
    return checks


def verify_unit(plan: Plan, root: Path) -> list[Check]:
    unit_path = root / UNIT_DIR / unit_name(plan)
    if not unit_path.exists():
        return [Check("unit", "installed", False, f"{unit_path} does not exist (run serve install)")]
    text = unit_path.read_text()
    fields = unit_fields(text)
    checks: list[Check] = []
    installed_hash = fields.get("X-Materialize-Plan-Hash", "<none>")
    if installed_hash != plan.hash():
        checks.append(Check("unit", "plan-hash", False,
                            f"stale unit: installed for plan {installed_hash[:12]} "
                            f"(materialization {fields.get('X-Materialize-Materialization', '?')}), current plan "
                            f"{plan.hash()[:12]} (materialization {plan.materialization_id}); install again"))
    else:
        checks.append(Check("unit", "plan-hash", True, f"unit is for the current plan {plan.hash()[:12]}"))
    checks.append(compare_argv("unit", exec_argv(plan), systemd_unquote(fields.get("ExecStart", ""))))
    if text != render_unit(plan) and installed_hash == plan.hash():
        checks.append(Check("unit", "content", False, "unit was edited by hand after install"))
    env_file = root / env_path(plan).lstrip("/")
    if not env_file.exists():
        checks.append(Check("unit", "env-file", False, f"{env_file} missing"))
    else:
        env_text = env_file.read_text()
        checks += compare_env("unit", plan, parse_env(env_text))
        if env_text != render_env(plan) and installed_hash == plan.hash():
            checks.append(Check("unit", "env-file", False, f"{env_file} was edited by hand after install"))
    overrides = drop_ins(plan, root)
    volatile = [p for p in overrides if "/run/" in str(p)]
    if overrides:
        checks.append(Check("unit", "drop-ins", False,
                            f"{len(overrides)} override(s) change the generated unit"
                            f"{' (in /run: lost on reboot)' if volatile else ''}: {', '.join(map(str, overrides))}"))
    return checks


def verify_pid(plan: Plan, pid: int) -> list[Check]:
    try:
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
    except psutil.NoSuchProcess:
        return [Check("process", "pid", False, f"no process {pid}")]
    except psutil.AccessDenied:
        return [Check("process", "pid", False, f"cannot read /proc/{pid}/cmdline (run as the service user or root)")]
    is_docker_cli = cmdline[:2] == ["docker", "run"] or (cmdline[:1] and cmdline[0].endswith("/docker"))
    expected = plan.argv if plan.launcher == "process" or is_docker_cli else plan.server_argv
    checks = [compare_argv("process", expected, cmdline)]
    if is_docker_cli:
        return checks  # the container's environment is in its -e words, compared above
    try:
        environ = proc.environ()
    except psutil.AccessDenied:
        return checks + [Check("process", "env", False, f"cannot read /proc/{pid}/environ (run as root)")]
    return checks + compare_env("process", plan, environ)


def container_view(inspect: dict[str, Any]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(argv, env, mounts target->source) from one ``docker inspect`` object."""
    config = inspect.get("Config") or {}
    argv = list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    mounts = {m.get("Destination"): m.get("Source") for m in inspect.get("Mounts") or []}
    return argv, env, mounts


def verify_container_data(plan: Plan, inspect: dict[str, Any]) -> list[Check]:
    argv, env, mounts = container_view(inspect)
    checks = [compare_argv("process", plan.server_argv, argv)]
    checks += compare_env("process", plan, env)
    want = {m.target: m.source for m in plan.mounts}
    wrong = [t for t in sorted(set(want) | set(mounts)) if t in want and mounts.get(t) != want[t]]
    checks.append(Check("process", "mounts", not wrong,
                        f"not mounted as planned: {', '.join(wrong)}" if wrong else f"{len(want)} mounts match"))
    return checks


def verify_container(plan: Plan, name: str) -> list[Check]:
    try:
        out = subprocess.run(["docker", "inspect", name], capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        return [Check("process", "container", False, "docker is not installed here")]
    if out.returncode != 0:
        return [Check("process", "container", False, f"docker inspect {name}: {out.stderr.strip()[:200]}")]
    data = json.loads(out.stdout)
    return verify_container_data(plan, data[0])


def verify_live(plan: Plan, url: str) -> list[Check]:
    results = gates_mod.run_gates(url, plan.served_model, plan.gates)
    return [Check("live", g.name, g.passed, f"{g.requests - g.failures}/{g.requests} passed; "
                  + (g.details[-1] if g.details else "")) for g in results]


def verify(plan: Plan, *, url: str | None, pid: int | None = None, container: str | None = None,
           unit_root: Path | None = None) -> list[Check]:
    checks: list[Check] = []
    if unit_root is not None:
        checks += verify_unit(plan, unit_root)
    if pid is not None:
        checks += verify_pid(plan, pid)
    if container is not None:
        checks += verify_container(plan, container)
    if url is not None:
        checks += verify_live(plan, url)
    if not checks:
        checks.append(Check("plan", "layers", False, "nothing to verify: give a URL, --pid/--container or --root"))
    return checks
