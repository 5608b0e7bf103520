"""Human-readable bisect status: the posterior table, the bounds, how far from done.

Numbers are always shown with what they rest on ("0/256 => rate < 1.17% at 95%"), never as a bare
percentage from one run.
"""

from __future__ import annotations

import numpy as np

from materialize.bisect.api import position_evidence
from materialize.bisect.posterior import runs_to_reach
from materialize.bisect.session import Step, metric_samples
from materialize.bisect.state import BisectState
from materialize.bisect.stats import compare


def _name(names: dict[int, str], position: int) -> str:
    if position == 0:
        return "(upstream alone)"
    return names.get(position, f"patch {position}")


def render(state: BisectState, step: Step, names: dict[int, str] | None = None) -> str:
    """The ``bisect status`` text."""
    names = names or {}
    lines = [
        f"bisect {state.mode} {state.gate if state.mode == 'gate' else state.metric!s}: "
        f"good={state.good} bad={state.bad} confidence={state.confidence:g}; "
        f"{len(state.observations)} observations, skipped={sorted(state.skipped) or '-'}"
    ]
    if state.mode == "gate":
        lines += _gate_table(state, step, names)
    else:
        lines += _metric_table(state, step, names)
    lines.append("")
    if step.status == "found":
        c = step.culprit or 0
        prob = f" (P={step.probability:.3f})" if step.probability is not None else ""
        lines.append(f"{_name(names, c)} at position {c} is the first bad patch{prob}")
    elif step.status == "run":
        todo = ", ".join(f"position {p} x{r}" for p, r in step.runs)
        lines.append(f"next: {todo}" + (f"  ({step.message})" if step.message else ""))
    else:
        lines.append(f"{step.status}: {step.message}")
    return "\n".join(lines)


def _gate_table(state: BisectState, step: Step, names: dict[int, str]) -> list[str]:
    post = step.posterior
    assert post is not None
    probs = {int(c): float(p) for c, p in zip(post.culprits, post.probs, strict=True)}
    out = ["", f"{'pos':>4}  {'patch':<34} {'P(culprit)':>10}  {'runs':>5}  evidence"]
    for k in range(state.good, state.bad + 1):
        runs = sum(1 for o in state.observations if o.position == k and o.requests)
        evidence = position_evidence(state, k)  # every failure counted, exit-code-only ones too
        if k in state.skipped:
            evidence = (evidence + "; " if evidence else "") + "skipped"
        p = f"{probs[k]:.3f}" if k in probs else "-"
        out.append(f"{k:>4}  {_name(names, k)[:34]:<34} {p:>10}  {runs:>5}  {evidence}")
    p0, p1 = post.rate_means()
    out.append("")
    out.append(f"posterior mean rates: baseline {p0 * 100:.3g}%/request, culprit {p1 * 100:.3g}%/request "
               f"(if there is one); P(no culprit in {state.good + 1}..{state.bad}) = {post.p_none:.3f}")
    if step.status in ("good-end-fails", "no-regression"):
        return out
    more = runs_to_reach(post, 0.99)
    best, prob = post.best()
    if prob >= 0.99:
        out.append(f"position {best} has P={prob:.3f}, past 0.99")
    elif more is None or more == 0:
        out.append(f"runs to lift P({best}) from {prob:.3f} to 0.99: unknown (the doubt is not only between "
                   "neighbours, or the rates are not yet distinguishable)")
    else:
        out.append(
            f"about {more} more run(s) at positions {best - 1}/{best} would lift P({best}) from {prob:.3f} "
            "to 0.99 (Wald estimate)"
        )
    return out


def _metric_table(state: BisectState, step: Step, names: dict[int, str]) -> list[str]:
    samples = metric_samples(state)
    good = samples.get(state.good, [])
    band = state.threshold
    probs = step.metric.probs if step.metric else {}
    better = "lower" if state.direction == "lower" else "higher"
    out = [
        "",
        f"{'pos':>4}  {'patch':<34} {'n':>4} {'median':>12} {'vs good':>9} {'P(culprit)':>10}  ({better} is better)",
    ]
    for k in sorted(samples):
        s = samples[k]
        med = float(np.median(s))
        vs = ""
        if good and k != state.good:
            cmp = compare(good, s, noise_band=band)
            vs = f"{cmp.shift * 100:+.2f}%"
        p = f"{probs[k]:.3f}" if k in probs else "-"
        end = {state.good: "  good end", state.bad: "  bad end"}.get(k, "")
        out.append(f"{k:>4}  {_name(names, k)[:34]:<34} {len(s):>4} {med:>12.6g} {vs:>9} {p:>10}{end}")
    if step.metric and step.metric.ends:
        e = step.metric.ends
        out.append("")
        out.append(
            f"ends: {e.verdict} (Mann-Whitney p={e.p_value:.3g}, shift {e.shift * 100:+.2f}%, "
            f"noise band {band * 100:.2f}%, n={e.n_a}/{e.n_b})"
        )
    if step.metric and step.metric.probs:
        out.append(
            f"P(regression beyond the {band * 100:g}% band, {'up' if state.direction == 'lower' else 'down'}wards)"
            f" = {step.metric.p_regression:.3f}; culprit range at {state.confidence:g}: "
            f"{step.metric.low + 1}..{step.metric.high}"
        )
    return out
