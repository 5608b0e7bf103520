"""What `apply` and `status` print: every row for a short series; for a long one a summary plus only
the rows worth a look (offsets, fuzz, failures); `-v` every row; plain text off a terminal."""

from __future__ import annotations

import json
import re
import subprocess
import sys

FILES = {f"f{i:02d}.txt": "".join(f"line {k} of file {i}\n" for k in range(30)) for i in range(25)}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True)


def long_series(builder, n=25):
    """``n`` one-file patches; upstream then grows 3 lines at the top of f03.txt, so patch 4 applies at an
    offset and every other patch cleanly."""
    b = builder(FILES)
    for i in range(n):
        name = f"f{i:02d}.txt"
        b.add_patch(f"{i + 1:04d}-p{i}", {name: FILES[name].replace("line 10 ", "LINE 10 ")})
    series = b.write()
    (b.upstream / "f03.txt").write_text("new 1\nnew 2\nnew 3\n" + FILES["f03.txt"])
    return series


def rows_printed(stdout: str) -> list[str]:
    """The patch names of the table rows printed (a row: position, then the patch name)."""
    return [words[1] for words in map(str.split, stdout.splitlines())
            if len(words) > 1 and words[0].isdigit() and re.fullmatch(r"\d{4}-\w+", words[1])]


def test_long_series_prints_a_summary_and_only_rows_worth_a_look(builder, tmp_path):
    series = long_series(builder)
    proc = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert rows_printed(proc.stdout) == ["0004-p3"], proc.stdout
    assert "25 patches, 25 hunks: 24 clean, 1 with offsets, 0 with fuzz; 25 applied, 0 reused" in proc.stdout
    assert "\x1b[" not in proc.stdout and "━" not in proc.stdout and "│" not in proc.stdout  # plain, not rich
    assert proc.stdout.rstrip().splitlines()[-1].startswith("materialization id: ")

    again = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"), "-v")
    assert rows_printed(again.stdout) == [f"{i + 1:04d}-p{i}" for i in range(25)], again.stdout
    assert "0 applied, 25 reused from the cache" in again.stdout
    assert "offset" not in "\n".join(again.stdout.splitlines()[1:]).replace("with offsets", "")  # no hunk lines
    hunks = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"), "-vv")
    assert "0004-p3: f03.txt @@ -8,7 +8,7 @@: offset (offset +3, fuzz 0)" in hunks.stdout, hunks.stdout

    doc = json.loads(run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"), "--json").stdout)
    assert len(doc["patches"]) == 25


def test_short_series_prints_every_row(builder, tmp_path):
    b = builder(FILES)
    b.add_patch("0001-a", {"f00.txt": FILES["f00.txt"].replace("line 3 ", "LINE 3 ")})
    b.add_patch("0002-b", {"f01.txt": FILES["f01.txt"].replace("line 3 ", "LINE 3 ")})
    series = b.write()
    proc = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"))
    assert rows_printed(proc.stdout) == ["0001-a", "0002-b"], proc.stdout
    assert "hunks:" not in proc.stdout  # no summary needed for two rows


def test_status_long_series_summary_and_verbose(builder):
    series = long_series(builder)
    proc = run_cli("status", "--series", str(series))
    assert proc.returncode == 0, proc.stderr
    assert rows_printed(proc.stdout) == ["0004-p3"], proc.stdout
    assert "25 patches: 25 applied (24 clean, 1 with offsets, 0 with fuzz), 0 failed, 0 not reached" in proc.stdout
    verbose = run_cli("status", "--series", str(series), "-v")
    assert len(rows_printed(verbose.stdout)) == 25
    assert json.loads(run_cli("status", "--series", str(series), "--json").stdout)["patches"][3]["offset"] == 1


ESC_NAME = "a\x1b]0;pwned\x07b.txt"


def _escape_series(tmp_path, patch: str):
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "x.txt").write_text("x\n")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "1.patch").write_text(patch)
    series = tmp_path / "series.yaml"
    series.write_text("version: 1\npatches_dir: patches\ntargets:\n  t:\n    pin: {kind: path, path: up}\n"
                      "patches:\n  - {patch: 1.patch, target: t}\n")
    return series


def test_a_patched_file_name_with_an_escape_sequence_is_spelled_out_not_sent_to_the_terminal(tmp_path):
    """A patch names its files: apply -vv, status and check printed them raw (ESC]0 retitles the
    terminal, ESC]52 writes the clipboard). Spelled ``\\x1b`` as git quotes such names."""
    series = _escape_series(tmp_path, f"--- /dev/null\n+++ b/{ESC_NAME}\n@@ -0,0 +1 @@\n+b\n")
    applied = run_cli("apply", "--series", str(series), "--out", str(tmp_path / "out"), "-vv")
    assert applied.returncode == 0, applied.stderr
    assert "\x1b" not in applied.stdout and "a\\x1b]0;pwned\\x07b.txt @@" in applied.stdout, applied.stdout
    assert (tmp_path / "out" / "t" / ESC_NAME).is_file()  # the file itself keeps its name


def test_status_and_check_spell_out_an_escape_sequence_in_a_failing_patch(tmp_path):
    series = _escape_series(tmp_path, f"--- a/{ESC_NAME}\n+++ b/{ESC_NAME}\n@@ -1 +1 @@\n-zzz\n+b\n")
    for command in ("status", "check"):
        proc = run_cli(command, "--series", str(series))
        assert proc.returncode == 1, proc.stderr
        assert "\x1b" not in proc.stdout + proc.stderr and "a\\x1b]0;pwned\\x07b.txt" in proc.stderr, proc.stderr
