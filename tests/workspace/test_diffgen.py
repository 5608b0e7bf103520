"""Minimal-churn regeneration: unchanged hunks stay byte-identical, and the patch is always correct."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from materialize.patching import apply_file, parse_patch
from materialize.workspace.diffgen import FileChange, regenerate
from materialize.workspace.patchtext import parse

REPO = Path(__file__).resolve().parents[2]
BASE = (REPO / "materialize" / "engine.py").read_bytes()  # a real, 200+ line Python module
HEADER = b"From: Ada <ada@example.com>\nDate: Mon, 21 Sep 2026 10:00:00 +0200\nSubject: attention tweaks\n\n"


def apply_with_gnu_patch(tmp_path: Path, base: bytes, patch: bytes) -> bytes:
    """Ground truth: GNU patch itself, in a scratch dir."""
    work = tmp_path / "gnu"
    (work / "models").mkdir(parents=True, exist_ok=True)
    (work / "models" / "attention.py").write_bytes(base)
    subprocess.run(["patch", "-s", "-p1", "-F0", "-d", str(work)], input=patch, check=True)
    return (work / "models" / "attention.py").read_bytes()


def hunks(patch: bytes) -> list[bytes]:
    return [h.raw for s in parse(patch).sections for h in s.hunks]


def edit_three_places(data: bytes) -> bytes:
    return (data.replace(b"class StoreTree:", b"class StoreTree:\n    # A: cache-aware")
            .replace(b"def apply_patch(", b"# B: the hot path\ndef apply_patch(")
            .replace(b"def materialize(", b"# C: entry point\ndef materialize("))


def test_refresh_after_editing_one_function_keeps_other_hunks_byte_identical(tmp_path: Path) -> None:
    v1 = edit_three_places(BASE)
    p1 = regenerate(None, [FileChange("models/attention.py", BASE, v1)], header=HEADER)
    assert len(hunks(p1)) == 3
    # edit only inside the apply_patch hunk's region
    v2 = v1.replace(b"# B: the hot path\n", b"# B: the hot path, measured\n")
    p2 = regenerate(parse(p1), [FileChange("models/attention.py", BASE, v2, prev=v1)])
    h1, h2 = hunks(p1), hunks(p2)
    assert h2[0] == h1[0] and h2[2] == h1[2]  # untouched hunks: byte-identical, @@ line included
    assert h2[1] != h1[1]
    assert p2.startswith(HEADER)
    assert apply_with_gnu_patch(tmp_path, BASE, p2) == v2
    # a review diff of p1 -> p2 is exactly one changed line pair
    changed = [line for line in p2.splitlines() if line not in p1.splitlines()]
    assert changed == [b"+# B: the hot path, measured"]


def test_growing_an_early_hunk_renumbers_later_hunks_but_keeps_their_bodies(tmp_path: Path) -> None:
    v1 = edit_three_places(BASE)
    p1 = regenerate(None, [FileChange("models/attention.py", BASE, v1)], header=HEADER)
    v2 = v1.replace(b"    # A: cache-aware\n", b"    # A: cache-aware\n    # A2: and documented\n")
    p2 = regenerate(parse(p1), [FileChange("models/attention.py", BASE, v2, prev=v1)])
    old, new = parse(p1).sections[0].hunks, parse(p2).sections[0].hunks
    assert new[1].body == old[1].body and new[2].body == old[2].body
    assert (new[1].new_start, new[2].new_start) == (old[1].new_start + 1, old[2].new_start + 1)
    assert new[1].section == old[1].section
    assert apply_with_gnu_patch(tmp_path, BASE, p2) == v2


def test_hand_written_hunks_survive_an_unrelated_edit(tmp_path: Path) -> None:
    """A patch made by another tool (1 line of context, its own @@ text) is kept, not reformatted."""
    v1 = BASE.replace(b"ID_LENGTH = 16", b"ID_LENGTH = 20")
    lines = BASE.splitlines(keepends=True)
    n = lines.index(b"ID_LENGTH = 16\n") + 1
    hand = (b"Index: models/attention.py\n===================================================================\n"
            b"--- a/models/attention.py\t2026-01-01 00:00:00\n+++ b/models/attention.py\t2026-01-02 00:00:00\n"
            + f"@@ -{n - 1},3 +{n - 1},3 @@ my own words\n".encode()
            + b" " + lines[n - 2] + b"-ID_LENGTH = 16\n+ID_LENGTH = 20\n" + b" " + lines[n])
    assert apply_with_gnu_patch(tmp_path, BASE, hand) == v1
    v2 = v1.replace(b"def materialize(", b"# new\ndef materialize(")
    p2 = regenerate(parse(hand), [FileChange("models/attention.py", BASE, v2, prev=v1)])
    assert p2.startswith(hand)  # header lines, timestamps, the hand hunk: all byte-identical
    assert apply_with_gnu_patch(tmp_path, BASE, p2) == v2


def test_unchanged_content_gives_identical_bytes() -> None:
    v1 = edit_three_places(BASE)
    p1 = regenerate(None, [FileChange("models/attention.py", BASE, v1)], header=HEADER)
    assert regenerate(parse(p1), [FileChange("models/attention.py", BASE, v1, prev=v1)]) == p1


def test_missing_newline_at_end_of_file_round_trips(tmp_path: Path) -> None:
    base = b"a\nb\nc"
    cur = b"a\nB\nc"
    p = regenerate(None, [FileChange("models/attention.py", base, cur)])
    assert b"\\ No newline at end of file\n" in p
    assert apply_with_gnu_patch(tmp_path, base, p) == cur
    assert regenerate(parse(p), [FileChange("models/attention.py", base, cur, prev=cur)]) == p


def test_format_patch_files_parse_and_render_byte_for_byte(tmp_path: Path) -> None:
    """git format-patch output (mbox line, diffstat, signature) survives parse/render exactly."""
    repo = tmp_path / "r"
    env = {"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "A",
           "GIT_COMMITTER_EMAIL": "a@x", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    (repo / "f.py").write_bytes(BASE)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "base"], check=True, env=env)
    (repo / "f.py").write_bytes(edit_three_places(BASE))
    subprocess.run(["git", "-C", str(repo), "commit", "-qam", "three edits"], check=True, env=env)
    data = subprocess.run(["git", "-C", str(repo), "format-patch", "-1", "--stdout"], check=True,
                          capture_output=True, env=env).stdout
    parsed = parse(data)
    assert parsed.render() == data
    assert parsed.header.startswith(b"From ") and b" f.py | " in parsed.header
    assert parsed.trailer.startswith(b"-- \n")
    # refresh with no content change keeps the whole file, signature included
    v1 = edit_three_places(BASE)
    assert regenerate(parsed, [FileChange("f.py", BASE, v1, prev=v1)]) == data
    # after an edit the git `index` line names the new blob (as `git hash-object` computes it)
    v2 = v1.replace(b"# B: the hot path", b"# B: the hot path!")
    (repo / "f.py").write_bytes(v2)
    blob = subprocess.run(["git", "-C", str(repo), "hash-object", "f.py"], check=True, capture_output=True,
                          env=env).stdout.strip()
    refreshed = regenerate(parsed, [FileChange("f.py", BASE, v2, prev=v1)])
    index = next(line for line in refreshed.splitlines() if line.startswith(b"index "))
    assert index.split(b"..")[1].split()[0] == blob[: len(index.split(b"..")[1].split()[0])]


_LINES = [b"x = %d\n" % i for i in range(40)]


@settings(max_examples=60, deadline=None)
@given(
    first=st.lists(st.tuples(st.integers(0, 39), st.sampled_from(["del", "ins", "mod"])), max_size=6),
    second=st.lists(st.tuples(st.integers(0, 39), st.sampled_from(["del", "ins", "mod"])), max_size=4),
)
def test_regenerated_patches_always_apply_exactly_and_are_stable(first, second) -> None:
    """For any two rounds of edits: the refreshed patch turns base into the new content (GNU-exact
    applier, no fuzz), and refreshing again without edits changes nothing."""
    def mutate(lines: list[bytes], ops, tag: bytes) -> list[bytes]:
        out = list(lines)
        for pos, op in ops:
            pos = min(pos, len(out) - 1) if out else 0
            if op == "del" and out:
                del out[pos]
            elif op == "ins":
                out.insert(pos, b"new %s %d\n" % (tag, pos))
            elif out:
                out[pos] = out[pos].rstrip(b"\n") + b" # " + tag + b"\n"
        return out

    base = b"".join(_LINES)
    v1 = b"".join(mutate(_LINES, first, b"one"))
    v2 = b"".join(mutate(v1.splitlines(keepends=True), second, b"two"))
    p1 = regenerate(None, [FileChange("f.py", base, v1)], header=b"Subject: s\n\n")
    p2 = regenerate(parse(p1), [FileChange("f.py", base, v2, prev=v1)])
    for patch, want in ((p1, v1), (p2, v2)):
        files = parse_patch(patch, source="p", strip=1).files
        if want == base:
            assert not files
            continue
        result = apply_file(base, files[0], max_fuzz=0)
        assert result.ok and result.content == want
        assert all(h.status == "clean" for h in result.hunks)
    assert regenerate(parse(p2), [FileChange("f.py", base, v2, prev=v2)]) == p2


BINARY_PATCH = b"""\
From: a <a@b>
Subject: a binary file

diff --git a/models/tt/blob.bin b/models/tt/blob.bin
new file mode 100644
index 0000000000000000000000000000000000000000..e69de29bb2d1d6434b8b29ae775ad8c2e48c5391
GIT binary patch
literal 3
KcmZ?wVEh0C00II4

literal 0
HcmV?d00001

"""


def test_refresh_after_push_force_never_drops_a_git_binary_payload(project) -> None:
    """push -f took a patch whose only section is a GIT binary patch in (its file went to a .rej);
    `refresh` then wrote the patch back empty: the payload was gone for good. Refused now, naming
    the patch line, and the patch is byte for byte what it was."""
    import subprocess
    import sys

    patch = project / "patches" / "tt-metal" / "bin.patch"
    patch.write_bytes(BINARY_PATCH)
    series = project / "series" / "default.yaml"
    series.write_text(series.read_text().replace("patches: []", "patches:\n  - {patch: tt-metal/bin.patch, target: tt-metal}"))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "materialize", *args], capture_output=True, text=True, cwd=project)

    assert cli("push", "-f").returncode == 1  # forced in, its file in a .rej
    for command in (["refresh"], ["diff"]):
        proc = cli(*command)
        assert proc.returncode == 1, proc.stderr
        assert f"{patch}:7: models/tt/blob.bin: a GIT binary patch" in proc.stderr
    assert patch.read_bytes() == BINARY_PATCH
    assert cli("pop", "-f").returncode == 0 and patch.read_bytes() == BINARY_PATCH


def test_a_kept_hunk_anchored_at_the_end_of_a_file_moves_off_it_only_regenerated(tmp_path: Path) -> None:
    """A hunk with less context after its change than before applies only at the end of the file (GNU
    patch at fuzz 0). The upstream grew a line at the end; the hunk that appends ``# first`` kept its
    bytes, did not apply any more, and `rebase` died on its own regenerated patch half-way (exit 1, no
    conflict to resolve, only --abort left)."""
    base = b"".join(b"%d\n" % i for i in range(1, 21))
    v1 = base + b"# first\n"
    p1 = regenerate(None, [FileChange("models/attention.py", base, v1)], header=HEADER)
    grown = base + b"# upstream moved on\n"
    merged = base + b"# first\n# upstream moved on\n"
    p2 = regenerate(parse(p1), [FileChange("models/attention.py", grown, merged, prev=merged)])
    assert apply_with_gnu_patch(tmp_path, grown, p2) == merged
    # at the start of a file, likewise
    v1 = b"# zeroth\n" + base
    p1 = regenerate(None, [FileChange("models/attention.py", base, v1)], header=HEADER)
    grown = b"# upstream moved on\n" + base
    merged = b"# upstream moved on\n# zeroth\n" + base
    p2 = regenerate(parse(p1), [FileChange("models/attention.py", grown, merged, prev=merged)])
    assert apply_with_gnu_patch(tmp_path, grown, p2) == merged


ODD_NAMES = ["with space.txt", "tab\there", 't"q.txt', "ö x.txt", "b\\s.txt", "plain.txt"]


def _file_header_lines(patch: bytes) -> list[bytes]:
    return [line for line in patch.splitlines()
            if line.startswith((b"diff --git ", b"--- ", b"+++ ", b"rename from ", b"rename to "))]


def test_names_with_spaces_and_special_characters_are_written_as_git_writes_them(tmp_path: Path) -> None:
    """A TAB after a name with a space in it (GNU patch otherwise reads `b/with`), C-quoting for
    control characters, quotes, backslashes and non-ASCII bytes: the header lines are git's own, and
    GNU patch applies the patch to the right files (edits, a new file, a deletion, a rename)."""
    repo = tmp_path / "git"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@x", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
           "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env).stdout

    git("init", "-q")
    body = b"".join(b"line %d\n" % i for i in range(20))
    for name in ODD_NAMES:
        (repo / name).write_bytes(body)
    (repo / "gone away.txt").write_bytes(b"bye\n")
    (repo / "old name.txt").write_bytes(body)
    git("add", "-A")
    git("commit", "-qm", "base")
    changes = []
    for name in ODD_NAMES:
        (repo / name).write_bytes(body.replace(b"line 5\n", b"line five\n"))
        changes.append(FileChange(name, body, body.replace(b"line 5\n", b"line five\n")))
    (repo / "new file.txt").write_bytes(b"new\n")
    changes.append(FileChange("new file.txt", None, b"new\n", old_mode=None))
    (repo / "gone away.txt").unlink()
    changes.append(FileChange("gone away.txt", b"bye\n", None, new_mode=None))
    renamed = body.replace(b"line 9\n", b"line nine\n")
    (repo / "old name.txt").rename(repo / "new näme.txt")
    (repo / "new näme.txt").write_bytes(renamed)
    changes.append(FileChange("new näme.txt", body, renamed, old_path="old name.txt"))
    git("add", "-A")
    ours = regenerate(None, changes)
    theirs = git("diff", "--cached", "-M", "HEAD")
    assert sorted(_file_header_lines(ours)) == sorted(_file_header_lines(theirs))
    gnu = tmp_path / "gnu"
    gnu.mkdir()
    for name in [*ODD_NAMES, "old name.txt"]:
        (gnu / name).write_bytes(body)
    (gnu / "gone away.txt").write_bytes(b"bye\n")
    subprocess.run(["patch", "-s", "-p1", "-F0", "-d", str(gnu)], input=ours, check=True)
    assert sorted(p.name for p in gnu.iterdir()) == sorted(p.name for p in repo.iterdir() if p.name != ".git")
    for p in gnu.iterdir():
        assert p.read_bytes() == (repo / p.name).read_bytes(), p.name


def test_a_file_absent_before_and_after_is_no_section_even_under_two_names() -> None:
    """(rt-ws 09) A section whose old name is in no tree and whose new name is on no disk changes nothing: it
    was written as `diff --git` + `new file mode None` and nothing else (a refresh after the entry's strip
    changed by hand); a no-op leaves the patch, like one under a single name."""
    out = regenerate(None, [FileChange(path="b/models/x.py", old_path="a/models/x.py", base=None, cur=None,
                                       old_mode=None, new_mode=None)], header=HEADER)
    assert out == HEADER
