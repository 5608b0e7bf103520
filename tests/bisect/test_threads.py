"""The bisect CLI caps numpy/scipy's thread pools before they load; its gate command gets the user's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from materialize.bisect.api import THREAD_VARS

# A fresh interpreter runs the real console entry point; an import hook records the environment
# at the moment numpy is first imported (what OpenBLAS/OpenMP read when they start their pools).
DRIVER = textwrap.dedent(
    """
    import json, os, sys
    seen, code = {}, None

    class Spy:
        def find_spec(self, name, path=None, target=None):
            if name == "numpy" and not seen:
                seen.update({v: os.environ.get(v) for v in THREAD_VARS})
            return None

    sys.meta_path.insert(0, Spy())
    from materialize.cli import main
    sys.argv = ["materialize", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    print("SEEN " + json.dumps({"numpy": "numpy" in sys.modules, "env": seen, "code": code}))
    """
).replace("THREAD_VARS", repr(THREAD_VARS))

GATE = "import json, os, sys; json.dump({v: os.environ.get(v) for v in sys.argv[2:]}, open(sys.argv[1], 'w'))"


def _materialize(args: list[str], env: dict[str, str], cwd: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", DRIVER, *args], env=env, cwd=cwd, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stderr
    out = out.stdout
    line = [ln for ln in out.splitlines() if ln.startswith("SEEN ")][-1]
    return json.loads(line[5:])


def test_bisect_caps_blas_threads_before_numpy_loads_but_not_the_gate_commands(gen_series, tmp_path: Path) -> None:
    series, _ = gen_series(4)
    env = {k: v for k, v in __import__("os").environ.items() if k not in THREAD_VARS}
    env["MKL_NUM_THREADS"] = "3"  # the user's own choice is kept
    common = ["--series", str(series), "--work-dir", str(tmp_path / "work")]
    started = _materialize(["bisect", "start", *common, "--good", "0", "--bad", "4", "--deterministic"], env, tmp_path)
    assert started["code"] in (0, None)
    seen_by_gate = tmp_path / "gate-env.json"
    ran = _materialize(["bisect", "run", *common, "--max-runs", "1", "--", sys.executable, "-c", GATE,
                        str(seen_by_gate), *THREAD_VARS], env, tmp_path)
    assert ran["numpy"], "the run decides with the posterior: numpy must have loaded"
    assert ran["env"] == {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "3"}
    # The gate command (a benchmark, a server) keeps the environment its user gave it.
    assert json.loads(seen_by_gate.read_text()) == {"OPENBLAS_NUM_THREADS": None, "OMP_NUM_THREADS": None,
                                                    "MKL_NUM_THREADS": "3"}
