"""The pytest plugin end to end: a small real series (path pin, GNU-style patches), real pytest runs.

Each scenario runs ``python -m pytest`` in a subprocess on a temporary ast_tests directory and
checks the exit code and the per-patch table, so what is tested is what ``make test-offline`` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CALC_V0 = "def clamp(x, lo, hi):\n    return x\n\n\nLIMIT = 3\n"
CALC_V1 = "def clamp(x, lo, hi):\n    return max(lo, min(hi, x))\n\n\nLIMIT = 3\n\n\ndef widen(n):\n    return n * 2\n"
CALC_V2 = "def clamp(x, lo, hi):\n    return x\n\n\nLIMIT = 3\n\n\ndef widen(n):\n    return n * 2\n"  # breaks 0001


def _diff(tmp: Path, rel: str, old: str, new: str) -> str:
    a, b = tmp / "diff-a", tmp / "diff-b"
    for root, text in ((a, old), (b, new)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = subprocess.run(
        ["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", str(a / rel), str(b / rel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    return "Subject: test patch\n\n---\n" + proc.stdout


@pytest.fixture(scope="module")
def store_cache(tmp_path_factory) -> Path:
    """One engine cache for all scenarios of this module (the runs share the same upstream)."""
    return tmp_path_factory.mktemp("materialize-cache")


@pytest.fixture
def workspace(tmp_path, store_cache):
    (tmp_path / "cache").symlink_to(store_cache, target_is_directory=True)
    up = tmp_path / "up" / "demo"
    (up / "demo").mkdir(parents=True)
    (up / "demo" / "__init__.py").write_text("")
    (up / "demo" / "calc.py").write_text(CALC_V0)
    patches = tmp_path / "patches" / "tt-metal"
    patches.mkdir(parents=True)
    (patches / "0001-clamp.patch").write_text(_diff(tmp_path, "demo/calc.py", CALC_V0, CALC_V1))
    (patches / "0002-unclamp.patch").write_text(_diff(tmp_path / "d2", "demo/calc.py", CALC_V1, CALC_V2))
    tests = tmp_path / "ast_tests"
    tests.mkdir()
    (tests / "conftest.py").write_text('pytest_plugins = ["materialize.offline.plugin"]\n')
    series = tmp_path / "series" / "s.yaml"
    series.parent.mkdir()
    series.write_text(
        textwrap.dedent(
            """\
            version: 1
            patches_dir: ../patches
            tests_dir: ../ast_tests
            targets:
              tt-metal:
                pin: {kind: path, path: ../up/demo}
            patches:
              - patch: tt-metal/0001-clamp.patch
                target: tt-metal
                tests: [test_bound_by_series.py]
            """
        )
    )
    return tmp_path


def _add_second_patch(ws: Path) -> None:
    series = ws / "series" / "s.yaml"
    series.write_text(series.read_text() + "  - patch: tt-metal/0002-unclamp.patch\n    target: tt-metal\n")


def _run(ws: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    for name, body in files.items():
        (ws / "ast_tests" / name).write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MATERIALIZE_CACHE=str(ws / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--series", str(ws / "series" / "s.yaml"),
         *args, str(ws / "ast_tests")],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


GOOD = """
    from materialize.offline import extract

    def test_clamps(tree):
        assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 5
"""


def test_patched_passes_and_control_fails_by_assertion(workspace):
    proc = _run(workspace, {"test_bound_by_series.py": GOOD})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    row = _row(proc.stdout, "0001-clamp")
    assert row.split()[3:7] == ["1/1", "1/1", "0", "-"] and row.endswith("ok")


def test_control_that_passes_is_an_error(workspace):
    blind = """
        from materialize.offline import extract

        def test_limit(tree):
            assert extract(tree, "demo/calc.py", "LIMIT").LIMIT == 3
    """
    proc = _run(workspace, {"test_bound_by_series.py": blind})
    assert proc.returncode == 1
    assert "CONTROL PASSED" in proc.stdout and "cannot see the patch" in proc.stdout
    assert _row(proc.stdout, "0001-clamp").endswith("FAIL")


def test_weak_control_must_be_declared(workspace):
    weak = """
        import pytest
        from materialize.offline import extract

        {marker}
        def test_widen(tree):
            assert extract(tree, "demo/calc.py", "widen").widen(2) == 4
    """
    undeclared = _run(workspace, {"test_bound_by_series.py": weak.format(marker="")})
    assert undeclared.returncode == 1
    assert "WEAK CONTROL" in undeclared.stdout and "'widen' is not defined" in undeclared.stdout
    declared = _run(workspace, {"test_bound_by_series.py": weak.format(marker='@pytest.mark.weak_control("new")')})
    assert declared.returncode == 0, declared.stdout
    assert _row(declared.stdout, "0001-clamp").split()[5] == "1"


def test_control_must_fail_by_assertion_not_by_error(workspace):
    crash = """
        from materialize.offline import extract

        def test_crash(tree):
            ns = extract(tree, "demo/calc.py", "clamp")
            assert ns.clamp(9, 0, 5) + ("" if ns.clamp(9, 0, 5) != 5 else 0) == 5
    """
    proc = _run(workspace, {"test_bound_by_series.py": crash})
    assert proc.returncode == 1
    assert "CONTROL ERRORED" in proc.stdout and "TypeError" in proc.stdout


def test_marker_binding_and_unbound_tests(workspace):
    marked = """
        import pytest
        from materialize.offline import extract

        @pytest.mark.patch("0001-clamp")
        def test_marked(tree):
            assert extract(tree, "demo/calc.py", "clamp").clamp(-1, 0, 5) == 0
    """
    proc = _run(workspace, {"test_bound_by_series.py": GOOD, "test_marked.py": marked})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _row(proc.stdout, "0001-clamp").split()[3:5] == ["2/2", "2/2"]
    unbound = "def test_unbound(tree):\n    assert tree\n"
    proc = _run(workspace, {"test_unbound.py": unbound})
    assert proc.returncode != 0 and "bound to no patch" in proc.stdout + proc.stderr


UNCLAMPED = """
    import pytest
    from materialize.offline import extract

    @pytest.mark.patch("0002-unclamp")
    def test_unclamped(tree):
        assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 9
"""


def test_at_tip_catches_a_later_patch_breaking_an_earlier_one(workspace):
    _add_second_patch(workspace)
    files = {"test_bound_by_series.py": GOOD, "test_unclamped.py": UNCLAMPED}
    at_patch = _run(workspace, files)
    assert at_patch.returncode == 0, at_patch.stdout
    at_tip = _run(workspace, files, "--at", "tip")
    assert at_tip.returncode == 1
    assert "test_clamps[tip]" in at_tip.stdout
    assert "broken by 0002-unclamp (position 2)" in at_tip.stdout
    assert _row(at_tip.stdout, "0001-clamp").split()[3:7] == ["1/1", "1/1", "0", "0/1"]
    assert _row(at_tip.stdout, "0002-unclamp").split()[3:7] == ["1/1", "1/1", "0", "1/1"]


# A patch no arm ran against is untested, not passed ----------------------------------------------

def test_a_patch_without_tests_fails_a_run_of_the_whole_folder(workspace):
    _add_second_patch(workspace)
    proc = _run(workspace, {"test_bound_by_series.py": GOOD})
    assert proc.returncode == 1, proc.stdout
    assert _row(proc.stdout, "0002-unclamp").endswith("NO TESTS")
    assert "s.yaml:11: 0002-unclamp: it lists no tests" in proc.stdout and "the patch is untested" in proc.stdout
    # a run of one file validates only the patches that file is listed for
    only = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--series", str(workspace / "series" / "s.yaml"),
         str(workspace / "ast_tests" / "test_bound_by_series.py")],
        cwd=workspace, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", MATERIALIZE_CACHE=str(workspace / "cache")),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert only.returncode == 0, only.stdout + only.stderr
    # so does a run that deselects tests by choice (-k): a subset, not the suite
    chosen = _run(workspace, {"test_bound_by_series.py": GOOD}, "-k", "patched")
    assert chosen.returncode == 0, chosen.stdout


def test_listed_tests_that_never_use_the_tree_leave_the_patch_untested(workspace):
    """The listed file is collected and passes, but without `tree` it has no patched or control arm:
    the patch's code was never looked at (it was shown as "not run" and the session exited 0)."""
    _list_tests(workspace, "test_no_tree.py")
    proc = _run(workspace, {"test_no_tree.py": "def test_x():\n    assert True\n"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _row(proc.stdout, "0001-clamp").endswith("not run")
    assert "0001-clamp: no patched/control arm ran against it" in proc.stdout


def test_heavy_module_in_sys_modules_fails_the_session(workspace):
    leak = """
        import sys
        import types
        from materialize.offline import extract

        def test_leaks(tree):
            sys.modules.setdefault("torch", types.ModuleType("torch"))
            assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 5
    """
    proc = _run(workspace, {"test_bound_by_series.py": leak})
    assert proc.returncode == 1
    assert "heavy modules in sys.modules (imported during the session): torch" in proc.stdout
    assert "torch first appeared in sys.modules during ast_tests/test_bound_by_series.py::test_leaks[patched]" in (
        proc.stdout
    )


def test_dirs_tree_source_applies_through_the_one_applier(workspace):
    proc = _run(
        workspace, {"test_bound_by_series.py": GOOD}, "--tree-source", "dirs", "--base-tree",
        f"tt-metal={workspace / 'up' / 'demo'}",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tree source: dirs" in proc.stdout
    assert not list((workspace / "up").rglob("__pycache__"))


def _row(stdout: str, name: str) -> str:
    rows = [line.rstrip() for line in stdout.splitlines() if f" {name} " in line and line[:1].isdigit()]
    assert rows, stdout
    return rows[0]


def test_cli_front_runs_the_same_suite(workspace, monkeypatch, capfd):
    from materialize.offline.cli import run_offline

    (workspace / "ast_tests" / "test_bound_by_series.py").write_text(textwrap.dedent(GOOD))
    monkeypatch.setenv("MATERIALIZE_CACHE", str(workspace / "cache"))
    assert run_offline(workspace / "series" / "s.yaml", at="tip") == 0
    out = capfd.readouterr().out
    assert _row(out, "0001-clamp").split()[3:7] == ["1/1", "1/1", "0", "1/1"]


def test_an_error_on_the_way_is_not_a_failing_control(workspace):
    """An assert raised outside the test's own code (extractor, kept code) makes the control *errored*."""
    inner = """
        from materialize.offline import extract

        def test_inner(tree):
            ns = extract(tree, "demo/calc.py", "clamp")
            if ns.clamp(9, 0, 5) != 5:
                exec(compile("assert False, 'an assert inside kept code'", "demo/kept.py", "exec"))
            assert ns.clamp(9, 0, 5) == 5
    """
    proc = _run(workspace, {"test_bound_by_series.py": inner})
    assert proc.returncode == 1, proc.stdout
    assert "CONTROL ERRORED" in proc.stdout and "demo/kept.py:1" in proc.stdout
    row = _row(proc.stdout, "0001-clamp").split()
    assert row[3:8] == ["1/1", "0/1", "0", "-", "1"] and row[-1] == "FAIL"
    assert "control errored (AssertionError at demo/kept.py:1" in proc.stdout


def test_a_declared_pytest_raises_counts_and_tip_names_the_patch_that_stops_it(workspace):
    """"DID NOT RAISE" is the test's own failure; at tip it names the breaking patch (no INTERNALERROR)."""
    _add_second_patch(workspace)
    raises = """
        import pytest
        from materialize.offline import extract

        def test_refuses_none(tree):
            with pytest.raises(TypeError):
                extract(tree, "demo/calc.py", "clamp").clamp(None, 0, 5)
    """
    files = {"test_bound_by_series.py": raises, "test_unclamped.py": UNCLAMPED}
    at_patch = _run(workspace, files)
    assert at_patch.returncode == 0, at_patch.stdout + at_patch.stderr
    assert _row(at_patch.stdout, "0001-clamp").split()[3:8] == ["1/1", "1/1", "0", "-", "0"]
    at_tip = _run(workspace, files, "--at", "tip")
    assert at_tip.returncode == 1, at_tip.stdout + at_tip.stderr
    assert "INTERNALERROR" not in at_tip.stdout + at_tip.stderr
    assert "broken by 0002-unclamp (position 2)" in at_tip.stdout and "DID NOT RAISE" in at_tip.stdout


def test_results_are_written_as_json(workspace):
    import json

    proc = _run(workspace, {"test_bound_by_series.py": GOOD})
    assert proc.returncode == 0, proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.startswith("results: "))
    data = json.loads(Path(line.removeprefix("results: ")).read_text())
    assert data["version"] == 1 and data["at"] == "patch" and data["exitstatus"] == 0
    (patch,) = data["patches"]
    assert (patch["position"], patch["name"], patch["target"], patch["status"]) == (1, "0001-clamp", "tt-metal", "ok")
    assert patch["arms"]["control"] == {"ok": 1, "total": 1, "errored": 0, "weak": 0}
    outcomes = {(r["test"], r["arm"], r["outcome"]) for r in patch["results"]}
    assert outcomes == {("test_clamps[patched]", "patched", "passed"), ("test_clamps[control]", "control", "failed")}
    off = _run(workspace, {}, "--offline-results", "")
    assert "results: " not in off.stdout


def test_a_setup_error_is_recorded_as_errored(workspace):
    broken = """
        import pytest

        @pytest.fixture
        def built(tree):
            raise RuntimeError("cannot build")

        def test_needs_built(built):
            assert built
    """
    proc = _run(workspace, {"test_bound_by_series.py": broken})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    row = _row(proc.stdout, "0001-clamp").split()
    assert row[3:8] == ["0/1", "0/1", "0", "-", "2"], row


def test_any_target_name(workspace):
    """Targets are named by the series alone: the same suite runs, with its control, on `linux`."""
    series = workspace / "series" / "s.yaml"
    series.write_text(series.read_text().replace("tt-metal:\n", "linux:\n").replace("target: tt-metal", "target: linux"))
    assert "tt-metal:" not in series.read_text()
    proc = _run(workspace, {"test_bound_by_series.py": GOOD})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
    row = _row(proc.stdout, "0001-clamp")
    assert row.split()[3:7] == ["1/1", "1/1", "0", "-"] and row.endswith("ok")


# A bound test that did not run, or ran without being able to fail, is not a pass ------------------

NOT_RUN = {
    "skipped in the patched arm": """
        import pytest
        from materialize.offline import extract

        def test_clamps(tree, request):
            if request.node.name.endswith("[patched]"):
                pytest.skip("flaky")
            assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 5
    """,
    "marked skip": """
        import pytest
        from materialize.offline import extract

        @pytest.mark.skip(reason="later")
        def test_clamps(tree):
            assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 5
    """,
    "marked xfail and failing when patched": """
        import pytest
        from materialize.offline import extract

        @pytest.mark.xfail(reason="known")
        def test_clamps(tree):
            assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 6
    """,
    "imperative xfail": """
        import pytest
        from materialize.offline import extract

        def test_clamps(tree):
            if extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) != 6:
                pytest.xfail("not yet")
    """,
}


@pytest.mark.parametrize("case", sorted(NOT_RUN))
def test_a_bound_test_that_did_not_really_run_fails_the_session(workspace, case):
    proc = _run(workspace, {"test_bound_by_series.py": NOT_RUN[case]})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _row(proc.stdout, "0001-clamp").endswith("FAIL"), proc.stdout


HEAVY_TRICKS = {
    "importlib": "importlib.import_module('vllm')",
    "__import__": "__import__('vllm.sub')",
    "import then forget": "import vllm; sys.modules.pop('vllm', None)",
    "caught ImportError": "exec('try:\\n    import vllm\\nexcept ImportError:\\n    pass')",
}


@pytest.mark.parametrize("case", sorted(HEAVY_TRICKS))
def test_any_import_of_a_heavy_module_fails_the_session(workspace, case):
    """A fake `vllm` is importable from the tests' folder; loading it in any way is refused and recorded,
    even when the test catches the error or removes the module from sys.modules afterwards."""
    fake = workspace / "ast_tests" / "vllm"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "sub.py").write_text("")
    body = f"""
        import importlib
        import sys
        from materialize.offline import extract

        def test_clamps(tree):
            try:
                {HEAVY_TRICKS[case]}
            except ImportError:
                pass
            assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 5
    """
    proc = _run(workspace, {"test_bound_by_series.py": body})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "vllm" in proc.stdout and "test_clamps[patched]" in proc.stdout, proc.stdout


def _list_tests(ws: Path, refs: str) -> None:
    series = ws / "series" / "s.yaml"
    series.write_text(series.read_text().replace("tests: [test_bound_by_series.py]", f"tests: [{refs}]"))


@pytest.mark.parametrize(
    ("refs", "files"),
    [
        ("test_bound_by_series.py::test_renamed", {"test_bound_by_series.py": GOOD}),
        ("check_clamp.py", {"check_clamp.py": GOOD.replace("def test_clamps(tree):",
                                                           "@__import__('pytest').mark.patch('0001-clamp')\n"
                                                           "    def test_clamps(tree):")}),
    ],
    ids=["renamed-function", "file-pytest-does-not-collect"],
)
def test_a_listed_test_that_is_not_collected_fails_the_session(workspace, refs, files):
    _list_tests(workspace, refs)
    proc = _run(workspace, files)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "was not collected" in proc.stdout and refs in proc.stdout, proc.stdout


def test_a_marker_must_name_its_patch_exactly(workspace):
    by_position = GOOD.replace("def test_clamps(tree):", "@__import__('pytest').mark.patch('1')\n    def test_clamps(tree):")
    _list_tests(workspace, "")
    proc = _run(workspace, {"test_marked.py": by_position})
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "must name the patch exactly" in proc.stdout + proc.stderr


def test_an_extract_error_the_control_caught_is_not_a_failing_control(workspace):
    """`try: … except ExtractError:` then an assertion: the control failed because extraction failed."""
    masked = """
        from materialize.offline import extract
        from materialize.offline.errors import ExtractError

        def test_clamps(tree):
            ns = extract(tree, "demo/calc.py", "clamp")
            try:
                if ns.clamp(9, 0, 5) != 5:
                    extract(tree, "demo/calc.py", "LIMIT.x")  # refused: LIMIT is not a class
                value = ns.clamp(9, 0, 5)
            except ExtractError:
                value = None
            assert value == 5
    """
    proc = _run(workspace, {"test_bound_by_series.py": masked})
    assert proc.returncode == 1, proc.stdout
    assert "CONTROL ERRORED" in proc.stdout and "caught by the test" in proc.stdout


def test_a_missing_definition_the_control_caught_is_a_weak_control(workspace):
    dressed = """
        import pytest
        from materialize.offline import MissingDefinition, extract

        {marker}
        def test_widen(tree):
            try:
                widen = extract(tree, "demo/calc.py", "widen").widen
            except MissingDefinition:
                widen = None
            assert widen is not None and widen(2) == 4
    """
    undeclared = _run(workspace, {"test_bound_by_series.py": dressed.format(marker="")})
    assert undeclared.returncode == 1, undeclared.stdout
    assert "WEAK CONTROL" in undeclared.stdout
    declared = _run(workspace, {"test_bound_by_series.py": dressed.format(marker='@pytest.mark.weak_control("new")')})
    assert declared.returncode == 0, declared.stdout


# A control counts only when the TREE makes its assertion fail (red team, C1-C3) -------------------

def _repatch(ws: Path, old: str, new: str) -> None:
    """Upstream calc.py is ``old`` and 0001-clamp turns it into ``new``."""
    (ws / "up" / "demo" / "demo" / "calc.py").write_text(old)
    (ws / "patches" / "tt-metal" / "0001-clamp.patch").write_text(_diff(ws / "re", "demo/calc.py", old, new))


SIGNATURE_V1 = "def clamp(x, lo, hi, *, wrap=False):\n    return max(lo, min(hi, x))\n\n\nLIMIT = 3\n"

CAUGHT = {
    # the patch adds a keyword: the control's TypeError only says the keyword is not there yet
    "signature TypeError": ("""
        from materialize.offline import extract

        def test_clamps(tree):
            try:
                value = extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5, wrap=False)
            except TypeError:
                value = None
            assert value == 5
    """, "TypeError"),
    # an IndexError the test's own code raised on the control's value, swallowed
    "own IndexError": ("""
        from materialize.offline import extract

        def test_clamps(tree):
            try:
                value = [0, 1, 2, 3, 4, 5][extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5)]
            except Exception:
                value = None
            assert value == 5
    """, "IndexError"),
    # an implicit error inside the kept code (a KeyError), swallowed by contextlib.suppress
    "KeyError in kept code": ("""
        import contextlib
        from materialize.offline import extract

        def test_clamps(tree):
            value = None
            with contextlib.suppress(KeyError):
                value = extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5)
            assert value == 5
    """, "KeyError"),
    # the watcher switched off, then the error swallowed
    "trace removed": ("""
        import sys
        from materialize.offline import extract

        def test_clamps(tree):
            sys.settrace(None)
            try:
                value = [0, 1, 2, 3, 4, 5][extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5)]
            except IndexError:
                value = None
            assert value == 5
    """, "RuntimeError"),
}


@pytest.mark.parametrize("case", sorted(CAUGHT))
def test_an_error_the_control_caught_is_not_a_failing_control(workspace, case):
    """Catching an error on the way and then asserting does not turn an errored control into a proven one."""
    if case == "signature TypeError":
        _repatch(workspace, CALC_V0, SIGNATURE_V1)
    elif case == "KeyError in kept code":
        _repatch(workspace, "def clamp(x, lo, hi):\n    return {0: 0}[x]\n", CALC_V1)
    body, name = CAUGHT[case]
    proc = _run(workspace, {"test_bound_by_series.py": body})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "CONTROL ERRORED" in proc.stdout and f"raised {name}" in proc.stdout, proc.stdout
    assert "(caught by the test)" in proc.stdout
    row = _row(proc.stdout, "0001-clamp").split()
    assert row[3:8] == ["1/1", "0/1", "0", "-", "1"] and row[-1] == "FAIL", row


def test_a_refusal_the_control_tree_raises_and_the_test_catches_is_behaviour(workspace):
    """The old code said no (an explicit `raise` in the tree): the test observed the tree's answer."""
    _repatch(workspace, 'def clamp(x, lo, hi):\n    if x > hi:\n        raise ValueError("out of range")\n    return x\n',
             CALC_V1)
    body = """
        import pytest
        from materialize.offline import extract

        def test_clamps(tree):
            clamp = extract(tree, "demo/calc.py", "clamp").clamp
            with pytest.raises(TypeError):
                clamp(None, 0, 5)  # expected in both arms: not an error on the way
            try:
                value = clamp(9, 0, 5)
            except ValueError:
                value = None
            assert value == 5
    """
    proc = _run(workspace, {"test_bound_by_series.py": body})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _row(proc.stdout, "0001-clamp").split()[3:8] == ["1/1", "1/1", "0", "-", "0"]


def test_a_test_may_not_ask_which_arm_it_runs_in(workspace):
    tautology = """
        def test_tautology(tree, offline_arm):
            assert offline_arm != "control"
    """
    proc = _run(workspace, {"test_bound_by_series.py": tautology})
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "test_tautology" in proc.stdout + proc.stderr and "offline_arm" in proc.stdout + proc.stderr
    assert "must not see which arm" in proc.stdout + proc.stderr
    # nor through a fixture of its own
    through = """
        import pytest

        @pytest.fixture
        def arm(offline_arm):
            return offline_arm

        def test_tautology(tree, arm):
            assert arm != "control"
    """
    proc = _run(workspace, {"test_bound_by_series.py": through})
    assert proc.returncode != 0 and "must not see which arm" in proc.stdout + proc.stderr


NOT_THE_TREE = {
    # the arm read another way than the fixture
    "node name": """
        def test_clamps(tree, request):
            assert "[control]" not in request.node.name
    """,
    "environment": """
        import os

        def test_clamps(tree):
            assert "[control]" not in os.environ["PYTEST_CURRENT_TEST"]
    """,
    # the test's own module state: the second run in the process fails, whatever the tree
    "module state": """
        _RUNS = []

        def test_clamps(tree):
            _RUNS.append(tree)
            assert len(_RUNS) == 1
    """,
    "state of another module": """
        import json

        def test_clamps(tree):
            json.__dict__.setdefault("_runs", []).append(tree)
            assert len(json._runs) == 1
    """,
}


@pytest.mark.parametrize("case", sorted(NOT_THE_TREE))
def test_a_control_that_fails_whatever_the_tree_is_not_proven(workspace, case):
    """The control's failure must be the tree's doing: run from the same process state with the
    patched tree in the control's place, the test must pass."""
    proc = _run(workspace, {"test_bound_by_series.py": NOT_THE_TREE[case]})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "CONTROL NOT CAUSED BY THE TREE" in proc.stdout, proc.stdout
    row = _row(proc.stdout, "0001-clamp").split()
    assert row[3:8] == ["1/1", "0/1", "0", "-", "1"] and row[-1] == "FAIL", row


TAMPERING = {
    # rt-failopen session 14: the test module replaces the plugin's judge, so a control failing whatever
    # the tree is (module state) is counted as proven
    "the probe's verdict": """
        import materialize.offline.plugin as plugin

        plugin._probe_failure = lambda item, call: None
        _RUNS = []

        def test_clamps(tree):
            _RUNS.append(tree)
            assert len(_RUNS) == 1
    """,
    # ... or the end-of-session check that every patch was exercised
    "the untested-patch check": """
        import materialize.offline.plugin as plugin

        plugin._OfflineState.untested_patches = lambda self, args: []

        def test_clamps():
            assert True
    """,
    "a code object": """
        import materialize.offline.plugin as plugin

        plugin._own_failure.__code__ = (lambda exc, test_dir: True).__code__

        def test_clamps(tree):
            raise AssertionError("anything")
    """,
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_a_test_that_replaces_the_plugins_judges_fails_the_session(workspace, case):
    proc = _run(workspace, {"test_bound_by_series.py": TAMPERING[case]})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the offline plugin's own code was replaced" in proc.stdout, proc.stdout


@pytest.mark.parametrize("where", ["control", "collection"])
def test_a_session_that_never_finishes_is_not_green(workspace, monkeypatch, capfd, where):
    """``os._exit(0)`` in a control (or at import of a test module) ends pytest with status 0 before
    the plugin's end-of-session checks run: the CLI front (and ``make test-offline``) needs the
    session's own seal, written last, and refuses a run without it."""
    from materialize.offline.cli import run_offline

    early = """
        import os
        from materialize.offline import extract

        def test_exits(tree, request):
            if "control" in request.node.name:
                os._exit(0)
            assert extract(tree, "demo/calc.py", "clamp").clamp(9, 0, 5) == 5
    """ if where == "control" else """
        import os
        os._exit(0)
    """
    (workspace / "ast_tests" / "test_bound_by_series.py").write_text(textwrap.dedent(early))
    monkeypatch.setenv("MATERIALIZE_CACHE", str(workspace / "cache"))
    assert run_offline(workspace / "series" / "s.yaml") == 1
    err = capfd.readouterr().err
    assert "the offline session did not finish" in err
