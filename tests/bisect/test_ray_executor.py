"""The fleet executor on a local Ray instance: one custom resource per (pretend) Tenstorrent host."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture
def local_ray():
    ray.init(num_cpus=2, resources={"tt_host_bh-a": 1, "tt_host_bh-b": 1}, include_dashboard=False,
             log_to_driver=False)
    yield
    ray.shutdown()


def test_bisect_run_dispatches_through_ray_hosts(invoke, gen_series, tmp_path: Path, local_ray) -> None:
    series, _ = gen_series(8)
    common = ["--series", str(series), "--work-dir", str(tmp_path / "work")]
    assert invoke("bisect", "start", *common, "--good", "0", "--bad", "8", "--deterministic").exit_code == 0
    seen = tmp_path / "hosts"
    seen.mkdir()
    script = tmp_path / "hw.py"
    script.write_text(
        "import os, sys\nfrom pathlib import Path\n"
        "assert sys.argv[1] == os.environ['TT_HOST']\n"
        "Path(sys.argv[2], sys.argv[1] + '-' + os.environ['MATERIALIZE_BISECT_POSITION']).touch()\n"
        "f = Path(os.environ['MATERIALIZED_DIR'], 'plugin/src/model.py')\n"
        "text = f.read_text() if f.exists() else ''\n"
        "sys.exit(1 if 'step_6 = True' in text else 0)\n"
    )
    result = invoke("bisect", "run", *common, "--ray-hosts", "bh-a,bh-b", "--", sys.executable, script, "{host}", seen)
    assert result.exit_code == 0, (result.output, result.exception)
    assert "position 6 is the first bad patch" in result.output
    hosts = {re.sub(r"-\d+$", "", p.name) for p in seen.iterdir()}
    assert hosts == {"bh-a", "bh-b"}
