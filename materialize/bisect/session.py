"""The bisect state machine: start, good/bad/skip, observations, the next step, replay.

Pure functions over ``BisectState`` (no engine, no hardware, no terminal), so that the CLI, the
``run`` loop, ``replay`` and the benchmark simulator all drive the same code. Every mutation
appends one log line with explicit positions; replaying the log rebuilds the same state.
"""

from __future__ import annotations

import functools
import math
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from materialize.bisect.state import BisectError, BisectState, Observation

if TYPE_CHECKING:  # numpy/scipy load only when a decision is computed, never for 'start'
    from materialize.bisect.metric import MetricModel, MetricStep
    from materialize.bisect.posterior import Counts, GateModel, Posterior


def _fmt(value: float) -> str:
    return repr(float(value)).removesuffix(".0") if float(value).is_integer() else repr(float(value))


def start(
    *,
    series: str,
    n_patches: int,
    good: int,
    bad: int,
    gate: str | None = None,
    metric: str | None = None,
    direction: Literal["lower", "higher"] = "lower",
    threshold_pct: float = 1.0,
    confidence: float = 0.95,
    requests: int = 1,
    deterministic: bool = False,
    switch_cost: float = 0.0,
    baseline_rate: float | None = None,
    culprit_rate: float | None = None,
    none_prior: float = 0.25,
    min_effect: float = 1.5,
) -> BisectState:
    """A fresh bisect between two series positions (0 = upstream alone)."""
    if not 0 <= good < bad <= n_patches:
        raise BisectError(f"need 0 <= good < bad <= {n_patches} (series length); got good={good} bad={bad}")
    if gate and metric:
        raise BisectError("bisect either a gate (--gate) or a metric (--metric), not both")
    if not 0.5 < confidence < 1:
        raise BisectError(f"--confidence must be in (0.5, 1); got {confidence}")
    if requests < 1:
        raise BisectError("--requests must be at least 1")
    if threshold_pct <= 0:
        raise BisectError("--threshold must be a positive percentage")
    for name, rate in (("--baseline-rate", baseline_rate), ("--culprit-rate", culprit_rate)):
        if rate is not None and not 0 < rate < 1:
            raise BisectError(f"{name} must be a per-request rate in (0, 1); got {rate}")
    if not 0 < none_prior < 1:
        raise BisectError(f"--prior-no-culprit must be in (0, 1); got {none_prior}")
    if min_effect <= 1:
        raise BisectError(f"--min-effect must be above 1 (a factor on the failure rate); got {min_effect}")
    if baseline_rate is not None and culprit_rate is not None and culprit_rate <= baseline_rate:
        raise BisectError("--culprit-rate must be above --baseline-rate")
    mode = "metric" if metric else "gate"
    state = BisectState(
        series=series,
        mode=mode,
        good=good,
        bad=bad,
        n_patches=n_patches,
        gate=gate or "exit",
        metric=metric,
        direction=direction,
        threshold=threshold_pct / 100.0,
        confidence=confidence,
        requests=requests,
        deterministic=deterministic,
        switch_cost=switch_cost,
        baseline_rate=baseline_rate,
        culprit_rate=culprit_rate,
        none_prior=none_prior,
        min_effect=min_effect,
    )
    state.log.append(start_line(state))
    return state


def start_line(state: BisectState) -> str:
    parts = ["start", "--good", str(state.good), "--bad", str(state.bad)]
    if state.mode == "metric":
        parts += ["--metric", shlex.quote(state.metric or "")]
        parts += ["--lower-is-better" if state.direction == "lower" else "--higher-is-better"]
        parts += ["--threshold", _fmt(state.threshold * 100)]
    else:
        parts += ["--gate", shlex.quote(state.gate), "--requests", str(state.requests)]
        if state.deterministic:
            parts.append("--deterministic")
        if state.baseline_rate is not None:
            parts += ["--baseline-rate", repr(state.baseline_rate)]
        if state.culprit_rate is not None:
            parts += ["--culprit-rate", repr(state.culprit_rate)]
        if state.min_effect != 1.5:
            parts += ["--min-effect", _fmt(state.min_effect)]
    parts += ["--confidence", _fmt(state.confidence), "--switch-cost", _fmt(state.switch_cost)]
    parts += ["--prior-no-culprit", _fmt(state.none_prior)]
    return " ".join(parts)


def _check_position(state: BisectState, position: int | None) -> int:
    if position is None:
        if state.current is None:
            raise BisectError("no current candidate: run 'bisect next' first or give a position")
        position = state.current
    if not 0 <= position <= state.n_patches:
        raise BisectError(f"position {position} is outside the series (0..{state.n_patches})")
    return position


def _id_opt(mid: str | None) -> str:
    return f" --id {mid}" if mid else ""


def mark(
    state: BisectState,
    verdict: Literal["good", "bad"],
    position: int | None = None,
    *,
    requests: int | None = None,
    failures: int | None = None,
) -> Observation:
    """``good``/``bad``: one run at a position passed/failed its gate (a pass is evidence, not proof).

    As in git bisect, ``bad`` means the run failed: ``--failures`` is at least 1 when given (a run
    with 0 failures is ``good``), and what is stored is what was given. ``--requests`` is at least 1.
    """
    if state.mode != "gate":
        raise BisectError("good/bad apply to gate bisects; a metric bisect takes samples ('record' or 'run')")
    position = _check_position(state, position)
    n = requests if requests is not None else state.requests
    if n < 1:
        raise BisectError(f"--requests must be at least 1 (got {n}): a run of no requests is no evidence")
    if verdict == "bad" and failures is not None and failures < 1:
        raise BisectError(
            f"'bad' means the run failed: --failures must be at least 1 (got {failures}); "
            "a run with 0 failures is 'good'"
        )
    if verdict == "good":
        if failures:
            raise BisectError("'good' means no failures; use 'bad --failures N' for a run with failures")
        obs = Observation(position, "good", state.ids.get(str(position)), n, 0, False)
    else:
        censored = failures is None
        obs = Observation(position, "bad", state.ids.get(str(position)), n, 1 if failures is None else failures, censored)
        if obs.failures > n:
            raise BisectError(f"--failures {failures} exceeds --requests {n}")
    state.observations.append(obs)
    line = f"{verdict} {position} --requests {n}"
    if verdict == "bad" and failures is not None:
        line += f" --failures {failures}"
    state.log.append(line + _id_opt(obs.materialization_id))
    return obs


def skip(state: BisectState, position: int | None = None) -> int:
    """``skip``: this position cannot be tested (does not build, no hardware); choose around it."""
    position = _check_position(state, position)
    if position not in state.skipped:
        state.skipped.append(position)
    state.log.append(f"skip {position}")
    if state.current == position:
        state.current = None
    return position


def observe(
    state: BisectState,
    position: int,
    *,
    source: str,
    materialization_id: str | None = None,
    requests: int = 0,
    failures: int = 0,
    censored: bool = False,
    samples: list[float] | None = None,
    records: list[str] | None = None,
    unit: str | None = None,
) -> Observation:
    """A result from a run record or an automated run, logged with its numbers so replay needs no files.

    ``records`` are the identities of the run records it came from (``RunRecord.identity``): they
    are logged, so a record fed again, even after a replay, is recognised and not counted twice.
    """
    position = _check_position(state, position)
    if samples:
        if state.mode != "metric":
            raise BisectError("metric samples given to a gate bisect")
        for s in samples:
            if not (isinstance(s, int | float) and math.isfinite(s) and s > 0):
                raise BisectError(
                    f"{source}: position {position}: metric {state.metric!r} sample {s!r} is not a finite "
                    "positive number (the model compares relative shifts, logs of samples); not recorded"
                )
        if unit is not None:
            if state.unit is None:
                state.unit, state.unit_source = unit, source
            elif unit != state.unit:
                raise BisectError(
                    f"{source}: metric {state.metric!r} in unit {unit!r}, but this bisect's samples are in "
                    f"{state.unit!r} (since {state.unit_source}); one unit per metric, samples are never converted"
                )
        obs = Observation(position, source, materialization_id, samples=[float(s) for s in samples])
        line = f"sample {position} --values {','.join(repr(float(s)) for s in samples)}"
        if unit is not None:
            line += f" --unit {shlex.quote(unit)}"
    else:
        if state.mode != "gate":
            raise BisectError("gate counts given to a metric bisect")
        if not 0 <= failures <= requests or requests < 1:
            raise BisectError(f"bad gate counts: {failures} failures of {requests} requests")
        obs = Observation(position, source, materialization_id, requests, failures, censored)
        line = f"observe {position} --requests {requests} --failures {failures}" + (
            " --censored" if censored else ""
        )
    if records:
        obs.records = list(records)
        line += " --records " + ",".join(records)
    state.observations.append(obs)
    state.log.append(line + _id_opt(materialization_id) + f" --source {shlex.quote(source)}")
    return obs


def recorded(state: BisectState) -> set[str]:
    """Identities of every run record already counted in this bisect."""
    return {r for o in state.observations for r in o.records}


def note_candidate(state: BisectState, position: int, materialization_id: str | None) -> None:
    """``next`` chose and materialized a candidate: remember it (log as a comment, replay ignores it)."""
    state.current = position
    if materialization_id:
        state.ids[str(position)] = materialization_id
    state.log.append(f"# next {position}" + (f" id {materialization_id}" if materialization_id else ""))


# ----------------------------------------------------------------------------------------------
# Deciding


@dataclass
class Step:
    """The answer to "what now?": runs to do, or the culprit and how sure we are."""

    status: Literal["run", "found", "no-regression", "inconclusive", "good-end-fails"]
    runs: list[tuple[int, int]] = field(default_factory=list)  # (position, repeats)
    culprit: int | None = None
    probability: float | None = None
    message: str = ""
    posterior: Posterior | None = None
    metric: MetricStep | None = None
    # why these runs (gate mode): "ends" (the ends are checked first), "confirm" (fresh runs at a
    # verdict's boundary), "no-culprit" (chosen for "no culprit" against "some culprit"), "search"
    phase: str = ""


def gate_data(state: BisectState) -> dict[int, Counts]:
    """Per-position counts of every gate observation: a live view, updated incrementally.

    Observations are only ever appended, so the counts are kept on the state object (not saved)
    and extended by the new ones: a long flaky bisect decides after each of thousands of runs.
    Callers must not mutate what they get.
    """
    from materialize.bisect.posterior import Counts

    cached = state.__dict__.get("_gate_counts")
    obs = state.observations
    if cached is not None and cached[0] is obs and cached[1] <= len(obs):
        data, done = cached[2], cached[1]
    else:
        data, done = {}, 0
    for o in obs[done:]:
        if o.requests:
            data.setdefault(o.position, Counts()).add(o.requests, o.failures, o.censored)
    state.__dict__["_gate_counts"] = (obs, len(obs), data)
    return data


def metric_samples(state: BisectState) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for o in state.observations:
        if o.samples:
            out.setdefault(o.position, []).extend(o.samples)
    return out


def gate_model(state: BisectState) -> GateModel:
    from materialize.bisect.posterior import GateModel

    return GateModel(
        good=state.good,
        bad=state.bad,
        requests_per_run=state.requests,
        confidence=state.confidence,
        deterministic=state.deterministic,
        switch_cost=state.switch_cost,
        baseline_rate=state.baseline_rate,
        culprit_rate=state.culprit_rate,
        none_prior=state.none_prior,
        min_ratio=state.min_effect,
    )


def metric_model(state: BisectState) -> MetricModel:
    from materialize.bisect.metric import MetricModel

    return MetricModel(
        good=state.good,
        bad=state.bad,
        direction=state.direction,
        threshold=state.threshold,
        confidence=state.confidence,
        none_prior=state.none_prior,
    )


def _runs_at(state: BisectState, position: int) -> tuple[int, int]:
    """(runs, failing runs) observed at ``position``: what the ends check looks at."""
    c = gate_data(state).get(position)
    return (c.runs, c.failed_runs) if c else (0, 0)


@functools.lru_cache(maxsize=1024)
def _lower_bound(fails: int, runs: int) -> float:
    from materialize.bisect.stats import clopper_pearson_lower

    return clopper_pearson_lower(fails, runs, 0.95)


def good_end_broken(state: BisectState) -> str | None:
    """Why the good end cannot be the good end, or None.

    git bisect refuses a "good" commit that is bad; with a flaky gate the good end may fail now and
    then, but not most of the time: when even the one-sided 95% lower bound of its per-run failure
    rate is above one half (3/3, 5/6, ... failing runs), the harness is broken or the good end is
    not good, and every later run would be read as evidence for a culprit that does not exist.
    """
    runs, fails = _runs_at(state, state.good)
    if not fails:
        return None
    lower = 1.0 if state.deterministic else _lower_bound(fails, runs)
    if lower <= 0.5:
        return None
    return (
        f"the good end (position {state.good}) is not good: {fails} of {runs} run(s) failed "
        f"(per-run failure rate >= {lower * 100:.0f}% at 95%). Check the gate command by hand at "
        f"position {state.good}: a command that crashes (exit 1/2) counts as a failing gate"
    )


def ends_runs(state: BisectState) -> list[tuple[int, int]]:
    """Runs the ends still need before any midpoint: the good end a few passes, the bad end one failure."""
    need_good = 1 if state.deterministic else ENDS_GOOD_RUNS
    g_runs, g_fails = _runs_at(state, state.good)
    b_runs, b_fails = _runs_at(state, state.bad)
    out = []
    if g_runs < need_good:
        out.append((state.good, need_good - g_runs))
    elif 2 * g_fails > g_runs:  # failing more often than not: run it until it is plausible or broken
        return [(state.good, 1)]
    if state.deterministic:
        if not b_runs:
            out.append((state.bad, 1))
    elif b_fails < ENDS_BAD_FAILS and b_runs < ENDS_BAD_RUNS:
        out.append((state.bad, 1))
    return out


# Runs at the ends before any midpoint (flaky gates). Besides git bisect's sanity check they measure
# the two rates: without them a late culprit (all midpoints pass) left the culprit rate unknown and
# cost more than a tuned retry rule; see bench/bisect_sim.py.
ENDS_GOOD_RUNS = 4  # runs of the good end
ENDS_BAD_FAILS = 3  # failing runs wanted at the bad end (they measure the culprit rate) ...
ENDS_BAD_RUNS = 12  # ... within this many runs; then the posterior takes over (maybe "no culprit")


VERDICT_COMPETITORS = 2


def verdict_threshold(confidence: float) -> float:
    """The posterior a verdict needs so that it is wrong at most ``1 - confidence`` of the time.

    A posterior of c is calibrated on average over the prior, not for every truth: with the truth
    fixed, the posterior odds of one wrong answer against the truth reach c/(1-c) with probability
    up to (1-c)/c (Ville's inequality, nearly attained when each run carries little evidence and the
    bisect takes hundreds of looks). A true culprit has two rivals that can come that close: its
    neighbours (for a weak culprit, one of them and "no culprit"). Each gets half the error budget.
    """
    return 1.0 - (1.0 - confidence) / VERDICT_COMPETITORS


# A verdict is given only once runs made *after* its posterior first reached the bar confirm it at
# its boundary by this Bayes factor, on each side (see ``_confirmation``).
CONFIRM_FACTOR = 3.0


def _first_crossings(state: BisectState, need: float) -> dict[int, int]:
    """For each culprit position, how many observations it took for its posterior to first reach
    ``need`` (the verdict's bar); computed once per observation and kept on the state (not saved,
    so the same observations always give the same answer, however often ``decide`` was called).

    The posteriors after each new observation are computed in batches (``best_after_each``): a
    state loaded with thousands of runs replays them at its first verdict."""
    from materialize.bisect.posterior import Counts, _CountsRows, _loglik_rows, best_after_each

    model = gate_model(state)
    obs = state.observations
    cached = state.__dict__.get("_crossings")
    if cached is not None and cached[0] is obs and cached[1] == (model, need) and cached[2] <= len(obs):
        done, data, crossed = cached[2], cached[3], cached[4]
    else:
        done, data, crossed = 0, {}, {}
    rates = model.rates()
    ll = _loglik_rows(rates, data, state.n_patches)
    rows = _CountsRows(rates)
    steps: list[int] = []
    changes = []
    for i in range(done, len(obs)):
        o = obs[i]
        if not o.requests:
            continue
        counts = data.setdefault(o.position, Counts())
        counts.add(o.requests, o.failures, o.censored)
        if o.position <= state.n_patches:
            steps.append(i)
            changes.append((o.position, rows(counts)))
    if changes:
        bests, probs = best_after_each(model, ll, changes)
        for i, c, p in zip(steps, bests.tolist(), probs.tolist(), strict=True):
            if p >= need and c not in crossed:
                crossed[c] = i + 1
    state.__dict__["_crossings"] = (obs, (model, need), len(obs), data, crossed)
    return crossed


def _confirmation(
    state: BisectState, post: Posterior, culprit: int, need: float
) -> list[tuple[int, int]] | None:
    """None when fresh runs confirm ``culprit``, else the runs that can (empty: none can be made).

    A posterior that reached the bar on one early fluke (say 12 passes in a row at a position that
    fails 22% of its runs) has nothing left to correct it: the runs it would need are never made.
    So the verdict must also be confirmed by runs made after its posterior first reached the bar,
    at its boundary: runs at ``culprit - 1`` must look like the baseline rather than the culprit's
    rate (against the rival ``culprit - 1``), runs at ``culprit`` like the culprit's rate rather than
    the baseline (against ``culprit + 1`` and "no culprit"), each by a Bayes factor of
    ``CONFIRM_FACTOR``, with the rates integrated over their posterior given ``culprit``. If the
    verdict is wrong, each factor is a fresh likelihood ratio against the truth: it reaches K with
    probability at most 1/K (Ville), so a wrong verdict needs a second, independent fluke.
    """
    if state.deterministic:
        return None
    from materialize.bisect.posterior import Counts, fresh_log_factor

    start = _first_crossings(state, need).get(culprit)
    if start is None:  # cannot happen (the posterior is past the bar now); be safe: no confirmation
        return None
    fresh: dict[int, Counts] = {}
    for o in state.observations[start:]:
        if o.requests and o.position in (culprit - 1, culprit):
            fresh.setdefault(o.position, Counts()).add(o.requests, o.failures, o.censored)
    target = math.log(CONFIRM_FACTOR)
    # its rivals culprit + 1 and "no culprit" run culprit at the baseline, the rival culprit - 1 runs
    # culprit - 1 at the culprit's rate; at the good end the runs check the baseline itself (a good
    # end that passed 38 times in a row makes any later position look like a culprit)
    sides = [(culprit, True), (culprit - 1, False)]
    lacking = []
    for position, bad in sides:
        if position in state.skipped:
            continue
        got, per_run = fresh_log_factor(post, culprit, fresh.get(position), bad)
        if got < target:
            lacking.append((got - target, position, per_run))
    if not lacking:
        return None
    deficit, position, per_run = min(lacking)
    if not state.switch_cost:  # a switch is free: one run at a time wastes none
        return [(position, 1)]
    return [(position, max(1, min(8, math.ceil(-deficit / max(per_run, 1e-3)))))]


def _no_regression(state: BisectState, post: Posterior) -> Step:
    bound = post.none_rate_bound(state.confidence)
    pct = f"{state.confidence * 100:g}%"
    return Step(
        "no-regression",
        [],
        None,
        post.p_none,
        f"no regression in {state.good + 1}..{state.bad}: every prefix is consistent with one failure "
        f"rate <= {bound * 100:.3g}% per request at {pct} (P(no culprit)={post.p_none:.3f})",
        post,
    )


def decide(state: BisectState, jobs: int = 1) -> Step:
    """The next runs, or the verdict, from everything observed so far.

    Gate mode checks the ends first (the good end passes at a plausible rate, the bad end fails),
    then chooses by expected information; it stops when one culprit, or "no culprit", reaches the
    confidence.
    """
    if state.mode == "metric":
        from materialize.bisect.metric import decide as metric_decide

        ms = metric_decide(metric_model(state), metric_samples(state), state.skipped, jobs)
        return Step(ms.status, ms.runs, ms.culprit, ms.probability, ms.message, None, ms)
    from materialize.bisect.posterior import choose, none_focus, posterior

    post = posterior(gate_model(state), gate_data(state), n_positions=state.n_patches)
    best, prob = post.best()
    broken = good_end_broken(state)
    if broken:
        return Step("good-end-fails", [], None, None, broken, post)
    ends = [r for r in ends_runs(state) if r[0] not in state.skipped]
    if ends:
        return Step("run", ends, best, prob, "checking the ends first", post, phase="ends")
    need = verdict_threshold(state.confidence)
    if post.p_none >= need:
        return _no_regression(state, post)
    if prob >= need:
        confirm = _confirmation(state, post, best, need)
        if confirm is None:
            return Step(
                "found",
                [],
                best,
                prob,
                f"decided at {state.confidence * 100:g}% confidence: position {best} is the first bad prefix "
                f"(posterior P={prob:.3f} >= {need:g}, the bar for {state.confidence:g}, confirmed by "
                f"fresh runs at {best - 1} and {best})",
                post,
            )
        if confirm:
            return Step(
                "run",
                confirm,
                best,
                prob,
                f"position {best} leads with P={prob:.3f}: confirming it with fresh runs at {best - 1} and {best}",
                post,
                phase="confirm",
            )
    choices = choose(post, state.skipped, jobs, current=state.current)
    if not choices:
        lo, hi = post.credible_range(state.confidence)
        return Step(
            "inconclusive",
            [],
            best,
            prob,
            f"no remaining candidate can tell positions {lo + 1}..{hi} apart (skipped); best {best} "
            f"P={prob:.3f}, P(no culprit)={post.p_none:.3f}",
            post,
        )
    phase = "no-culprit" if none_focus(post) else "search"
    return Step("run", [(c.position, c.repeats) for c in choices], best, prob, "", post, phase=phase)


# ----------------------------------------------------------------------------------------------
# Replay


def _options(argv: list[str], source: str) -> tuple[list[str], dict[str, str | bool]]:
    positional: list[str] = []
    opts: dict[str, str | bool] = {}
    i = 0
    flags = {"--deterministic", "--censored", "--lower-is-better", "--higher-is-better"}
    while i < len(argv):
        tok = argv[i]
        if tok in flags:
            opts[tok[2:]] = True
            i += 1
        elif tok.startswith("--"):
            if i + 1 >= len(argv):
                raise BisectError(f"{source}: option {tok} needs a value")
            opts[tok[2:]] = argv[i + 1]
            i += 2
        else:
            positional.append(tok)
            i += 1
    return positional, opts


def apply_line(
    state: BisectState | None, argv: list[str], source: str, series: str, n_patches: int
) -> BisectState:
    """Apply one log command; ``start`` creates the state."""
    verb, rest = argv[0], argv[1:]
    pos, opts = _options(rest, source)
    try:
        if verb == "start":
            return start(
                series=series,
                n_patches=n_patches,
                good=int(opts["good"]),
                bad=int(opts["bad"]),
                gate=str(opts["gate"]) if "gate" in opts else None,
                metric=str(opts["metric"]) if "metric" in opts else None,
                direction="higher" if opts.get("higher-is-better") else "lower",
                threshold_pct=float(opts.get("threshold", 1.0)),
                confidence=float(opts.get("confidence", 0.95)),
                requests=int(opts.get("requests", 1)),
                deterministic=bool(opts.get("deterministic", False)),
                switch_cost=float(opts.get("switch-cost", 0.0)),
                baseline_rate=float(opts["baseline-rate"]) if "baseline-rate" in opts else None,
                culprit_rate=float(opts["culprit-rate"]) if "culprit-rate" in opts else None,
                none_prior=float(opts.get("prior-no-culprit", 0.25)),
                min_effect=float(opts.get("min-effect", 1.5)),
            )
        if state is None:
            raise BisectError(f"{source}: '{verb}' before 'start'")
        position = int(pos[0]) if pos else None
        mid = str(opts["id"]) if "id" in opts else None
        if mid and position is not None:
            state.ids.setdefault(str(position), mid)
        if verb in ("good", "bad"):
            mark(
                state,
                verb,  # type: ignore[arg-type]
                position,
                requests=int(opts["requests"]) if "requests" in opts else None,
                failures=int(opts["failures"]) if "failures" in opts else None,
            )
        elif verb == "skip":
            skip(state, position)
        elif verb == "observe":
            observe(
                state,
                _need(position, source),
                source=str(opts.get("source", "replay")),
                materialization_id=mid,
                requests=int(opts["requests"]),
                failures=int(opts.get("failures", 0)),
                censored=bool(opts.get("censored", False)),
                records=_records_opt(opts),
            )
        elif verb == "sample":
            values = [float(v) for v in str(opts["values"]).split(",") if v]
            observe(
                state,
                _need(position, source),
                source=str(opts.get("source", "replay")),
                materialization_id=mid,
                samples=values,
                records=_records_opt(opts),
                unit=str(opts["unit"]) if "unit" in opts else None,
            )
        else:
            raise BisectError(f"{source}: unknown bisect command {verb!r}")
    except KeyError as exc:
        raise BisectError(f"{source}: '{verb}' is missing --{exc.args[0]}") from None
    except ValueError as exc:
        raise BisectError(f"{source}: '{verb}': {exc}") from None
    return state


def _records_opt(opts: dict[str, str | bool]) -> list[str]:
    return [r for r in str(opts.get("records", "")).split(",") if r]


def _need(position: int | None, source: str) -> int:
    if position is None:
        raise BisectError(f"{source}: a position is required")
    return position


def replay(lines: list[tuple[int, list[str]]], source: str, series: str, n_patches: int) -> BisectState:
    """Rebuild a state from a log (``bisect log`` output): the same lines give the same state."""
    state: BisectState | None = None
    for number, argv in lines:
        state = apply_line(state, argv, f"{source}:{number}", series, n_patches)
    if state is None:
        raise BisectError(f"{source}: the log has no 'start' line")
    return state
