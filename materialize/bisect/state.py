"""Persistent bisect state under ``<work>/bisect/``: survives a crash and a reboot.

Everything a bisect knows lives in one JSON document (``state.json``) rewritten atomically (temp
file, fsync, ``os.replace``) after every change, so a kill at any instant leaves either the old or
the new state, never half of one. The same document carries the log: one git-bisect-like line per
user action with explicit positions, so ``replay`` re-derives the exact state without re-running
hardware. A human-readable copy of the log is written next to it (``log``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from materialize.atomic import atomic_write
from materialize.errors import BusyError, MaterializeError

STATE_FORMAT = 1
Mode = Literal["gate", "metric"]


class BisectError(MaterializeError):
    """Bisect used wrongly (no bisect started, a position out of range, a malformed log line)."""

    exit_code = 2


@dataclass
class Observation:
    """One result at one position: gate counts, or metric samples."""

    position: int
    source: str  # "good", "bad", "run", "record <file>:<line>", "replay"
    materialization_id: str | None = None
    requests: int = 0
    failures: int = 0
    censored: bool = False
    samples: list[float] = field(default_factory=list)
    records: list[str] = field(default_factory=list)  # identities of the run records it came from


@dataclass
class BisectState:
    """The whole bisect, as saved."""

    series: str
    mode: Mode
    good: int
    bad: int
    n_patches: int
    gate: str = "exit"
    metric: str | None = None
    unit: str | None = None  # the metric's unit, fixed by the first samples that name one (never converted)
    unit_source: str = ""  # where that unit was first given (a record's FILE:LINE, "run")
    direction: Literal["lower", "higher"] = "lower"
    threshold: float = 0.01
    confidence: float = 0.95
    requests: int = 1  # requests per run when only pass/fail is known
    deterministic: bool = False
    switch_cost: float = 0.0
    baseline_rate: float | None = None
    culprit_rate: float | None = None
    none_prior: float = 0.25  # prior mass of "no patch in the range changed the gate/metric"
    min_effect: float = 1.5  # gate: a culprit multiplies the per-request failure rate at least by this
    series_hash: str = ""  # patch names and contents at start: a changed series is refused
    layout: Literal["overlay", "full"] = "overlay"  # how candidates are written under bisect/candidates
    run_count: int = 0  # runs 'bisect run' has done in this bisect (all invocations): --max-runs counts it
    run_results: str = ""  # gate: "reported" once a run gave counts (records/JSON), "exit" if only exit codes
    observations: list[Observation] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)  # position -> materialization id
    current: int | None = None
    log: list[str] = field(default_factory=list)
    format: int = STATE_FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, source: str) -> BisectState:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BisectError(f"{source}:{exc.lineno}: corrupt bisect state: {exc.msg}") from None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise BisectError(f"{source}: unknown bisect state format (expected {STATE_FORMAT})")
        try:
            data["observations"] = [Observation(**o) for o in data.get("observations", [])]
            return cls(**data)
        except TypeError as exc:
            raise BisectError(f"{source}: corrupt bisect state: {exc}") from None

    def counts_at(self, position: int) -> list[Observation]:
        return [o for o in self.observations if o.position == position]

    def runs_used(self) -> int:
        return sum(1 for o in self.observations if o.source not in ("replay-note",))


class StateStore:
    """The ``<work>/bisect`` directory: state, human log, candidates; locked as a whole."""

    def __init__(self, work_dir: str | Path) -> None:
        self.dir = Path(work_dir) / "bisect"
        self.state_path = self.dir / "state.json"
        self.log_path = self.dir / "log"
        self.candidates = self.dir / "candidates"

    def exists(self) -> bool:
        return self.state_path.exists()

    def load(self) -> BisectState:
        try:
            text = self.state_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise BisectError(
                f"no bisect in progress ({self.state_path} not found); run 'bisect start'"
            ) from None
        return BisectState.from_json(text, str(self.state_path))

    def save(self, state: BisectState) -> None:
        atomic_write(self.state_path, (state.to_json() + "\n").encode(), durable=True)
        atomic_write(self.log_path, render_log(state).encode(), durable=True)

    def reset(self) -> bool:
        existed = self.state_path.exists()
        self.state_path.unlink(missing_ok=True)
        self.log_path.unlink(missing_ok=True)
        shutil.rmtree(self.candidates, ignore_errors=True)
        return existed

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the bisect for a whole command; a second state-changing command fails at once (exit 5).

        The lock is ``flock`` on the directory itself: no lock file to leave behind, released by the
        kernel when the holder dies (even by ``kill -9``). Under the lock, temp files of a writer that
        was killed mid-write are swept.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise BusyError(
                    f"another bisect command is running on {self.dir} (wait for it, or stop it)"
                ) from None
            for leftover in [*self.dir.glob(".state.json.*"), *self.dir.glob(".log.*"), self.dir / ".lock"]:
                leftover.unlink(missing_ok=True)
            for scratch in self.dir.glob(".run-*"):  # a killed 'bisect run's ledger scratch
                shutil.rmtree(scratch, ignore_errors=True)
            yield
        finally:
            os.close(fd)


LOG_HEADER = "# materialize bisect log: replay with 'materialize bisect replay FILE'\n"


def render_log(state: BisectState) -> str:
    return LOG_HEADER + "".join(line + "\n" for line in state.log)


def parse_log(text: str, source: str) -> list[tuple[int, list[str]]]:
    """(line number, argv) for every command line of a log; comments and blanks skipped."""
    import shlex

    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            out.append((number, shlex.split(stripped)))
        except ValueError as exc:
            raise BisectError(f"{source}:{number}: cannot parse log line: {exc}") from None
    return out


def state_dict(state: BisectState) -> dict[str, Any]:
    return asdict(state)
