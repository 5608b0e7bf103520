"""Seeded differential fuzzer: random tree + quilt series of 2-6 patches; `quilt push` vs materialize.

Usage: ``python -m tests.differential.quilt_fuzz START COUNT [--keep]`` from the repository root
(one JSON line per finding on stdout, summary at the end); ``test_quilt_fuzz.py`` runs a fixed range
of seeds in ``make test-differential``. Written by the session-14 exactness red team (about 3,650
seeds then, every silent difference found fixed).

For each seed: a small tree; each patch is generated against the tree quilt has *now* (perturbed so
that hunks land at offsets, with fuzz, or fail), in one of: unified, context, normal, git (renames,
copies, modes, symlinks, new/deleted/empty files), with strips -p0/-p1/-p2, -R, -F, mail headers,
garbage, CRLF, no-newline, several sections per file, .gz. quilt pushes one patch at a time (its
stdout is GNU's per-hunk report); the series stops at the first patch quilt fails. Then ours:
import-quilt + apply; trees compared (bytes, x bit, links, empty dirs, which files exist), the
failing patch compared, and every hunk's (line, offset, fuzz) compared with GNU's words.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from materialize.cli import main as mat_main

from .debian import snapshot

VOCAB = [b"a", b"b", b"c", b"int x;", b"}", b"{", b"", b"\tfoo", b"  bar  ", b"\f", b"x" * 300,
         b"caf\xe9 \xff", b"return 0;", b"#define Y 1", b"- dash", b"+ plus", b"*** stars", b"--- x",
         b"\tint t;", b"end", b"@@ at", b"\\ back", b"  ", b"\t"]
ENV = dict(os.environ, LC_ALL="C", QUILTRC="/dev/null", QUOTING_STYLE="literal",
           GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@b", GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@b",
           GIT_AUTHOR_DATE="1700000000 +0000", GIT_COMMITTER_DATE="1700000000 +0000")
ENV.pop("PYTHONPATH", None)


def rline(rng: random.Random) -> bytes:
    return rng.choice(VOCAB)


# Seeds from NEW_SHAPES on also draw the shapes added by the session-15 red team: names git quotes
# (TAB, quote, backslash, non-ASCII with core.quotepath), a binary file (git --binary, "Binary files
# differ"), lines with CRLF among LF lines, renames/copies onto existing files, several sections on one
# file in different formats, hand-trimmed context (hunks with fewer leading/trailing context lines).
NEW_SHAPES = 20000
SHAPES = {"new": False}
ODD_NAMES = ["t\tab.c", 'q"uote.c', "back\\slash.c", "sp ace/\u00e9t\u00e9.txt", "-dash.c", "#hash.c"]


def gen_file(rng: random.Random, crlf: bool = False) -> bytes:
    n = rng.choice([0, 1, 3, 8, 15, 30, 50])
    lines = [rline(rng) for _ in range(n)]
    eol = b"\r\n" if crlf else b"\n"
    if SHAPES["new"] and rng.random() < 0.1:  # CRLF on some lines only
        data = b"".join(x + rng.choice([b"\n", b"\r\n"]) for x in lines)
    else:
        data = b"".join(x + eol for x in lines)
    if data and rng.random() < 0.15:
        data = data[: -len(eol)]
    return data


def gen_tree(rng: random.Random) -> dict:
    tree = {}
    names = ["f.c", "src/g.c", "src/h.txt", "doc/readme", "dir two/s p.txt", "x/y/z.c", "e.txt", "caf\u00e9.c"]
    if SHAPES["new"]:
        names += rng.sample(ODD_NAMES, 2)
    for name in rng.sample(names, rng.randint(2, 5)):
        tree[name] = ("file", rng.random() < 0.15, gen_file(rng, crlf=rng.random() < 0.15))
    if SHAPES["new"] and rng.random() < 0.2:
        tree["bin.dat"] = ("file", False, bytes(rng.randrange(256) for _ in range(rng.choice([4, 40]))) + b"\0")
    if rng.random() < 0.3:
        tree["link"] = ("link", False, rng.choice(list(tree)).encode())
    if rng.random() < 0.4:
        tree["emptydir"] = ("dir", False, b"")
    if rng.random() < 0.3:
        tree["src/void/deeper"] = ("dir", False, b"")
    return tree


def write_tree(root: Path, tree: dict) -> None:
    for path, (kind, x, data) in tree.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        if kind == "dir":
            p.mkdir(parents=True, exist_ok=True)
        elif kind == "link":
            os.symlink(data, p)
        else:
            p.write_bytes(data)
            p.chmod(0o755 if x else 0o644)


def edit_lines(rng: random.Random, data: bytes) -> bytes:
    crlf = b"\r\n" in data and rng.random() < 0.8
    eol = b"\r\n" if crlf else b"\n"
    lines = data.split(b"\n")
    last_unterminated = lines[-1] != b""
    if not last_unterminated:
        lines.pop()
    lines = [x + b"\n" for x in lines]
    if last_unterminated and lines:
        lines[-1] = lines[-1][:-1]
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(lines))
        dele = rng.randint(0, 2)
        ins = [rline(rng) + eol for _ in range(rng.randint(0, 2))]
        if dele == 0 and not ins:
            ins = [rline(rng) + eol]
        lines[at : at + dele] = ins
    out = b"".join(x if x.endswith(b"\n") else x + b"\n" for x in lines)
    if out and rng.random() < 0.12:
        out = out[:-1]  # drop the final newline
    if out == data:
        out += b"new\n"
    return out


def perturb(rng: random.Random, data: bytes) -> bytes:
    """What the patch's author had instead of ``data``: lines added far away (offset), one changed (fuzz)."""
    lines = data.splitlines(keepends=True)
    r = rng.random()
    if r < 0.3 and lines:
        at = rng.choice([0, len(lines) // 2, len(lines)])
        lines[at:at] = [rline(rng) + b"\n" for _ in range(rng.randint(1, 5))]
    elif r < 0.5 and lines:
        k = rng.randrange(len(lines))
        if lines[k].endswith(b"\n"):
            lines[k] = rline(rng) + b"\n"
    elif r < 0.55 and lines:
        del lines[rng.randrange(len(lines))]
    return b"".join(lines)


def label(path: str, side: str, strip: int) -> str:
    pre = {0: "", 1: f"{side}/", 2: f"w/{side}/"}[strip]
    return pre + path


def stamp(rng: random.Random, missing: bool) -> str:
    if missing and rng.random() < 0.5:
        return "\t1970-01-01 00:00:00.000000000 +0000"
    return rng.choice(["", "\t2023-05-01 10:00:00.000000000 +0200", "\tMon Jan  2 10:00:00 2023"])


def plain_section(rng: random.Random, kind: str, path: str, old: bytes | None, new: bytes | None,
                  strip: int, tmp: Path) -> bytes:
    a, b = tmp / "old", tmp / "new"
    a.write_bytes(old or b"")
    b.write_bytes(new or b"")
    ctx = rng.choice([0, 1, 2, 3, 3, 3, 5])
    lo = "/dev/null" if old is None and rng.random() < 0.7 else label(path, "a", strip)
    if old is not None and rng.random() < 0.12:  # another old name: GNU's best_name picks the file
        lo = label(rng.choice([path + ".orig", "caf\u00e9.c", "f.c", "x/" + path, path.split("/")[-1]]), "a", strip)
    ln = "/dev/null" if new is None and rng.random() < 0.7 else label(path, "b", strip)
    if kind == "normal":
        out = subprocess.run(["diff", str(a), str(b)], capture_output=True).stdout
        head = f"Index: {label(path, 'a', strip)}\n".encode()
        if rng.random() < 0.5:
            head = f"diff {label(path, 'a', strip)} {label(path, 'b', strip)}\n".encode() + head
        return head + out
    flag = "-U" if kind == "unified" else "-C"
    out = subprocess.run(["diff", "-a", f"{flag}{ctx}", "-L", lo + stamp(rng, old is None),
                          "-L", ln + stamp(rng, new is None), str(a), str(b)], capture_output=True).stdout
    head = b""
    r = rng.random()
    if r < 0.08 and kind == "unified" and out.count(b"\n") > 2:  # an Index: line alone names the file
        return f"Index: {label(path, 'b', strip)}\n".encode() + out.split(b"\n", 2)[2]
    if r < 0.3:
        head = f"Index: {label(path, 'b', strip)}\n===================================================================\n".encode()
    elif r < 0.5:
        head = f"diff -Nru {label(path, 'a', strip)} {label(path, 'b', strip)}\n".encode()
    return head + out


def git_patch(rng: random.Random, old_tree: dict, new_tree: dict, strip: int, tmp: Path) -> bytes:
    repo = tmp / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir()
    quotepath = "true" if SHAPES["new"] and rng.random() < 0.5 else "false"
    git = ["git", "-c", "core.autocrlf=false", "-c", f"core.quotepath={quotepath}", "-C", str(repo)]
    subprocess.run(git + ["init", "-q"], check=True, env=ENV)
    write_tree(repo, old_tree)
    subprocess.run(git + ["add", "-A"], check=True, env=ENV)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "o"], check=True, env=ENV)
    for p in list(repo.iterdir()):
        if p.name != ".git":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    write_tree(repo, new_tree)
    subprocess.run(git + ["add", "-A"], check=True, env=ENV)
    opts = [rng.choice(["-M", "-M", "-C", "-C", "--no-renames"]), f"-U{rng.choice([0, 1, 3, 3])}"]
    if SHAPES["new"] and rng.random() < 0.5:
        opts.append("--binary")
    if opts[0] == "-C" and rng.random() < 0.5:
        opts.append("--find-copies-harder")
    src, dst = {0: ("", ""), 1: ("a/", "b/"), 2: ("w/a/", "w/b/")}[strip]
    if strip == 0:
        opts.append("--no-prefix")
    elif strip == 2:
        opts += [f"--src-prefix={src}", f"--dst-prefix={dst}"]
    if rng.random() < 0.4:
        out = subprocess.run(git + ["commit", "-q", "-m", "subject line\n\nbody text"], env=ENV, capture_output=True)
        out = subprocess.run(git + ["format-patch", "--stdout", "-1", *opts], capture_output=True, env=ENV)
    else:
        out = subprocess.run(git + ["diff", "--cached", *opts], capture_output=True, env=ENV)
    return out.stdout


def fits(name: str, tree: dict) -> bool:
    """``name`` can be written into ``tree``: no file where it needs a folder, no folder below it."""
    parents = ["/".join(name.split("/")[:k]) for k in range(1, name.count("/") + 1)]
    return not any(tree.get(x, ("dir",))[0] != "dir" for x in parents) \
        and not any(x.startswith(name + "/") for x in tree)


def change_tree(rng: random.Random, cur: dict, git: bool) -> tuple[dict, dict]:
    """(author's old tree, author's new tree) for one patch over the current tree ``cur``."""
    files = [p for p, v in cur.items() if v[0] == "file"]
    old = dict(cur)
    new = dict(cur)
    ops = rng.randint(1, 3)
    for _ in range(ops):
        r = rng.random()
        if files and r < 0.55:
            p = rng.choice(files)
            if old[p][0] != "file" or new.get(p, ("x",))[0] != "file":
                continue
            pert = perturb(rng, old[p][2])
            old[p] = ("file", old[p][1], pert)
            new[p] = ("file", new[p][1], edit_lines(rng, new[p][2] if new[p][2] != cur[p][2] else pert))
        elif r < 0.7:
            name = rng.choice(["new.c", "src/new.h", "n/m/o.txt", "empty", "f.c", "src", "emptydir/in.c",
                               "src/void/deeper/d.c", "src/void/v.c"])
            if name in new or not fits(name, new):
                continue
            new[name] = ("file", git and rng.random() < 0.3, b"" if name == "empty" else gen_file(rng))
        elif files and r < 0.8:
            p = rng.choice(files)
            if p in new and rng.random() < 0.3 and old[p][0] == "file":
                old[p] = ("file", old[p][1], perturb(rng, old[p][2]))
            new.pop(p, None)
        elif git and files and r < 0.88:
            p = rng.choice(files)
            if p in new and new[p][0] == "file":
                dests = ["moved.c", "src/moved.c", "g2/" + p.split("/")[-1]]
                if SHAPES["new"]:
                    dests = [x for x in dests + files[:2] + ["t\tmoved.c", 'mo"ved.c'] if x != p]
                dest = rng.choice(dests)
                if SHAPES["new"] and dest in new and rng.random() < 0.5:
                    del new[dest]  # the destination existed before: git shows a rename onto it
                if dest not in new and fits(dest, new):
                    data = new[p][2]
                    if rng.random() < 0.5 and data:
                        data = edit_lines(rng, data)
                    new[dest] = ("file", new[p][1], data)
                    if rng.random() < 0.7:
                        del new[p]
        elif git and files and r < 0.94:
            p = rng.choice(files)
            if p in new and new[p][0] == "file":
                new[p] = ("file", not new[p][1], new[p][2])
        elif git:
            name = rng.choice(["link", "src/ln", "lnk2"])
            if name in new and new[name][0] == "file" or not fits(name, new):
                continue
            if name in new and rng.random() < 0.3:
                del new[name]
            else:
                target = rng.choice(files + ["nowhere", "dangling/x"]) if files else "nowhere"
                new[name] = ("link", False, target.encode())
    return old, new


_UHUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def trim_context(rng: random.Random, body: bytes) -> bytes:
    """Hand-trimmed unified hunks: some leading or trailing context lines dropped, header recounted."""
    lines = body.split(b"\n")
    out: list[bytes] = []
    k = 0
    while k < len(lines):
        m = _UHUNK.match(lines[k])
        if not m or rng.random() < 0.4:
            out.append(lines[k])
            k += 1
            continue
        a, b, c, d = (int(m.group(1)), int(m.group(2) or 1) if m.group(2) is not None else 1,
                      int(m.group(3)), int(m.group(4)) if m.group(4) is not None else 1)
        n_old, n_new, j = 0, 0, k + 1
        while j < len(lines) and (n_old < b or n_new < d):
            t = lines[j][:1]
            if t in (b" ", b""):
                n_old, n_new = n_old + 1, n_new + 1
            elif t == b"-":
                n_old += 1
            elif t == b"+":
                n_new += 1
            elif t != b"\\":
                break
            j += 1
        while j < len(lines) and lines[j].startswith(b"\\"):
            j += 1
        hunk = lines[k + 1 : j]
        b0, d0 = b, d
        lead = rng.randint(0, 2) if rng.random() < 0.5 else 0
        trail = rng.randint(0, 2) if lead == 0 or rng.random() < 0.3 else 0
        while lead and hunk and hunk[0][:1] == b" " and len(hunk) > 1:
            hunk.pop(0)
            a, b, c, d, lead = a + 1, b - 1, c + 1, d - 1, lead - 1
        while trail and len(hunk) > 1 and hunk[-1][:1] == b" " :
            hunk.pop()
            b, d, trail = b - 1, d - 1, trail - 1
        if b == 0 and b0:  # trimmed to an empty side: the range now starts at the line before
            a -= 1
        if d == 0 and d0:
            c -= 1
        out.append(b"@@ -%d,%d +%d,%d @@" % (a, b, c, d) + m.group(5))
        out.extend(hunk)
        k = j
    return b"\n".join(out)


def make_patch(rng: random.Random, cur: dict, tmp: Path) -> tuple[bytes, str, int, bool]:
    """(patch bytes, kind, strip, reverse)."""
    kind = rng.choice(["unified", "unified", "context", "normal", "git", "git"])
    strip = rng.choice([1, 1, 1, 0, 2])
    reverse = rng.random() < 0.12
    old, new = change_tree(rng, cur, kind == "git")
    if reverse:  # the series says -R: the patch goes from the wanted tree back to the current one
        old, new = new, old
    if kind == "git":
        body = git_patch(rng, old, new, strip, tmp)
    else:
        parts = []
        paths = sorted(set(old) | set(new))
        for p in paths:
            o, n = old.get(p), new.get(p)
            if (o and o[0] == "link") or (n and n[0] == "link"):
                continue
            if o == n:
                continue
            if kind == "normal" and (o is None or n is None or n[2] == o[2]):
                continue
            ob = o[2] if o else None
            nb = n[2] if n else None
            if ob == nb:
                continue
            if rng.random() < 0.15 and ob is not None and nb is not None and kind != "normal":
                mid = edit_lines(rng, ob)  # two sections for the same file
                k2 = rng.choice(["unified", "context", "normal"]) if SHAPES["new"] else kind
                parts.append(plain_section(rng, kind, p, ob, mid, strip, tmp))
                parts.append(plain_section(rng, k2, p, mid, nb, strip, tmp))
            else:
                parts.append(plain_section(rng, kind, p, ob, nb, strip, tmp))
        garbage = [b"", b"", b"Only in a: junk\n", b"Binary files a/x.bin and b/x.bin differ\n", b"\n",
                   b"# comment line\n", b"some prose here\n"]
        body = b"".join(rng.choice(garbage) + part for part in parts)
    if SHAPES["new"] and rng.random() < 0.2:
        body = trim_context(rng, body)
    if rng.random() < 0.25:  # whitespace eaten by a mailer or an editor: blank and TAB-led context lines
        lines = body.split(b"\n")
        for k, line in enumerate(lines):
            if line in (b" ", b"  ") and rng.random() < 0.7:
                lines[k] = b""
            elif line.startswith((b" \t", b"  \t")) and rng.random() < 0.7:
                lines[k] = line.lstrip(b" ")
        body = b"\n".join(lines)
    r = rng.random()
    if r < 0.2:
        body = (b"From: Someone <s@x>\nSubject: [PATCH] thing\n\nWhy:\n - because\n---\n f | 2 +-\n\n" + body
                + b"-- \n2.39.2\n\n")
    elif r < 0.3:
        body = b"Description: fix\n\tcontinued\nAuthor: me\n\n" + body
    elif r < 0.35:
        body = body.replace(b"\n", b"\r\n")
    if rng.random() < 0.05 and body.endswith(b"\n"):
        body = body[:-1]  # the patch file's last line without its newline
    return body, kind, strip, reverse


def quilt(cwd: Path, patches: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(ENV, QUILT_PATCHES=str(patches))
    return subprocess.run(["quilt", *args], cwd=cwd, env=env, capture_output=True)


_SUCC = re.compile(r"^Hunk #(\d+) succeeded at (-?\d+)(?: with fuzz (\d+))?(?: \(offset (-?\d+) lines?\))?\.$")


STATS = {"hunks": 0, "nonclean": 0, "patches": 0, "identical": 0, "identical_failure": 0}


def gnu_hunks(out: str) -> list[tuple[str, dict[int, tuple[int, int, int]]]]:
    files: list[tuple[str, dict]] = []
    for line in out.splitlines():
        if line.startswith("patching file ") or line.startswith("patching symbolic link "):
            files.append((line, {}))
        elif m := _SUCC.match(line):
            files[-1][1][int(m.group(1))] = (int(m.group(2)), int(m.group(4) or 0), int(m.group(3) or 0))
    return files


def ours(qdir: Path, base: Path, work: Path, upto: int | None = None) -> tuple[int, str, Path, list]:
    series = work / "s.yaml"
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = 0
        if not series.exists():
            code = mat_main(["import-quilt", str(qdir), "--upstream", str(base), "--target", "t", "-o", str(series)])
        out = work / ("out" if upto is None else f"out{upto}")
        reports = []
        if code == 0:
            args = ["apply", "--series", str(series), "--out", str(out)]
            if upto is not None:
                args += ["--upto", str(upto)]
            code = mat_main(args)
            if code == 0:
                from materialize.engine import materialize
                from materialize.series import load_series
                m = materialize(load_series(series), upto=upto)  # cached: the reports with their lines
                reports = [dict(hunks=[dict(file=h.file, header=h.header, status=h.status, offset=h.offset,
                                            fuzz=h.fuzz, at=h.applied_at) for h in r.hunks]) for r in m.reports]
    return code, sink.getvalue(), out / "t", reports


def cmp_snap(a, b) -> list[str]:
    d = []
    for p in sorted(set(a.files) | set(b.files)):
        if a.files.get(p) != b.files.get(p):
            x, y = a.files.get(p), b.files.get(p)
            d.append(f"{p}: ours={None if x is None else x[:2]} quilt={None if y is None else y[:2]}")
    for p in sorted(a.empty_dirs ^ b.empty_dirs):
        d.append(f"{p}/: empty dir only in {'ours' if p in a.empty_dirs else 'quilt'}")
    return d


def run_seed(seed: int, root: Path) -> dict | None:
    rng = random.Random(seed)
    SHAPES["new"] = seed >= NEW_SHAPES
    base = root / "base"
    base.mkdir()
    write_tree(base, gen_tree(rng))
    qtree = root / "q"
    shutil.copytree(base, qtree, symlinks=True)
    patches = root / "patches"
    patches.mkdir()
    (patches / "series").write_bytes(b"")
    tmp = root / "tmp"
    tmp.mkdir()
    n = rng.randint(2, 6)
    series_lines: list[str] = []
    gnu: list[list] = []
    failed_at = None
    kinds = []
    for k in range(1, n + 1):
        cur = snapshot(qtree).files
        cur = {p: v for p, v in cur.items()}
        for _try in range(8):
            body, kind, strip, reverse = make_patch(rng, cur, tmp)
            if b"\n@@ " in body or b"\n***************" in body or re.search(rb"\n\d+(,\d+)?[acd]\d", body) \
                    or b"\ndiff --git" in body or body.startswith(b"diff --git"):
                break
        else:
            continue
        kinds.append(kind + (f"-p{strip}" if strip != 1 else "") + ("-R" if reverse else ""))
        name = f"{k:02d}-{kind}.patch"
        if rng.random() < 0.1:
            name = "sub/" + name
            (patches / "sub").mkdir(exist_ok=True)
        r = rng.random()
        if r < 0.06:
            name += ".gz"
            (patches / name).write_bytes(gzip.compress(body, mtime=0))
        elif r < 0.09:
            import bz2
            name += ".bz2"
            (patches / name).write_bytes(bz2.compress(body))
        elif r < 0.12:
            import lzma
            name += ".xz"
            (patches / name).write_bytes(lzma.compress(body))
        else:
            (patches / name).write_bytes(body)
        opts = []
        if strip != 1 or rng.random() < 0.2:
            opts.append(rng.choice([f"-p{strip}", f"-p {strip}"]) if strip != 1 or rng.random() < 0.5 else "-p1")
        if reverse:
            opts.append("-R")
        if rng.random() < 0.25:
            opts.append(f"-F{rng.randint(0, 3)}")
        if rng.random() < 0.15:
            series_lines.append("# a comment")
        series_lines.append(" ".join([name, *opts]) + (" # trailing" if rng.random() < 0.05 else ""))
        (patches / "series").write_text("\n".join(series_lines) + "\n")
        before = snapshot(qtree)
        proc = quilt(qtree, patches, "push")
        out = proc.stdout.decode("utf-8", "replace")
        if proc.returncode != 0:
            failed_at = k
            break
        gnu.append(gnu_hunks(out))
    work = root / "ours"
    work.mkdir()
    code, msg, out_tree, reports = ours(patches, base, work)
    info = dict(seed=seed, kinds=kinds, failed_at=failed_at)
    if failed_at is None:
        if code != 0:
            return dict(info, problem="ours failed where quilt applied", msg=msg[-1500:])
        diffs = cmp_snap(snapshot(out_tree), snapshot(qtree))
        if diffs:
            return dict(info, problem="trees differ", diffs=diffs[:10])
    else:
        if code == 0:
            return dict(info, problem="ours applied where quilt failed", quilt=out[-800:])
        if code not in (1, 2):
            return dict(info, problem=f"ours exit {code} where quilt failed", msg=msg[-800:], quilt=out[-600:])
        if f"{failed_at:02d}-" not in msg:
            return dict(info, problem="ours failed at another patch", msg=msg[-800:], quilt=out[-600:])
        if code == 2:
            return dict(info, problem="ours refused (exit 2) where quilt failed (ok-ish)", msg=msg[-400:], soft=True)
        if failed_at > 1:
            code, msg, out_tree, reports = ours(patches, base, work, upto=failed_at - 1)
            if code != 0:
                return dict(info, problem="ours failed on prefix quilt applied", msg=msg[-1500:])
            diffs = cmp_snap(snapshot(out_tree), before)  # (quilt's rollback loses empty files)
            if diffs:
                return dict(info, problem="prefix trees differ", diffs=diffs[:10])
    # per-hunk reports vs GNU's words
    for k, (files, rep) in enumerate(zip(gnu, reports, strict=False), 1):
        ours_files: list[list] = []
        last = object()
        for h in rep["hunks"]:
            if h["file"] != last or not ours_files:
                pass
            ours_files.append(h)
        # group our hunks per file section in order: GNU numbers hunks per "patching file" block
        groups: list[list] = []
        prev = None
        for h in rep["hunks"]:
            if prev is None or h["file"] != prev or h["header"].startswith("@@ -") and False:
                groups.append([])
            groups[-1].append(h)
            prev = h["file"]
        gnu_with_hunks = [(f, hs) for f, hs in files]
        flat_ours = [(h["offset"], h["fuzz"], h["status"]) for h in rep["hunks"]]
        flat_gnu = []
        # Without a hunk count per GNU block we compare the hunks GNU reported (offset/fuzz) in order.
        for _f, hs in gnu_with_hunks:
            for i in sorted(hs):
                flat_gnu.append((hs[i][1], hs[i][2]))
        ours_nonclean = [(o, f) for o, f, s in flat_ours if s != "clean"]
        # GNU's "succeeded at L": the hunk's line in the output, so earlier hunks of its file count
        lines_ours, lines_gnu = [], []
        shift, prev = 0, None
        for h in rep["hunks"]:
            if h["file"] != prev:
                shift, prev = 0, h["file"]
            if h["status"] != "clean":
                lines_ours.append(h["at"] + shift)
            m = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", h["header"])
            shift += int(m.group(2) or 1) - int(m.group(1) or 1)
        for _f, hs in gnu_with_hunks:
            for i in sorted(hs):
                lines_gnu.append(hs[i][0])
        STATS["hunks"] += len(flat_ours)
        STATS["nonclean"] += len(lines_gnu)
        STATS["patches"] += 1
        groups = sum(1 for i, h in enumerate(rep["hunks"]) if i == 0 or h["file"] != rep["hunks"][i - 1]["file"])
        if len(files) != len(set(f for f, _ in files)) or groups != len(files):
            lines_ours = lines_gnu  # a file in two sections: GNU counts each section's hunks on its own
        if ours_nonclean == flat_gnu and lines_ours != lines_gnu:
            return dict(info, problem=f"patch {k}: hunk lines differ", ours=lines_ours, gnu=lines_gnu,
                        gnu_raw=[f for f, _ in files])
        if ours_nonclean != flat_gnu:
            return dict(info, problem=f"patch {k}: hunk reports differ", ours=ours_nonclean, gnu=flat_gnu,
                        gnu_raw=[f for f, _ in files])
    STATS["identical" if failed_at is None else "identical_failure"] += 1
    return None


def main() -> None:
    start, count = int(sys.argv[1]), int(sys.argv[2])
    scratch = Path(tempfile.mkdtemp(prefix="quilt-fuzz-"))
    os.environ.setdefault("MATERIALIZE_CACHE", str(scratch / "cache"))
    found = soft = 0
    for seed in range(start, start + count):
        root = Path(tempfile.mkdtemp(prefix=f"fz{seed}-", dir=scratch))
        try:
            res = run_seed(seed, root)
        except Exception:
            res = dict(seed=seed, problem="harness error", tb=traceback.format_exc()[-1200:])
        if res:
            found += 1
            soft += bool(res.get("soft"))
            print(json.dumps(res), flush=True)
            if "--keep" not in sys.argv:
                shutil.rmtree(root, ignore_errors=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(dict(done=count, start=start, findings=found, soft=soft, other=found - soft, **STATS)),
          flush=True)


if __name__ == "__main__":
    main()
