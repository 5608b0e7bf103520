"""Rebase on real releases: patches written against the vllm 0.32.0 sdist, carried to 0.33.0.

The patches are derived from the two real trees so that each outcome is one that really happens
between these releases: an untouched file (clean), a file upstream edited above our change (offset),
one of upstream's own 0.33.0 changes (already upstream) and a line upstream rewrote differently
(conflict); and the shipped patches of each target carried to the previous release and back.
Skipped unless MATERIALIZE_NETWORK_TESTS=1. Downloads what the machine does not hold yet: vllm 0.32.0
(47 MB) and ttnn 0.80.0 (~100 MB; MATERIALIZE_NETWORK_TESTS_LIGHT=1 skips the ttnn case).
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import pytest

from materialize.engine import materialize
from materialize.series import load_series
from materialize.store import Store, default_cache_dir
from materialize.upstream import parse_spec, resolve
from materialize.upstream.resolve import sha256_file
from materialize.workspace import rebase
from materialize.workspace.diffgen import FileChange, regenerate
from materialize.workspace.rebase import RebaseConflict
from materialize.workspace.state import Workspace

pytestmark = [
    pytest.mark.network,
    pytest.mark.skipif(os.environ.get("MATERIALIZE_NETWORK_TESTS") != "1", reason="set MATERIALIZE_NETWORK_TESTS=1"),
    pytest.mark.timeout(600),
]

CLEAN = "vllm/tool_parsers/qwen3_engine_tool_parser.py"
# Captured at import, before the autouse fixture points MATERIALIZE_CACHE at a tmp dir: artifacts the
# machine already holds (CI's cache, the user's cache, a download dir) are copied in after their sha256
# is checked, so the test downloads only what is missing.
_SEED_DIRS = [Path(p) for p in (os.environ.get("MATERIALIZE_CACHE", ""), os.environ.get("MATERIALIZE_SEED_DIR", ""))
              if p] + [default_cache_dir(), Path("/tmp/dl")]


def _seed(cache: Path, pin) -> None:
    dest = cache / "artifacts" / pin.sha256 / pin.file
    for root in _SEED_DIRS:
        for candidate in (root / "artifacts" / pin.sha256 / pin.file, root / pin.file):
            if candidate.is_file() and sha256_file(candidate) == pin.sha256:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(candidate, dest)
                return


def _lines(store: Store, tree: str, path: str) -> list[bytes]:
    return store.read_blob(tree, path).splitlines(keepends=True)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for both tests: each release is downloaded (or seeded) and imported once."""
    cache = tmp_path_factory.mktemp("release-cache")
    for spec in ("pypi:vllm==0.32.0", "pypi:vllm==0.33.0"):
        _seed(cache, parse_spec(spec))
    return cache


def _pick(store: Store, old: str, new: str) -> tuple[str, int, str, int, str]:
    """(offset file, line index, conflict file, line index, upstream-change file), first in path order."""
    changed = sorted(p for p in store.changed_paths(old, new)[0]
                     if p.startswith("vllm/") and p.endswith(".py") and store.lookup(old, p))
    offset = conflict = upstream = None
    for path in changed:
        a, b = _lines(store, old, path), _lines(store, new, path)
        ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
        for tag, i1, i2, j1, j2 in ops:
            if offset is None and tag == "equal" and i2 - i1 >= 30 and j1 != i1 and i1 > 0:
                mid = i1 + 15
                if a[mid].strip() and not a[mid].rstrip().endswith((b"\\", b",")):
                    offset = (path, mid)
            if conflict is None and tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1 and a[i1].strip() \
                    and (offset is None or offset[0] != path):
                conflict = (path, i1)
        if upstream is None and len(ops) <= 4 and path not in {offset and offset[0], conflict and conflict[0]}:
            upstream = path
        if offset and conflict and upstream:
            return offset[0], offset[1], conflict[0], conflict[1], upstream
    raise AssertionError("these releases no longer offer every kind of change")


def test_rebase_vllm_0_32_to_0_33(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> None:
    monkeypatch.setenv("MATERIALIZE_CACHE", str(shared_cache))
    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    store = Store.open()
    old_pin, new_spec = parse_spec("pypi:vllm==0.32.0"), "pypi:vllm==0.33.0"
    old = resolve(old_pin, store, base_dir=tmp_path, progress=False).tree
    new = resolve(parse_spec(new_spec), store, base_dir=tmp_path, progress=False).tree
    off_path, off_line, con_path, con_line, up_path = _pick(store, old, new)

    def write_patch(name: str, path: str, cur: bytes, base_tree: str = old) -> dict:
        base = store.read_blob(base_tree, path)
        data = regenerate(None, [FileChange(path, base, cur)],
                          header=f"From: Ada <ada@example.com>\nDate: Mon, 21 Sep 2026 10:00:00 +0200\nSubject: {name}\n\n".encode())
        (tmp_path / "patches" / "plugin").mkdir(parents=True, exist_ok=True)
        (tmp_path / "patches" / "plugin" / f"{name}.patch").write_bytes(data)
        return {"patch": f"plugin/{name}.patch", "target": "plugin"}

    def edit_line(path: str, index: int, suffix: bytes) -> bytes:
        lines = _lines(store, old, path)
        lines[index] = lines[index].rstrip(b"\n") + suffix + b"\n"
        return b"".join(lines)

    clean_src = store.read_blob(old, CLEAN).replace(b"\nclass ", b"\n# downstream: qwen xml tool calls\nclass ", 1)
    entries = [
        write_patch("0001-qwen-tool-parser-note", CLEAN, clean_src),
        write_patch("0002-offset", off_path, edit_line(off_path, off_line, b"  # downstream")),
        write_patch("0003-upstreamed", up_path, store.read_blob(new, up_path)),
        write_patch("0004-conflict", con_path, edit_line(con_path, con_line, b"  # downstream override")),
    ]
    (tmp_path / "series").mkdir()
    import yaml

    doc = {"version": 1, "patches_dir": "../patches",
           "targets": {"plugin": {"pin": old_pin.model_dump(exclude_none=True)}}, "patches": entries}
    (tmp_path / "series" / "default.yaml").write_text("# real releases\n" + yaml.safe_dump(doc, sort_keys=False))
    ws = Workspace.open(tmp_path / "series" / "default.yaml", store)
    materialize(ws.series, store=store)  # the series is exact on 0.32.0

    table = rebase.report(ws, "plugin", new_spec)
    got = {o.name: o.status for o in table}
    print(rebase.render_report(table, "plugin", new_spec))
    assert got == {"0001-qwen-tool-parser-note": "clean", "0002-offset": "offset",
                   "0003-upstreamed": "already-upstream", "0004-conflict": "conflict"}

    before = {p: p.read_bytes() for p in sorted(tmp_path.joinpath("patches").rglob("*.patch"))}
    with pytest.raises(RebaseConflict, match="0004-conflict"):
        rebase.start(ws, "plugin", new_spec)
    assert b"<<<<<<< upstream (new pin)" in (tmp_path / "work" / "plugin" / con_path).read_bytes()
    rebase.abort(Workspace.open(tmp_path / "series" / "default.yaml", store))
    assert {p: p.read_bytes() for p in sorted(tmp_path.joinpath("patches").rglob("*.patch"))} == before

    ws = Workspace.open(tmp_path / "series" / "default.yaml", store)
    with pytest.raises(RebaseConflict):
        rebase.start(ws, "plugin", new_spec)
    done = rebase.proceed(Workspace.open(tmp_path / "series" / "default.yaml", store), skip=True)
    assert [o.status for o in done] == ["clean", "offset", "already-upstream", "skipped"]
    series = load_series(tmp_path / "series" / "default.yaml")
    assert series.targets["plugin"].pin.requirement == "vllm==0.33.0"
    assert [p.name for p in series.patches] == ["0001-qwen-tool-parser-note", "0002-offset"]
    m = materialize(series, store=store)
    assert {h.status for r in m.reports for h in r.hunks} == {"clean"}


REPO = Path(__file__).resolve().parents[2]


TTNN_080 = "pypi:ttnn==0.80.0:ttnn-0.80.0-cp312-cp312-manylinux_2_34_x86_64.whl"
TTNN_0811 = "pypi:ttnn==0.81.1:ttnn-0.81.1-cp312-cp312-manylinux_2_34_x86_64.whl"


@pytest.mark.parametrize(("target", "older", "pinned"), [
    pytest.param("plugin", "pypi:vllm==0.32.0", "pypi:vllm==0.33.0", id="vllm-0.33.0-0.32.0-0.33.0"),
    pytest.param("tt-metal", TTNN_080, TTNN_0811, id="ttnn-0.81.1-0.80.0-0.81.1", marks=pytest.mark.skipif(
        os.environ.get("MATERIALIZE_NETWORK_TESTS_LIGHT") == "1", reason="two 100 MB wheels")),
])
def test_shipped_patches_round_trip_to_an_older_release_and_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_cache: Path, target: str, older: str, pinned: str) -> None:
    """The shipped patches of a target (written for the pinned release) carried to the previous
    release and back: every step exact, and the files come back byte for byte (kept hunks keep their
    bytes, only @@ numbers move)."""
    from ruamel.yaml import YAML

    monkeypatch.setenv("MATERIALIZE_CACHE", str(shared_cache))
    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    for spec in (older, pinned):
        _seed(shared_cache, parse_spec(spec))
    shipped = load_series(REPO / "series" / "default.yaml")
    if not [p for p in shipped.patches if p.target == target]:
        pytest.skip(f"the shipped series has no {target} patches")
    # a one-target copy of the shipped series (the other target's artifact is not needed), entries verbatim
    yaml = YAML()
    doc = yaml.load((REPO / "series" / "default.yaml").read_text())
    doc["targets"] = {target: doc["targets"][target]}
    doc["patches"] = [e for e in doc["patches"] if e["target"] == target]
    (tmp_path / "series").mkdir()
    with (tmp_path / "series" / "default.yaml").open("w") as handle:
        yaml.dump(doc, handle)
    shutil.copytree(REPO / "patches" / target, tmp_path / "patches" / target)
    original = {p.name: p.read_bytes() for p in (tmp_path / "patches" / target).iterdir()}
    store = Store.open()
    series_path = tmp_path / "series" / "default.yaml"

    down = rebase.start(Workspace.open(series_path, store), target, older)
    print(rebase.render_report(down, target, older))
    assert all(o.status in ("clean", "offset", "fuzz", "merged") for o in down)
    m = materialize(load_series(series_path), store=store)
    assert {h.status for r in m.reports for h in r.hunks} == {"clean"}

    up = rebase.start(Workspace.open(series_path, store), target, pinned)
    print(rebase.render_report(up, target, pinned))
    assert {p.name: p.read_bytes() for p in (tmp_path / "patches" / target).iterdir()} == original
    assert load_series(series_path).targets[target].pin == shipped.targets[target].pin
