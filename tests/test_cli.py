"""Exit codes scripts can trust, and messages without tracebacks, through the real console script."""

import json
import subprocess
import sys

from materialize.cli import main

BASE = {"a.txt": "".join(f"{i}\n" for i in range(20))}


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True, cwd=cwd)


def test_apply_json_and_status(builder, tmp_path):
    b = builder(BASE)
    b.add_patch("0001-x", {"a.txt": BASE["a.txt"].replace("5\n", "five\n")}, flag="X_FLAG", banner="x engaged")
    series = b.write()
    proc = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["patches"][0]["flag"] == "X_FLAG" and doc["patches"][0]["hunks"][0]["status"] == "clean"
    status = run_cli("status", "--series", str(series), "--json")
    assert json.loads(status.stdout)["patches"][0]["state"] == "applied"
    assert run_cli("check", "--series", str(series)).returncode == 0


def test_invalid_series_exits_2_with_file_line(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("version: 1\ntargets: {}\npatches:\n  - patch: x.patch\n    target: nowhere\n")
    proc = run_cli("apply", "--series", str(bad))
    assert proc.returncode == 2
    assert "s.yaml:5: patches.0.target" in proc.stderr and "Traceback" not in proc.stderr


def test_failing_patch_exits_1_and_check_too(builder):
    b = builder(BASE)
    b.add_patch("0001-x", {"a.txt": BASE["a.txt"].replace("5\n", "five\n")})
    (b.upstream / "a.txt").write_text("something else entirely\n")
    series = b.write()
    proc = run_cli("apply", "--series", str(series))
    assert proc.returncode == 1 and "0001-x" in proc.stderr and "a.txt" in proc.stderr
    assert run_cli("check", "--series", str(series)).returncode == 1
    status = run_cli("status", "--series", str(series), "--json")
    assert status.returncode == 1 and json.loads(status.stdout)["patches"][0]["state"] == "FAILED"


def test_unsafe_patch_exits_4(builder):
    b = builder(BASE)
    series = b.write()
    (b.root / "patches" / "0001-evil.patch").write_text("--- a/../x\n+++ b/../x\n@@ -0,0 +1 @@\n+x\n")
    series.write_text(series.read_text().replace("patches: []", "patches:\n- patch: 0001-evil.patch\n  target: plugin"))
    assert main(["apply", "--series", str(series)]) == 4


def test_tarball_hash_mismatch_exits_3(tmp_path):
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "f.txt").write_text("x\n")
    archive = tmp_path / "u.tar.gz"
    subprocess.run(["tar", "czf", str(archive), "-C", str(tmp_path), "up"], check=True)
    series = tmp_path / "s.yaml"
    series.write_text(f"version: 1\ntargets:\n  plugin:\n    pin: {{kind: tarball, path: {archive}, sha256: '{'0' * 64}'}}\n")
    assert main(["apply", "--series", str(series), "--out", str(tmp_path / "o")]) == 3


def test_usage_error_exits_2():
    assert run_cli("apply", "--no-such-option").returncode == 2


def test_every_registered_command_resolves_to_itself():
    from materialize.cli import COMMANDS, resolve

    for name in COMMANDS:
        assert resolve(name).name == name, name


def test_listed_help_lines_are_the_commands_own():
    """`--help` prints the lines kept beside the registration; they must say what the command says."""
    from materialize.cli import COMMANDS, resolve

    for name, (_where, line) in COMMANDS.items():
        assert resolve(name).short_help == line, name


def test_no_command_unknown_command_and_version():
    """git's habits: no command prints the help (exit 2, nothing was done), an unknown one names the
    choices (exit 2), --version exits 0."""
    none = run_cli()
    assert none.returncode == 2 and "usage: materialize" in none.stdout and "push" in none.stdout
    unknown = run_cli("pussh")
    assert unknown.returncode == 2 and "invalid choice: 'pussh'" in unknown.stderr and "Traceback" not in unknown.stderr
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.startswith("materialize ")


def test_missing_extra_names_the_extra_to_install():
    """`make materialize` installs no extras: a subsystem command then says which extra it needs (exit 2)."""
    code = ("import sys; sys.modules['libcst'] = None\n"  # as if the `offline` extra were not installed
            "from materialize.cli import main; sys.exit(main(['test-offline', *sys.argv[1:]]))")
    proc = subprocess.run([sys.executable, "-c", code, "--series", "no-such.yaml"], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "needs libcst, from the `offline` extra" in proc.stderr and "Traceback" not in proc.stderr
    # Its help needs nothing of the extra.
    proc = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "--tree-source" in proc.stdout, proc.stderr


def test_options_a_command_hands_on_reach_their_program(monkeypatch):
    """`test-offline` passes what it does not know to pytest, as `make test-offline ARGS=-k x` does."""
    from materialize.offline import cli as offline_cli

    seen = {}
    monkeypatch.setattr(offline_cli, "run_offline", lambda path, **kwargs: seen.update(kwargs) or 0)
    assert main(["test-offline", "-k", "sdpa", "--at", "tip", "-x"]) == 0
    assert seen["at"] == "tip" and seen["extra"] == ("-k", "sdpa", "-x")


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    """`materialize runs list | head -1`: the pipe closes under us; exit 141 (SIGPIPE) quietly, as git does."""
    ledger = tmp_path / "runs.jsonl"
    ledger.write_text("{}\n" * 20000)  # 20k lines to print, one read
    proc = subprocess.run(f"{sys.executable} -m materialize runs list {ledger} | head -1; echo \"${{PIPESTATUS[0]}}\"",
                          shell=True, executable="/bin/bash", capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    assert "INVALID" in lines[0] and lines[-1] == "141", proc.stdout[-500:]
    assert "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr, proc.stderr


def test_command_help_is_the_docstring_as_inspect_cleans_it():
    """cliargs dedents docstrings itself (no inspect, no textwrap at start-up): the same text."""
    import inspect

    from materialize.cliargs import _cleandoc

    for doc in ("One line.", "  First.\n\n    Body line\n      indented more\n    last\n  ", "A.\n\tTabbed\n\tbody\n",
                "Only\n", "", "First.\n\n    a\n\n    b\n"):
        assert _cleandoc(doc) == inspect.cleandoc(doc).strip(), doc
