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


def test_every_lazily_registered_command_resolves():
    import click

    from materialize.cli import cli

    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name, name


def test_lazy_help_lines_are_the_commands_own():
    """`--help` prints the lines kept beside the lazy registration; they must say what the command says."""
    import click

    from materialize.cli import LAZY, _shorten, cli

    ctx = click.Context(cli)
    for name, (_where, line) in LAZY.items():
        assert cli.get_command(ctx, name).get_short_help_str(200) == _shorten(line, 200)


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
