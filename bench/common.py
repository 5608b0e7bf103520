"""Helpers shared by the benchmark scripts: run a command several times, report medians and peak RSS.

Benchmarks are scripts that print tables, never timed unit tests: the machine is shared and noisy,
so every number is the median of several runs and the spread is shown next to it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Timing:
    seconds: list[float]
    peak_rss_mib: float

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def cell(self) -> str:
        spread = f" ({min(self.seconds):.2f}-{max(self.seconds):.2f})" if len(self.seconds) > 1 else ""
        return f"{self.median:.3f}s{spread}"


def run_once(argv: Sequence[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall time and peak RSS (MiB) of one child process, measured with wait4 for that child only."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(argv), cwd=cwd, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {stderr[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024


def measure(runs: int, command: Callable[[], Sequence[str]], *, prepare: Callable[[], None] | None = None,
            cwd: Callable[[], Path] | None = None, env: dict[str, str] | None = None) -> Timing:
    """Median of ``runs`` runs; ``prepare`` (untimed) resets state before each run."""
    seconds: list[float] = []
    peak = 0.0
    for _ in range(runs):
        if prepare:
            prepare()
        elapsed, rss = run_once(command(), cwd=cwd() if cwd else None, env=env)
        seconds.append(elapsed)
        peak = max(peak, rss)
    return Timing(seconds, peak)
