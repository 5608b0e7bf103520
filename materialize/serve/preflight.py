"""Checks on the host before a server starts: memory, device nodes, port, launcher, sources.

Seed 002: boots attempted below ~3 GB MemAvailable hard-froze the host twice, so free memory is a
threshold in the profile, checked first. Devices are named by stable by-id paths and must exist as
character devices; on a machine without Tenstorrent cards this is where ``serve up`` stops, saying so.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from materialize.errors import MaterializeError
from materialize.serve.plan import Plan, edited_sources
from materialize.serve.profile import Profile

TT_DEVICE_DIR = Path("/dev/tenstorrent")


class PreflightError(MaterializeError):
    """The host cannot run this profile now (no devices, too little memory, port taken)."""

    exit_code = 1


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def check_memory(min_gb: float, available: int | None = None) -> Check:
    avail = psutil.virtual_memory().available if available is None else available
    gb = avail / 1e9
    ok = gb >= min_gb
    return Check("memory", ok, f"MemAvailable {gb:.2f} GB {'>=' if ok else '<'} {min_gb:g} GB"
                 + ("" if ok else " (a boot this low can hard-freeze the host; free memory or reboot first)"))


def check_devices(devices: list[str]) -> list[Check]:
    if not devices:
        return [Check("devices", True, "profile names no devices")]
    checks = []
    for device in devices:
        try:
            mode = os.stat(device).st_mode
        except FileNotFoundError:
            hint = ("this machine has no Tenstorrent devices (/dev/tenstorrent is absent)"
                    if not TT_DEVICE_DIR.exists() else f"not present under {TT_DEVICE_DIR}")
            checks.append(Check("devices", False, f"{device}: missing; {hint}"))
            continue
        if not stat.S_ISCHR(mode):
            checks.append(Check("devices", False, f"{device}: exists but is not a character device"))
        else:
            checks.append(Check("devices", True, f"{device}: present"))
    return checks


def check_port(host: str, port: int) -> Check:
    """Can the server bind its port? Bound the way uvicorn binds (SO_REUSEADDR), so the TIME_WAIT
    connections a stopped server leaves for a minute do not read as "in use"; a listener does."""
    bind_host = "0.0.0.0" if host in ("", "0.0.0.0") else host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind_host, port))
        except OSError as exc:
            why = "in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            return Check("port", False, f"{host}:{port} {why}")
    return Check("port", True, f"{host}:{port} free")


def check_launcher(profile: Profile) -> Check:
    launcher = profile.spec.launcher
    exe = "docker" if launcher.kind == "docker" else launcher.command[0]
    found = shutil.which(exe) or (exe if os.access(exe, os.X_OK) and Path(exe).is_file() else None)
    if not found:
        return Check("launcher", False, f"{exe}: not found on PATH")
    if launcher.kind == "docker":
        try:
            probe = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                                   text=True, timeout=20, check=False)
        except subprocess.TimeoutExpired:
            return Check("launcher", False, "docker info timed out: no engine reachable")
        if probe.returncode != 0:
            return Check("launcher", False, f"docker engine not reachable: {probe.stderr.strip()[:200]}")
    return Check("launcher", True, f"{exe}: {found}")


def check_sources(plan: Plan) -> list[Check]:
    from materialize.serve.bootcheck import shadowing

    missing = [m.source for m in plan.mounts if not Path(m.source).is_file()]
    checks = [Check("sources", False, f"{len(missing)} mount source(s) missing, e.g. {missing[0]}") if missing
              else Check("sources", True, f"{len(plan.mounts)} mount source(s) present")]
    if not missing:
        edited = edited_sources(plan)
        if edited:
            checks.append(Check("sources", False, f"{len(edited)} source(s) are not what materialization "
                                                  f"{plan.materialization_id} wrote: {'; '.join(edited[:3])}"))
    shadows = shadowing(plan)
    if shadows:
        checks.append(Check("workdir", False, f"{', '.join(shadows)} in the server's working directory would be "
                                              f"imported ahead of the plan's code by an interpreter that puts it "
                                              f"first on sys.path"))
    return checks


def host_checks(profile: Profile) -> list[Check]:
    """Everything that needs no materialization: run these first, they are the cheap way to fail."""
    spec = profile.spec
    return [
        check_memory(spec.preflight.min_mem_available_gb),
        *check_devices(spec.devices),
        check_port(spec.server.host, spec.server.port),
        check_launcher(profile),
    ]


def require(checks: list[Check], profile: str) -> None:
    """Raise PreflightError listing every failed check."""
    failed = [c for c in checks if not c.ok]
    if failed:
        lines = "\n  ".join(f"{c.name}: {c.detail}" for c in failed)
        raise PreflightError(f"preflight failed for profile {profile!r}; nothing was started:\n  {lines}")
