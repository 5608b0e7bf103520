"""Helpers shared by the benchmark scripts: run a command several times, report medians and peak RSS.

Benchmarks are scripts that print tables, never timed unit tests: the machine is shared and noisy,
so every number is the median of several runs and the spread is shown next to it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def compile_package() -> None:
    """Byte-compile ``materialize`` once before timing it, as ``pip install`` does (and as a first run
    does for a user): with PYTHONDONTWRITEBYTECODE set (our agents' and CI's environment) every timed
    run would otherwise recompile every module it imports, a cost no installed copy pays."""
    import sys

    package = Path(__file__).resolve().parents[1] / "materialize"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})


@dataclass
class Timing:
    seconds: list[float]
    peak_rss_mib: float
    cpu_seconds: list[float] = field(default_factory=list)  # user + system of each run, when known

    @property
    def cpu_median(self) -> float | None:
        """CPU time is less at the mercy of the other jobs on a shared machine than wall time."""
        return statistics.median(self.cpu_seconds) if self.cpu_seconds else None

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def cell(self) -> str:
        spread = f" ({min(self.seconds):.2f}-{max(self.seconds):.2f})" if len(self.seconds) > 1 else ""
        return f"{self.median:.3f}s{spread}"


def run_once(argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall time and peak RSS (MiB) of one command, RSS read by GNU time (a fork of this process would
    inherit our own high-water mark)."""
    elapsed, rss, _cpu = run_once_cpu(argv, cwd=cwd, env=env)
    return elapsed, rss


def run_once_cpu(argv: Sequence[str], cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Wall time, peak RSS (MiB) and CPU time (user + system, children included) of one command."""
    with tempfile.NamedTemporaryFile(prefix="bench-rss-") as rss_file:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", rss_file.name, *argv], cwd=cwd,
                              env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
        kib, user, system = (float(v) for v in Path(rss_file.name).read_text().split()[-3:])
    return elapsed, kib / 1024, user + system


def measure(runs: int, command: Callable[[], Sequence[str]], *, prepare: Callable[[], None] | None = None,
            cwd: Callable[[], Path] | None = None, env: dict[str, str] | None = None) -> Timing:
    """Median of ``runs`` runs; ``prepare`` (untimed) resets state before each run."""
    seconds: list[float] = []
    cpu: list[float] = []
    peak = 0.0
    for _ in range(runs):
        if prepare:
            prepare()
        elapsed, rss, used = run_once_cpu(command(), cwd=cwd() if cwd else None, env=env)
        seconds.append(elapsed)
        cpu.append(used)
        peak = max(peak, rss)
    return Timing(seconds, peak, cpu)


@dataclass
class Row:
    """One row of `make bench`'s summary table: our time beside the reference's, and the issue's target.

    ``max_ratio`` (ours / reference) and ``max_seconds`` are the targets; ``max_mib`` bounds the new disk
    an output costs (``disk_mib``). ``error`` is set when our side failed, so the row says why."""

    work: str
    ours: Timing | None
    reference: str = ""
    ref: Timing | None = None
    max_ratio: float | None = None
    max_seconds: float | None = None
    disk_mib: float | None = None
    max_mib: float | None = None
    error: str = ""
    unit: str = "s"  # "s" for timings, "MiB" for a memory row (Timing.seconds then holds MiB)

    @property
    def ratio(self) -> float | None:
        if self.ours is None or self.ref is None or self.ref.median <= 0:
            return None
        return self.ours.median / self.ref.median

    def target(self) -> str:
        parts = []
        if self.max_ratio is not None:
            parts.append(f"≤ {self.max_ratio:g}×")
        if self.max_seconds is not None:
            parts.append(f"≤ {_secs(self.max_seconds)}")  # only for timing rows
        if self.max_mib is not None:
            parts.append(f"≤ {self.max_mib:g} MiB new disk")
        return ", ".join(parts) or "–"

    def met(self) -> str:
        if self.ours is None:
            return "**no** (failed)"
        checks = []
        if self.max_ratio is not None and self.ratio is not None:
            checks.append(self.ratio <= self.max_ratio)
        if self.max_seconds is not None:
            checks.append(self.ours.median <= self.max_seconds)
        if self.max_mib is not None and self.disk_mib is not None:
            checks.append(self.disk_mib <= self.max_mib)
        if not checks:
            return "–"
        return "yes" if all(checks) else "**no**"

    def cells(self) -> list[str]:
        ours = f"error: {self.error}" if self.ours is None else _cell(self.ours, self.unit)
        if self.ours is not None and self.unit == "s" and self.ours.cpu_median is not None:
            ours += f"; CPU {_secs(self.ours.cpu_median)}"
        if self.disk_mib is not None:
            ours += f", {self.disk_mib:.1f} MiB new disk"
        ref = f"{self.reference} {_cell(self.ref, self.unit)}" if self.ref else (self.reference or "–")
        if self.ref is not None and self.unit == "s" and self.ref.cpu_median is not None:
            ref += f"; CPU {_secs(self.ref.cpu_median)}"
        ratio = f"{self.ratio:.2f}×" if self.ratio is not None else "–"
        return [self.work, ours, ref, ratio, self.target(), self.met()]

    def to_json(self) -> dict:
        return {"cells": self.cells(), "ours_s": self.ours.seconds if self.ours else None,
                "ref_s": self.ref.seconds if self.ref else None, "peak_rss_mib": self.ours.peak_rss_mib if self.ours else None}


HEADERS = ["work", "ours (median, min–max)", "reference", "ratio", "target", "met?"]


def _secs(value: float, unit: str = "s") -> str:
    if unit != "s":
        return f"{value:.0f} {unit}"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _cell(t: Timing, unit: str = "s") -> str:
    spread = f" ({_secs(min(t.seconds), unit)}–{_secs(max(t.seconds), unit)})" if len(t.seconds) > 1 else ""
    return f"{_secs(t.median, unit)}{spread}"


def markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines) + "\n"


_header_printed = False


def record(rows: list[Row]) -> None:
    """Print the rows (markdown; the header once per process) and, under `make bench` (BENCH_ROWS set by
    run_all.py), append them to the summary that run_all prints as one table at the end. Recording row by
    row keeps what was measured when a long run is interrupted."""
    global _header_printed
    text = markdown([r.cells() for r in rows])
    print(text if not _header_printed else text.split("\n", 2)[2], end="", flush=True)
    _header_printed = True
    target = os.environ.get("BENCH_ROWS")
    if target:
        import json

        with open(target, "a", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(r.to_json()) + "\n")
