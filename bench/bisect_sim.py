"""Simulated hardware bisects: our state machine against the best fixed retry rule, per scenario.

Every trial drives ``materialize.bisect.session`` in-process, the same state machine ``materialize
bisect run`` uses (start, decide, observe, ...), with a simulated gate or metric whose truth is known.

    .venv/bin/python bench/bisect_sim.py                 # 200 trials per scenario, 2 workers
    .venv/bin/python bench/bisect_sim.py --trials 50     # quick look
    .venv/bin/python bench/bisect_sim.py --only 'gate: culprit' --known-baseline   # what learning p0 costs
    .venv/bin/python bench/bisect_sim.py --paired ...    # A/B of two versions on the same gate results

A/B of a knob, paired (the same gate results for both), per-trial results kept and compared:

    .venv/bin/python bench/bisect_sim.py --paired --only 'gate: culprit' --dump a.json
    .venv/bin/python bench/bisect_sim.py --paired --only 'gate: culprit' --dump b.json --set session.CONFIRM_FACTOR=2
    .venv/bin/python bench/bisect_sim.py --compare a.json b.json

(``--no-notes`` leaves out the notes below the table, which rerun ours and tune the retry rules
for minutes: an A/B needs only the rows and ``--dump``.)

Gate scenarios: 32 patches, a gate of 32 requests, exit code only (pass/fail per run, as ``bisect
run`` sees an exit status); baseline 1/256 per request in every prefix, 1/32 with the culprit.

  * culprit at start / middle / end: positions 2, 16, 31.
  * none: no patch changes the rate (the bad end is not bad); the right answer is "no regression".
  * weak culprit: 1/128 over 1/256 at position 16.
  * broken harness: the command crashes (exit 1) everywhere; the right answer is "the good end
    is not good", as early as possible.
  * no culprit / culprit at 16 with ``--min-effect 3`` (only a tripled rate counts as a regression).

Metric scenarios: 32 patches, Gaussian noise of 1% per sample, a noise band of 1%, culprit at a
random position, shift 0 / 0.5 / 1 / 2%. Right answers: 2% -> the culprit; 0 and 0.5% -> no
regression; 1% sits on the band's edge, so the culprit or "no regression" are both right (only a
wrong patch, or "no regression" for 2%, is wrong).

Columns: accuracy (right answer), mean and 90th-percentile runs, confident-wrong (a verdict that is
wrong: exit 0 with a wrong patch, or "no regression" when there is one), then the best fixed retry
rule reaching the same accuracy: git bisect where every position is run N times and called bad at t
failures (early stop once decided); it is given the one end check its scenario needs for free (the
bad end for "none", the good end for "broken harness"). For metrics the fixed rule takes N samples
per position and calls a midpoint bad when its mean is past the middle of the two ends.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # tiny matrices: threads only cost
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import ast  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from materialize.bisect import posterior, session  # noqa: E402

N = 32
REQUESTS = 32
P0, P1, P1_WEAK = 1 / 256, 1 / 32, 1 / 128
MAX_RUNS = 2000


@dataclass(frozen=True)
class GateScenario:
    label: str
    culprit: int | None  # None: no culprit
    p1: float = P1
    broken: bool = False
    min_effect: float = 1.5  # the bisect's --min-effect
    known: tuple[float | None, float | None] = (None, None)  # --baseline-rate, --culprit-rate given
    paired: bool = False  # --paired: the n-th run at a position has the same outcome whatever ran before

    @property
    def expected(self) -> str:
        return "good-end-fails" if self.broken else "no-regression" if self.culprit is None else "found"


GATES = [
    GateScenario("gate: culprit at start (2)", 2),
    GateScenario("gate: culprit in the middle (16)", 16),
    GateScenario("gate: culprit at the end (31)", 31),
    GateScenario("gate: no culprit", None),
    GateScenario("gate: weak culprit 1/128 (16)", 16, P1_WEAK),
    GateScenario("gate: broken harness (exit 1)", None, broken=True),
    GateScenario("gate: no culprit, --min-effect 3", None, min_effect=3.0),
    GateScenario("gate: culprit 16, --min-effect 3", 16, min_effect=3.0),
]
METRICS = [0.0, 0.005, 0.01, 0.02]
TARGET_CAP = 0.99  # a fixed rule is asked for our accuracy, at most 99% (100% of 200 is not 100%)


def gate_trial(args: tuple[GateScenario, int]) -> tuple[bool, bool, int, int, dict[str, int]]:
    """One bisect through the session state machine; (right, confident-wrong, runs, runs at the ends,
    runs per phase: see ``WHERE``)."""
    sc, seed = args
    rng = np.random.default_rng(seed)
    streams: dict[int, np.random.Generator] = {}  # --paired: one random stream per position
    state = session.start(series="sim", n_patches=N, good=0, bad=N, gate="exit", requests=REQUESTS,
                          min_effect=sc.min_effect, baseline_rate=sc.known[0], culprit_rate=sc.known[1])
    runs = 0
    where: dict[str, int] = {}
    while runs < MAX_RUNS:
        step = session.decide(state)
        if step.status != "run":
            break
        for position, repeats in step.runs:
            session.note_candidate(state, position, None)  # as 'bisect run' does: the switch is known
            phase = step.phase
            if phase == "ends":
                phase += " (good)" if position == 0 else " (bad)"
            elif phase in ("no-culprit", "search"):
                at_end = position in (0, N)
                at_boundary = sc.culprit is not None and position in (sc.culprit - 1, sc.culprit)
                phase += " at the ends" if at_end else " at the boundary" if at_boundary else " elsewhere"
            where[phase] = where.get(phase, 0) + repeats
            for _ in range(repeats):
                bad = sc.culprit is not None and position >= sc.culprit
                gen = streams.setdefault(position, np.random.default_rng([seed, position])) if sc.paired else rng
                fails = REQUESTS if sc.broken else int(gen.binomial(REQUESTS, sc.p1 if bad else P0))
                runs += 1
                session.observe(state, position, source="sim", requests=REQUESTS, failures=min(fails, 1),
                                censored=fails > 0)
    step = session.decide(state)
    right = step.status == sc.expected and (step.status != "found" or step.culprit == sc.culprit)
    wrong = step.status in ("found", "no-regression", "good-end-fails") and not right
    data = session.gate_data(state)
    ends = sum(data[k].runs for k in (0, N) if k in data)
    return right, wrong, runs, ends, where


# Where a gate bisect's runs go, in this order (gate_trial's last value, printed below the table)
WHERE = ("ends (good)", "ends (bad)", "no-culprit at the ends", "no-culprit at the boundary", "no-culprit elsewhere",
         "search at the ends", "search at the boundary", "search elsewhere", "confirm")


def where_note(label: str, res: list) -> str:
    """Mean runs per phase: the ends check (the good end, the bad end), runs chosen while "no
    culprit" leads, the search (at the ends, at the culprit's boundary c-1 and c, elsewhere),
    confirmation by fresh runs."""
    means = {k: float(np.mean([r[4].get(k, 0) for r in res])) for k in WHERE}
    parts = ", ".join(f"{k} {v:.1f}" for k, v in means.items() if v >= 0.05)
    return f"{label}: where the runs went (mean per bisect): {parts}"


def metric_trial(args: tuple[float, int]) -> tuple[bool, bool, int, int, dict[str, int]]:
    shift, seed = args
    rng = np.random.default_rng(seed)
    culprit = int(rng.integers(1, N + 1))
    state = session.start(series="sim", n_patches=N, good=0, bad=N, metric="makespan", threshold_pct=1.0)
    runs = 0
    while runs < MAX_RUNS:
        step = session.decide(state)
        if step.status != "run":
            break
        for position, count in step.runs:
            mean = 100.0 * (1 + shift) if position >= culprit else 100.0
            session.observe(state, position, source="sim", samples=list(rng.normal(mean, 1.0, count)))
            runs += count
    step = session.decide(state)
    found_right = step.status == "found" and step.culprit == culprit
    if shift >= 0.02:
        right = found_right
    elif shift >= 0.01:
        right = found_right or step.status == "no-regression"
    else:
        right = step.status == "no-regression"
    wrong = (step.status == "found" and step.culprit != culprit) or (
        step.status == "no-regression" and shift >= 0.02
    )
    return right, wrong, runs, 0, {}


# ------------------------------------------------------------------------------------------------
# The fixed retry rules, vectorised over trials


def _retry_position(q: np.ndarray, retries: int, t: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Run each trial's position up to ``retries`` times at failure probability ``q``; (bad, runs used)."""
    outcomes = rng.random((len(q), retries)) < q[:, None]
    cum = np.cumsum(outcomes, axis=1)
    remaining = retries - np.arange(1, retries + 1)
    decided = (cum >= t) | (cum + remaining < t)
    return cum[:, -1] >= t, np.argmax(decided, axis=1) + 1


def retry_gate(sc: GateScenario, retries: int, t: int, trials: int, rng: np.random.Generator):
    """Accuracy and runs of git bisect with ``retries`` runs per position and bad at ``t`` failures."""
    q0 = 1.0 if sc.broken else 1 - (1 - P0) ** REQUESTS
    q1 = 1 - (1 - sc.p1) ** REQUESTS
    if sc.broken:  # the good end, checked first: right when it is called bad
        bad, used = _retry_position(np.full(trials, q0), retries, t, rng)
        return bad, used
    if sc.culprit is None:  # the bad end, checked first: right when it is called good
        bad, used = _retry_position(np.full(trials, q0), retries, t, rng)
        return ~bad, used
    lo, hi = np.zeros(trials, int), np.full(trials, N)
    runs = np.zeros(trials, int)
    while np.any(hi - lo > 1):
        active = hi - lo > 1
        mid = (lo + hi) // 2
        bad, used = _retry_position(np.where(mid >= sc.culprit, q1, q0), retries, t, rng)
        runs += np.where(active, used, 0)
        hi = np.where(active & bad, mid, hi)
        lo = np.where(active & ~bad, mid, lo)
    return hi == sc.culprit, runs


def retry_gate_checked(sc: GateScenario, retries: int, t: int, trials: int, rng: np.random.Generator):
    """``retry_gate`` that first checks both ends as the bisect does (issue 15 item 2, git bisect's "the
    good commit is bad"): the good end must be called good and the bad end bad under the same rule,
    else the bisect stops without an answer (wrong). The fair price of a fixed rule that, like ours,
    does not take the ends on trust."""
    q0 = 1 - (1 - P0) ** REQUESTS
    q1 = 1 - (1 - sc.p1) ** REQUESTS
    good_bad, good_used = _retry_position(np.full(trials, q0), retries, t, rng)
    bad_bad, bad_used = _retry_position(np.full(trials, q1), retries, t, rng)
    right, runs = retry_gate(sc, retries, t, trials, rng)
    return right & ~good_bad & bad_bad, runs + good_used + bad_used


def retry_metric(shift: float, n: int, trials: int, rng: np.random.Generator):
    """Fixed-sample bisect: n samples at the ends and at each midpoint; none if the ends are within 1%."""
    culprit = rng.integers(1, N + 1, size=trials)

    def mean_at(pos: np.ndarray) -> np.ndarray:
        mu = np.where(pos >= culprit, 100.0 * (1 + shift), 100.0)
        return mu + rng.normal(0, 1.0, (trials, n)).mean(axis=1)

    good, bad = mean_at(np.zeros(trials, int)), mean_at(np.full(trials, N))
    regressed = bad / good - 1 > 0.01
    lo, hi = np.zeros(trials, int), np.full(trials, N)
    runs = np.full(trials, 2 * n)
    while np.any(regressed & (hi - lo > 1)):
        active = regressed & (hi - lo > 1)
        mid = (lo + hi) // 2
        m = mean_at(mid)
        is_bad = m - good > (bad - good) / 2
        runs += np.where(active, n, 0)
        hi = np.where(active & is_bad, mid, hi)
        lo = np.where(active & ~is_bad, mid, lo)
    found_right = regressed & (hi == culprit)
    if shift >= 0.02:
        right = found_right
    elif shift >= 0.01:
        right = found_right | ~regressed
    else:
        right = ~regressed
    return right, runs


def one_rule_for_all(scenarios: list[GateScenario], target: float, trials: int, seed: int) -> str:
    """The cheapest single retry rule reaching ``target`` accuracy averaged over culprits at all the
    given positions: what a user who does not know where the culprit is could tune at best."""
    rng = np.random.default_rng(seed)
    best = None
    for n in range(1, 41):
        for t in range(1, n + 1):
            res = [retry_gate(sc, n, t, trials, rng) for sc in scenarios]
            acc = float(np.mean([np.mean(r) for r, _ in res]))
            mean = float(np.mean([np.mean(u) for _, u in res]))
            if acc >= target and (best is None or mean < best[2]):
                best = (f"x{n} >={t}", acc, mean, [float(np.mean(u)) for _, u in res])
    if best is None:
        return "none reaches it"
    per = " / ".join(f"{m:.1f}" for m in best[3])
    return f"{best[0]}: right {best[1] * 100:.1f}%, mean {best[2]:.1f} runs ({per} at {', '.join(str(sc.culprit) for sc in scenarios)})"


def best_rule(evaluate, options, target: float, trials: int, seed: int) -> tuple[str, float, float, float]:
    """The cheapest option (mean runs) whose accuracy reaches ``target``, confirmed on fresh trials."""
    rng = np.random.default_rng(seed)
    best = None
    closest = None
    for label, args in options:
        right, runs = evaluate(*args, trials, rng)
        acc = float(np.mean(right))
        if closest is None or acc > closest[1]:
            closest = (label, acc, float(np.mean(runs)), float(np.percentile(runs, 90)), args)
        if acc >= target and (best is None or np.mean(runs) < best[2]):
            best = (label, acc, float(np.mean(runs)), float(np.percentile(runs, 90)), args)
    pick = best or closest
    assert pick is not None
    right, runs = evaluate(*pick[4], trials * 2, rng)
    note = "" if best else " (never reaches it)"
    return pick[0] + note, float(np.mean(right)), float(np.mean(runs)), float(np.percentile(runs, 90))


def ends_checked_note(scenarios: list[GateScenario], seed: int) -> str:
    """The tuned rules again, each also checking both ends first as the bisect does: the table's fixed
    rule trusts the ends (the ~9 runs of our ends check, and the "no culprit" runs there, are ours only)."""
    parts = []
    for goal in (0.99, 0.995):
        costs = []
        for sc in scenarios:
            opts = [(f"x{n} >={t}", (sc, n, t)) for n in range(1, 41) for t in range(1, n + 1)]
            name, _, mean, _ = best_rule(retry_gate_checked, opts, goal, 4000, seed)
            costs.append(f"{mean:.1f} ({name})")
        parts.append(f"at {goal * 100:g}%: " + " / ".join(costs))
    return (f"retry rule tuned per position that checks both ends first (as ours does), at "
            f"{', '.join(str(sc.culprit) for sc in scenarios)}: " + "; ".join(parts))


def same_knowledge_note(pool: ProcessPoolExecutor, positional: list[tuple[GateScenario, list]], seed: int) -> str:
    """Ours again (fresh seeds), given the two rates (``--baseline-rate``, ``--culprit-rate``) that
    the tuned rules carry in their thresholds (a rule tuned per scenario was chosen knowing both).

    Issue 15 item 3 asked why the bisect loses to a fixed rule at the edges: the rule tuned for a
    culprit at 2 knows what a failing run at 3 means because its threshold was fitted to the true
    rates, while the bisect must learn the baseline from positions 0 and 1 (at 31, the culprit's rate
    from 31 and 32). With the same knowledge the comparison is like for like.
    """
    parts, rules = [], []
    for sc, res in positional:
        known = dataclasses.replace(sc, known=(P0, sc.p1))
        again = list(pool.map(gate_trial, [(known, seed * 1_000_003 + 7 * 10_007 + k) for k in range(len(res))],
                              chunksize=2))
        right = float(np.mean([r[0] for r in again]))
        parts.append(f"{np.mean([r[2] for r in again]):.1f} ({right * 100:.1f}% right, {sum(r[1] for r in again)} "
                     f"confident wrong)")
        opts = [(f"x{n} >={t}", (sc, n, t)) for n in range(1, 41) for t in range(1, n + 1)]
        name, _, mean, _ = best_rule(retry_gate, opts, min(right, TARGET_CAP), 4000, seed)
        rules.append(f"{mean:.1f} ({name})")
    where = ", ".join(str(sc.culprit) for sc, _ in positional)
    return (f"ours given both rates, as the tuned rules have them (--baseline-rate/--culprit-rate): "
            f"{' / '.join(parts)} at {where}; the tuned rule at that accuracy: {' / '.join(rules)}")


HEAD = ("| scenario                           | trials | right | mean runs | p90 runs | confident wrong "
        "| best fixed rule at the same accuracy | its right | its mean | its p90 | secs |")


def print_row(label: str, res: list, acc: float, rule: tuple[str, float, float, float], secs: float) -> None:
    """One table row, printed (and flushed) as soon as its scenario is done."""
    name, racc, rmean, rp90 = rule
    runs = np.array([r[2] for r in res])
    wrong = float(np.mean([r[1] for r in res]))
    print(f"| {label:<34} | {len(res):>6} | {acc * 100:>4.1f}% | {runs.mean():>9.1f} | {np.percentile(runs, 90):>8.0f} "
          f"| {wrong * 100:>14.1f}% | {name:<36} | {racc * 100:>8.1f}% | {rmean:>8.1f} | {rp90:>7.0f} | {secs:>4.0f} |",
          flush=True)


def run_metrics(a: argparse.Namespace, pool: ProcessPoolExecutor, dump: dict[str, list]) -> None:
    for j, shift in enumerate(METRICS):
        label = f"metric: {shift * 100:g}% shift"
        if a.only not in label:
            continue
        t0 = time.time()
        res = list(pool.map(metric_trial, [(shift, a.seed * 7919 + j * 100_003 + k) for k in range(a.trials)],
                            chunksize=2))
        secs = time.time() - t0
        acc = float(np.mean([r[0] for r in res]))
        options = [(f"{n} samples", (shift, n)) for n in range(2, 65)]
        rule = best_rule(retry_metric, options, min(acc, TARGET_CAP), 4000, a.seed)
        print_row(label, res, acc, rule, secs)
        dump[label] = [[bool(r[0]), bool(r[1]), int(r[2])] for r in res]


KNOBS = {"posterior": posterior, "session": session}


def apply_settings(settings: list[str]) -> None:
    """``--set module.NAME=VALUE``: override a module constant of the bisect (in every worker too)."""
    for item in settings:
        name, _, value = item.partition("=")
        module, _, attr = name.partition(".")
        if module not in KNOBS or not hasattr(KNOBS[module], attr) or not attr.isupper() or not value:
            raise SystemExit(f"--set {item}: want posterior.NAME=VALUE or session.NAME=VALUE (a constant)")
        setattr(KNOBS[module], attr, ast.literal_eval(value))


def compare(path_a: str, path_b: str) -> None:
    """Paired differences of two ``--dump`` files, per scenario: B - A in runs, with its standard error."""
    with open(path_a) as fa, open(path_b) as fb:
        a, b = json.load(fa), json.load(fb)
    for label, ra in a.items():
        rb = b.get(label)
        if not rb:
            continue
        n = min(len(ra), len(rb))
        ra, rb = ra[:n], rb[:n]
        d = np.array([y[2] - x[2] for x, y in zip(ra, rb, strict=True)], float)
        se = float(d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")

        def summary(r: list) -> str:
            return (f"{np.mean([x[2] for x in r]):.1f} runs, {np.mean([x[0] for x in r]) * 100:.1f}% right, "
                    f"{sum(x[1] for x in r)} confident wrong")

        print(f"{label} ({n} trials): A {summary(ra)}; B {summary(rb)}; B - A {d.mean():+.1f} +- {se:.1f} runs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=200, help="trials per scenario (ours)")
    ap.add_argument("--slow-trials", type=int, default=None,
                    help="trials for the two slow scenarios (no culprit, weak culprit); default --trials")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--only", default="", help="run only scenarios whose label contains this")
    ap.add_argument("--known-baseline", action="store_true",
                    help="give the bisect the true baseline rate (--baseline-rate 1/256), gate scenarios")
    ap.add_argument("--known-culprit", action="store_true",
                    help="give the bisect the true culprit rate (--culprit-rate), gate scenarios with a culprit")
    ap.add_argument("--paired", action="store_true",
                    help="one random stream per position (common random numbers): two versions of the bisect "
                         "see the same outcome for the n-th run at a position, so an A/B compares them on the "
                         "same gate results instead of on streams that part at their first different choice")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE",
                    help="override a constant of materialize.bisect.posterior or .session for this run "
                         "(e.g. session.CONFIRM_FACTOR=2, posterior.LEADER_FOCUS=0.5)")
    ap.add_argument("--dump", metavar="FILE", help="write every trial's (right, confident wrong, runs) as JSON")
    ap.add_argument("--no-notes", action="store_true",
                    help="the table rows only, without the notes below it (the tuned rules, ours given both rates): "
                         "for A/B runs, which need only the rows and --dump")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="paired differences of two --dump files; no run")
    a = ap.parse_args()
    if a.compare:
        compare(*a.compare)
        return
    apply_settings(a.set)
    if a.paired:
        GATES[:] = [dataclasses.replace(sc, paired=True) for sc in GATES]
    if a.known_baseline or a.known_culprit:
        GATES[:] = [dataclasses.replace(sc, known=(P0 if a.known_baseline else None,
                                                   sc.p1 if a.known_culprit and sc.culprit else None))
                    for sc in GATES]

    print(HEAD)
    print("|" + "|".join("-" * len(c) for c in HEAD.split("|")[1:-1]) + "|", flush=True)
    t_all = time.time()
    dump: dict[str, list] = {}
    with ProcessPoolExecutor(max_workers=a.workers, initializer=apply_settings, initargs=(a.set,)) as pool:
        slow = [i for i, sc in enumerate(GATES) if (sc.culprit is None and not sc.broken) or sc.p1 != P1]
        fast = [i for i in range(len(GATES)) if i not in slow]
        notes: list[str] = []
        wheres: list[str] = []
        positional: list[tuple[GateScenario, list]] = []
        for part in ("fast", "metric", "slow"):
            if part == "metric":
                run_metrics(a, pool, dump)
                continue
            for i in fast if part == "fast" else slow:
                sc = GATES[i]
                if a.only not in sc.label:
                    continue
                t0 = time.time()
                trials = a.slow_trials if a.slow_trials and part == "slow" else a.trials
                res = list(pool.map(gate_trial, [(sc, a.seed * 1_000_003 + i * 10_007 + k) for k in range(trials)],
                                    chunksize=2))
                secs = time.time() - t0
                acc = float(np.mean([r[0] for r in res]))
                options = [(f"x{n} >={t}", (sc, n, t)) for n in range(1, 41) for t in range(1, n + 1)]
                rule = best_rule(retry_gate, options, min(acc, TARGET_CAP), 4000, a.seed)
                print_row(sc.label, res, acc, rule, secs)
                dump[sc.label] = [[bool(r[0]), bool(r[1]), int(r[2])] for r in res]
                if a.dump:  # after each scenario: a long run's finished rows survive an interruption
                    with open(a.dump, "w") as f:
                        json.dump(dump, f)
                if sc.culprit is not None and sc.p1 == P1 and sc.min_effect == 1.5:
                    positional.append((sc, res))
                    ends = np.mean([r[3] for r in res])
                    notes.append(f"{sc.label}: {ends:.1f} of our runs were at the ends (0 and {N})")
                    wheres.append(where_note(sc.label, res))
        if len(positional) > 1 and not a.no_notes:
            target = min(float(np.mean([np.mean([r[0] for r in res]) for _, res in positional])), TARGET_CAP)
            ours = np.mean([np.mean([r[2] for r in res]) for _, res in positional])
            notes.append(f"ours over the {len(positional)} culprit positions: right {target * 100:.1f}%, "
                         f"mean {ours:.1f} runs")
            notes.append("one retry rule for every position at that accuracy: "
                         + one_rule_for_all([sc for sc, _ in positional], target, 4000, a.seed))
            # The table asks a tuned rule for our accuracy capped at 99%; what a rule tuned per
            # position costs a little above it (ours is 99.5-100% right there): the cost of a fixed
            # rule rises by ~10 runs from 99% to 99.5%, so the cap decides the edges' comparison.
            for goal in (0.98, 0.99, 0.995):
                costs = []
                for sc, _ in positional:
                    opts = [(f"x{n} >={t}", (sc, n, t)) for n in range(1, 41) for t in range(1, n + 1)]
                    name, _, mean, _ = best_rule(retry_gate, opts, goal, 4000, a.seed)
                    costs.append(f"{mean:.1f} ({name})")
                notes.append(f"retry rule tuned per position at {goal * 100:g}%: " + " / ".join(costs)
                             + f" at {', '.join(str(sc.culprit) for sc, _ in positional)}")
            notes.append(ends_checked_note([sc for sc, _ in positional], a.seed))
            if not (a.known_baseline or a.known_culprit):
                notes.append(same_knowledge_note(pool, positional, a.seed))
        if a.dump:
            with open(a.dump, "w") as f:
                json.dump(dump, f)
        print()
        for note in [*notes, *wheres]:
            print(note)

    cpu = time.process_time() + sum(os.times()[2:4])
    print(f"\ntotal {time.time() - t_all:.0f}s wall, {cpu:.0f}s CPU with {a.workers} worker(s)")


if __name__ == "__main__":
    main()
