"""`make bench`: every benchmark script in turn, each printing its own table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    ["bench_materialize.py", "--runs", "5"],
    ["bench_workspace.py"],
    ["bisect_sim.py"],
]


def main() -> int:
    failed = 0
    for script, *args in SCRIPTS:
        path = HERE / script
        if not path.exists():
            print(f"(skipping {script}: not present)")
            continue
        print(f"\n=== {script} {' '.join(args)}", flush=True)
        failed |= subprocess.run([sys.executable, str(path), *args]).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
