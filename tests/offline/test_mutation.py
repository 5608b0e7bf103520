"""The mutation check's mutants: each reverts exactly one block and still applies with GNU patch."""

from __future__ import annotations

import subprocess
from pathlib import Path

from materialize.offline.mutation import Block, blocks, mutant
from materialize.series import load_series

OLD = "def f(x):\n    return x\n\n\nLIMIT = 3\n\n\ndef g():\n    return 1\n"
NEW = (
    "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return x * 2\n\n\nLIMIT = 4\n\n\n"
    "def g():\n    return 1\n\n\ndef h():\n    return 2\n\n\nDONE = True\n"
)


def _project(tmp_path: Path) -> Path:
    for name, text in (("a", OLD), ("b", NEW)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text(text)
    diff = subprocess.run(
        ["diff", "-u", "--label", "a/m.py", "--label", "b/m.py", "a/m.py", "b/m.py"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "0001-x.patch").write_text("Subject: x\n\n---\n" + diff)
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "m.py").write_text(OLD)
    (tmp_path / "s.yaml").write_text(
        "version: 1\npatches_dir: patches\ntargets:\n  t:\n    pin: {kind: path, path: up}\n"
        "patches:\n  - patch: 0001-x.patch\n    target: t\n"
    )
    return tmp_path


def _apply(tmp_path: Path, text: str) -> str:
    work = tmp_path / "work"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    subprocess.run(["cp", "-r", str(tmp_path / "up"), str(work)], check=True)
    proc = subprocess.run(["patch", "-p1", "-F0", "-d", str(work)], input=text, capture_output=True, text=True)
    assert proc.returncode == 0 and "offset" not in proc.stdout and "fuzz" not in proc.stdout, proc.stdout
    return (work / "m.py").read_text()


def test_each_mutant_reverts_one_block_and_applies_exactly(tmp_path):
    root = _project(tmp_path)
    entry = load_series(root / "s.yaml").patches[0]
    text = entry.read().decode()
    found = blocks(entry)
    summaries = [b.summary for b in found]
    assert summaries == ["return x", "LIMIT = 3", "def h():", "DONE = True"]  # a mixed run stays whole
    assert len(found) == len({(b.start, b.end) for b in found})  # no duplicates
    results = {b.summary: _apply(tmp_path, mutant(text, b)) for b in found}
    assert results["LIMIT = 3"] == NEW.replace("LIMIT = 4", "LIMIT = 3")
    assert results["def h():"] == NEW.replace("def h():\n    return 2\n", "")  # its blank lines stay
    assert results["return x"] == NEW.replace("    if x < 0:\n        raise ValueError(x)\n    return x * 2\n", "    return x\n")
    assert _apply(tmp_path, text) == NEW


def test_value_mutant_replaces_inside_one_added_line(tmp_path):
    root = _project(tmp_path)
    entry = load_series(root / "s.yaml").patches[0]
    text = entry.read().decode()
    line = next(i for i, x in enumerate(text.splitlines()) if x == "+LIMIT = 4")
    block = Block(entry.name, "b/m.py", 0, line, line + 1, 0, "limit", replace=("4", "5"))
    assert _apply(tmp_path, mutant(text, block)) == NEW.replace("LIMIT = 4", "LIMIT = 5")
