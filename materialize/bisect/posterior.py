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

import functools
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
NONE_FOCUS = True  # see choose()
LEADER_FOCUS = 0.3  # see leader_focus(); 0: never


@dataclass
class Counts:
    """What is known about one position's gate: exact counts plus censored failing runs."""

    requests: int = 0
    failures: int = 0
    censored_fail_runs: list[int] = field(
        default_factory=list
    )  # requests per run that "failed, count unknown"
    runs: int = 0  # results added (one per run)
    failed_runs: int = 0  # of which had a failure (counted or only "failed")
    sizes: dict[int, int] = field(default_factory=dict, repr=False)  # censored_fail_runs grouped by size

    def __post_init__(self) -> None:
        if self.censored_fail_runs and not self.sizes:
            for r in self.censored_fail_runs:
                self.sizes[r] = self.sizes.get(r, 0) + 1

    def add(self, requests: int, failures: int, censored: bool = False) -> None:
        self.runs += 1
        self.failed_runs += failures > 0
        if censored:
            if failures > 0:
                self.censored_fail_runs.append(requests)
                self.sizes[requests] = self.sizes.get(requests, 0) + 1
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
    grid_size: int = 128  # log-spaced: neighbours 7.6% apart (40 left a true rate 11% from the grid)
    rate_lo: float = 1e-4
    rate_hi: float = 0.95
    baseline_rate: float | None = None  # per-request rate every prefix shows, if known (e.g. 1/256)
    culprit_rate: float | None = None  # per-request rate with the culprit, if known
    none_prior: float = 0.25  # prior mass of "no patch in the range changed the rate"
    min_ratio: float = 1.5  # a culprit at least multiplies the per-request rate by this

    def rates(self) -> np.ndarray:
        return _rates(self)

    def _rates(self) -> np.ndarray:
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
        """Prior over grid pairs (see ``_log_prior``); cached per model (it is the same for every step)."""
        if rates is self.rates():
            return _log_prior(self)
        return self._log_prior(rates)

    def _log_prior(self, rates: np.ndarray) -> np.ndarray:
        """Prior over grid pairs (p0, p1) with p0 < p1.

        Rates the user knows (``baseline_rate``, ``culprit_rate``) are pinned to their value.
        Otherwise p0 is log-uniform (a baseline flake rate can be anything from 1e-4 up). Given p0, p1
        is at least ``min_ratio`` times p0 and log-uniform in the *per-run* failure probability
        q = 1-(1-p)^R: a culprit is not assumed to be near-deterministic (a log-uniform p1 would put a
        quarter of its mass on rates where a 32-request gate always fails, and three lucky passes
        would then clear a culprit), and small effects keep their share (uniform in q spread them
        over [q0, 1], so a culprit doubling a 12% per-run flake lost to "no culprit" by that Occam
        factor: 17.5% confident wrong answers in bench/bisect_sim.py). The smallest effect is 1.5x so
        that a doubling sits inside the prior, not on its edge.
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
        w = np.where(allowed, (dq / q)[None, :], 0.0)
        row = w.sum(axis=1, keepdims=True)
        w = np.divide(w, row, out=np.zeros_like(w), where=row > 0)
        with np.errstate(divide="ignore"):
            prior = np.log(w)
        return prior - logsumexp(prior)


@functools.lru_cache(maxsize=64)
def _rates(model: GateModel) -> np.ndarray:
    r = model._rates()
    r.flags.writeable = False
    return r


@functools.lru_cache(maxsize=64)
def _log_prior(model: GateModel) -> np.ndarray:
    p = model._log_prior(model.rates())
    p.flags.writeable = False
    return p


def _linear(log_prior: np.ndarray) -> tuple[np.ndarray, float]:
    """The prior as ``(exp(log_prior - max), max)``: [i, j] weights, 0 where a pair is not allowed."""
    pmax = float(np.max(log_prior))
    return np.exp(log_prior - pmax), pmax


@functools.lru_cache(maxsize=64)
def _linear_prior(model: GateModel) -> tuple[np.ndarray, float]:
    return _linear(_log_prior(model))


def _loglik_rows(rates: np.ndarray, data: Mapping[int, Counts], top: int) -> np.ndarray:
    """``[position 0..top, rate]`` log-likelihood of each position's results at each grid rate."""
    log_p, log_q = np.log(rates), np.log1p(-rates)
    ll = np.zeros((top + 1, len(rates)))
    keys = [k for k in data if 0 <= k <= top]
    if not keys:
        return ll
    fails = np.array([data[k].failures for k in keys], float)
    reqs = np.array([data[k].requests for k in keys], float)
    rows = fails[:, None] * log_p + (reqs - fails)[:, None] * log_q
    # censored failing runs, grouped by size: "failed" of r requests has likelihood 1 - (1-p)^r
    sizes = sorted({r for k in keys for r in data[k].sizes})
    if sizes:
        n = np.array([[data[k].sizes.get(r, 0) for r in sizes] for k in keys], float)
        rows += n @ np.log(-np.expm1(np.asarray(sizes, float)[:, None] * log_q[None, :]))
    ll[keys] = rows
    return ll


class _CountsRows:
    """``_loglik(rates, c)`` for many ``c`` at the same rates: the logs are taken once."""

    def __init__(self, rates: np.ndarray) -> None:
        self.log_p, self.log_q = np.log(rates), np.log1p(-rates)
        self.failed: dict[int, np.ndarray] = {}  # size -> log P(a run of that many requests fails)

    def __call__(self, c: Counts) -> np.ndarray:
        row = c.failures * self.log_p + (c.requests - c.failures) * self.log_q
        for size in sorted(c.sizes):
            if size not in self.failed:
                self.failed[size] = np.log(-np.expm1(size * self.log_q))
            row += c.sizes[size] * self.failed[size]
        return row


def _loglik(rates: np.ndarray, c: Counts) -> np.ndarray:
    return _loglik_rows(rates, {0: c}, 0)[0]


@dataclass
class Posterior:
    """Posterior over culprit position (and "no culprit") with each row's marginals over the two rates.

    The joint over (culprit, p0, p1) factorises per row as prior(p0, p1) * L(before | p0) *
    L(after | p1), so everything decisions and reports need (culprit probabilities, the p0 and p1
    marginals per row) comes from two small matrix products; the joint cube is never built.
    """

    model: GateModel
    rates: np.ndarray
    culprits: np.ndarray  # candidate culprit positions good+1..bad
    m0: np.ndarray  # [culprit..., none; i]: P(row, p0 = rates[i]); all rows sum to 1
    m1: np.ndarray  # [culprit..., none; j]: P(row, p1 = rates[j])
    log_evidence: float

    @property
    def all_probs(self) -> np.ndarray:
        """Culprit probabilities followed by the probability of "no culprit"."""
        return self.m0.sum(axis=1)

    @property
    def probs(self) -> np.ndarray:
        return self.all_probs[:-1]

    @property
    def p_none(self) -> float:
        """Posterior probability that no patch in the range changed the rate."""
        return float(self.all_probs[-1])

    def none_rate_bound(self, confidence: float) -> float:
        """Upper ``confidence`` quantile of the one shared per-request rate, given "no culprit"."""
        w = self.m0[-1]
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
        w0, w1 = self.m0[:-1].sum(axis=0), self.m1[:-1].sum(axis=0)
        total = w0.sum()
        if total <= 0:
            return float(self.rates.mean()), float(self.rates.mean())
        return float((w0 * self.rates).sum() / total), float((w1 * self.rates).sum() / total)

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
    ll = _loglik_rows(rates, data, top)
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
    prior, pmax = _linear_prior(model) if rates is model.rates() else _linear(model.log_prior(rates))
    bmax, amax = before.max(axis=1), after.max(axis=1)
    b = np.exp(before - bmax[:, None])
    a = np.exp(after - amax[:, None])
    m0 = b * (a @ prior.T)  # [row, i] = B[row, i] * sum_j P[i, j] A[row, j]
    m1 = a * (b @ prior)  # [row, j] = A[row, j] * sum_i B[row, i] P[i, j]
    row = m0.sum(axis=1)
    with np.errstate(divide="ignore"):
        log_row = np.log(row) + bmax + amax + log_mass + pmax
    log_z = float(logsumexp(log_row))
    if not math.isfinite(log_z):  # contradictory deterministic answers: flat, not NaNs
        flat = np.full(m0.shape, 1.0 / m0.size)
        return Posterior(model, rates, culprits, flat, flat.copy(), log_z)
    scale = np.divide(np.exp(log_row - log_z), row, out=np.zeros_like(row), where=row > 0)
    return Posterior(model, rates, culprits, m0 * scale[:, None], m1 * scale[:, None], log_z)


def best_after_each(
    model: GateModel, ll: np.ndarray, changes: list[tuple[int, np.ndarray]], chunk: int = 128
) -> tuple[np.ndarray, np.ndarray]:
    """``posterior(...).best()`` after each of a sequence of results, in batches: (culprits, probabilities).

    ``ll`` is the ``[position 0..top, rate]`` log-likelihood before the first result
    (``_loglik_rows``); each change is one position's row after its next result. The arithmetic is
    ``posterior``'s, stacked over the steps (one matrix product per batch instead of one call per
    result): a state of thousands of results replays its verdict history in a fraction of the time.
    """
    rates = model.rates()
    culprits = np.arange(model.good + 1, model.bad + 1)
    split = np.append(culprits, ll.shape[0])
    none = min(max(model.none_prior, 0.0), 1.0 - 1e-9)
    with np.errstate(divide="ignore"):
        log_mass = np.append(np.full(len(culprits), math.log1p(-none) - math.log(len(culprits))), math.log(none))
    prior, pmax = _linear_prior(model) if rates is model.rates() else _linear(model.log_prior(rates))
    cur = np.array(ll, dtype=float)
    best_c, best_p = np.empty(len(changes), int), np.empty(len(changes))
    for lo in range(0, len(changes), chunk):
        part = changes[lo : lo + chunk]
        stack = np.empty((len(part), *cur.shape))
        for t, (position, row) in enumerate(part):
            cur[position] = row
            stack[t] = cur
        csum = np.zeros((len(part), cur.shape[0] + 1, cur.shape[1]))
        for k in range(cur.shape[0]):  # np.cumsum's order of additions, faster than it on this axis
            np.add(csum[:, k], stack[:, k], out=csum[:, k + 1])
        before = csum[:, split]
        after = csum[:, -1:] - before
        bmax, amax = before.max(axis=2), after.max(axis=2)
        b = np.exp(before - bmax[:, :, None])
        a = np.exp(after - amax[:, :, None])
        ap = (a.reshape(-1, a.shape[2]) @ prior.T).reshape(a.shape)  # one matrix product for the batch
        row_mass = (b * ap).sum(axis=2)  # [step, row]
        with np.errstate(divide="ignore"):
            log_row = np.log(row_mass) + bmax + amax + log_mass + pmax
        top = log_row.max(axis=1, keepdims=True)
        finite = np.isfinite(top[:, 0])
        with np.errstate(invalid="ignore"):
            log_z = np.where(finite[:, None], top + np.log(np.exp(log_row - top).sum(axis=1, keepdims=True)), 0.0)
            probs = np.exp(log_row - log_z)[:, :-1]
        idx = np.argmax(probs, axis=1)
        # contradictory deterministic answers: posterior() returns a flat table (its first culprit)
        best_c[lo : lo + len(part)] = np.where(finite, culprits[idx], culprits[0])
        best_p[lo : lo + len(part)] = np.where(finite, probs[np.arange(len(part)), idx], 1.0 / len(split))
    return best_c, best_p


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


@functools.lru_cache(maxsize=64)
def _model_outcome_liks(model: GateModel, repeats: tuple[int, ...]) -> tuple[np.ndarray, list[slice]]:
    return _outcome_liks(model.rates(), model.requests_per_run, repeats)


def gain_table(
    post: Posterior, positions: list[int], repeats: tuple[int, ...], none_only: bool = False
) -> np.ndarray:
    """Expected entropy reduction of the culprit posterior from r pass/fail runs at each position.

    Returns ``[position, repeats]``. A run at ``k`` has rate p1 for culprits ``c <= k`` and p0 otherwise,
    so the outcome likelihoods only need the two rate marginals of the joint posterior.
    """
    if post.rates is post.model.rates():
        liks, slices = _model_outcome_liks(post.model, tuple(repeats))
    else:
        liks, slices = _outcome_liks(post.rates, post.model.requests_per_run, repeats)
    u1 = post.m1 @ liks  # [row, outcome] if the position carries p1
    u0 = post.m0 @ liks  # [row, outcome] if it carries p0
    n_c = len(post.culprits)
    # A run at k carries p1 for culprits c <= k and p0 for the others and for "no culprit" (last row),
    # so sums over rows are prefix sums: P(outcome) and sum u*log(u) for every k in O(rows).
    with np.errstate(divide="ignore", invalid="ignore"):
        f1 = np.where(u1 > 0, u1 * np.log(u1), 0.0)
        f0 = np.where(u0 > 0, u0 * np.log(u0), 0.0)
    zero = np.zeros((1, u0.shape[1]))
    cu1, cf1 = np.vstack([zero, np.cumsum(u1[:n_c], axis=0)]), np.vstack([zero, np.cumsum(f1[:n_c], axis=0)])
    cu0, cf0 = np.vstack([zero, np.cumsum(u0[:n_c], axis=0)]), np.vstack([zero, np.cumsum(f0[:n_c], axis=0)])
    n_left = np.searchsorted(post.culprits, np.asarray(positions), side="right")
    p_out = cu1[n_left] + (u0.sum(axis=0) - cu0[n_left])  # [k, outcome]
    flogf = cf1[n_left] + (f0.sum(axis=0) - cf0[n_left])
    with np.errstate(divide="ignore", invalid="ignore"):
        weighted = np.where(p_out > 0, p_out * np.log(p_out), 0.0) - flogf  # P(o) * H(culprit | o)
    if none_only:
        # only "no culprit" against "some culprit": the none row's share of every outcome is the same
        # wherever the run is made (p0 everywhere), the culprits' share is the rest
        pn = np.broadcast_to(u0[-1], p_out.shape)
        pc = np.clip(p_out - pn, 0.0, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            xlogx = lambda x: np.where(x > 0, x * np.log(x), 0.0)  # noqa: E731
            weighted = xlogx(p_out) - xlogx(pn) - xlogx(pc)
        h0 = _entropy(np.array([post.p_none, 1.0 - post.p_none]))
    else:
        h0 = post.entropy()
    return np.stack([h0 - weighted[:, sl].sum(axis=1) for sl in slices], axis=1)


def leader_gain_table(post: Posterior, positions: list[int], repeats: tuple[int, ...]) -> np.ndarray:
    """Expected rise of the leading culprit's posterior log-odds from r runs at each position, the
    outcome drawn as if the leader were the culprit, as ``[position, repeats]``.

    This is the Kullback-Leibler divergence between the outcome's distribution under the leader
    (its rates integrated over their posterior given it) and under its rivals together (Chernoff's
    rule for sequential tests: sample where the leader is best told from the rest). The culprit
    entropy values splitting the mass of positions that are already nearly ruled out; once a
    leader has emerged, what ends the bisect is the leader's odds against its neighbours.
    """
    if post.rates is post.model.rates():
        liks, slices = _model_outcome_liks(post.model, tuple(repeats))
    else:
        liks, slices = _outcome_liks(post.rates, post.model.requests_per_run, repeats)
    u1, u0 = post.m1 @ liks, post.m0 @ liks  # [row, outcome]: P(row, outcome) if the run carries p1 / p0
    n_c = len(post.culprits)
    zero = np.zeros((1, u0.shape[1]))
    cu1, cu0 = np.vstack([zero, np.cumsum(u1[:n_c], axis=0)]), np.vstack([zero, np.cumsum(u0[:n_c], axis=0)])
    pos = np.asarray(positions)
    n_left = np.searchsorted(post.culprits, pos, side="right")
    p_out = cu1[n_left] + (u0.sum(axis=0) - cu0[n_left])  # [k, outcome]
    lead = int(np.argmax(post.probs))
    p_lead = float(post.probs[lead])
    joint = np.where((post.culprits[lead] <= pos)[:, None], u1[lead][None, :], u0[lead][None, :])  # P(lead, o)
    rest = np.clip(p_out - joint, 1e-300, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        logit = np.where(joint > 0, np.log(joint) - np.log(rest), 0.0)
    before = math.log(p_lead) - math.log(max(1.0 - p_lead, 1e-300))
    w = joint / p_lead  # P(outcome | lead)
    return np.stack([(w[:, sl] * logit[:, sl]).sum(axis=1) - before for sl in slices], axis=1)


def expected_gain(post: Posterior, position: int, repeats: int) -> float:
    """Expected entropy reduction from ``repeats`` pass/fail runs at ``position``."""
    return float(gain_table(post, [position], (repeats,))[0, 0])


@dataclass(frozen=True)
class Choice:
    position: int
    repeats: int
    gain: float  # expected nats for the whole batch of repeats


def none_focus(post: Posterior) -> bool:
    """Whether runs are chosen by what they tell about "no culprit" against "some culprit": while
    "no culprit" leads every single culprit (see ``choose``)."""
    return NONE_FOCUS and post.p_none >= post.best()[1]


def leader_focus(post: Posterior) -> bool:
    """Whether runs are chosen by the leading culprit's expected log-odds (``leader_gain_table``)
    instead of the culprit entropy: once a leader holds ``LEADER_FOCUS`` of the posterior and "no
    culprit" does not lead. From the first run on (any leader) a culprit at 31 of 32 took 29 more
    runs (the leader of a flat posterior is arbitrary and greedy runs at it do not explore);
    bench/bisect_sim.py --paired: 0.2 to 0.35 save 1-2 runs."""
    if not LEADER_FOCUS or post.model.deterministic or none_focus(post):
        return False
    return post.best()[1] >= LEADER_FOCUS


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
        # While "no culprit" leads, what is left to learn is whether there is a culprit at all: the
        # culprit entropy would spend runs on telling apart positions that all may be innocent.
        none_leads = none_focus(post)
        if leader_focus(post):
            gains = leader_gain_table(post, candidates, repeats_options)
        else:
            gains = gain_table(post, candidates, repeats_options, none_only=none_leads)
        if none_leads and float(gains.max()) < 1e-6:
            gains = gain_table(post, candidates, repeats_options)
        switch = np.where(np.asarray(candidates) == current, 0.0, model.switch_cost)
        per_run = gains / (np.asarray(repeats_options, float)[None, :] + switch[:, None])
        best = np.argmax(per_run, axis=1)
        rows = np.arange(len(candidates))
        for k, b, score, gain in zip(candidates, best, per_run[rows, best], gains[rows, best], strict=True):
            scored.append((float(score), Choice(k, repeats_options[int(b)], float(gain))))
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


def fresh_log_factor(post: Posterior, culprit: int, fresh: Counts | None, bad: bool) -> tuple[float, float]:
    """Log Bayes factor of ``fresh`` runs at one position for running at the culprit's rate (``bad``)
    rather than the baseline (or the reverse), and the expected nats per further run.

    Both rates are integrated over their posterior given ``culprit``.
    """
    idx = culprit - post.model.good - 1
    w0, w1 = post.m0[idx], post.m1[idx]
    w0, w1 = w0 / w0.sum(), w1 / w1.sum()
    r = post.model.requests_per_run
    q = -np.expm1(r * np.log1p(-post.rates))
    q0, q1 = float(w0 @ q), float(w1 @ q)
    per_run = _kl(q1, q0) if bad else _kl(q0, q1)
    if fresh is None or fresh.runs == 0:
        return 0.0, per_run
    ll = _loglik(post.rates, fresh)
    m = float(ll.max())
    at0 = math.log(float(w0 @ np.exp(ll - m))) + m
    at1 = math.log(float(w1 @ np.exp(ll - m))) + m
    return (at1 - at0 if bad else at0 - at1), per_run


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
