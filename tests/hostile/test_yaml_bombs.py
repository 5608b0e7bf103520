"""YAML bombs in a series file or a serve profile: refused with file:line (exit 2), in bounded time and
memory, never a RecursionError traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from materialize.errors import SeriesError
from materialize.series import load_series
from materialize.yamlpos import load_located

LAUGHS = textwrap.dedent("""\
    version: 1
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "series.yaml"
    path.write_text(text)
    return path


@pytest.mark.timeout(60)
def test_billion_laughs_is_refused(tmp_path):
    with pytest.raises(SeriesError, match=r"series.yaml:\d+: the document expands to more than"):
        load_series(write(tmp_path, LAUGHS))


def test_self_referencing_alias_is_refused(tmp_path):
    with pytest.raises(SeriesError, match=r"series.yaml:1: .*nested deeper than"):
        load_located(write(tmp_path, "x: &a [*a]\n"))


def test_deep_nesting_is_refused_before_the_composer_recurses(tmp_path):
    with pytest.raises(SeriesError, match=r"series.yaml:1: nested deeper than 64 levels"):
        load_located(write(tmp_path, "x: " + "[" * 20000 + "]" * 20000 + "\n"))


def test_a_small_shared_alias_still_works(tmp_path):
    located = load_located(write(tmp_path, "a: &x {k: 1}\nb: *x\n"))
    assert located.data == {"a": {"k": 1}, "b": {"k": 1}}


def test_cli_exit_2_with_line_and_bounded_memory(tmp_path):
    """Through the real CLI: one line, exit 2, no traceback, and memory stays small."""
    series = write(tmp_path, LAUGHS)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30));"
            "from materialize.cli import main; sys.exit(main(['apply', '--series', sys.argv[1]]))")
    proc = subprocess.run([sys.executable, "-c", code, str(series)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "series.yaml:" in proc.stderr + proc.stdout


def test_unquoted_digit_sha_says_to_quote_it(tmp_path):
    (tmp_path / "up").mkdir()
    series = write(tmp_path, textwrap.dedent("""\
        version: 1
        targets:
          t:
            pin: {kind: git, url: up, rev: main, sha: 1234567890123456789012345678901234567890}
        patches: []
        """))
    with pytest.raises(SeriesError, match=r"series.yaml:4: .*sha.*unquoted number.*quotes"):
        load_series(series)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", [
    "1" * 5000,                                # past Python's 4300-digit int conversion limit: was a ValueError traceback
    ":".join(["59"] * 150_000),                # a YAML 1.1 base-60 int: quadratic to build (13 s for 450 KB)
    ":".join(["59"] * 2000) + ".5",            # a base-60 float past a double: was an OverflowError traceback
])
def test_a_huge_or_base_60_number_is_refused_with_its_line(tmp_path, value):
    series = write(tmp_path, f"targets: {{}}\nversion: {value}\n")
    with pytest.raises(SeriesError, match=r"series.yaml:2: .*number of \d+ characters"):
        load_located(series)
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "series.yaml:2:" in proc.stderr and "Traceback" not in proc.stderr


def test_ordinary_numbers_still_read_as_yaml_1_1_reads_them(tmp_path):
    located = load_located(write(tmp_path, "a: 1\nb: 0x1f\nc: 1:30\nd: 1.5e+3\ne: .inf\nf: 0o17\n"))
    assert located.data == {"a": 1, "b": 31, "c": 90, "d": 1500.0, "e": float("inf"), "f": "0o17"}


@pytest.mark.parametrize("value", ['!!bool "maybe"', '!!int "-"', '!!int ""', '!!int "abc"', '!!float "x"'])
def test_an_explicit_tag_on_a_value_it_cannot_build_is_exit_2_with_its_line(tmp_path, value):
    """`!!bool "maybe"` was a KeyError traceback, `!!int "-"` an IndexError: the safe constructor's
    own failures on a plain tag are refused with the line, as a malformed value."""
    with pytest.raises(SeriesError, match=r"series.yaml:2: a (bool|int|float|number) that cannot be read"):
        load_located(write(tmp_path, f"targets: {{}}\nversion: {value}\n"))


def test_a_series_path_that_is_a_folder_or_unreadable_is_one_line(tmp_path):
    """`--series` naming a folder was an IsADirectoryError traceback (only a missing file was caught)."""
    folder = tmp_path / "series.yaml"
    folder.mkdir()
    with pytest.raises(SeriesError, match=r"series.yaml: cannot read it: Is a directory"):
        load_located(folder)
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(folder)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x1b", "\x7f", "\ufffe"])
def test_a_control_character_yaml_cannot_read_is_exit_2_naming_the_line(tmp_path, char):
    """A NUL (or another character YAML's reader refuses) in a series file was a ReaderError traceback:
    the reader's error is not a MarkedYAMLError, which was all that was caught."""
    series = write(tmp_path, f"version: 1\ntargets: {{}}\npatches: []\nwhy: a{char}b\n")
    with pytest.raises(SeriesError, match=r"series.yaml:4: invalid YAML: .*character"):
        load_located(series)
    proc = subprocess.run([sys.executable, "-m", "materialize", "status", "--series", str(series)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "series.yaml:4:" in proc.stderr


@pytest.mark.timeout(60)
def test_a_file_past_the_size_cap_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    """A 300 MB ``why:`` took 8 s and 1.7 GB before any budget spoke: the file's size is checked first,
    through the CLI (exit 2, one line naming the file), and a file at the cap still loads."""
    import materialize.yamlpos as yamlpos

    monkeypatch.setattr(yamlpos, "MAX_BYTES", 4096)
    head = "version: 1\npatches: []\ntargets: {}\n"
    at_cap = write(tmp_path, head + "# " + "x" * (4096 - len(head) - 3) + "\n")
    assert at_cap.stat().st_size == 4096
    load_located(at_cap)
    big = tmp_path / "big.yaml"
    big.write_text(head + "why: " + "x" * 5000 + "\n")
    with pytest.raises(SeriesError, match=r"big.yaml: larger than 0 MiB"):
        load_located(big)
    huge = tmp_path / "huge.yaml"
    huge.write_text(head + "why: " + "x" * (17 << 20) + "\n")
    proc = subprocess.run([sys.executable, "-m", "materialize", "status", "--series", str(huge)],
                          capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert "huge.yaml: larger than 16 MiB" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "tty-link", "null-link"])
def test_a_series_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path, kind):
    """A series (or a profile) that is a fifo, or a link to /dev/tty (a symlink is a file a checkout
    holds), waited forever for a writer or a key press; a link to /dev/null read as an empty file."""
    import os

    series = tmp_path / "series.yaml"
    if kind == "fifo":
        os.mkfifo(series)
    else:
        series.symlink_to("/dev/tty" if kind == "tty-link" else "/dev/null")
    with pytest.raises(SeriesError, match=r"series.yaml: (not a regular file|cannot read it)"):
        load_located(series)
    proc = subprocess.run([sys.executable, "-m", "materialize", "status", "--series", str(series)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=30, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    # load_series reads the file its link leads to (relative paths are relative to that file's folder)
    assert str(series.resolve()) in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
