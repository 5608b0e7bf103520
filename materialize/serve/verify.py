"""``serve verify``: the plan vs the unit vs the running process vs live requests (seed 002).

A unit-level check proves the override was read, not that the server behaves; a live request proves
behaviour, not which code. So each layer is checked against the same rendered plan:
  unit     the installed unit and env file match the current plan (hash and content); no drop-ins
  process  the running process's real argv, environment and working directory (psutil, or ``docker
           inspect``: Entrypoint + Cmd, Env, WorkingDir); a variable that selects code and that the plan
           did not set (the caller's PYTHONSTARTUP, an image's TT_METAL_HOME) fails
  live     the gates, sent to the URL now
Any mismatch fails; nothing is reported as verified that was not read back.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from materialize.serve import gates as gates_mod
from materialize.serve import systemd
from materialize.serve.diff import argv_options
from materialize.serve.install import (
    UNIT_DIR,
    WANTED_BY,
    env_path,
    exec_argv,
    log_path,
    parse_env,
    plan_path,
    render_env,
    render_unit,
    systemd_unquote,
    unit_fields,
    unit_name,
    unit_workdir,
)
from materialize.serve.launch import describe_unexpected, unexpected_banners
from materialize.serve.plan import Plan, edited_sources

VOLATILE = "/run/"


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


def compare_env(layer: str, plan: Plan, actual: dict[str, str], image_owned: frozenset[str] = frozenset()) -> list[Check]:
    """Every plan variable with its value; no flag the profile left off; and no variable that selects code
    (constraints.code_selecting) that the plan did not set, except ``image_owned`` (a container's PATH
    and HOME, which the image decides for its own interpreter)."""
    from materialize.serve.constraints import code_selecting

    wrong = [f"{k}: plan {v!r}, running {actual.get(k, '<unset>')!r}" for k, v in plan.env.items() if actual.get(k) != v]
    wrong += [f"{k}={actual[k]!r} is set but not by the plan, and {code_selecting(k)}" for k in sorted(actual)
              if k not in plan.env and k not in image_owned and code_selecting(k)]
    engaged = [f for f in plan.disabled_flags if actual.get(f, "0") not in ("", "0")]
    checks = [Check(layer, "env", not wrong, "; ".join(wrong) or f"{len(plan.env)} variables match the plan")]
    if engaged:
        checks.append(Check(layer, "flags", False, f"set but not enabled by the profile: {', '.join(engaged)}"))
    return checks


def verify_unit(plan: Plan, root: Path) -> list[Check]:
    """The installed unit as systemd would load it under ``root``, against the plan."""
    root = root.resolve()
    name = unit_name(plan)
    view = systemd.unit_view(name, root)
    ours = root / UNIT_DIR / name
    if view.fragment is None or not ours.exists():
        return [Check("unit", "installed", False, f"{ours} does not exist (run serve install)")]
    checks: list[Check] = []
    if view.masked:
        checks.append(Check("unit", "fragment", False, f"{view.fragment} masks the unit (-> /dev/null)"))
    elif view.fragment != ours:
        checks.append(Check("unit", "fragment", False, f"systemd loads {view.fragment}, not the generated {ours}"
                            f"{' (in /run: lost on reboot)' if VOLATILE in str(view.fragment) else ''}"))
    text = ours.read_text()
    fields = unit_fields(text)
    installed_hash = fields.get("X-Materialize-Plan-Hash", "<none>")
    if installed_hash != plan.hash():
        checks.append(Check("unit", "plan-hash", False,
                            f"stale unit: installed for plan {installed_hash[:12]} "
                            f"(materialization {fields.get('X-Materialize-Materialization', '?')}), current plan "
                            f"{plan.hash()[:12]} (materialization {plan.materialization_id}); install again"))
    else:
        checks.append(Check("unit", "plan-hash", True, f"unit is for the current plan {plan.hash()[:12]}"))
    checks.append(compare_argv("unit", exec_argv(plan), systemd_unquote(fields.get("ExecStart", ""))))
    workdir = fields.get("WorkingDirectory", "<unset>")
    checks.append(Check("unit", "cwd", workdir == unit_workdir(plan),
                        f"WorkingDirectory={workdir}" + ("" if workdir == unit_workdir(plan)
                                                         else f", plan {unit_workdir(plan)}")))
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
    checks += _durable_files(plan, root)
    if view.dropins:
        volatile = [p for p in view.dropins if VOLATILE in str(p)]
        checks.append(Check("unit", "drop-ins", False,
                            f"{len(view.dropins)} drop-in(s) change the generated unit"
                            f"{' (in /run: lost on reboot)' if volatile else ''}: {', '.join(map(str, view.dropins))}"))
    else:
        checks.append(Check("unit", "drop-ins", True, "no drop-in in any of systemd's unit directories"))
    enabled, how = systemd.is_enabled(name, root, WANTED_BY)
    checks.append(Check("unit", "enabled", enabled, how + ("" if enabled else ": it will not start after a reboot")))
    if systemd.systemd_running(root):
        checks += verify_loaded(plan, systemd.systemctl_show(name))
    return checks


def _durable_files(plan: Plan, root: Path) -> list[Check]:
    """The plan file the boot check reads, the sources the unit mounts, the checker's interpreter."""
    checks = []
    installed = root / plan_path(plan).lstrip("/")
    if not installed.is_file() or installed.read_text() != plan.to_json():
        checks.append(Check("unit", "plan-file", False, f"{installed} missing or not the current plan"))
    missing = [m.source for m in plan.mounts if not (root / m.source.lstrip("/")).is_file()]
    missing += [p for p in filter(None, plan.env.get("PYTHONPATH", "").split(":")) if not (root / p.lstrip("/")).is_dir()]
    edited = edited_sources(plan, root) if not missing else []
    if missing:
        checks.append(Check("unit", "sources", False, f"{len(missing)} source(s) the unit needs are missing, e.g. "
                            f"{missing[0]}: the unit will refuse to start; install again"))
    elif edited:
        checks.append(Check("unit", "sources", False, f"{len(edited)} source(s) are not what materialization "
                            f"{plan.materialization_id} wrote (edited after installing?): {'; '.join(edited[:3])}; "
                            "the unit will refuse to start; install again"))
    else:
        checks.append(Check("unit", "sources", True, f"sources present under {plan.sources or '(none needed)'}"))
    fields = unit_fields(render_unit(plan))
    checker = systemd_unquote(fields["ExecStartPost"])[0]
    if not os.access(checker, os.X_OK):
        checks.append(Check("unit", "boot-check", False, f"{checker} (the boot check's interpreter) is not executable"))
    return checks


def verify_loaded(plan: Plan, props: dict[str, str]) -> list[Check]:
    """What the running systemd loaded (``systemctl show``), against the plan."""
    checks = []
    dropins = props.get("DropInPaths", "").split()
    checks.append(Check("systemd", "drop-ins", not dropins,
                        f"systemd loaded drop-in(s): {' '.join(dropins)}" if dropins else "systemd loaded no drop-in"))
    want = " ".join(exec_argv(plan))
    have = " ".join(systemd.show_argv(props.get("ExecStart", "")))
    checks.append(Check("systemd", "exec-start", have == want,
                        "loaded ExecStart is the plan's" if have == want else f"loaded ExecStart differs: {have!r}"))
    state = props.get("UnitFileState", "")
    checks.append(Check("systemd", "enabled", state == "enabled", f"UnitFileState={state}"))
    reload_needed = props.get("NeedDaemonReload") == "yes"
    checks.append(Check("systemd", "daemon-reload", not reload_needed,
                        "unit changed on disk since systemd loaded it: systemctl daemon-reload" if reload_needed
                        else "loaded unit is the file on disk"))
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
        return checks  # the container's environment and --workdir are in its words, compared above
    if plan.launcher == "process":
        try:
            cwd = proc.cwd()
            checks.append(Check("process", "cwd", cwd == plan.workdir,
                                f"working directory {cwd}" + ("" if cwd == plan.workdir else
                                                              f", plan {plan.workdir} (python -m imports from it "
                                                              f"first)")))
        except psutil.AccessDenied:
            checks.append(Check("process", "cwd", False, f"cannot read /proc/{pid}/cwd (run as root)"))
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
    """Cmd, Env, image, devices and every mount (none extra, none writable that the plan mounts ro)."""
    argv, env, mounts = container_view(inspect)
    checks = [compare_argv("process", plan.server_argv, argv)]
    workdir = (inspect.get("Config") or {}).get("WorkingDir") or "<image default>"
    checks.append(Check("process", "cwd", workdir == plan.workdir,
                        f"working directory {workdir}" + ("" if workdir == plan.workdir else f", plan {plan.workdir}")))
    checks += compare_env("process", plan, env, frozenset({"PATH", "HOME"}))
    want = {m.target: m for m in plan.mounts}
    have = {m.get("Destination"): m for m in inspect.get("Mounts") or []}
    problems = []
    for target in sorted(set(want) | set(have)):
        if target not in have:
            problems.append(f"{target}: not mounted")
        elif target not in want:
            problems.append(f"{target}: mounted from {have[target].get('Source')} but not in the plan")
        else:
            if have[target].get("Source") != want[target].source:
                problems.append(f"{target}: from {have[target].get('Source')}, plan {want[target].source}")
            if bool(have[target].get("RW")) == want[target].read_only:
                problems.append(f"{target}: {'read-write' if have[target].get('RW') else 'read-only'}, "
                                f"plan {'ro' if want[target].read_only else 'rw'}")
    checks.append(Check("process", "mounts", not problems,
                        "; ".join(problems) if problems else f"{len(want)} mounts match (none extra)"))
    image = (inspect.get("Config") or {}).get("Image")
    checks.append(Check("process", "image", image == plan.image, f"image {image}, plan {plan.image}"))
    devices = sorted(d.get("PathOnHost", "") for d in ((inspect.get("HostConfig") or {}).get("Devices") or []))
    checks.append(Check("process", "devices", devices == sorted(plan.devices),
                        f"devices {devices}" + ("" if devices == sorted(plan.devices) else f", plan {sorted(plan.devices)}")))
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


def verify_banners(plan: Plan, log_text: str | None, where: str) -> list[Check]:
    """Every expected banner in the server's output; a flag with ``banner: none`` is named as unobservable."""
    checks = []
    if plan.banners:
        if log_text is None:
            checks.append(Check("process", "banners", False, f"{len(plan.banners)} banner(s) expected but the "
                                "server's output cannot be read: give --log (or --pid, --container, --root)"))
        else:
            missing = [b for b in plan.banners if b.banner not in log_text]
            checks.append(Check("process", "banners", not missing,
                                "did not appear in " + where + ", so their patches did not engage: " + "; ".join(
                                    f"{b.flag} ({b.patch}) -> {b.banner!r}" for b in missing) if missing
                                else f"{len(plan.banners)} banner(s) seen in {where}"))
    found = unexpected_banners(log_text, plan) if log_text is not None else []
    if found:
        checks.append(Check("process", "left-off", False, f"in {where}: {describe_unexpected(found)}"))
    for u in plan.unobservable:
        checks.append(Check("process", "unobservable", True,
                            f"{u['flag']} ({u['patch']}) declares banner: none: {u['reason']}"))
    return checks


def server_output(pid: int | None, container: str | None, unit_root: Path | None, plan: Plan,
                  log: Path | None) -> tuple[str | None, str]:
    """The server's output from the most direct source given, and where it was read."""
    if log is not None:
        return (log.read_text(errors="replace") if log.is_file() else None), str(log)
    if pid is not None:
        try:
            target = Path(os.readlink(f"/proc/{pid}/fd/1"))
            if target.is_file():
                return target.read_text(errors="replace"), str(target)
        except OSError:
            pass
    if container is not None:
        try:
            out = subprocess.run(["docker", "logs", container], capture_output=True, text=True, timeout=60,
                                 check=False)
            if out.returncode == 0:
                return out.stdout + out.stderr, f"docker logs {container}"
        except (FileNotFoundError, subprocess.TimeoutExpired):
            pass
    if unit_root is not None:
        path = unit_root / log_path(plan).lstrip("/")
        if path.is_file():
            return path.read_text(errors="replace"), str(path)
    return None, "nowhere"


def verify_live(plan: Plan, url: str) -> list[Check]:
    results = gates_mod.run_gates(url, plan.served_model, plan.gates)
    return [Check("live", g.name, g.passed, gates_mod.describe(g)) for g in results]


def verify_sources(plan: Plan) -> Check:
    """The files the running server imports (mounted into its container, or on its PYTHONPATH) hold what
    the materialization wrote: argv and environment can match the plan while a hand edit in the sources
    folder runs under the id."""
    edited = edited_sources(plan)
    if edited:
        return Check("process", "sources", False, f"{len(edited)} source(s) the server runs are not what "
                     f"materialization {plan.materialization_id} wrote: {'; '.join(edited[:3])}")
    return Check("process", "sources", True, f"{len(plan.digests)} changed source(s) hold what materialization "
                 f"{plan.materialization_id} wrote")


def verify(plan: Plan, *, url: str | None, pid: int | None = None, container: str | None = None,
           unit_root: Path | None = None, log: Path | None = None) -> list[Check]:
    checks: list[Check] = []
    if unit_root is not None:
        checks += verify_unit(plan, unit_root)
    if pid is not None:
        checks += verify_pid(plan, pid)
    if container is not None:
        checks += verify_container(plan, container)
    if pid is not None or container is not None:
        checks.append(verify_sources(plan))
    if any(x is not None for x in (pid, container, unit_root, log)):
        text, where = server_output(pid, container, unit_root, plan, log)
        checks += verify_banners(plan, text, where)
    if url is not None:
        checks += verify_live(plan, url)
    if not checks:
        checks.append(Check("plan", "layers", False, "nothing to verify: give a URL, --pid/--container or --root"))
    return checks
