"""A small real project in a tmp dir: two targets pinned as local directories of real Python files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from materialize.store import Store

REPO = Path(__file__).resolve().parents[2]

SERIES = """\
# test series: two path pins
version: 1
patches_dir: ../patches
defaults:
  strip: 1
  max_fuzz: 0

targets:
  tt-metal:
    pin:
      kind: path
      path: ../upstream/tt-metal
  plugin:
    # the vLLM side
    pin:
      kind: path
      path: ../upstream/plugin

patches: []
"""


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def make_upstream(root: Path) -> None:
    """Real source files (frozen copies of this repository's own modules, in ``fixtures/``) laid out
    like the two upstream trees; frozen so that the tests' edits keep matching when the modules change."""
    tt = root / "upstream" / "tt-metal"
    (tt / "models" / "tt").mkdir(parents=True)
    shutil.copy(FIXTURES / "attention.py", tt / "models" / "tt" / "attention.py")
    shutil.copy(FIXTURES / "generator.py", tt / "models" / "tt" / "generator.py")
    (tt / "scripts").mkdir()
    (tt / "scripts" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (tt / "scripts" / "run.sh").chmod(0o755)
    plugin = root / "upstream" / "plugin" / "vllm"
    plugin.mkdir(parents=True)
    shutil.copy(FIXTURES / "config.py", plugin / "config.py")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MATERIALIZE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Tester")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ada@example.com")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1790000000")
    root = tmp_path / "proj"
    make_upstream(root)
    (root / "series").mkdir()
    (root / "series" / "default.yaml").write_text(SERIES)
    (root / "patches" / "tt-metal").mkdir(parents=True)
    (root / "patches" / "plugin").mkdir(parents=True)
    return root


@pytest.fixture
def store(project: Path) -> Store:
    s = Store.open()
    yield s
    s.close()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "network: needs the package index; runs only with MATERIALIZE_NETWORK_TESTS=1")
