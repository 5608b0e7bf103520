"""Start-up stays light: `materialize --help` lists every command without importing a subsystem, and
the daily commands never import the heavy libraries of bisect, plots, offline tests or the fleet.

Each case runs the real console entry in a fresh interpreter with ``-X importtime`` and reads the
modules it imported (timings are for bench/, never asserted here).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = {"scipy", "numpy", "matplotlib", "libcst", "ray", "httpx", "pydantic"}
BASE = {"a.txt": "".join(f"{i}\n" for i in range(20))}


def imported(*args: str, cwd: Path | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    """Every module the command imported (from ``-X importtime``), and the finished process."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "materialize", *args], capture_output=True,
                          text=True, cwd=cwd)
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    modules.discard("package")  # the header line
    assert modules, proc.stderr[-2000:]
    return modules, proc


def top_level(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_help_imports_no_subsystem_and_no_rich():
    modules, proc = imported("--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in ("push ", "bisect ", "serve ", "test-offline ", "export-git ", "apply "):  # every command listed
        assert line in proc.stdout, proc.stdout
    ours = {m for m in modules if m.startswith("materialize")}
    assert ours <= {"materialize", "materialize.cli", "materialize.cliargs", "materialize.errors", "materialize.console",
                    "materialize.__main__"}, ours
    assert not top_level(modules) & (HEAVY | {"rich", "pydantic", "httpx", "git", "yaml", "unidiff", "click"})


def _every_command() -> list[str]:
    from materialize.cli import COMMANDS

    return sorted(COMMANDS)


@pytest.mark.parametrize("command", _every_command())
def test_command_help_never_imports_heavy_libraries(command):
    """Each command's --help is its full argparse page (options included) yet loads no heavy library."""
    modules, proc = imported(command, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"usage: materialize {command} [-h]" in proc.stdout, proc.stdout
    assert not top_level(modules) & HEAVY, sorted(top_level(modules) & HEAVY)


@pytest.mark.parametrize("command", ["push", "pop", "new", "add", "refresh", "rebase", "export-git", "test-offline"])
def test_subsystem_help_imports_only_the_command_module(command):
    """Workspace and offline help comes from their command module alone: no series, store or engine."""
    modules, proc = imported(command, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours = {m for m in modules if m.startswith("materialize")}
    assert ours <= {"materialize", "materialize.cli", "materialize.cliargs", "materialize.errors", "materialize.console",
                    "materialize.__main__",
                    "materialize.workspace", "materialize.workspace.cli", "materialize.offline",
                    "materialize.offline.errors", "materialize.offline.cli"}, sorted(ours)
    assert not top_level(modules) & {"yaml", "filelock", "platformdirs", "rich"}


def test_apply_and_status_never_import_heavy_libraries(builder, tmp_path):
    """Nor rich: off a terminal there is no progress bar and tables are plain text. Nor dataclasses:
    the records of the engine, the applier and the store are NamedTuples or plain classes."""
    b = builder(BASE)
    b.add_patch("0001-x", {"a.txt": BASE["a.txt"].replace("5\n", "five\n")})
    series = b.write()
    for args in (["apply", "--series", str(series), "--out", str(tmp_path / "out")],
                 ["apply", "--series", str(series), "--overlay", "--out", str(tmp_path / "out")],
                 ["status", "--series", str(series)]):
        modules, proc = imported(*args)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "0001-x" in proc.stdout
        assert not top_level(modules) & (HEAVY | {"rich"}), (args, sorted(top_level(modules) & (HEAVY | {"rich"})))
        assert "dataclasses" not in modules, args  # its import and generated methods: ~10 ms of each run


def test_workspace_commands_never_import_heavy_libraries(builder):
    """The daily quilt-style commands: no heavy library, no pydantic, no rich (their output is plain)."""
    b = builder(BASE)
    b.add_patch("0001-x", {"a.txt": BASE["a.txt"].replace("5\n", "five\n")})
    series = str(b.write())
    for args in (["push", "--series", series], ["add", "--series", series, "a.txt"],
                 ["refresh", "--series", series], ["pop", "--series", series]):
        modules, proc = imported(*args)
        if args[0] == "add":  # a.txt is in the top patch already: quilt's "already in patch", exit 2
            assert proc.returncode == 2 and "File a.txt is already in patch 0001-x" in proc.stderr, proc.stderr[-2000:]
        else:
            assert proc.returncode == 0, (args, proc.stderr[-2000:])
        assert not top_level(modules) & (HEAVY | {"rich"}), (args, sorted(top_level(modules) & (HEAVY | {"rich"})))


def test_a_user_error_is_one_plain_line_without_rich(tmp_path):
    modules, proc = imported("status", "--series", str(tmp_path / "missing.yaml"))
    assert proc.returncode == 2 and "materialize: error: " in proc.stderr and "missing.yaml" in proc.stderr
    assert "rich" not in top_level(modules)


def test_the_daily_workspace_loop_imports_only_what_it_runs(builder, monkeypatch):
    """quilt's daily loop (new, add, edit, refresh, pop, push): no file-lock library, no ruamel, no
    email package, no archive readers; new/add/edit no YAML parser, no applier, no subprocess, shutil,
    tempfile, OpenSSL or locale, and no dataclasses (the
    records every command loads are NamedTuples or plain classes); the pop and push of
    a just-refreshed patch no applier (refresh cached its prefix)."""
    b = builder(BASE)
    b.add_patch("0001-x", {"a.txt": BASE["a.txt"].replace("5\n", "five\n")})
    series = str(b.write())
    monkeypatch.setenv("EDITOR", "true")
    never = {"filelock", "ruamel", "email", "tarfile", "zipfile", "rich", *HEAVY}
    modules, proc = imported("push", "--series", series)  # the first run parses the series
    assert proc.returncode == 0, proc.stderr[-2000:]
    work = Path(series).parent.parent / "work" / "plugin" / "a.txt"
    light = {"yaml", "materialize.patching", "dataclasses"}  # dataclasses and its inspect cost ~10 ms
    # each of these cost 5-20M instructions (OpenSSL, compression modules, signal/threading/selectors):
    # more than quilt's whole `add` together (bench/README.md)
    light |= {"subprocess", "shutil", "tempfile", "hashlib", "_hashlib", "locale", "textwrap", "inspect", "datetime"}
    for args, also_never in ((["new", "0002-y"], light),
                             (["add", "a.txt"], light | {"materialize.engine", "materialize.workspace.patchtext"}),
                             (["edit", "a.txt"], light | {"materialize.engine", "materialize.workspace.patchtext"}),
                             (["refresh"], {"dataclasses"}),
                             (["pop"], {"materialize.patching", "dataclasses"}),
                             (["push"], {"materialize.patching", "dataclasses"})):
        if args == ["refresh"]:
            work.write_text(work.read_text() + "six\n")
        modules, proc = imported(*args, "--series", series)
        assert proc.returncode == 0, (args, proc.stderr[-2000:])
        loaded = top_level(modules) | {m for m in modules if m.startswith("materialize.")}
        assert not loaded & (never | also_never), (args, sorted(loaded & (never | also_never)))


_COUNT_COMPILES = """
import builtins, runpy, sys
strings = []
real = builtins.compile
def spy(source, filename, *args, **kwargs):
    if filename == "<string>":  # typing's ForwardRef, eval/exec of text: not a module's own source
        strings.append(source if isinstance(source, str) else repr(source))
    return real(source, filename, *args, **kwargs)
builtins.compile = spy
sys.argv = ["materialize", *sys.argv[1:]]
try:
    runpy.run_module("materialize", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
print("STRINGS-COMPILED", strings, file=sys.stderr)
"""


def test_the_daily_commands_compile_no_source_text(builder, monkeypatch):
    """A ``TypeVar(bound="BaseModel")`` at module level made typing compile its string (ForwardRef):
    the first compile() of a process wakes Python's parser, ~10M instructions, 5% of `materialize new`.
    Nothing on the daily commands' path compiles text (status, a cached apply, quilt's daily loop)."""
    b = builder(BASE)
    b.add_patch("0001-x", {"a.txt": BASE["a.txt"].replace("5\n", "five\n")})
    series = str(b.write())
    monkeypatch.setenv("EDITOR", "true")
    overlay = str(Path(series).parent.parent / "build" / "overlay")
    work = Path(series).parent.parent / "work" / "plugin" / "a.txt"
    for step, args in enumerate((["push"], ["status"], ["apply", "--overlay", "--out", overlay], ["new", "0002-y"],
                                 ["add", "a.txt"], ["edit", "a.txt"], ["refresh"], ["pop"], ["push"])):
        if args == ["refresh"]:
            work.write_text(work.read_text() + "six\n")
        proc = subprocess.run([sys.executable, "-c", _COUNT_COMPILES, *args, "--series", series],
                              capture_output=True, text=True)
        assert "STRINGS-COMPILED" in proc.stderr, (args, proc.stderr[-2000:])
        if step:  # the first push imports the upstream and applies (not a daily start-up)
            assert "STRINGS-COMPILED []" in proc.stderr, (args, proc.stderr[-2000:])
