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
    """Wall time and peak RSS (MiB) of one command, RSS read by GNU time (a fork of this process would
    inherit our own high-water mark)."""
    with tempfile.NamedTemporaryFile(prefix="bench-rss-") as rss_file:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file.name, *argv], cwd=cwd,
                              env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
        kib = float(Path(rss_file.name).read_text().split()[-1])
    return elapsed, kib / 1024


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
