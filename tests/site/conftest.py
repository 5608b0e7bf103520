"""A small real project for the report: two targets, four patches (cleared / held / experimental, one
flag-gated with a banner, one applying at an offset), serving profiles, a ledger with valid and
invalid records, and a gate bisect driven through the bisect session API. Patches are real unified
diffs applied by the real engine into the test's own store."""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

sys.dont_write_bytecode = True

ATTENTION = "".join(f"# line {i}\n" for i in range(1, 21)) + "def sdpa(chunk):\n    return 'legacy'\n"
ATTENTION_STREAMING = ATTENTION.replace(
    "    return 'legacy'\n",
    "    import os\n    if os.environ.get('QWEN36_SDPA_STREAMING') == '1':\n"
    "        print('QWEN36_SDPA_STREAMING engaged')\n        return 'streaming'\n    return 'legacy'\n")
SCHEDULER = "def allow_async(prefix_caching):\n    return not prefix_caching\n"
SCHEDULER_FIXED = SCHEDULER.replace("return not prefix_caching", "return False  # <script>alert(1)</script>")
CHUNK = "def plan(start, end):\n    return [(start, end)]\n"

NAMES = ["0001-sdpa-streaming", "0002-chunk-plan", "0003-scheduler-sync", "0004-docs"]
STATUSES = {"0001-sdpa-streaming": "cleared", "0002-chunk-plan": "held", "0003-scheduler-sync": "experimental",
            "0004-docs": "experimental"}


def udiff(path: str, old: str | None, new: str) -> str:
    return "".join(difflib.unified_diff(
        [] if old is None else old.splitlines(keepends=True), new.splitlines(keepends=True),
        "/dev/null" if old is None else f"a/{path}", f"b/{path}"))


def profile(name: str, model_dir: Path, **vllm) -> dict:
    return {
        "version": 1, "description": f"{name} arm", "series": "../../series/default.yaml",
        "launcher": {"kind": "docker", "image": "ghcr.io/example/vllm-tt:0.33.0", "sources": "mounts"},
        # A local model whose chat template has no tool-call markup: serve reads the format from it.
        "model": {"path": str(model_dir), "served_name": "qwen3-8b"},
        "vllm": {"max_model_len": 8192, **vllm},
        "enable": ["0001-sdpa-streaming"] if name == "prod" else [],
        "env": {"TT_METAL_CACHE": "/var/cache/tt-metal"},
        "unverified": {"TT_METAL_CACHE": "tt-metal's compiled runtime, not in the pinned Python sources"},
        "devices": ["/dev/tenstorrent/by-id/card0"],
        "gates": [{"name": "models"}],
    }


@dataclass
class Project:
    root: Path
    series: Path

    def patch_sha(self, name: str) -> str:
        import hashlib

        path = next((self.root / "patches").rglob(f"{name}.patch"))
        return hashlib.sha256(path.read_bytes()).hexdigest()

    def prefix(self, n: int) -> list[dict]:
        return [{"name": name, "sha256": self.patch_sha(name)} for name in NAMES[:n]]

    def run(self, *args: str, check: bool = True) -> Ran:
        """The CLI in this process (cwd is the project root): the same entry point, without paying
        the interpreter and scipy start-up for every call."""
        from materialize.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        ran = Ran(code, out.getvalue(), err.getvalue())
        if check:
            assert code == 0, ran.stdout + ran.stderr
        return ran


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def write_project(root: Path) -> Project:
    (root / "upstream/tt-metal/models").mkdir(parents=True)
    (root / "upstream/tt-metal/models/attention.py").write_text(ATTENTION)
    (root / "upstream/plugin/vllm").mkdir(parents=True)
    (root / "upstream/plugin/vllm/scheduler.py").write_text(SCHEDULER)
    (root / "upstream/plugin/README").write_text("plugin\n")
    # The pinned vLLM's argparse: serve checks every option of a plan against it (issue 14.9).
    (root / "upstream/plugin/vllm/entrypoints").mkdir()
    (root / "upstream/plugin/vllm/entrypoints/cli_args.py").write_text(
        "import argparse\n\n\nclass FrontendArgs:\n    host: str | None = None\n    port: int = 8000\n\n\n"
        "def add_cli_args(parser):\n" + "".join(
            f"    parser.add_argument({opt!r})\n" for opt in (
                "--model", "--served-model-name", "--max-model-len", "--tensor-parallel-size", "--max-num-seqs"))
        + "".join(f"    parser.add_argument({opt!r}, action=argparse.BooleanOptionalAction)\n"
                  for opt in ("--enable-prefix-caching", "--async-scheduling")))
    patches = root / "patches"
    (patches / "tt-metal").mkdir(parents=True)
    (patches / "plugin").mkdir(parents=True)
    # 0001 was made against a tree with two lines fewer at the top: it applies at offset +2.
    shifted = ATTENTION.replace("# line 1\n# line 2\n", "")
    streaming = udiff("models/attention.py", shifted, ATTENTION_STREAMING.replace("# line 1\n# line 2\n", ""))
    (patches / "tt-metal/0001-sdpa-streaming.patch").write_text("SDPA streaming behind a flag.\n\n" + streaming)
    (patches / "tt-metal/0002-chunk-plan.patch").write_text(udiff("models/chunk_plan.py", None, CHUNK))
    (patches / "plugin/0003-scheduler-sync.patch").write_text(udiff("vllm/scheduler.py", SCHEDULER, SCHEDULER_FIXED))
    (patches / "plugin/0004-docs.patch").write_text(udiff("README", "plugin\n", "plugin\nsee docs/\n"))
    series = {
        "version": 1, "patches_dir": "../patches",
        "targets": {
            "tt-metal": {"pin": {"kind": "path", "path": "../upstream/tt-metal"}, "install_path": "/opt/tt"},
            "plugin": {"pin": {"kind": "path", "path": "../upstream/plugin"}, "install_path": "/opt/vllm"},
        },
        "patches": [
            {"patch": "tt-metal/0001-sdpa-streaming.patch", "target": "tt-metal", "status": "cleared",
             "flag": "QWEN36_SDPA_STREAMING", "banner": "QWEN36_SDPA_STREAMING engaged",
             "evidence": ["bench/runs/prod.jsonl:1", "bench/runs/missing.jsonl:9"],
             "why": "streaming SDPA for long prefill <b>not bold</b>", "tests": ["test_0001.py"]},
            {"patch": "tt-metal/0002-chunk-plan.patch", "target": "tt-metal", "status": "held",
             "why": "chunk plan, held until the resume fix lands"},
            {"patch": "plugin/0003-scheduler-sync.patch", "target": "plugin", "status": "experimental",
             "why": "sync scheduling"},
            {"patch": "plugin/0004-docs.patch", "target": "plugin", "why": "docs"},
        ],
    }
    (root / "series").mkdir()
    path = root / "series/default.yaml"
    path.write_text(yaml.safe_dump(series, sort_keys=False))
    (root / "serve/profiles").mkdir(parents=True)
    model = root / "models/plain-chat"
    model.mkdir(parents=True)
    (model / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}\n")
    (root / "serve/profiles/prod.yaml").write_text(yaml.safe_dump(profile("prod", model, max_num_seqs=8)))
    (root / "serve/profiles/prefix.yaml").write_text(
        yaml.safe_dump(profile("prefix", model, enable_prefix_caching=True, async_scheduling=False)))
    return Project(root, path)


def write_ledger(project: Project, ids: dict[int, str]) -> None:
    runs = project.root / "bench/runs"
    runs.mkdir(parents=True)
    good = {"schema": 1, "materialization_id": ids[1], "series_prefix": project.prefix(1), "host": "cfx-llm2",
            "time": "2026-11-29T10:00:00Z", "flags": {"QWEN36_SDPA_STREAMING": "1"}, "profile": "prod",
            "banners_seen": ["QWEN36_SDPA_STREAMING engaged"],
            "gates": [{"name": "stage3", "requests": 256, "failures": 0}],
            "metrics": [{"name": "makespan", "unit": "s", "samples": [294.7, 295.0, 294.6]}]}
    no_banner = {**good, "banners_seen": [], "time": "2026-11-29T11:00:00Z",
                 "gates": [{"name": "stage3", "requests": 32, "failures": 1}]}
    wrong_id = {**good, "materialization_id": "0123456789abcdef", "time": "2026-11-29T12:00:00Z"}
    base = {"schema": 1, "materialization_id": ids[0], "series_prefix": [], "host": "cfx-llm1",
            "time": "2026-11-28T09:00:00Z", "gates": [{"name": "stage3", "requests": 32, "failures": 0}]}
    lines = [json.dumps(r) for r in (good, no_banner, wrong_id, base)]
    lines.append(json.dumps({"schema": 1, "materialization_id": ids[1], "host": "x"}))  # schema error
    (runs / "prod.jsonl").write_text("\n".join(lines) + "\n")


def write_bisect(project: Project) -> None:
    """A gate bisect over positions 0..4 with real observations, saved through the bisect state store."""
    from materialize.bisect import session
    from materialize.bisect.state import StateStore

    state = session.start(series=str(project.series), n_patches=4, good=0, bad=4, gate="stage3", requests=32)
    session.observe(state, 2, source="run", requests=32, failures=0)
    session.observe(state, 3, source="run", requests=32, failures=3)
    session.observe(state, 2, source="run", requests=32, failures=0)
    StateStore(project.root / "work").save(state)


def write_offline(project: Project) -> Path:
    """The offline plugin's results file, written by its own serializer (one patch ran: one control
    test saw the patch, the other did not)."""
    from materialize.offline.report import ArmResult, Ledger, results_json
    from materialize.series import load_series

    series = load_series(project.series)
    ledger = Ledger()
    row = ledger.row(1, "0001-sdpa-streaming", "tt-metal")
    row.results += [ArmResult("test_a[patched]", "patched", ok=True),
                    ArmResult("test_b[patched]", "patched", ok=True),
                    ArmResult("test_a[control]", "control", ok=True, outcome="failed"),
                    ArmResult("test_b[control]", "control", ok=False, outcome="passed")]
    path = project.root / "build/offline/results.json"
    path.parent.mkdir(parents=True)
    path.write_text(results_json(ledger, series, ["test_b[control] passed: it cannot see its patch"],
                                 series=str(series.path), at="patch", tree_source="engine", exitstatus=1))
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    """The full project, with ledger, bisect and offline results; cwd is the project root."""
    from materialize.engine import materialize
    from materialize.series import load_series

    proj = write_project(tmp_path / "project")
    monkeypatch.chdir(proj.root)
    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    series = load_series(proj.series)
    ids = {k: materialize(series, upto=k).id for k in (0, 1)}
    write_ledger(proj, ids)
    write_bisect(proj)
    write_offline(proj)
    return proj
