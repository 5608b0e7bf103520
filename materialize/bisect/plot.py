"""``bisect status --plot FILE.png``: the culprit posterior over patches, or metric samples per candidate.

Drawn with matplotlib's Agg backend (no display needed on a build host).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from materialize.bisect.session import Step, gate_data, metric_samples  # noqa: E402
from materialize.bisect.state import BisectState  # noqa: E402


def plot(state: BisectState, step: Step, path: str | Path, names: dict[int, str] | None = None) -> Path:
    names = names or {}
    path = Path(path)
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 0.35 * (state.bad - state.good + 2)), 7), sharex=True)
    top, bottom = axes
    positions = list(range(state.good, state.bad + 1))
    if state.mode == "gate" and step.posterior is not None:
        post = step.posterior
        top.bar([int(c) for c in post.culprits], post.probs, color="tab:red")
        top.axhline(state.confidence, ls="--", color="grey", lw=1)
        top.set_ylabel("P(first bad patch)")
        top.set_ylim(0, 1)
        data = gate_data(state)
        rates, lows = [], []
        for k in positions:
            c = data.get(k)
            if c is None or c.requests + sum(c.censored_fail_runs) == 0:
                rates.append(0.0)
                lows.append(0)
                continue
            total = c.requests + sum(c.censored_fail_runs)
            rates.append((c.failures + c.runs_failed) / total)
            lows.append(total)
        bottom.bar(positions, rates, color="tab:blue")
        for k, n in zip(positions, lows, strict=True):
            if n:
                bottom.annotate(
                    f"n={n}", (k, 0), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=6
                )
        bottom.set_ylabel("failures / requests (failing exit = 1)")
    else:
        samples = metric_samples(state)
        for k, s in samples.items():
            bottom.scatter([k] * len(s), s, s=10, alpha=0.6, color="tab:blue")
        verdicts = step.metric.verdicts if step.metric else {}
        colours = [
            "tab:green"
            if verdicts.get(k) == "good"
            else "tab:red"
            if verdicts.get(k) == "bad"
            else "lightgrey"
            for k in positions
        ]
        top.bar(positions, [1 if k in samples else 0 for k in positions], color=colours)
        if step.culprit is not None:
            top.bar([step.culprit], [1], color="black")
        top.set_ylabel("tested (green good / red bad)")
        bottom.set_ylabel(state.metric or "metric")
    bottom.set_xlabel("series position (prefix length)")
    bottom.set_xticks(positions)
    bottom.set_xticklabels([str(k) for k in positions], fontsize=7)
    title = f"bisect {state.mode}: {step.status}"
    if step.culprit is not None:
        title += f", best {step.culprit} {names.get(step.culprit, '')}"
    top.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
