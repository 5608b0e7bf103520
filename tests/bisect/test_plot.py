"""`bisect status --plot`: both pictures render to real PNG files."""

from __future__ import annotations

from pathlib import Path

from materialize.bisect import session
from materialize.bisect.plot import plot


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000


def test_gate_and_metric_plots(tmp_path: Path) -> None:
    gate = session.start(series="s", n_patches=6, good=0, bad=6, gate="stage3", requests=32)
    session.observe(gate, 2, source="run", requests=32, failures=0)
    session.observe(gate, 4, source="run", requests=32, failures=1, censored=True)
    assert _is_png(plot(gate, session.decide(gate), tmp_path / "gate.png", {4: "0004-x"}))

    metric = session.start(series="s", n_patches=6, good=0, bad=6, metric="ttft")
    for pos, base in ((0, 100.0), (6, 103.0), (3, 103.0)):
        session.observe(metric, pos, source="run", samples=[base, base + 0.3, base - 0.2, base + 0.1])
    assert _is_png(plot(metric, session.decide(metric), tmp_path / "sub" / "metric.png"))
