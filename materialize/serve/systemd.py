"""What systemd will really run for a unit: every place a unit file or drop-in can come from.

Seed 002: production ran a ``/run`` drop-in over an immutable unit, and ``verify`` read only two of
systemd's drop-in directories. systemd reads many more (``system.control`` from ``systemctl
set-property``, ``transient``, generators, ``/usr/lib``, ``/usr/local/lib``), and also top-level
``service.d`` and dash-prefix drop-ins (``materialize-serve-.service.d`` applies to every
``materialize-serve-*.service``); a unit file of the same name earlier in the search path replaces ours.
So the search path is asked of systemd itself (``systemd-analyze unit-paths``) where it is installed,
and when systemd is running, ``systemctl show`` is asked what it loaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# systemd 252's system unit search path (``systemd-analyze unit-paths``), used when systemd is absent.
DEFAULT_UNIT_PATHS = (
    "/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
    "/run/systemd/generator.early", "/etc/systemd/system", "/etc/systemd/system.attached",
    "/run/systemd/system", "/run/systemd/system.attached", "/run/systemd/generator",
    "/usr/local/lib/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system",
    "/run/systemd/generator.late",
)
VOLATILE_PREFIX = "/run/"
SHOW_PROPERTIES = ("Id", "LoadState", "FragmentPath", "DropInPaths", "UnitFileState", "NeedDaemonReload",
                   "ExecStart", "ActiveState", "SubState", "Result")


def unit_paths() -> list[str]:
    """The unit search path, highest priority first: systemd's own answer when it is installed."""
    if shutil.which("systemd-analyze"):
        out = subprocess.run(["systemd-analyze", "unit-paths"], capture_output=True, text=True, check=False)
        paths = [line.strip() for line in out.stdout.splitlines() if line.startswith("/")]
        if out.returncode == 0 and paths:
            return paths
    return list(DEFAULT_UNIT_PATHS)


def dropin_dir_names(unit: str) -> list[str]:
    """Drop-in folder names that apply to ``unit``, in systemd's order: the type-wide ``service.d``,
    each dash prefix (``a-.service.d``, ``a-b-.service.d``), then the unit's own."""
    stem, _, kind = unit.rpartition(".")
    names = [f"{kind}.d"]
    parts = stem.split("-")
    for i in range(1, len(parts)):
        names.append("-".join(parts[:i]) + f"-.{kind}.d")
    names.append(f"{unit}.d")
    return names


@dataclass(frozen=True)
class UnitView:
    """Where systemd would load a unit from, under a root."""

    fragment: Path | None      # the unit file systemd picks (first in the search path)
    shadowed: list[Path]       # other files of the same name, lower in the search path
    dropins: list[Path]        # every drop-in that applies
    masked: bool


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def unit_view(unit: str, root: Path, paths: list[str] | None = None) -> UnitView:
    """Find the unit file and every drop-in as systemd's search path lays them out under ``root``."""
    paths = unit_paths() if paths is None else paths
    files = [_under(root, p) / unit for p in paths if os.path.lexists(_under(root, p) / unit)]
    fragment = files[0] if files else None
    masked = fragment is not None and fragment.is_symlink() and os.readlink(fragment) == "/dev/null"
    dropins: list[Path] = []
    for p in paths:
        for name in dropin_dir_names(unit):
            directory = _under(root, p) / name
            if directory.is_dir():
                dropins += sorted(directory.glob("*.conf"))
    return UnitView(fragment=fragment, shadowed=files[1:], dropins=dropins, masked=masked)


def is_enabled(unit: str, root: Path, wanted_by: str) -> tuple[bool, str]:
    """``systemctl --root ROOT is-enabled`` (systemd's own logic, works without a running systemd);
    without systemctl, the ``wanted_by.wants`` link ``systemctl enable`` creates."""
    if shutil.which("systemctl"):
        args = ["systemctl", "is-enabled", unit] if root == Path("/") else [
            "systemctl", f"--root={root}", "is-enabled", unit]
        out = subprocess.run(args, capture_output=True, text=True, check=False)
        state = (out.stdout.strip() or out.stderr.strip() or "unknown").splitlines()[0]
        return state == "enabled", f"systemctl is-enabled: {state}"
    link = root / "etc/systemd/system" / f"{wanted_by}.wants" / unit
    ok = link.is_symlink()
    return ok, f"{link} {'exists' if ok else 'is missing'} (systemctl not installed)"


def systemd_running(root: Path) -> bool:
    """sd_booted(): systemd is PID 1 of the system we are checking (only meaningful for root /)."""
    return root == Path("/") and Path("/run/systemd/system").is_dir() and shutil.which("systemctl") is not None


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show -p A,B`` output (``Key=value`` lines) as a dict."""
    props: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            props[key] = value
    return props


def systemctl_show(unit: str) -> dict[str, str]:
    out = subprocess.run(["systemctl", "show", "-p", ",".join(SHOW_PROPERTIES), unit],
                         capture_output=True, text=True, check=False)
    return parse_show(out.stdout)


def show_argv(exec_start: str) -> list[str]:
    """The argv of ``ExecStart={ path=... ; argv[]=A B C ; ... }`` as systemctl shows it."""
    marker = "argv[]="
    if marker not in exec_start:
        return []
    rest = exec_start.split(marker, 1)[1]
    return rest.split(" ; ", 1)[0].split(" ")
