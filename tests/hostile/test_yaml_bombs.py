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
