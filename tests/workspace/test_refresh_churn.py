"""Refresh writes what `diff -u` / `git diff` would write (issue 11 item 3).

A review of a refreshed patch must show exactly the lines the user changed, and an edit plus its
revert must give back the patch byte for byte. Fresh hunks are placed the way the patch's own tool
places them (git for git-style patches, GNU diff for quilt/GNU ones; they differ from difflib on
blocks bracketed by blank lines), and the `@@` function context is what the patch had.
"""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from materialize.workspace.diffgen import FileChange, regenerate
from materialize.workspace.patchtext import parse

from .conftest import REPO
from .test_edit import ATTN, patch_file, run, wfile

HEADER = b"From: Ada Tester <ada@example.com>\nSubject: add a helper\n\n"


def hunks_of(diff: bytes) -> bytes:
    """Everything from the first @@ on (file headers differ in labels and dates)."""
    return diff[diff.index(b"\n@@") + 1:] if b"\n@@" in diff else b""


def tool_diff(style: str, base: bytes, cur: bytes, tmp: Path, *, funcname: bool = False) -> bytes:
    """The patch text `diff -u` (gnu) or `git diff` (git) writes for ATTN going from base to cur."""
    for side, data in (("a", base), ("b", cur)):
        (tmp / side / ATTN).parent.mkdir(parents=True, exist_ok=True)
        (tmp / side / ATTN).write_bytes(data)
    if style == "git":
        argv = ["git", "diff", "--no-index", "--src-prefix=", "--dst-prefix=", f"a/{ATTN}", f"b/{ATTN}"]
    else:
        argv = ["diff", "-u", *(["-p"] if funcname else []), "--label", f"a/{ATTN}", "--label", f"b/{ATTN}",
                f"a/{ATTN}", f"b/{ATTN}"]
    proc = subprocess.run(argv, cwd=tmp, capture_output=True, env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"})
    assert proc.returncode == 1, proc.stderr
    return proc.stdout


def with_block(base: bytes, at: int, block: list[bytes]) -> bytes:
    lines = base.splitlines(keepends=True)
    blanks = [i for i, line in enumerate(lines) if line == b"\n"]
    i = blanks[at % len(blanks)]
    return b"".join(lines[:i] + block + lines[i:])


def random_edit(rng: random.Random, base: bytes, trial: int) -> bytes:
    block = [b"\n", b"def added_%d():\n" % trial, b"    value = 41\n", b"    return value\n", b"\n"]
    if rng.random() < 0.5:
        block.append(b"\n")
    cur = with_block(base, rng.randrange(1000), block)
    if rng.random() < 0.5:  # and a second change elsewhere
        lines = cur.splitlines(keepends=True)
        k = rng.randrange(len(lines))
        lines[k] = b"# changed\n"
        cur = b"".join(lines)
    return cur


@pytest.mark.parametrize("style", ["git", "gnu", "gnu-p"])
def test_fresh_hunks_are_what_the_patch_tool_writes(style: str, tmp_path: Path) -> None:
    base = (REPO / "materialize" / "engine.py").read_bytes()
    rng = random.Random(11)
    tool = "git" if style == "git" else "gnu"
    for trial in range(25):
        cur = random_edit(rng, base, trial)
        expected = tool_diff(tool, base, cur, tmp_path / str(trial), funcname=style == "gnu-p")
        if style == "git":
            old = None  # a new patch is git-style
        else:  # an existing quilt/GNU patch of this file (another change), written by diff -u [-p]
            other = base.replace(b"ID_LENGTH = 16", b"ID_LENGTH = 17", 1)
            old = parse(HEADER + tool_diff(tool, base, other, tmp_path / f"old{trial}", funcname=style == "gnu-p"))
        got = regenerate(old, [FileChange(ATTN, base, cur, prev=None)])
        assert hunks_of(got) == hunks_of(expected), trial


def project_with_patch(project: Path, style: str) -> tuple[bytes, bytes]:
    """A one-patch series whose patch the tool wrote: an added block bracketed by blank lines."""
    base = (project / "upstream" / "tt-metal" / ATTN).read_bytes()
    cur = with_block(base, 3, [b"\n", b"def resume_offset(page):\n", b"    offset = page * 64\n",
                               b"    return offset\n", b"\n", b"\n"])
    data = HEADER + tool_diff(style, base, cur, project.parent / "mk")
    (project / "patches" / "tt-metal" / "0001-helper.patch").write_bytes(data)
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace(
        "patches: []", "patches:\n  - patch: tt-metal/0001-helper.patch\n    target: tt-metal\n"))
    return data, cur


@pytest.mark.parametrize("style", ["gnu", "git"])
def test_a_one_line_edit_changes_one_line_and_its_revert_gives_the_bytes_back(project: Path, style: str) -> None:
    original, _cur = project_with_patch(project, style)
    assert run(project, "push") == 0
    f = wfile(project)
    written = f.read_bytes()
    f.write_bytes(written.replace(b"    offset = page * 64\n", b"    offset = page * 128\n"))
    assert run(project, "refresh") == 0
    edited = patch_file(project, "0001-helper").read_bytes()
    review = subprocess.run(["diff", "-u", "-", str(patch_file(project, "0001-helper"))], input=original,
                            capture_output=True).stdout.decode()
    changed = [line for line in review.splitlines()[2:] if line[:1] in "+-" and not line[1:].startswith("index ")]
    assert changed == ["-+    offset = page * 64", "++    offset = page * 128"]
    assert edited.count(b"\n@@") == original.count(b"\n@@")
    f.write_bytes(written)
    assert run(project, "refresh") == 0
    assert patch_file(project, "0001-helper").read_bytes() == original


def test_function_context_stays_what_the_patch_had(tmp_path: Path) -> None:
    """A hunk regenerated in place keeps its @@ text (here a long, untruncated one); a patch without
    function context gets none; a new git-style hunk gets git's (80 bytes)."""
    base = (REPO / "materialize" / "engine.py").read_bytes()
    cur = base.replace(b"ID_LENGTH = 16", b"ID_LENGTH = 20", 1)
    diff = tool_diff("gnu", base, cur, tmp_path / "a")
    long_context = b" def a_function_whose_signature_is_long(query, key, value, scale, chunk, page, is_causal=True):"
    old_bytes = HEADER + diff.replace(b" @@\n", b" @@" + long_context + b"\n", 1)
    old = parse(old_bytes)
    edited = cur.replace(b"ID_LENGTH = 20", b"ID_LENGTH = 24", 1)
    new = regenerate(old, [FileChange(ATTN, base, edited, prev=cur)])
    assert long_context + b"\n" in new
    plain = regenerate(parse(HEADER + diff), [FileChange(ATTN, base, edited, prev=cur)])
    assert [h.section for s in parse(plain).sections for h in s.hunks] == [b"\n"]
    fresh = regenerate(None, [FileChange(ATTN, base, edited)])
    git = tool_diff("git", base, edited, tmp_path / "g")
    assert hunks_of(fresh) == hunks_of(git)
