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
