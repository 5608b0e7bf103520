"""Start the server a plan describes, stream its log to a file, wait for readiness, watch for banners.

Two launchers, one shape: the plan's ``argv`` is exec'd (``docker run`` in the foreground for docker,
the server command itself for a process) with its output appended to a log file. A server process gets
the plan's env and the caller's locale (``LANG``, ``LC_ALL``, ``TZ``) and nothing else, in the plan's
working directory: a flag, ``PATH``, ``HOME``, ``PYTHONSTARTUP``... exported in someone's shell, or the
checkout they stand in, never decides what runs. The docker client gets the caller's basics (which
``docker``, its config), and the container gets the plan through its rendered argv. Stopping uses ``docker stop -t N`` (never
``rm -f``, seed 003) or SIGTERM to the process group, then SIGKILL after the timeout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from materialize.serve.plan import Banner, Plan

# What the docker client needs from the caller (to find ``docker`` and its config); it is not the server.
DOCKER_CLIENT_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "TZ")
# The only variables a server process takes from the caller: its locale and time zone (they select no code:
# GCONV_PATH / LOCPATH are not passed). PATH is the plan's (interpreter folder + a fixed default); HOME,
# TMPDIR, USER are not passed, as in the installed unit (a system unit without User= has none of them).
PROCESS_ENV_KEEP = ("LANG", "LC_ALL", "TZ")


def process_env(plan: Plan, host_env: dict[str, str] | None = None) -> dict[str, str]:
    """The exact environment the child gets: for a process, the caller's locale then the plan (the plan
    wins); for docker, the client's basics (the container's environment is the argv's ``-e`` words)."""
    host_env = dict(os.environ if host_env is None else host_env)
    if plan.launcher != "process":
        return {k: host_env[k] for k in DOCKER_CLIENT_ENV_KEEP if k in host_env}
    env = {k: host_env[k] for k in PROCESS_ENV_KEEP if k in host_env}
    env.update(plan.env)
    return env


@dataclass
class Running:
    """A started server: its Popen, its log, and how to stop it."""

    plan: Plan
    popen: subprocess.Popen
    log_path: Path
    started: float
    offset: int = 0  # where this start's output begins in the (appended) log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def log_text(self) -> str:
        """This start's output only: what an earlier run appended to the same file is not its banners."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.offset)
                return log.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> int | None:
        """Stop and reap the server; returns its exit code (None if it had to be killed and vanished)."""
        if self.popen.poll() is not None:
            return self.popen.returncode
        timeout = self.plan.stop_timeout_s
        if self.plan.launcher == "docker" and self.plan.container_name:
            subprocess.run(["docker", "stop", "-t", str(timeout), self.plan.container_name],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        else:
            _signal_group(self.popen.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout=timeout + 5)
        except subprocess.TimeoutExpired:
            _signal_group(self.popen.pid, signal.SIGKILL)
            return self.popen.wait(timeout=30)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def launch(plan: Plan, log_path: Path) -> Running:
    """Exec the plan's argv in its own session, stdout+stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        offset = log.seek(0, os.SEEK_END)
        popen = subprocess.Popen(
            plan.argv,
            env=process_env(plan),
            cwd=plan.workdir if plan.launcher == "process" else "/",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Running(plan=plan, popen=popen, log_path=log_path, started=time.monotonic(), offset=offset)


@dataclass(frozen=True)
class Readiness:
    ready: bool
    elapsed_s: float
    reason: str


def poll_ready(url: str, timeout_s: float, poll_s: float = 1.0,
               exited: Callable[[], int | None] = lambda: None, started: float | None = None) -> Readiness:
    """Poll ``url/v1/models`` until it answers 200, ``exited()`` reports an exit code, or ``timeout_s``
    passes. Used by ``serve up`` (which owns the process) and by the unit's boot check (which does not)."""
    started = time.monotonic() if started is None else started
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    with httpx.Client(base_url=url, timeout=min(5.0, max(poll_s, 0.5)), trust_env=False) as client:
        while True:
            code = exited()
            if code is not None:
                return Readiness(False, time.monotonic() - started, f"server exited with code {code} before it was ready")
            try:
                resp = client.get("/v1/models")
                if resp.status_code == 200:
                    return Readiness(True, time.monotonic() - started, "GET /v1/models -> 200")
                last = f"GET /v1/models -> HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}"
            if time.monotonic() >= deadline:
                return Readiness(False, time.monotonic() - started, f"not ready within {timeout_s:g}s (last: {last})")
            time.sleep(poll_s)


def wait_ready(running: Running, timeout_s: float, poll_s: float = 1.0) -> Readiness:
    """Poll the started server until it is ready, exits, or ``timeout_s`` passes."""
    return poll_ready(running.plan.url, timeout_s, poll_s, running.exit_code, running.started)


def banners_seen(log_text: str, banners: list[Banner]) -> tuple[list[Banner], list[Banner]]:
    """Split expected banners into (seen, missing) by substring match on the log."""
    seen = [b for b in banners if b.banner in log_text]
    missing = [b for b in banners if b.banner not in log_text]
    return seen, missing


def unexpected_banners(log_text: str, plan: Plan) -> list[Banner]:
    """Banners of patches the profile left off that appear in the log: that patch engaged. A text that
    also occurs inside an expected banner cannot tell the two apart and is not judged."""
    return [b for b in plan.disabled_banners
            if b.banner in log_text and not any(b.banner in e.banner for e in plan.banners)]


def describe_unexpected(found: list[Banner]) -> str:
    return ("banner(s) of patches the profile left off appeared, so they engaged (their flag reached the server "
            "from outside the plan: the image's ENV, the service manager's environment?): "
            + "; ".join(f"{b.flag} ({b.patch}) -> {b.banner!r}" for b in found))


def wait_banners(running: Running, banners: list[Banner], grace_s: float, poll_s: float = 0.2) -> list[Banner]:
    """Missing banners after up to ``grace_s`` more seconds of log (a banner may trail readiness)."""
    deadline = time.monotonic() + grace_s
    while True:
        _, missing = banners_seen(running.log_text(), banners)
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(poll_s)
