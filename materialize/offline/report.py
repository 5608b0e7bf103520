"""The per-patch table ``make test-offline`` prints: did each patch's tests see their patch?

The same ledger is written as JSON (``results_json``) for the HTML report; its shape is documented
in ast_tests/README.md ("Results file").
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

ARMS = ("patched", "control", "tip")


@dataclass
class ArmResult:
    """One run of one test in one arm; ``ok`` means the arm's requirement was met.

    ``outcome`` is what the test did: ``passed``, ``failed`` (its own assertion), ``errored``
    (anything else: extraction, stubs, a NameError in kept code) or ``weak`` (a control that failed
    only because the definition is missing).
    """

    test: str
    arm: str
    ok: bool
    outcome: str = "passed"
    weak: bool = False
    detail: str = ""
    duration: float = 0.0


@dataclass
class PatchRow:
    position: int
    name: str
    target: str
    results: list[ArmResult] = field(default_factory=list)

    def count(self, arm: str) -> tuple[int, int]:
        runs = [r for r in self.results if r.arm == arm]
        return sum(r.ok for r in runs), len(runs)

    @property
    def weak(self) -> int:
        return sum(r.weak for r in self.results if r.arm == "control")

    @property
    def errored(self) -> int:
        return sum(r.outcome == "errored" for r in self.results)

    @property
    def duration(self) -> float:
        return sum(r.duration for r in self.results)

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)


class Ledger:
    """Collects arm results during the session, keyed by series position."""

    def __init__(self) -> None:
        self.rows: dict[int, PatchRow] = {}
        self.durations: dict[str, float] = defaultdict(float)

    def row(self, position: int, name: str, target: str) -> PatchRow:
        return self.rows.setdefault(position, PatchRow(position, name, target))

    def add_duration(self, nodeid: str, seconds: float) -> None:
        self.durations[nodeid] += seconds

    def render(self, series_patches, problems: list[str]) -> list[str]:
        """Lines of the table; patches without tests are listed so missing coverage is visible."""
        header = (
            "#",
            "patch",
            "target",
            "patched pass",
            "control fails",
            "weak",
            "tip pass",
            "errored",
            "time",
            "result",
        )
        rows = []
        for entry in series_patches:
            row = self.rows.get(entry.position)
            if row is None:
                result = "not run" if entry.spec.tests else "NO TESTS"
                rows.append(
                    (str(entry.position), entry.name, entry.target, "-", "-", "-", "-", "-", "-", result)
                )
                continue
            tip_ok, tip_n = row.count("tip")
            p_ok, p_n = row.count("patched")
            c_ok, c_n = row.count("control")
            result = "ok" if row.ok else "FAIL"
            rows.append(
                (
                    str(row.position),
                    row.name,
                    row.target,
                    f"{p_ok}/{p_n}",
                    f"{c_ok}/{c_n}",
                    str(row.weak),
                    f"{tip_ok}/{tip_n}" if tip_n else "-",
                    str(row.errored),
                    f"{row.duration:.2f}s",
                    result,
                )
            )
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
        lines += [fmt.format(*r) for r in rows]
        failures = [
            f"  {row.name} [{r.arm}] {r.test}: {r.detail}"
            for row in self.rows.values()
            for r in row.results
            if not r.ok
        ]
        weak_runs: dict[tuple[str, str, str], int] = {}
        for row in self.rows.values():
            for r in row.results:
                if r.weak:
                    key = (row.name, r.test.split("[", 1)[0], r.detail)
                    weak_runs[key] = weak_runs.get(key, 0) + 1
        weak = [
            f"  {name} {test} ({n} run{'s' if n > 1 else ''}): {detail}" for (name, test, detail), n in weak_runs.items()
        ]
        if weak:
            lines += ["weak controls (declared with @pytest.mark.weak_control):", *weak]
        if failures:
            lines += ["failures:", *failures]
        if problems:
            lines += ["errors:", *(f"  {p}" for p in problems)]
        return lines


def run_inputs(series) -> dict[str, str]:
    """What a run's results are about besides the patches (each row keeps its patch's sha256): the
    pins as the series states them and every file of the tests folder. The report shows a recorded
    run only while these and the patches up to a row are unchanged: results name the series by path,
    and green cells about last week's code are a fail-open (``site.collect.read_offline``)."""
    from materialize import digest

    pins = {name: spec.pin.model_dump(exclude_none=True) for name, spec in sorted(series.targets.items())}
    tests = digest.sha256(b"")
    root = series.resolve(series.spec.tests_dir)
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                tests.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return {"pins": digest.sha256(json.dumps(pins, sort_keys=True, default=str).encode()).hexdigest(),
            "tests": tests.hexdigest()}


def results_json(ledger: Ledger, series, problems: list[str], /, **meta) -> str:
    """The ledger as JSON: one object per series entry with its arms' counts and every run, the
    patch's sha256, and the run's other inputs (``run_inputs``)."""
    patches = []
    for entry in series.patches:
        row = ledger.rows.get(entry.position)
        results = row.results if row is not None else []
        arms = {}
        for arm in ARMS:
            runs = [r for r in results if r.arm == arm]
            if runs:
                arms[arm] = {
                    "ok": sum(r.ok for r in runs),
                    "total": len(runs),
                    "errored": sum(r.outcome == "errored" for r in runs),
                    "weak": sum(r.weak for r in runs),
                }
        status = ("ok" if row.ok else "FAIL") if row is not None else ("not run" if entry.spec.tests else "NO TESTS")
        patches.append(
            {
                "position": entry.position,
                "name": entry.name,
                "target": entry.target,
                "status": status,
                "sha256": entry.sha256(),
                "arms": arms,
                "results": [
                    {
                        "test": r.test,
                        "arm": r.arm,
                        "ok": r.ok,
                        "outcome": r.outcome,
                        "weak": r.weak,
                        "detail": r.detail,
                        "duration": round(r.duration, 4),
                    }
                    for r in results
                ],
            }
        )
    return json.dumps({"version": 1, **meta, "inputs": run_inputs(series), "problems": problems, "patches": patches},
                      indent=2) + "\n"
