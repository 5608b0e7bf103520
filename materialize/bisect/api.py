"""What other commands (the HTML report) may use of bisect: where its state lives, how a position's
materialization id is checked, and the bound a position's runs support.

One public home for these so that a consumer never reaches into ``bisect.cli``'s private helpers and
``bisect status`` and the report print the same sentence for the same evidence. Light at import:
statistics and the engine load only when a function needs them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from materialize.bisect.state import BisectState
    from materialize.series import Series

DEFAULT_SERIES = "series/default.yaml"

# numpy/scipy's BLAS and OpenMP pools start one thread per core when they load. The posterior's
# matrices are tiny, and the machine a bisect runs on is shared with the gate it drives (2 cores in
# CI): extra threads only spin. Set before numpy is first imported, unless the user chose a value.
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_capped: dict[str, str] = {}


def cap_threads(threads: int = 1) -> None:
    """Cap numpy/scipy's thread pools for this process (call before numpy is imported)."""
    for var in THREAD_VARS:
        if var not in os.environ:
            os.environ[var] = _capped[var] = str(threads)


def child_environ() -> dict[str, str]:
    """This process's environment without the caps ``cap_threads`` added: the gate command (a
    benchmark, a server) gets the threads its user gave it, not the bisect's own limit."""
    env = dict(os.environ)
    for var, value in _capped.items():
        if env.get(var) == value:
            del env[var]
    return env


def series_path(value: str | None) -> Path:
    """The series file: the option, else ``$MATERIALIZE_SERIES``, else ``series/default.yaml``."""
    return Path(value or os.environ.get("MATERIALIZE_SERIES") or DEFAULT_SERIES)


def work_dir(value: str | Path | None, series_opt: str | None = None) -> Path:
    """``work/`` next to ``series/`` (as the workspace commands use it), overridable by MATERIALIZE_WORK."""
    if value:
        return Path(value)
    if os.environ.get("MATERIALIZE_WORK"):
        return Path(os.environ["MATERIALIZE_WORK"])
    return series_path(series_opt).resolve().parent.parent / "work"


def id_checker(series: Series, state: BisectState | None, check_ids: bool) -> Callable[[int], str | None] | None:
    """position -> the materialization id a record at that prefix must carry (None: unknown).

    Without ``check_ids`` only the ids the bisect already knows are checked (no engine run); with it
    every position is materialized once (cached) to learn its id.
    """
    known = dict(state.ids) if state else {}
    if not check_ids:
        return (lambda pos: known.get(str(pos))) if known else None
    cache: dict[int, str | None] = {int(k): v for k, v in known.items()}

    def id_of(pos: int) -> str | None:
        if pos not in cache:
            try:
                from materialize.engine import materialize
            except ImportError:
                cache[pos] = None
            else:
                cache[pos] = materialize(series, upto=pos).id
        return cache[pos]

    return id_of


def position_evidence(state: BisectState, position: int) -> str:
    """The bound a gate position's runs support, counting every failure seen (issue 15 item 4).

    Exact counts only: Clopper-Pearson on requests (rule of three without failures). When some runs
    only said "failed" (an exit code), the bound is on runs, failing ones included; "" without runs.
    """
    from materialize.bisect.stats import describe_rate, describe_runs

    obs = [o for o in state.observations if o.position == position and o.requests]
    if not obs:
        return ""
    if any(o.censored and o.failures > 0 for o in obs):
        return describe_runs([o.requests for o in obs], sum(o.failures > 0 for o in obs), state.confidence)
    return describe_rate(sum(o.failures for o in obs), sum(o.requests for o in obs), state.confidence)
