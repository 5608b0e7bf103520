"""Where is the culprit, given flaky gate results? A posterior over patches, and what to run next.

Model (the seeds' situation): every prefix fails a request at a shared baseline rate ``p0`` (the
"1 in 32 present in every arm" kind of defect); prefixes that contain the culprit patch ``c`` fail
at ``p1 > p0``. Candidates are series positions ``k`` (prefix of k patches); the culprit ``c`` is in
``(good, bad]``; prefix ``k`` runs at ``p1`` iff ``k >= c``. ``p0`` and ``p1`` are unknown: they are
integrated out on a log-spaced grid with a prior uniform over pairs ``p0 < p1`` (a Beta-Binomial
model with the order constraint, done numerically so that censored runs fit in too).

Observations per position are exact counts (``failures`` of ``requests``, from run records) and
censored failing runs (only "the gate failed", from exit codes): likelihood ``1 - (1-p)^R``.

The next candidate and its number of repeats maximise expected information about the culprit per
hardware run, with a per-candidate ``switch_cost`` (materializing and booting a server is not free).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np


def logsumexp(a: np.ndarray) -> float:
    """log(sum(exp(a))) over all entries (scipy's version costs more than the whole posterior here)."""
    m = float(np.max(a))
    if not math.isfinite(m):
        return m
    return m + math.log(float(np.exp(a - m).sum()))

REPEAT_CHOICES = (1, 2, 3, 4, 6, 8)


@dataclass
class Counts:
    """What is known about one position's gate: exact counts plus censored failing runs."""

    requests: int = 0
    failures: int = 0
    censored_fail_runs: list[int] = field(
        default_factory=list
    )  # requests per run that "failed, count unknown"

    def add(self, requests: int, failures: int, censored: bool = False) -> None:
        if censored:
            if failures > 0:
                self.censored_fail_runs.append(requests)
            else:
                self.requests += requests
        else:
            self.requests += requests
            self.failures += failures

    @property
    def runs_failed(self) -> int:
        return len(self.censored_fail_runs)


@dataclass(frozen=True)
class GateModel:
    """The bisection range and model knobs."""

    good: int
    bad: int
    requests_per_run: int = 1
    confidence: float = 0.95
    deterministic: bool = False
    switch_cost: float = 0.0
    grid_size: int = 40
    rate_lo: float = 1e-4
    rate_hi: float = 0.95
    baseline_rate: float | None = None  # per-request rate every prefix shows, if known (e.g. 1/256)
    culprit_rate: float | None = None  # per-request rate with the culprit, if known
    none_prior: float = 0.25  # prior mass of "no patch in the range changed the rate"
    min_ratio: float = 2.0  # a culprit at least multiplies the per-request rate by this

    def rates(self) -> np.ndarray:
        if self.deterministic:
            return np.array([1e-6, 1.0 - 1e-6])
        grid = np.geomspace(self.rate_lo, self.rate_hi, self.grid_size)
        known = [r for r in (self.baseline_rate, self.culprit_rate) if r is not None]
        return np.unique(np.concatenate([grid, known])) if known else grid

    def _pinned(self, rates: np.ndarray, value: float | None) -> np.ndarray:
        """Mask of grid points a rate may take: all, or only the one the user gave."""
        if value is None:
            return np.ones(len(rates), bool)
        return np.isclose(rates, value, rtol=1e-12, atol=0)

    def log_prior(self, rates: np.ndarray) -> np.ndarray:
        """Prior over grid pairs (p0, p1) with p0 < p1.

        Rates the user knows (``baseline_rate``, ``culprit_rate``) are pinned to their value.
        Otherwise p0 is log-uniform (a baseline flake rate can be anything from 1e-4 up). Given p0, p1 is
        uniform in the *per-run* failure probability q = 1-(1-p)^R above q0: a culprit is not assumed
        to be near-deterministic. (A log-uniform p1 would put a quarter of its mass on rates where a
        32-request gate always fails, and three lucky passes would then wrongly clear a culprit.)
        """
        g = len(rates)
        if self.deterministic:
            prior = np.full((g, g), -np.inf)
            prior[0, 1] = 0.0
            return prior
        q = -np.expm1(self.requests_per_run * np.log1p(-rates))
        edges = np.concatenate([[0.0], (q[1:] + q[:-1]) / 2, [1.0]])
        dq = np.diff(edges)
        i, j = np.meshgrid(np.arange(g), np.arange(g), indexing="ij")
        ratio = self.min_ratio
        if self.baseline_rate is not None and self.culprit_rate is not None:
            ratio = min(ratio, self.culprit_rate / self.baseline_rate)
        # A culprit raises the rate by at least ``ratio``: without a smallest effect, "no culprit" could
        # never be told from "a culprit that adds 1%" and a bisect without culprit would never end.
        allowed = (
            (j > i)
            & (rates[j] >= ratio * rates[i] * (1 - 1e-9))
            & self._pinned(rates, self.baseline_rate)[:, None]
            & self._pinned(rates, self.culprit_rate)[None, :]
        )
        w = np.where(allowed, dq[None, :], 0.0)
        row = w.sum(axis=1, keepdims=True)
        w = np.divide(w, row, out=np.zeros_like(w), where=row > 0)
        with np.errstate(divide="ignore"):
            prior = np.log(w)
        return prior - logsumexp(prior)


def _loglik(rates: np.ndarray, c: Counts) -> np.ndarray:
    log_p, log_q = np.log(rates), np.log1p(-rates)
    out = c.failures * log_p + (c.requests - c.failures) * log_q
    sizes: dict[int, int] = {}
    for r in c.censored_fail_runs:  # grouped: a long bisect has thousands of these
        sizes[r] = sizes.get(r, 0) + 1
    for r, n in sizes.items():
        out = out + n * np.log(-np.expm1(r * log_q))
    return out


@dataclass
class Posterior:
    """Joint posterior over culprit position and the two rates, with the marginals reports need."""

    model: GateModel
    rates: np.ndarray
    culprits: np.ndarray  # candidate culprit positions good+1..bad
    weights: np.ndarray  # [culprit..., none, i(p0), j(p1)], sums to 1; the last row is "no culprit"
    log_evidence: float

    @property
    def all_probs(self) -> np.ndarray:
        """Culprit probabilities followed by the probability of "no culprit"."""
        return self.weights.sum(axis=(1, 2))

    @property
    def probs(self) -> np.ndarray:
        return self.all_probs[:-1]

    @property
    def p_none(self) -> float:
        """Posterior probability that no patch in the range changed the rate."""
        return float(self.all_probs[-1])

    def none_rate_bound(self, confidence: float) -> float:
        """Upper ``confidence`` quantile of the one shared per-request rate, given "no culprit"."""
        w = self.weights[-1].sum(axis=1)
        total = w.sum()
        if total <= 0:
            return 1.0
        cdf = np.cumsum(w / total)
        return float(self.rates[min(int(np.searchsorted(cdf, confidence)), len(self.rates) - 1)])

    def prob_of(self, position: int) -> float:
        idx = position - self.model.good - 1
        return float(self.probs[idx]) if 0 <= idx < len(self.culprits) else 0.0

    def best(self) -> tuple[int, float]:
        probs = self.probs
        idx = int(np.argmax(probs))
        return int(self.culprits[idx]), float(probs[idx])

    def rate_means(self) -> tuple[float, float]:
        w = self.weights[:-1].sum(axis=0)
        w = w / w.sum() if w.sum() > 0 else w
        return float((w.sum(axis=1) * self.rates).sum()), float((w.sum(axis=0) * self.rates).sum())

    def credible_range(self, mass: float) -> tuple[int, int]:
        """Narrowest (good, bad] window holding ``mass`` of the culprit posterior."""
        probs = self.probs
        n = len(probs)
        csum = np.concatenate([[0.0], np.cumsum(probs)])
        best = (self.model.good, self.model.bad)
        best_len = n + 1
        for a in range(n):
            for b in range(a + 1, n + 1):
                if csum[b] - csum[a] >= mass - 1e-12:
                    if b - a < best_len:
                        best_len, best = b - a, (int(self.culprits[a]) - 1, int(self.culprits[b - 1]))
                    break
        return best

    def entropy(self) -> float:
        return _entropy(self.all_probs)


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def posterior(model: GateModel, data: Mapping[int, Counts], n_positions: int | None = None) -> Posterior:
    """Culprit posterior given per-position counts (positions outside the range still inform the rates)."""
    rates = model.rates()
    top = max([model.bad, *data.keys()]) if n_positions is None else n_positions
    g = len(rates)
    ll = np.zeros((top + 1, g))
    for pos, counts in data.items():
        if 0 <= pos <= top:
            ll[pos] = _loglik(rates, counts)
    # before[c] = sum_{k<c} ll[k]; after[c] = sum_{k>=c} ll[k]
    csum = np.vstack([np.zeros(g), np.cumsum(ll, axis=0)])
    culprits = np.arange(model.good + 1, model.bad + 1)
    # The last row is "no culprit": every position runs at p0 (p1 is a nuisance that sums out).
    split = np.append(culprits, top + 1)
    before = csum[split]
    after = csum[-1] - csum[split]
    none = min(max(model.none_prior, 0.0), 1.0 - 1e-9)
    with np.errstate(divide="ignore"):
        log_mass = np.append(np.full(len(culprits), math.log1p(-none) - math.log(len(culprits))), math.log(none))
    logw = log_mass[:, None, None] + model.log_prior(rates)[None, :, :] + before[:, :, None] + after[:, None, :]
    log_z = float(logsumexp(logw))
    # Contradictory deterministic answers: fall back to a flat posterior instead of NaNs.
    weights = np.exp(logw - log_z) if math.isfinite(log_z) else np.full(logw.shape, 1.0 / logw.size)
    return Posterior(model, rates, culprits, weights, log_z)


def _outcome_liks(
    rates: np.ndarray, requests: int, repeats: tuple[int, ...]
) -> tuple[np.ndarray, list[slice]]:
    """Likelihood of "m of r runs failed" for every r in ``repeats`` and m in 0..r, as columns."""
    q = -np.expm1(requests * np.log1p(-rates))  # P(a run fails | rate)
    cols, slices, start = [], [], 0
    for r in repeats:
        for m in range(r + 1):
            cols.append(math.comb(r, m) * q**m * (1 - q) ** (r - m))
        slices.append(slice(start, start + r + 1))
        start += r + 1
    return np.stack(cols, axis=1), slices


def gain_table(post: Posterior, positions: list[int], repeats: tuple[int, ...]) -> np.ndarray:
    """Expected entropy reduction of the culprit posterior from r pass/fail runs at each position.

    Returns ``[position, repeats]``. A run at ``k`` has rate p1 for culprits ``c <= k`` and p0 otherwise,
    so the outcome likelihoods only need the two rate marginals of the joint posterior.
    """
    liks, slices = _outcome_liks(post.rates, post.model.requests_per_run, repeats)
    w = post.weights
    u1 = w.sum(axis=1) @ liks  # [c, outcome] if the position carries p1
    u0 = w.sum(axis=2) @ liks  # [c, outcome] if it carries p0
    split = np.append(post.culprits, np.iinfo(np.int64).max)  # "no culprit": every position at p0
    left = split[None, :] <= np.asarray(positions)[:, None]  # [k, c]
    unnorm = np.where(left[:, :, None], u1[None], u0[None])  # [k, c, outcome]
    p_out = unnorm.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        cond = unnorm / p_out
        h = -np.where(cond > 0, cond * np.log(cond), 0.0).sum(axis=1)  # [k, outcome]
    weighted = p_out[:, 0, :] * h
    h0 = post.entropy()
    return np.stack([h0 - weighted[:, sl].sum(axis=1) for sl in slices], axis=1)


def expected_gain(post: Posterior, position: int, repeats: int) -> float:
    """Expected entropy reduction from ``repeats`` pass/fail runs at ``position``."""
    return float(gain_table(post, [position], (repeats,))[0, 0])


@dataclass(frozen=True)
class Choice:
    position: int
    repeats: int
    gain: float  # expected nats for the whole batch of repeats


def choose(
    post: Posterior, skipped: Iterable[int] = (), jobs: int = 1, current: int | None = None
) -> list[Choice]:
    """Best (position, repeats) by expected information per run; up to ``jobs`` positions.

    A run costs 1, and moving to another candidate than ``current`` (the one materialized and
    booted now) costs ``switch_cost`` more; staying costs no switch. A switch cost buys batches of
    repeats whose last runs are often wasted once the first ones decided: with the old default of
    1 a culprit at 31 of 32 cost ~83 runs against ~65 with 0 (bench/bisect_sim.py), so the default
    is 0 and the switch is priced only when the user says it costs something.
    """
    model = post.model
    skip = set(skipped)
    candidates = [k for k in range(model.good, model.bad + 1) if k not in skip]
    repeats_options = (1,) if model.deterministic else REPEAT_CHOICES
    scored: list[tuple[float, Choice]] = []
    if candidates:
        gains = gain_table(post, candidates, repeats_options)
        for k, row in zip(candidates, gains, strict=True):
            cost = np.asarray(repeats_options, float) + (0.0 if k == current else model.switch_cost)
            best = int(np.argmax(row / cost))
            scored.append((float(row[best] / cost[best]), Choice(k, repeats_options[best], float(row[best]))))
    scored.sort(key=lambda sc: -sc[0])
    if not scored or scored[0][1].gain < 1e-6:
        return []
    if jobs <= 1:
        return [scored[0][1]]
    return _spread(post, scored, jobs)


def _spread(post: Posterior, scored: list[tuple[float, Choice]], jobs: int) -> list[Choice]:
    """k-ary step: the best choice, then the best-scoring choices nearest the culprit-CDF quantiles."""
    cdf = np.cumsum(post.probs)
    by_pos = {c.position: c for _, c in scored}
    picked: list[Choice] = [scored[0][1]]
    for q in np.linspace(0, 1, jobs + 2)[1:-1]:
        if len(picked) >= jobs:
            break
        target = int(post.culprits[min(int(np.searchsorted(cdf, q)), len(cdf) - 1)]) - 1
        options = sorted(by_pos, key=lambda k: abs(k - target))
        for k in options:
            if all(p.position != k for p in picked) and by_pos[k].gain > 1e-6:
                picked.append(by_pos[k])
                break
    for _, c in scored:
        if len(picked) >= jobs:
            break
        if all(p.position != c.position for p in picked):
            picked.append(c)
    return picked


def _kl(a: float, b: float) -> float:
    """KL divergence between Bernoulli(a) and Bernoulli(b)."""
    eps = 1e-12
    a, b = min(max(a, eps), 1 - eps), min(max(b, eps), 1 - eps)
    return a * math.log(a / b) + (1 - a) * math.log((1 - a) / (1 - b))


def runs_to_reach(post: Posterior, target: float) -> int | None:
    """Rough number of further runs (Wald's SPRT approximation) to lift the best culprit to ``target``.

    The competitors that take longest to rule out are the neighbours: ``c-1`` is separated by runs
    at ``c-1`` (baseline under ``c``, culprit rate under ``c-1``) and ``c+1`` by runs at ``c``. Each
    run yields on average KL(pass/fail distribution) nats; we need log-odds ``logit(target)`` against
    each neighbour (sharing the remaining mass). None when the rates are indistinguishable.
    """
    c, p = post.best()
    if p >= target:
        return 0
    p0, p1 = post.rate_means()
    r = post.model.requests_per_run
    q0, q1 = 1 - (1 - p0) ** r, 1 - (1 - p1) ** r
    need = math.log(2 * target / (1 - target))
    total = 0.0
    for neighbour, kl in ((c - 1, _kl(q0, q1)), (c + 1, _kl(q1, q0))):
        pn = post.prob_of(neighbour)
        if pn <= 0 or not (post.model.good < neighbour <= post.model.bad):
            continue
        if kl <= 1e-9:
            return None
        total += max(0.0, need - math.log(p / pn)) / kl
    return math.ceil(total)
