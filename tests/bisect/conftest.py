"""A generated series whose "hardware" is a script with a known culprit (see ``HARDWARE``)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

# The "hardware": reads the materialized tree, fails when the culprit's line is present. Flaky on
# purpose: each run draws failures deterministically from (seed, position, run number), at the
# culprit rate once the culprit is applied and at the baseline rate everywhere (as in seed 001).
HARDWARE = textwrap.dedent(
    """
    import hashlib, json, os, sys
    from pathlib import Path

    culprit, p0, p1, requests, seed, mode = sys.argv[1:7]
    tree = Path(os.environ["MATERIALIZED_DIR"]) / "plugin" / "src" / "model.py"
    text = tree.read_text() if tree.exists() else ""  # an overlay holds only changed files
    bad = f"step_{culprit} = True" in text
    pos = os.environ["MATERIALIZE_BISECT_POSITION"]
    counter = Path(os.environ["HW_COUNTS"]) / pos
    with open(counter, "a") as fh:
        fh.write(".")
    run = counter.stat().st_size
    rate = float(p1 if bad else p0)
    fails = 0
    for i in range(int(requests)):
        h = hashlib.sha256(f"{seed}/{pos}/{run}/{i}".encode()).digest()
        fails += int.from_bytes(h[:8], "big") / 2**64 < rate
    if mode == "metric":
        base = 100.0 * (1.02 if bad else 1.0)
        h = hashlib.sha256(f"{seed}/{pos}/{run}/m".encode()).digest()
        noise = (int.from_bytes(h[:8], "big") / 2**64 - 0.5) * 2.0  # uniform +-1%
        print(json.dumps({"metric": "makespan", "value": base + noise}))
        sys.exit(0)
    if mode == "record":
        rec = {
            "schema": 1, "materialization_id": os.environ["MATERIALIZATION_ID"],
            "series_prefix": json.loads(os.environ["HW_PREFIXES"])[pos],
            "host": "sim", "time": "2026-11-29T12:00:00Z",
            "gates": [{"name": "stage3", "requests": int(requests), "failures": fails}],
            "x_run": f"{pos}-{run}",  # two runs alike to the second are two runs
        }
        with open(os.environ["MATERIALIZE_LEDGER"], "a") as fh:
            fh.write(json.dumps(rec) + "\\n")
        sys.exit(0)
    sys.exit(1 if fails else 0)
    """
)


def model_text(k: int) -> str:
    return "".join(f"step_{i} = True\n" for i in range(1, k + 1)) or "# upstream\n"


@pytest.fixture
def gen_series(builder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """make(n, flagged={k: (FLAG, banner)}) -> (series path, hardware argv prefix)."""

    def make(n: int = 12, flagged: dict[int, tuple[str, str]] | None = None):
        b = builder({"src/model.py": model_text(0)})
        for k in range(1, n + 1):
            extra = {}
            if flagged and k in flagged:
                extra = {"flag": flagged[k][0], "banner": flagged[k][1]}
            b.add_patch(f"{k:04d}-step-{k}", {"src/model.py": model_text(k)}, **extra)
        series = b.write()
        hw = tmp_path / "hardware.py"
        hw.write_text(HARDWARE)
        counts = tmp_path / "hw-counts"
        counts.mkdir()
        monkeypatch.setenv("HW_COUNTS", str(counts))
        monkeypatch.chdir(tmp_path)  # build/materialized/ is relative to the working directory
        return series, [sys.executable, str(hw)]

    return make
