"""Shared fixtures: every test gets its own store (MATERIALIZE_CACHE) and builds real trees, real
patches (made by GNU diff) and real series files in a tmp dir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.dont_write_bytecode = True


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("MATERIALIZE_CACHE", str(cache))
    return cache


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return root


def make_patch(old: Path, new: Path, header: str = "") -> bytes:
    """A real unified diff between two directories, with a/ b/ prefixes, as `diff -ruN` makes it."""
    proc = subprocess.run(["diff", "-ruN", old.name, new.name], cwd=old.parent, capture_output=True)
    assert proc.returncode in (0, 1), proc.stderr
    lines = []
    for line in proc.stdout.split(b"\n"):
        if line.startswith(b"--- " + old.name.encode() + b"/"):
            line = b"--- a/" + line[len(old.name) + 5:]
        elif line.startswith(b"+++ " + new.name.encode() + b"/"):
            line = b"+++ b/" + line[len(new.name) + 5:]
        lines.append(line)
    return header.encode() + b"\n".join(lines)


class SeriesBuilder:
    """Builds a project dir: an upstream tree, a patches dir and a series file, step by step."""

    def __init__(self, root: Path, files: dict[str, str | bytes], target: str = "plugin") -> None:
        self.root = root
        self.target = target
        self.upstream = write_tree(root / "upstream", files)
        self.current = root / "work-0"
        subprocess.run(["cp", "-a", str(self.upstream), str(self.current)], check=True)
        self.patches: list[dict] = []
        (root / "patches").mkdir()
        self.step = 0

    def add_patch(self, name: str, changes: dict[str, str | bytes | None], **entry) -> Path:
        """Record a patch that makes ``changes`` (None deletes) on top of the previous state."""
        self.step += 1
        nxt = self.root / f"work-{self.step}"
        subprocess.run(["cp", "-a", str(self.current), str(nxt)], check=True)
        for rel, content in changes.items():
            if content is None:
                (nxt / rel).unlink()
            else:
                write_tree(nxt, {rel: content})
        data = make_patch(self.current, nxt, header=f"Subject: {name}\n\n")
        path = self.root / "patches" / f"{name}.patch"
        path.write_bytes(data)
        self.patches.append({"patch": f"{name}.patch", "target": self.target, **entry})
        self.current = nxt
        return path

    def write(self, extra_targets: dict | None = None) -> Path:
        doc = {
            "version": 1,
            "patches_dir": "patches",
            "targets": {self.target: {"pin": {"kind": "path", "path": "upstream"}}, **(extra_targets or {})},
            "patches": self.patches,
        }
        series = self.root / "series.yaml"
        series.write_text(yaml.safe_dump(doc, sort_keys=False))
        return series


@pytest.fixture
def builder(tmp_path: Path):
    def make(files: dict[str, str | bytes], target: str = "plugin") -> SeriesBuilder:
        return SeriesBuilder(tmp_path / "project", files, target)

    return make


class Invocation:
    """What one in-process `materialize ...` printed and returned (the test-side view of a run)."""

    def __init__(self, exit_code: int, output: str, exception: BaseException | None) -> None:
        self.exit_code = exit_code
        self.output = output
        self.exception = exception

    @property
    def return_value(self) -> int:
        return self.exit_code


@pytest.fixture
def invoke():
    """Run `materialize ARGS...` in-process, as typed, capturing stdout and stderr together. A user
    error is kept in ``exception`` with its exit code (the console script would print it), so a test
    can check both the message and the code without parsing stderr."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from materialize.cli import resolve
    from materialize.errors import MaterializeError

    def run(*args: object) -> Invocation:
        words = [str(a) for a in args]
        stream = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
        exception: BaseException | None = None
        with redirect_stdout(stream), redirect_stderr(stream):
            try:
                code = resolve(words[0]).main(words[1:], prog=f"materialize {words[0]}")
            except MaterializeError as exc:
                code, exception = exc.exit_code, exc
            except SystemExit as exc:  # argparse: a usage error (2) or --help (0)
                code, exception = int(exc.code or 0), exc
        return Invocation(code, stream.buffer.getvalue().decode("utf-8", "replace"), exception)

    return run
