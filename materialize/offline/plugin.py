"""pytest plugin: run each patch's offline tests on the patched tree AND on a control tree without it.

A test bound to a patch (listed in the series entry's ``tests``, or marked
``@pytest.mark.patch("0003-name")``) and using the ``tree`` fixture is run in arms:

- ``patched``: the tree at the prefix that ends with its patch; must pass.
- ``control``: the same prefix without that patch; must FAIL BY THE TEST'S OWN ASSERTION: an
  ``AssertionError`` (or pytest's ``Failed``, e.g. "DID NOT RAISE" of a ``pytest.raises`` it
  declared) raised by a frame of the test file itself, or by an assertion helper it called
  (pytest, ``numpy.testing``, ``unittest``, hypothesis). A control that passes means the test
  cannot see its patch, and is an error. A control that fails only because the extractor cannot
  find the definition (``MissingDefinition``) is *weak*, allowed only for tests marked
  ``@pytest.mark.weak_control("why")``. Anything else (an extractor error, a ``NameError`` in kept
  code, an ``assert`` inside the tree's code or the extractor) makes the control *errored*: reported
  as such, and the run fails. The failure must be the tree's doing: an error the test caught on the
  way counts as if uncaught (``_errors_on_the_way``, ``caught.py``); a test may not ask for
  ``offline_arm``; and the control's probe (``probe.py``), forked from the state the control starts
  in, must pass with the patched tree in the control's place.
- ``tip`` (with ``--at tip``): the full series; must pass, so a later patch that breaks an earlier
  patch's behaviour is caught.

At the end it prints one row per patch and fails the session if ttnn, torch or vllm was imported.
It also writes every arm's result as JSON (``--offline-results``, default
``build/offline/results.json`` under pytest's rootdir) for the HTML report.
Load with ``-p materialize.offline.plugin`` or ``pytest_plugins`` in a conftest.
"""

from __future__ import annotations

import importlib.machinery
import inspect
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

sys.dont_write_bytecode = True  # a __pycache__ in a source tree once broke a deployment

from materialize.offline import errors as offline_errors  # noqa: E402
from materialize.offline.caught import CaughtByTest  # noqa: E402
from materialize.offline.errors import ExtractError, MissingDefinition  # noqa: E402
from materialize.offline.extract import DEFAULT_HEAVY  # noqa: E402
from materialize.offline.probe import Probe  # noqa: E402
from materialize.offline.report import ArmResult, Ledger, results_json  # noqa: E402
from materialize.offline.trees import EngineSource, PatchDirSource, TreeSource  # noqa: E402
from materialize.series import PatchEntry, Series, load_series  # noqa: E402

_STATE_KEY = pytest.StashKey["_OfflineState"]()


class _OfflineState:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.ledger = Ledger()
        self.problems: list[str] = []
        self.series: Series | None = None
        self.by_file: dict[Path, PatchEntry] = {}
        self.by_test: dict[str, PatchEntry] = {}
        self.source: TreeSource | None = None
        self.heavy = tuple(DEFAULT_HEAVY) + tuple(config.getoption("offline_heavy") or ())
        self.preloaded = sorted(_heavy_modules(self.heavy))
        self.scratch: str | None = None
        self.seen_heavy: set[str] = set(self.preloaded)
        self.results_path: Path | None = None
        self.blocker = _HeavyImportRefused(self.heavy)
        self.reported_attempts = 0
        self.collected: set[tuple[Path, str]] = set()  # (file, function) of every test collected
        self.deselected = 0  # tests -k, -m, --lf ... left out: the session validates a subset by choice
        self.extract_errors: list[ExtractError] = []  # every ExtractError created, caught or not
        self.probe_tree: object | None = None  # set only in a control's probe process: the patched tree
        self.session: pytest.Session | None = None  # set when the session finishes (its checks ran)
        self.pid = os.getpid()  # the session's own process, not a control's forked probe
        self.judges = _judges_snapshot()  # the code that judges the arms, as loaded: a test must not replace it
        self.tampered: set[str] = set()

    def check_judges(self, where: str) -> None:
        """Record a problem when the code judging the arms was changed since the session started
        (`plugin._probe_failure = lambda *a: None`, `_OfflineState.untested_patches = ...`)."""
        now = _judges_snapshot()
        changed = sorted(name for name in self.judges.keys() | now.keys() if self.judges.get(name) != now.get(name))
        fresh = [name for name in changed if name not in self.tampered]
        if fresh:
            self.tampered.update(fresh)
            self.problems.append(
                f"the offline plugin's own code was replaced during {where} ({', '.join(fresh[:6])}): "
                "a test must not change how its arms are judged"
            )

    def unrun_refs(self, args: list[Path]) -> list[str]:
        """The series' ``tests:`` entries this session should have collected but did not (a renamed
        test function, a file pytest does not collect): that patch would silently lose its tests."""
        if self.series is None:
            return []
        tests_dir = self.series.resolve(self.series.spec.tests_dir)
        problems = []
        for entry in self.series.patches:
            for ref in entry.spec.tests:
                file_part, _, test_part = ref.partition("::")
                full = (tests_dir / file_part).resolve()
                if not full.exists() or not any(full == a or a in full.parents for a in args):
                    continue  # missing files are reported at load; files outside this run's paths are not expected
                if test_part:
                    found = (full, test_part) in self.collected
                else:
                    found = any(path == full for path, _ in self.collected)
                if not found:
                    problems.append(
                        f"{self.series.path}:{entry.line}: {entry.name}: test {ref!r} was not collected "
                        "(no such test function, or a file name pytest does not collect): the patch would run untested"
                    )
        return problems

    def untested_patches(self, args: list[Path]) -> list[str]:
        """Patches this session was asked to validate against which no arm ran.

        A run over the whole tests folder validates every patch of the series; a run over some files
        validates the patches whose ``tests:`` those files are. A patch is validated when its patched
        and control arms (and tip arm, ``--at tip``) ran: tests listed for it that never use the
        ``tree`` fixture pass without ever seeing its code, and a patch with no tests at all is not
        validated by anything. A session that deselected tests (``-k``, ``-m``, ``--lf``) validates a
        subset by the user's choice and is not held to this.
        """
        if self.series is None or self.deselected:
            return []
        tests_dir = self.series.resolve(self.series.spec.tests_dir).resolve()
        whole = any(a == tests_dir or a in tests_dir.parents for a in args)
        arms = ("patched", "control", "tip") if self.config.getoption("offline_at") == "tip" else ("patched", "control")
        problems = []
        for entry in self.series.patches:
            row = self.ledger.rows.get(entry.position)
            missing = [arm for arm in arms if row is None or not row.count(arm)[1]]
            if not missing:
                continue
            listed = [(tests_dir / ref.partition("::")[0]).resolve() for ref in entry.spec.tests]
            if not whole and not any(any(f == a or a in f.parents for a in args) for f in listed):
                continue
            if row is None and not entry.spec.tests:
                why = "it lists no tests (`tests:` is empty) and no test is marked for it"
            else:
                why = (f"no {'/'.join(missing)} arm ran against it (its tests never use the `tree` fixture, "
                       "or stopped before it)")
            problems.append(f"{self.series.path}:{entry.line}: {entry.name}: {why}: the patch is untested")
        return problems

    def load_series(self) -> Series:
        if self.series is None:
            option = self.config.getoption("offline_series")
            path = Path(option) if option else self.config.rootpath / "series" / "default.yaml"
            self.series = load_series(path)
            tests_dir = self.series.resolve(self.series.spec.tests_dir)
            for entry in self.series.patches:
                for ref in entry.spec.tests:
                    file_part, _, test_part = ref.partition("::")
                    full = (tests_dir / file_part).resolve()
                    if not full.exists():
                        self.problems.append(
                            f"{self.series.path}:{entry.line}: {entry.name}: test {ref!r} does not exist ({full})"
                        )
                    if test_part:
                        self.by_test[f"{full}::{test_part}"] = entry
                    else:
                        self.by_file[full] = entry
        return self.series

    def tree_source(self) -> TreeSource:
        if self.source is None:
            series = self.load_series()
            kind = self.config.getoption("offline_tree_source")
            bases = dict(_parse_base(b) for b in self.config.getoption("offline_base_tree") or ())
            env = os.environ.get("MATERIALIZE_OFFLINE_BASES")
            if env and not bases:
                bases = dict(_parse_base(b) for b in env.split(os.pathsep) if b)
            if kind == "dirs" or (kind == "auto" and bases):
                self.source = PatchDirSource(series, bases, name="dirs")
            else:
                try:
                    engine = EngineSource(series)
                except ImportError as exc:
                    raise pytest.UsageError(
                        "materialize.engine is not available and no --base-tree TARGET=DIR was given "
                        f"({exc}); pass unpacked upstream trees with --base-tree"
                    ) from None
                if kind == "overlay":
                    upstream = {t: engine.tree(0, t) for t in series.targets}
                    self.source = PatchDirSource(series, upstream, name="overlay")
                else:
                    self.source = engine
        return self.source

    def binding(self, definition) -> PatchEntry | None:
        series = self.load_series()
        marker = definition.get_closest_marker("patch")
        path = Path(str(definition.path)).resolve()
        entry = self.by_test.get(f"{path}::{definition.originalname}") or self.by_file.get(path)
        if marker is not None:
            marked = series.find(marker.args[0])
            if marker.args[0] not in (marked.name, marked.spec.patch, Path(marked.spec.patch).name):
                # a position or a prefix binds to whatever sits there after the series changes
                raise pytest.UsageError(
                    f"{definition.nodeid}: patch({marker.args[0]!r}) must name the patch exactly "
                    f"(e.g. {marked.name!r}), not by position or prefix"
                )
            if entry is not None and entry is not marked:
                raise pytest.UsageError(
                    f"{definition.nodeid}: marked patch({marker.args[0]!r}) but the series lists it under {entry.name}"
                )
            return marked
        return entry


_JUDGES = (
    "materialize.offline.plugin", "materialize.offline.probe", "materialize.offline.caught",
    "materialize.offline.report", "materialize.offline.errors",
)  # fmt: skip
"""The modules whose code decides whether an arm proved anything."""


def _judges_snapshot() -> dict[str, object]:
    """Every function and class member of the judging modules, by identity and code object: a
    rebinding (`module.f = ...`, `Class.method = ...`) or a replaced ``__code__`` shows as a change."""
    out: dict[str, object] = {}
    for modname in _JUDGES:
        module = sys.modules.get(modname)
        if module is None:
            continue
        for name, value in list(vars(module).items()):
            members = vars(value).items() if isinstance(value, type) and value.__module__ == modname else ()
            for key, item in [(name, value), *((f"{name}.{k}", v) for k, v in members)]:
                code = getattr(item, "__code__", None)
                if callable(item) or code is not None:
                    out[f"{modname}.{key}"] = (id(item), id(code))
    observers = getattr(sys.modules.get("materialize.offline.errors"), "OBSERVERS", None)
    out["materialize.offline.errors.OBSERVERS[]"] = tuple(id(o) for o in observers or ())
    return out


def _parse_base(text: str) -> tuple[str, Path]:
    target, sep, directory = text.partition("=")
    if not sep:
        raise pytest.UsageError(f"--base-tree expects TARGET=DIR, got {text!r}")
    return target, Path(directory)


def _heavy_modules(heavy: tuple[str, ...]) -> set[str]:
    return {m for m in sys.modules if m.split(".")[0] in heavy}


class _HeavyImportRefused:
    """First on ``sys.meta_path`` for the session: loading any heavy module, by an import statement,
    ``__import__`` or ``importlib``, is refused with ImportError and recorded, so the session fails even
    when the test catches the error or removes the module from ``sys.modules`` afterwards. Finding a
    spec alone (``importlib.util.find_spec``, an availability probe) loads nothing and is not recorded."""

    def __init__(self, heavy: tuple[str, ...]) -> None:
        self.heavy = heavy
        self.attempts: list[str] = []

    def find_spec(self, name: str, path=None, target=None):  # noqa: ARG002 - the finder protocol
        if name.split(".")[0] in self.heavy:
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        self.attempts.append(spec.name)
        raise ImportError(f"offline tests never import {spec.name} (heavy: {', '.join(self.heavy)})", name=spec.name)

    def exec_module(self, module) -> None:  # pragma: no cover - create_module always refuses
        raise ImportError(f"offline tests never import {module.__name__}")


def _state(config: pytest.Config) -> _OfflineState:
    return config.stash[_STATE_KEY]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("materialize-offline", "offline patch tests (patched vs control)")
    group.addoption(
        "--series", dest="offline_series", default=None, help="series YAML (default series/default.yaml)"
    )
    group.addoption(
        "--at",
        dest="offline_at",
        choices=("patch", "tip"),
        default="patch",
        help="'tip' also re-runs every patch's tests on the full series",
    )
    group.addoption(
        "--tree-source",
        dest="offline_tree_source",
        choices=("auto", "engine", "overlay", "dirs"),
        default="auto",
        help="engine: every prefix from the store (default); overlay: upstream from the store + the series "
        "applied into overlay directories; dirs: unpacked directories (--base-tree) + the same applier",
    )
    group.addoption(
        "--base-tree",
        dest="offline_base_tree",
        action="append",
        default=[],
        help="TARGET=DIR of an unpacked upstream",
    )
    group.addoption(
        "--offline-results",
        dest="offline_results",
        default="build/offline/results.json",
        help="where to write the per-patch results as JSON (relative to the rootdir; '' = do not write)",
    )
    group.addoption(
        "--heavy", dest="offline_heavy", action="append", default=[], help="another package never to import"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "patch(name): bind this test to a series entry (patched + control runs)"
    )
    config.addinivalue_line(
        "markers", "weak_control(reason): the control may fail only because the patched definition is missing"
    )
    state = config.stash[_STATE_KEY] = _OfflineState(config)
    sys.meta_path.insert(0, state.blocker)
    offline_errors.OBSERVERS.append(state.extract_errors.append)
    state.judges = _judges_snapshot()  # with the plugin's own observer in place
    if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
        # hypothesis caches into ./.hypothesis by default: never write into the checkout
        state.scratch = tempfile.mkdtemp(prefix="materialize-offline-hypothesis-")
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = state.scratch


def pytest_itemcollected(item: pytest.Item) -> None:
    state = _state(item.config)
    state.collected.add((Path(str(item.path)).resolve(), getattr(item, "originalname", item.name)))


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        _state(items[0].config).deselected += len(items)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:  # noqa: ARG001
    """If the tests use hypothesis: no example database in the repo, no deadlines, reproducible runs.

    Done here, not at configure time, so sessions that never import hypothesis do not pay for it.
    """
    hypothesis = sys.modules.get("hypothesis")
    if hypothesis is not None:
        hypothesis.settings.register_profile("materialize-offline", database=None, deadline=None, derandomize=True)
        hypothesis.settings.load_profile("materialize-offline")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tree" not in metafunc.fixturenames:
        return
    state = _state(metafunc.config)
    entry = state.binding(metafunc.definition)
    if entry is None:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: uses the 'tree' fixture but is bound to no patch; list its file under "
            "the patch's `tests:` in the series or mark it @pytest.mark.patch('NNNN-name')"
        )
    _refuse_arm_readers(metafunc)
    arms = ["patched", "control"]
    if metafunc.config.getoption("offline_at") == "tip":
        arms.append("tip")
    metafunc.parametrize("offline_arm", arms, indirect=True)


def _refuse_arm_readers(metafunc: pytest.Metafunc) -> None:
    """A test must tell the trees apart by their code, never by the name of the arm it runs in.

    ``assert offline_arm != "control"`` fails every control by the test's own assertion without ever
    looking at the tree. The test function and every fixture it uses, except the plugin's ``tree``,
    are refused when they ask for ``offline_arm`` (other ways of reading the arm, the node's name or
    ``PYTEST_CURRENT_TEST``, are caught by the control's probe: see ``_Probe``).
    """
    readers = []
    if "offline_arm" in inspect.signature(metafunc.function).parameters:
        readers.append(f"the test {metafunc.definition.originalname}()")
    for name in metafunc.fixturenames:
        for fixturedef in metafunc._arg2fixturedefs.get(name, ()):
            ours = name == "tree" and getattr(fixturedef.func, "__module__", None) == __name__
            if "offline_arm" in fixturedef.argnames and not ours:
                readers.append(f"its fixture {name!r}")
    if readers:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: {' and '.join(readers)} ask for `offline_arm`: a test must not see "
            "which arm it runs in (an assertion on the arm's name fails every control without looking at the "
            "tree); tell the trees apart by their code"
        )


@pytest.fixture
def offline_arm(request: pytest.FixtureRequest) -> str:
    """Which arm this run is: patched, control or tip. Only ``tree`` may use it (see ``_refuse_arm_readers``)."""
    return request.param


@pytest.fixture
def patch_entry(request: pytest.FixtureRequest) -> PatchEntry:
    """The series entry the test is bound to."""
    entry = _state(request.config).binding(request.node)
    assert entry is not None
    return entry


@pytest.fixture
def tree(request: pytest.FixtureRequest, offline_arm: str, patch_entry: PatchEntry):
    """The bound patch's target tree for this arm (read from the store; never a hard-coded path)."""
    state = _state(request.config)
    if state.probe_tree is not None and offline_arm == "control":
        return state.probe_tree  # the probe: the control's run with the patched tree in its place
    series = state.load_series()
    position = {
        "patched": patch_entry.position,
        "control": patch_entry.position - 1,
        "tip": len(series.patches),
    }[offline_arm]
    return state.tree_source().tree(position, patch_entry.target)


# Frames an assertion helper may add after the test's own frame (np.testing.assert_allclose,
# pytest.raises' "DID NOT RAISE", unittest's assert*, hypothesis re-raising the minimal example).
_ASSERTION_HELPERS = tuple(
    f"{os.sep}{part}{os.sep}" for part in ("_pytest", os.path.join("numpy", "testing"), "unittest", "hypothesis")
)


def _is_test_frame(filename: str, test_dir: Path) -> bool:
    try:
        return Path(filename).resolve().parent == test_dir
    except (OSError, ValueError):
        return False


def _own_failure(exc: BaseException, test_dir: Path) -> bool:
    """True if ``exc`` is the test's own failed assertion, not an error on the way to it.

    An ``AssertionError`` (or pytest's ``Failed``) counts only when the innermost frame of the
    test's directory is followed by nothing but assertion-helper frames: an ``assert`` inside the
    extractor or inside the tree's kept code is an internal error, not the test looking and seeing.
    """
    if isinstance(exc, BaseExceptionGroup):
        return bool(exc.exceptions) and all(_own_failure(e, test_dir) for e in exc.exceptions)
    if not isinstance(exc, AssertionError | pytest.fail.Exception):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    own = [i for i, frame in enumerate(frames) if _is_test_frame(frame.filename, test_dir)]
    if not own:
        return False
    return all(any(h in frame.filename for h in _ASSERTION_HELPERS) for frame in frames[own[-1] + 1 :])


def _where(exc: BaseException) -> str:
    """``file:line`` of the frame that raised ``exc`` (for the "errored" detail)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def _missing(exc: BaseException) -> MissingDefinition | None:
    if isinstance(exc, MissingDefinition):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        found = [_missing(e) for e in exc.exceptions]
        if found and all(found):
            return found[0]
    return None


_ERRORS_MARK = pytest.StashKey[int]()
_PROBE = pytest.StashKey["Probe | str"]()
_CAUGHT = pytest.StashKey[CaughtByTest]()


def _arm(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("offline_arm") if callspec is not None else None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ARG001
    """Before a control starts, fork its probe (``materialize.offline.probe``): the same process state,
    waiting to run the test with the patched tree if the control fails by assertion."""
    state = _state(item.config)
    probe = None
    if _arm(item) == "control" and state.probe_tree is None:
        entry = state.binding(item)
        try:
            assert entry is not None
            patched = state.tree_source().tree(entry.position, entry.target)
            probe = item.stash[_PROBE] = Probe(item, patched, _enter_probe(state))
        except Exception as exc:  # noqa: BLE001 - the control cannot be shown to be the tree's doing
            item.stash[_PROBE] = f"{type(exc).__name__}: {exc}"
    try:
        yield
    finally:
        if probe is not None:
            probe.close()


def _enter_probe(state: _OfflineState):
    def enter(patched_tree: object) -> None:
        state.probe_tree = patched_tree
    return enter


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A control's body runs watched: the exceptions the test's own code catches are recorded."""
    if _arm(item) != "control" or _state(item.config).probe_tree is not None:
        yield
        return
    watch = item.stash[_CAUGHT] = CaughtByTest(Path(str(item.path)).resolve().parent)
    with watch:
        yield


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Where this test's ExtractErrors begin in the session's list."""
    item.stash[_ERRORS_MARK] = len(_state(item.config).extract_errors)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    arm = _arm(item)
    state = _state(item.config)
    if not arm or state.probe_tree is not None:
        return  # in the probe process only the raw outcome counts
    state.ledger.add_duration(item.nodeid, report.duration)
    state.check_judges(item.nodeid)
    attempts = state.blocker.attempts[state.reported_attempts :]
    if report.when in ("setup", "call") and attempts:
        state.reported_attempts = len(state.blocker.attempts)
        state.problems.append(f"import of {', '.join(sorted(set(attempts)))} refused during {item.nodeid}")
    if state.blocker not in sys.meta_path:
        state.problems.append(f"the heavy-import guard was removed from sys.meta_path during {item.nodeid}")
        sys.meta_path.insert(0, state.blocker)
    if report.skipped or hasattr(report, "wasxfail"):
        # a bound test proves its patch only by running: a skip or an xfail (marked or imperative) is a failure
        how = "xfail" if hasattr(report, "wasxfail") else "skipped"
        report.outcome = "failed"
        report.longrepr = (
            f"NOT RUN ({how}): {item.nodeid} is bound to a patch and must run in every arm; "
            f"{how} hides whether it sees its patch. {getattr(report, 'wasxfail', '')}"
        )
        _record(item, arm, ok=False, outcome="errored", detail=f"{how}: a bound test must run")
        return
    if report.when == "setup" and report.failed:
        _record(item, arm, ok=False, outcome="errored", detail=f"setup failed: {_short(call)}")
        return
    if report.when != "call":
        return
    appeared = _heavy_modules(state.heavy) - state.seen_heavy
    if appeared:
        state.seen_heavy |= appeared
        roots = sorted({m.split(".")[0] for m in appeared})
        state.problems.append(f"{', '.join(roots)} first appeared in sys.modules during {item.nodeid}")
    if arm == "tip" and report.failed:
        culprit = _first_breaking_patch(item, state)
        if culprit is not None:
            note = f"broken by {culprit.name} (position {culprit.position})"
            report.sections.append(("offline --at tip", note))
            _record(item, arm, ok=False, outcome="failed", detail=f"{note}: {_short(call)}")
            return
    exc = call.excinfo.value if call.excinfo is not None else None
    test_dir = Path(str(item.path)).resolve().parent
    if arm != "control":
        if report.passed:
            _record(item, arm, ok=True, outcome="passed")
        elif exc is not None and not _own_failure(exc, test_dir):
            _record(item, arm, ok=False, outcome="errored", detail=f"errored: {_short(call)}{_where(exc)}")
        else:
            _record(item, arm, ok=False, outcome="failed", detail=f"failed: {_short(call)}")
        return
    weak_marker = item.get_closest_marker("weak_control")
    own = exc is not None and _own_failure(exc, test_dir)
    missing = _missing(exc) if exc is not None else None
    # an ExtractError the test caught on the way (`try: extract(...) except ...:`) and then failed an
    # assertion over: the control failed because extraction failed, not because it saw old behaviour
    hidden = [e for e in state.extract_errors[item.stash.get(_ERRORS_MARK, 0) :] if e is not exc]
    if own and hidden:
        own = False
        if all(isinstance(e, MissingDefinition) for e in hidden):
            missing = hidden[0]  # the weak case, however the test dressed it
        else:
            exc = hidden[0]
    # any other error the test's own code caught on the way (`except TypeError:`, contextlib.suppress):
    # judged as if it had not been caught (see _errors_on_the_way)
    on_the_way = _errors_on_the_way(item, exc, test_dir) if own else []
    if on_the_way:
        own, exc, hidden = False, on_the_way[0], on_the_way
    not_the_tree = _probe_failure(item, call) if own else None
    if exc is None:
        report.outcome = "failed"
        report.longrepr = (
            f"CONTROL PASSED: {item.nodeid} passed on the tree WITHOUT its patch, so it cannot see the patch. "
            "Assert on the behaviour the patch changes."
        )
        _record(item, arm, ok=False, outcome="passed", detail="control passed: the test cannot see its patch")
    elif own and not_the_tree is not None:
        report.outcome = "failed"
        report.longrepr = (
            f"CONTROL NOT CAUSED BY THE TREE: {item.nodeid} failed its assertion on the control tree, but run "
            "again from the same process state, as the same arm, with the PATCHED tree in the control's place, "
            f"it did not pass either ({not_the_tree}). Its failure comes from the test (the arm it runs in, "
            "state it keeps between runs), not from the tree without the patch.\n\n"
            f"{report.longrepr}"
        )
        _record(
            item, arm, ok=False, outcome="errored",
            detail=f"control failed, but not because of the tree: with the patched tree in its place {not_the_tree}",
        )  # fmt: skip
    elif own:
        report.outcome, report.longrepr = "passed", None
        _record(item, arm, ok=True, outcome="failed", detail="control failed by assertion")
    elif missing is not None:
        if weak_marker is not None:
            report.outcome, report.longrepr = "passed", None
            reason = weak_marker.args[0] if weak_marker.args else "new code"
            _record(item, arm, ok=True, weak=True, outcome="weak", detail=f"{missing.name!r} missing ({reason})")
        else:
            report.outcome = "failed"
            report.longrepr = (
                f"WEAK CONTROL: {item.nodeid} failed on the control tree only because a definition is missing:\n"
                f"  {missing}\nThat proves nothing about the behaviour. Test behaviour that exists before the patch, "
                "or mark the test @pytest.mark.weak_control('why') if the patch only adds new code."
            )
            _record(item, arm, ok=False, outcome="weak", detail=f"weak control not declared: {missing}")
    else:
        report.outcome = "failed"
        report.longrepr = (
            f"CONTROL ERRORED: {item.nodeid} must fail by the test's own assertion on the control tree, "
            f"but raised {type(exc).__name__}{_where(exc)}: {exc}{' (caught by the test)' if hidden else ''}\n"
            "An error on the way (extraction, a stub, a NameError or an assert in kept code) proves nothing.\n\n"
            f"{report.longrepr}"
        )
        _record(
            item, arm, ok=False, outcome="errored",
            detail=f"control errored ({type(exc).__name__}{_where(exc)}, not the test's assertion): {exc}",
        )  # fmt: skip


def _errors_on_the_way(item: pytest.Item, final: BaseException | None, test_dir: Path) -> list[BaseException]:
    """The exceptions the test's own code caught during the control that make it errored.

    The rule: a control is judged by what was raised on the way to its assertion, caught or not. An
    exception the test's code caught (``except``, ``contextlib.suppress``) counts as if it had not been
    caught, so it makes the control errored, unless it is one of:

    - what a ``pytest.raises`` block matched (the test declared it), ``StopIteration`` (iteration), the
      test's own failed assertion (its own logic);
    - an ``ExtractError`` (judged as before: errored, or weak for a ``MissingDefinition`` only);
    - the tree's own answer: raised by a ``raise`` statement, with the tree's code in its traceback
      (``raise ValueError("not aligned")`` in the control tree's code is behaviour the patch changed,
      and the test observed it).

    Everything else is an error on the way: a ``TypeError`` because the control's function does not
    take the patch's new argument (the patched definition is not there yet: that proves no behaviour),
    a ``KeyError``/``AttributeError``/``NameError`` raised inside the kept code, an ``IndexError`` in the
    test's own code.
    """
    watch = item.stash.get(_CAUGHT, None)
    if watch is None:
        return []
    funcargs = getattr(item, "funcargs", {}) or {}
    tree_prefix = _tree_prefix(funcargs.get("tree"))
    out = []
    for exc in watch.result(final):
        if isinstance(exc, ExtractError) or _own_failure(exc, test_dir) or _tree_refusal(exc, tree_prefix):
            continue
        out.append(exc)
    return out


def _tree_prefix(tree: object) -> str | None:
    display = getattr(tree, "display_path", None)
    if display is None:
        return None
    probe = "__materialize_probe__"
    return display(probe)[: -len(probe)]


def _tree_refusal(exc: BaseException, tree_prefix: str | None) -> bool:
    """``exc`` was raised by a ``raise`` statement and the tree's code is in its traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or tree_prefix is None or not any(f.filename.startswith(tree_prefix) for f in frames):
        return False
    line = frames[-1].line or ""
    return line.startswith("raise ") or line == "raise"


def _probe_failure(item: pytest.Item, call: pytest.CallInfo) -> str | None:
    """None when the probe passed (the tree made the control fail), else what happened there."""
    probe = item.stash.get(_PROBE, None)
    if probe is None:
        return "no probe was run"
    if isinstance(probe, str):
        return f"the probe could not start: {probe}"
    result = probe.run(timeout=max(300.0, 20 * call.duration))
    if result.get("passed"):
        return None
    return result.get("detail") or "it failed"


def _first_breaking_patch(item: pytest.Item, state: _OfflineState) -> PatchEntry | None:
    """The first later patch at which a test that passed at its own patch fails (tip failed).

    Re-runs the test body on each later prefix of the same target, with the fixtures it already has.
    """
    entry = state.binding(item)
    series = state.load_series()
    funcargs = getattr(item, "funcargs", None)
    if entry is None or funcargs is None or "tree" not in funcargs:
        return None
    original = funcargs["tree"]
    try:
        for later in series.patches[entry.position :]:
            if later.target != entry.target:
                continue
            funcargs["tree"] = state.tree_source().tree(later.position, entry.target)
            try:
                item.runtest()
            except (Exception, pytest.fail.Exception):  # noqa: BLE001 - any failure marks the culprit
                # pytest's Failed ("DID NOT RAISE", pytest.fail) is a BaseException, not an Exception
                return later
    finally:
        funcargs["tree"] = original
    return None


def _short(call: pytest.CallInfo) -> str:
    if call.excinfo is None:
        return ""
    text = str(call.excinfo.value).strip().splitlines()
    return f"{call.excinfo.typename}: {text[0] if text else ''}"[:200]


def _record(
    item: pytest.Item, arm: str, *, ok: bool, outcome: str, weak: bool = False, detail: str = ""
) -> None:
    state = _state(item.config)
    entry = state.binding(item)
    if entry is None:
        return
    row = state.ledger.row(entry.position, entry.name, entry.target)
    name = item.nodeid.split("::", 1)[-1]
    row.results.append(
        ArmResult(
            name,
            arm,
            ok=ok,
            weak=weak,
            outcome=outcome,
            detail=detail,
            duration=state.ledger.durations.get(item.nodeid, 0.0),
        )
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = _state(session.config)
    state.session = session  # its final exit status is sealed at unconfigure
    state.check_judges("the session")
    if state.blocker.attempts[state.reported_attempts :]:
        names = ", ".join(sorted(set(state.blocker.attempts[state.reported_attempts :])))
        state.problems.append(f"import of {names} refused outside a test (collection or a fixture)")
    args = [Path(str(a).split("::")[0]).resolve() for a in session.config.args]
    if state.series is None:
        try:
            state.load_series()  # the series' tests must run even when no collected test uses `tree`
        except Exception as exc:  # noqa: BLE001 - reported as the session's problem, not a crash at exit
            state.problems.append(f"cannot load the series: {exc}")
    state.problems += state.unrun_refs(args)
    state.problems += state.untested_patches(args)
    failed_rows = [row.name for row in state.ledger.rows.values() if not row.ok]
    if failed_rows and session.exitstatus == 0:
        # every arm that missed its requirement fails the session, whatever pytest made of the report
        state.problems.append(f"arms that did not meet their requirement: {', '.join(failed_rows)}")
    if state.blocker in sys.meta_path:
        sys.meta_path.remove(state.blocker)
    if state.extract_errors.append in offline_errors.OBSERVERS:
        offline_errors.OBSERVERS.remove(state.extract_errors.append)
    leaked = sorted(_heavy_modules(state.heavy))
    if leaked:
        origin = (
            "already imported before the session started"
            if state.preloaded
            else "imported during the session"
        )
        state.problems.append(f"heavy modules in sys.modules ({origin}): {', '.join(leaked[:8])}")
    if state.problems and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _write_results(session, state)
    if state.source is not None:
        state.source.close()
    if state.scratch is not None:
        shutil.rmtree(state.scratch, ignore_errors=True)
        os.environ.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)


SEAL_ENV = "MATERIALIZE_OFFLINE_SEAL"
"""A path the CLI front gives the session: the plugin writes the session's exit status there last."""


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Seal a finished session: ``os._exit(0)`` in a test (or at a test module's import) ends pytest
    with status 0 before the end-of-session checks ran, so status 0 alone proves nothing. The CLI
    front (``materialize test-offline``, what ``make test-offline`` runs) refuses a run without the
    seal, or whose seal disagrees with the exit code. Only the session's own process seals (a
    control's forked probe never reaches here, and must not)."""
    state = config.stash.get(_STATE_KEY, None)
    seal = os.environ.get(SEAL_ENV)
    if not seal or state is None or state.session is None or os.getpid() != state.pid:
        return
    Path(seal).write_text(f"{int(state.session.exitstatus)}\n")


def _write_results(session: pytest.Session, state: _OfflineState) -> None:
    """Every arm's result as JSON for the HTML report (one atomic write; never half a file)."""
    option = session.config.getoption("offline_results")
    if not option or state.series is None or not state.ledger.rows:
        return
    from materialize.atomic import atomic_write

    path = Path(option)
    if not path.is_absolute():
        path = session.config.rootpath / path
    data = results_json(
        state.ledger,
        state.series,
        state.problems,
        series=str(state.series.path),
        at=session.config.getoption("offline_at"),
        tree_source=state.source.name if state.source is not None else "-",
        exitstatus=int(session.exitstatus),
    )
    atomic_write(path, data.encode("utf-8"))
    state.results_path = path


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = _state(config)
    if state.series is None:
        return
    lines = state.ledger.render(state.series.patches, state.problems)
    terminalreporter.section("offline patch tests (patched must pass, control must fail by assertion)")
    source = state.source.name if state.source is not None else "-"
    heavy = ", ".join(state.heavy)
    terminalreporter.write_line(f"series {state.series.path}  tree source: {source}  never imported: {heavy}")
    for line in lines:
        terminalreporter.write_line(line)
    if state.results_path is not None:
        terminalreporter.write_line(f"results: {state.results_path}")
