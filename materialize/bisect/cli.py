"""``materialize bisect ...`` and ``materialize runs ...``: thin wrappers over the bisect modules.

Each command is a plain function returning an exit code; user mistakes raise ``MaterializeError``
subclasses for the main CLI's handler. Exit codes follow git bisect where it has one: 0 done/ok,
1 the work failed (run ended without a culprit, invalid records found), 2 wrong usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from materialize.bisect.api import DEFAULT_SERIES, cap_threads, id_checker, series_path
from materialize.bisect.api import work_dir as _work_dir
from materialize.cliargs import UsageError, group, option
from materialize.console import write
from materialize.errors import MaterializeError

cap_threads()  # before any bisect command imports numpy/scipy (see materialize.bisect.api)


class _OnFirstUse:
    """A module imported on first attribute access: ``session`` pulls in scipy and numpy, which
    `materialize bisect --help` must not pay for (issue 12: --help <= 150 ms)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str):  # noqa: ANN204
        import importlib

        return getattr(importlib.import_module(self._name), attribute)


session = _OnFirstUse("materialize.bisect.session")
# The series model and the state's modules load when a command runs, not for `bisect --help`.
_state = _OnFirstUse("materialize.bisect.state")
_candidates = _OnFirstUse("materialize.bisect.candidates")
_series = _OnFirstUse("materialize.series")


def render(*args, **kwargs) -> str:  # noqa: ANN002, ANN003 - materialize.bisect.report.render, loaded on use
    from materialize.bisect.report import render as _render

    return _render(*args, **kwargs)


if TYPE_CHECKING:
    from materialize.bisect.candidates import Candidate, SeriesIndex
    from materialize.bisect.state import BisectState, StateStore
    from materialize.bisect.validate import Checked
    from materialize.series import Series

DEFAULT_RUNS = "bench/runs"


def _series_path(value: str | None) -> Path:
    return series_path(value)


def common(f: Callable) -> Callable:
    f = option(
        "--series",
        dest="series_opt",
        default=None,
        help=f"series file (default ${{MATERIALIZE_SERIES}} or {DEFAULT_SERIES})",
    )(f)
    f = option(
        "--work-dir",
        default=None,
        help="work directory holding bisect/ (default $MATERIALIZE_WORK, else work/ next to series/)",
    )(f)
    return f


def _position(series: Series, ref: str) -> int:
    return series.position(0 if ref in ("0", "base") else ref)


def _rate(value: str | None) -> float | None:
    """A per-request rate given as a fraction ("1/256") or a number ("0.0039")."""
    if value is None:
        return None
    try:
        if "/" in value:
            num, den = value.split("/", 1)
            return float(num) / float(den)
        return float(value)
    except (ValueError, ZeroDivisionError):
        raise _state.BisectError(f"not a rate: {value!r} (use e.g. 1/256 or 0.0039)") from None


def check_records(*args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - lazy: the ledger schema loads on use
    from materialize.bisect.validate import check_records as _check

    return _check(*args, **kwargs)


def iter_ledger(paths):  # noqa: ANN001, ANN201
    from materialize.ledger import iter_ledger as _iter

    return _iter(paths)


def _ledger_files(paths):  # noqa: ANN001, ANN202
    from materialize.ledger import ledger_files

    return ledger_files(paths)


# Seam for tests and for the end-to-end run: how a position becomes a materialized directory.
def default_prepare(series: Series, root: Path, overlay: bool) -> Callable[[int], Candidate]:
    from materialize.bisect.candidates import prepare

    cache: dict[int, Candidate] = {}

    def _prep(position: int) -> Candidate:
        if position not in cache:
            cache[position] = prepare(series, position, root, overlay=overlay)
        return cache[position]

    return _prep


PREPARE_FACTORY: Callable[[Series, Path, bool], Callable[[int], Candidate]] = default_prepare


def _prepare_for(series: Series, store: StateStore, state: BisectState) -> Callable[[int], Candidate]:
    return PREPARE_FACTORY(series, store.candidates, state.layout == "overlay")


@group("bisect")
def bisect_group() -> None:
    """Find the patch that broke a gate or moved a metric, across (flaky, noisy) hardware runs."""


def _load(series_opt: str | None, work_dir: str | None) -> tuple[Series, StateStore]:
    return _series.load_series(_series_path(series_opt)), _state.StateStore(_work_dir(work_dir, series_opt))


def _store(series_opt: str | None, work_dir: str | None) -> StateStore:
    return _state.StateStore(_work_dir(work_dir, series_opt))


def _state_series(state: BisectState, series_opt: str | None) -> Series:
    """The series the bisect was started on (not ``--series`` or the default), unchanged since.

    Positions only mean something for that series: bisecting another one with the old positions
    would test the wrong code and mark the missing positions skipped.
    """
    from materialize.bisect.candidates import series_hash

    recorded = Path(state.series)
    if series_opt is not None and Path(series_opt).resolve() != recorded.resolve():
        raise _state.BisectError(
            f"this bisect was started on {recorded}, not {Path(series_opt).resolve()}; "
            "leave --series out, or 'bisect reset' and start again"
        )
    series = _series.load_series(recorded)
    if state.series_hash and series_hash(series) != state.series_hash:
        raise _state.BisectError(
            f"{recorded} changed since 'bisect start' (a patch was edited, added or removed): "
            "the recorded positions no longer name the same code; 'bisect reset' and start again"
        )
    return series


def _series_guard(state: BisectState, index: SeriesIndex) -> Callable[[], None]:
    """A check that the series is still the one the bisect was started on, for ``bisect run``.

    ``_state_series`` checks it when a command starts; a run lasts hours, and a ``refresh`` meanwhile
    would change what the later candidates are built from: the same positions would name two codes.
    The run calls this before and after building each candidate (an edit during a build may leave
    the edited code in it, or a half-written patch that fails to apply: neither is used nor skipped).
    Candidates already built keep their code (their directory is named by their id), so runs of them
    in flight still count. A change stops the run (exit 2, as at start) naming what changed.
    """
    from materialize.bisect.candidates import describe_change, hash_of

    recorded = Path(state.series)
    start = list(zip(index.names, index.shas, strict=True))
    expected = state.series_hash or hash_of(recorded.read_bytes(), start)

    def check() -> None:
        try:
            series = _series.load_series(recorded)
            now = [(p.name, p.sha256()) for p in series.patches]
            text = recorded.read_bytes()
        except (MaterializeError, OSError) as exc:  # caught mid-edit: unreadable is changed too
            raise _state.BisectError(
                f"{recorded} changed during 'bisect run' and cannot be read now ({exc}); stopped before "
                "building another candidate (the runs recorded so far stay); 'bisect reset' and start again"
            ) from None
        if hash_of(text, now) != expected:
            raise _state.BisectError(
                f"{recorded} changed during 'bisect run' ({describe_change(start, now)}): the positions "
                "would name other code from here on; stopped before building another candidate (the runs "
                "recorded so far stay); 'bisect reset' and start again"
            )

    return check


@bisect_group.command("start")
@common
@option(
    "--good", required=True, help="a known-good position (0 or 'base' = upstream alone, or a patch name)"
)
@option("--bad", required=True, help="a known-bad position (number or patch name)")
@option(
    "--gate",
    default=None,
    help="bisect a correctness gate (pass/fail counts); default 'exit' = the command's exit code",
)
@option("--metric", default=None, help="bisect a metric (samples) instead of a gate")
@option("--lower-is-better", dest="direction", action="store_const", const="lower", default="lower")
@option("--higher-is-better", dest="direction", action="store_const", const="higher")
@option("--threshold", type=float, default=1.0, show_default=True, help="metric noise band in percent")
@option(
    "--requests",
    type=int,
    default=1,
    show_default=True,
    help="requests per gate run (e.g. 32 for a stage-3 gate)",
)
@option("--confidence", type=float, default=0.95, show_default=True)
@option("--deterministic", action="store_true", help="plain git-bisect semantics: one pass clears a position")
@option(
    "--switch-cost",
    type=float,
    default=0.0,
    show_default=True,
    help="extra cost of moving to another candidate (materialize, boot), in runs",
)
@option("--baseline-rate", default=None, help="known per-request rate of every prefix, e.g. 1/256")
@option("--culprit-rate", default=None, help="known per-request rate with the culprit, e.g. 1/32")
@option(
    "--prior-no-culprit",
    type=float,
    default=0.25,
    show_default=True,
    help="prior probability that no patch in the range is the culprit",
)
@option(
    "--min-effect",
    type=float,
    default=1.5,
    show_default=True,
    help="gate: the smallest regression worth finding, as a factor on the per-request failure rate; "
    "a larger one lets 'no regression' be concluded in far fewer runs",
)
@option(
    "--full-trees",
    action="store_true",
    help="write whole trees per candidate (default: an overlay of changed files) under work/bisect/candidates",
)
def start_cmd(
    series_opt,
    work_dir,
    good,
    bad,
    gate,
    metric,
    direction,
    threshold,
    requests,
    confidence,
    deterministic,
    switch_cost,
    baseline_rate,
    culprit_rate,
    prior_no_culprit,
    min_effect,
    full_trees,
) -> int:
    """Start a bisect between two series positions."""
    from materialize.bisect.candidates import series_hash

    series, store = _load(series_opt, work_dir)
    with store.locked():
        if store.exists():
            raise _state.BisectError(f"a bisect is already in progress in {store.dir}; 'bisect reset' first")
        state = session.start(
            series=str(series.path),
            n_patches=len(series.patches),
            good=_position(series, good),
            bad=_position(series, bad),
            gate=gate,
            metric=metric,
            direction=direction,
            threshold_pct=threshold,
            confidence=confidence,
            requests=requests,
            deterministic=deterministic,
            switch_cost=switch_cost,
            baseline_rate=_rate(baseline_rate),
            culprit_rate=_rate(culprit_rate),
            none_prior=prior_no_culprit,
            min_effect=min_effect,
        )
        state.series_hash = series_hash(series)
        state.layout = "full" if full_trees else "overlay"
        store.save(state)
    write(
        f"bisecting positions {state.good}..{state.bad} ({state.bad - state.good} candidate patches); state in {store.dir}"
    )
    return 0


@bisect_group.command("next")
@common
def next_cmd(series_opt, work_dir) -> int:
    """Materialize the next candidate and print its id and directory (or the verdict)."""
    store = _store(series_opt, work_dir)
    with store.locked():
        state = store.load()
        series = _state_series(state, series_opt)
        prepare = _prepare_for(series, store, state)
        while True:
            step = session.decide(state)
            if step.status != "run":
                store.save(state)
                write(render(state, step, _candidates.patch_names(series)))
                return 0 if step.status == "found" else 1
            position, repeats = step.runs[0]
            try:
                cand = prepare(position)
                break
            except MaterializeError as exc:  # an untestable prefix is skipped, as git bisect skips
                write(f"position {position}: cannot materialize ({exc}); skipping it", stderr=True)
                session.skip(state, position)
        session.note_candidate(state, position, cand.materialization_id)
        store.save(state)
    name = _candidates.patch_names(series).get(position, "(upstream alone)")
    write(f"position {position} {name}")
    write(f"id {cand.materialization_id}")
    write(f"dir {cand.directory}")
    how = "'good'/'bad'/'skip'" if state.mode == "gate" else "'record RUNFILE'"
    write(f"run it {repeats} time(s), then {how}")
    return 0


def _mark(series_opt, work_dir, verdict, position, requests, failures) -> int:
    store = _store(series_opt, work_dir)
    with store.locked():
        state = store.load()
        series = _state_series(state, series_opt)
        pos = _position(series, position) if position is not None else None
        obs = session.mark(state, verdict, pos, requests=requests, failures=failures)
        store.save(state)
    step = session.decide(state)
    write(f"{verdict} at position {obs.position}; " + _summary(step))
    return 0


def _summary(step: session.Step) -> str:
    if step.status == "found":
        return f"first bad position {step.culprit}" + (
            f" (P={step.probability:.3f})" if step.probability else ""
        )
    if step.status == "run":
        best = f"best {step.culprit} P={step.probability:.3f}; " if step.probability is not None else ""
        return best + "next: " + ", ".join(f"position {p} x{r}" for p, r in step.runs)
    return f"{step.status}: {step.message}"


@bisect_group.command("good")
@common
@option("position", nargs="?")
@option("--requests", type=int, default=None, help="requests in this run (default: from start)")
def good_cmd(series_opt, work_dir, position, requests) -> int:
    """The candidate (or POSITION) passed a run."""
    return _mark(series_opt, work_dir, "good", position, requests, None)


@bisect_group.command("bad")
@common
@option("position", nargs="?")
@option("--requests", type=int, default=None)
@option("--failures", type=int, default=None, help="failures seen (default: 'at least one')")
def bad_cmd(series_opt, work_dir, position, requests, failures) -> int:
    """The candidate (or POSITION) failed a run."""
    return _mark(series_opt, work_dir, "bad", position, requests, failures)


@bisect_group.command("skip")
@common
@option("position", nargs="?")
def skip_cmd(series_opt, work_dir, position) -> int:
    """The candidate (or POSITION) cannot be tested."""
    store = _store(series_opt, work_dir)
    with store.locked():
        state = store.load()
        series = _state_series(state, series_opt)
        pos = session.skip(state, _position(series, position) if position is not None else None)
        store.save(state)
    write(f"skipped position {pos}; " + _summary(session.decide(state)))
    return 0


def _print_problems(bad: list[Checked]) -> None:
    for c in bad:
        for problem in c.problems:
            write(f"{c.line.where}: invalid: {problem}", stderr=True)


def _feed(state: BisectState, checked: list[Checked]) -> tuple[int, int, int]:
    """Add valid, relevant records to the state, each run once. Returns (used, irrelevant, skipped).

    A run is its record's content (``RunRecord.identity``), not the path it was read through: the
    same line given twice in one command, through another path, in a copy of the file, in a later
    command, or already counted by the ``bisect run`` that wrote it, is skipped.
    """
    seen = session.recorded(state)
    used = irrelevant = skipped = 0
    for c in checked:
        rec = c.line.record
        if not c.ok or rec is None or c.position is None:
            continue
        rid = rec.identity
        if rid in seen:
            skipped += 1
            continue
        source = f"record {c.line.where}"
        if state.mode == "gate" and (g := rec.gate(state.gate)):
            session.observe(
                state,
                c.position,
                source=source,
                materialization_id=rec.materialization_id,
                requests=g.requests,
                failures=g.failures,
                censored=g.censored,
                records=[rid],
            )
            used += 1
        elif state.mode == "metric" and (m := rec.metric(state.metric or "")):
            session.observe(
                state,
                c.position,
                source=source,
                materialization_id=rec.materialization_id,
                samples=m.samples,
                records=[rid],
                unit=m.unit,
            )
            used += 1
        else:
            irrelevant += 1
        seen.add(rid)
    return used, irrelevant, skipped


@bisect_group.command("record")
@common
@option("runfiles", nargs="+")
@option(
    "--check-ids", action=argparse.BooleanOptionalAction, default=True, help="recompute each prefix's materialization id (cached)"
)
def record_cmd(series_opt, work_dir, runfiles, check_ids) -> int:
    """Feed run records (JSONL) into the bisect; invalid records are refused, loudly."""
    store = _store(series_opt, work_dir)
    with store.locked():
        state = store.load()
        series = _state_series(state, series_opt)
        units = {state.metric: (state.unit, state.unit_source)} if state.metric and state.unit is not None else None
        checked = check_records(
            iter_ledger(runfiles), _candidates.SeriesIndex(series), id_checker(series, state, check_ids), units
        )
        bad = [c for c in checked if not c.ok]
        _print_problems(bad)
        used, irrelevant, skipped = _feed(state, checked)
        store.save(state)
    write(
        f"recorded {used} run(s); skipped {skipped} already recorded; {len(bad)} invalid (not used); "
        f"{irrelevant} without {state.gate if state.mode == 'gate' else state.metric!r}"
    )
    write(_summary(session.decide(state)))
    return 1 if bad else 0


@bisect_group.command("run")
@common
@option(
    "--jobs",
    type=int,
    default=1,
    show_default=True,
    help="candidates run at once (k-ary search); {job} picks a host",
)
@option("--max-runs", type=int, default=None, help="stop after this many hardware runs")
@option("--timeout", type=float, default=None, help="seconds per run; a timeout counts as skip")
@option(
    "--ledger", default=None, help="append a run record per run to this JSONL (e.g. bench/runs/bisect.jsonl)"
)
@option(
    "--ray-hosts",
    default=None,
    help="comma-separated Tenstorrent hosts: dispatch through Ray (one custom resource per host)",
)
@option("command", nargs=argparse.REMAINDER, help="the harness and its arguments (after --)")
def run_cmd(series_opt, work_dir, jobs, max_runs, timeout, ledger, ray_hosts, command) -> int:
    """Run COMMAND on candidates until the culprit is found (exit 0), or not (exit 1)."""
    from materialize.bisect.runner import LocalExecutor, run_loop
    from materialize.bisect.validate import candidate_problems

    command = command[1:] if command[:1] == ["--"] else command
    if not command:
        raise UsageError("bisect run needs the COMMAND to run (after --)")
    if jobs < 1:
        raise _state.BisectError("--jobs must be at least 1")
    store = _store(series_opt, work_dir)
    with store.locked():  # for the whole run: a second run or a 'good' meanwhile gets exit 5
        state = store.load()
        series = _state_series(state, series_opt)
        executor = LocalExecutor(jobs)
        if ray_hosts:
            from materialize.bisect.ray_executor import RayExecutor

            executor = RayExecutor([h for h in ray_hosts.split(",") if h])
        index = _candidates.SeriesIndex(series)
        check = _series_guard(state, index)
        check()  # the index (the records' prefixes) was read after _state_series: the same series?
        step = run_loop(
            store,
            list(command),
            _prepare_for(series, store, state),
            index.prefix_entries,
            executor=executor,
            check_series=check,
            vet=lambda rec, position: candidate_problems(rec, index, position),
            ledger=Path(ledger) if ledger else None,
            max_runs=max_runs,
            timeout=timeout,
            echo=write,
        )
        state = store.load()
    write(render(state, step, _candidates.patch_names(series)))
    return 0 if step.status == "found" else 1


@bisect_group.command("status")
@common
@option("--plot", dest="plot_path", default=None, help="also draw the posterior / samples to this PNG")
def status_cmd(series_opt, work_dir, plot_path) -> int:
    """The posterior table (or metric table), bounds, and runs still needed."""
    store = _store(series_opt, work_dir)
    state = store.load()
    series = _state_series(state, series_opt)
    step = session.decide(state)
    names = _candidates.patch_names(series)
    write(render(state, step, names))
    if plot_path:
        from materialize.bisect.plot import plot

        write(f"plot written to {plot(state, step, plot_path, names)}")
    return 0


@bisect_group.command("log")
@common
def log_cmd(series_opt, work_dir) -> int:
    """Print the replayable log."""
    store = _state.StateStore(_work_dir(work_dir, series_opt))
    write(_state.render_log(store.load()))
    return 0


@bisect_group.command("replay")
@common
@option("logfile", type=str)
def replay_cmd(series_opt, work_dir, logfile) -> int:
    """Reset, then rebuild the bisect from a log (no hardware is run)."""
    series, store = _load(series_opt, work_dir)
    try:
        text = Path(logfile).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _state.BisectError(f"{logfile}: no such log file") from None
    from materialize.bisect.candidates import series_hash

    state = session.replay(_state.parse_log(text, logfile), logfile, str(series.path), len(series.patches))
    state.series_hash = series_hash(series)
    with store.locked():
        store.reset()
        store.save(state)
    write(f"replayed {len(state.log)} line(s); " + _summary(session.decide(state)))
    return 0


@bisect_group.command("reset")
@common
def reset_cmd(series_opt, work_dir) -> int:
    """Forget the bisect in progress (run records in the ledger are kept)."""
    store = _state.StateStore(_work_dir(work_dir, series_opt))
    with store.locked():
        existed = store.reset()
    write("bisect state removed" if existed else "no bisect in progress")
    return 0


@bisect_group.command("infer")
@common
@option("--runs", dest="runs_paths", action="append", help=f"ledger files or dirs (default {DEFAULT_RUNS})")
@option("--good", default="0", show_default=True)
@option("--bad", default=None, help="default: the whole series")
@option("--gate", default=None)
@option("--metric", default=None)
@option("--lower-is-better", dest="direction", action="store_const", const="lower", default="lower")
@option("--higher-is-better", dest="direction", action="store_const", const="higher")
@option("--threshold", type=float, default=1.0, show_default=True)
@option("--requests", type=int, default=1, show_default=True)
@option("--confidence", type=float, default=0.95, show_default=True)
@option("--check-ids", action=argparse.BooleanOptionalAction, default=True, help="recompute each prefix's materialization id (cached)")
def infer_cmd(
    series_opt,
    work_dir,
    runs_paths,
    good,
    bad,
    gate,
    metric,
    direction,
    threshold,
    requests,
    confidence,
    check_ids,
) -> int:
    """Start (or extend) a bisect from what the ledger already knows: no hardware run repeated for nothing."""
    from materialize.bisect.candidates import series_hash

    store = _store(series_opt, work_dir)
    paths = runs_paths or (DEFAULT_RUNS,)
    with store.locked():
        if store.exists():
            state = store.load()
            series = _state_series(state, series_opt)
        else:
            series = _series.load_series(_series_path(series_opt))
            state = session.start(
                series=str(series.path),
                n_patches=len(series.patches),
                good=_position(series, good),
                bad=len(series.patches) if bad is None else _position(series, bad),
                gate=gate,
                metric=metric,
                direction=direction,
                threshold_pct=threshold,
                confidence=confidence,
                requests=requests,
            )
            state.series_hash = series_hash(series)
        checked = check_records(
            iter_ledger(paths), _candidates.SeriesIndex(series), id_checker(series, state, check_ids)
        )
        bad_records = [c for c in checked if not c.ok]
        _print_problems(bad_records)
        used, _, skipped = _feed(state, checked)
        step = session.decide(state)
        if state.mode == "gate" and step.posterior is not None:
            lo, hi = step.posterior.credible_range(state.confidence)
            narrow = f"narrowest range holding {state.confidence:g} of the posterior: good={lo} bad={hi}"
        else:
            ms = step.metric
            narrow = f"narrowest range from past runs: good={ms.low} bad={ms.high}" if ms else ""
        store.save(state)
    write(
        f"used {used} past run(s) from {len(_ledger_files(paths))} ledger file(s); skipped {skipped} already recorded; "
        f"{len(bad_records)} invalid record(s) ignored"
    )
    write(narrow)
    write(render(state, step, _candidates.patch_names(series)))
    return 1 if bad_records else 0  # invalid records given: exit 1, as 'record' and 'runs validate'


# ----------------------------------------------------------------------------------------------
# runs


@group("runs")
def runs_group() -> None:
    """The run ledger (bench/runs/*.jsonl): list, show, validate."""


@runs_group.command("list")
@option("paths", nargs="*")
def runs_list_cmd(paths) -> int:
    """One line per recorded run."""
    for line in iter_ledger(paths or (DEFAULT_RUNS,)):
        rec = line.record
        if rec is None:
            write(f"{line.where}  INVALID  {line.error}")
            continue
        gates = " ".join(f"{g.name}={g.failures}/{g.requests}" for g in rec.gates)
        metrics = " ".join(f"{m.name}(n={len(m.samples)})" for m in rec.metrics)
        write(
            f"{line.where}  {rec.time}  {rec.host}  {rec.materialization_id[:12]}  prefix={rec.position}  {gates} {metrics}".rstrip()
        )
    return 0


@runs_group.command("show")
@option("where")
@option("--runs", dest="runs_paths", action="append")
def runs_show_cmd(where, runs_paths) -> int:
    """Show one record: FILE:LINE, or a materialization id prefix (all its runs)."""
    import json

    if ":" in where and where.rsplit(":", 1)[1].isdigit():
        file, number = where.rsplit(":", 1)
        lines = [ln for ln in iter_ledger([file]) if ln.line == int(number)]
    else:
        lines = [
            ln
            for ln in iter_ledger(runs_paths or (DEFAULT_RUNS,))
            if ln.record and ln.record.materialization_id.startswith(where)
        ]
    if not lines:
        from materialize.ledger import LedgerError

        raise LedgerError(f"no record at {where}")
    for ln in lines:
        write(f"# {ln.where}")
        if ln.record is None:
            write(f"INVALID: {ln.error}")
        else:
            write(json.dumps(ln.record.model_dump(by_alias=True), indent=2))
    return 0


@runs_group.command("validate")
@option("paths", nargs="*")
@option("--series", dest="series_opt", default=None)
@option(
    "--check-ids", action=argparse.BooleanOptionalAction, default=True, help="recompute prefix ids with the engine (cached)"
)
def runs_validate_cmd(paths, series_opt, check_ids) -> int:
    """Flag records that are not evidence: wrong schema, unknown prefix/id, banner mismatch, degenerate output."""
    series = _series.load_series(_series_path(series_opt))
    checked = check_records(
        iter_ledger(paths or (DEFAULT_RUNS,)), _candidates.SeriesIndex(series), id_checker(series, None, check_ids)
    )
    bad = [c for c in checked if not c.ok]
    _print_problems(bad)
    write(f"{len(checked) - len(bad)} valid, {len(bad)} invalid record(s)")
    return 1 if bad else 0
