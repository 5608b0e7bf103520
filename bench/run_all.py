"""`make bench`: every benchmark script in turn, each printing its own tables, then ONE summary table
of every row a script recorded (ours, reference, ratio, target, met?) -- the table bench/README.md
and the README quote.

Scripts record rows through ``common.record`` into the file named by ``BENCH_ROWS``.

    .venv/bin/python bench/run_all.py [--quick] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import markdown  # noqa: E402

SCRIPTS = [
    ["bench_materialize.py", "--runs", "5", "--cold-runs", "3"],
    ["bench_workspace.py"],
    ["bisect_sim.py"],
]
QUICK = {"bench_materialize.py": ["--runs", "3", "--cold-runs", "1"], "bench_workspace.py": ["--runs", "1"]}


SECTIONS = ("`materialize", "glibc", "one patch", "shipped", "workspace")


def _section(cells: list[str]) -> int:
    return next((i for i, prefix in enumerate(SECTIONS) if cells[0].startswith(prefix)), len(SECTIONS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer runs per row (a smoke run, not for the README)")
    parser.add_argument("--markdown", type=Path, help="also write the summary table to this file")
    parser.add_argument("--only", help="run only this script (e.g. bench_materialize.py)")
    parser.add_argument("--rows", type=Path, help="keep the recorded rows in this JSONL file (appended to)")
    parser.add_argument("--no-run", action="store_true", help="only print the summary of the rows in --rows")
    args = parser.parse_args()
    failed = 0
    if args.rows:
        rows_path = args.rows
        rows_path.touch()
    else:
        with tempfile.NamedTemporaryFile(prefix="bench-rows-", suffix=".jsonl", delete=False) as rows_file:
            rows_path = Path(rows_file.name)
    env = {**os.environ, "BENCH_ROWS": str(rows_path), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    load_before = os.getloadavg()[1]
    try:
        for script, *script_args in SCRIPTS:
            if args.no_run or (args.only and script != args.only):
                continue
            path = HERE / script
            if not path.exists():
                print(f"(skipping {script}: not present)")
                continue
            if args.quick and script in QUICK:
                script_args = QUICK[script]
            print(f"\n=== {script} {' '.join(script_args)}", flush=True)
            failed |= subprocess.run([sys.executable, str(path), *script_args], env=env).returncode != 0
        rows = [json.loads(line)["cells"] for line in rows_path.read_text().splitlines() if line.strip()]
        rows.sort(key=_section)  # stable: scripts run in parallel by hand still give the order
    finally:
        if not args.rows:
            rows_path.unlink(missing_ok=True)
    minutes = (time.monotonic() - started) / 60
    # Wall times on a shared machine depend on the other jobs: say how loaded it was (CPU times are
    # printed beside our medians for that reason).
    summary = markdown(rows) + (f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
                                f"5-min load average {load_before:.1f} at the start and {os.getloadavg()[1]:.1f} "
                                f"at the end, {minutes:.0f} min.\n")
    print("\n=== summary: every row, ours beside the reference, with the target\n")
    print(summary, flush=True)
    if args.markdown:
        args.markdown.write_text(summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
