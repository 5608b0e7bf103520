"""``make test-mutation``: revert each changed block of each shipped patch, and see which tests notice.

A *block* is a maximal run of changed lines inside a hunk (``-``/``+`` lines with no context line
between them); a run of only added lines is further split at blank lines (paragraphs), so a new
function or a new file is reverted one paragraph at a time. The mutant patch is the original
with that block reverted: its ``-`` lines become context, its ``+`` lines are dropped, and the
hunk headers (this hunk's new length, later hunks' new start) are recomputed, so the mutant
applies exactly where the original does.

For each mutant the offline tests of that patch and of every later patch of the same target run
on the patched arm (``pytest -k patched --tree-source overlay``, in a copy of series/, patches/
and ast_tests/), and the plugin's results file says, per test, whether it failed by its own
assertion (``assertion``) or errored (``error``: extraction refused, NameError, a later patch no
longer applying). A mutant no test fails *survives*: the behaviour that block adds is untested.

Prints a Markdown table (the one in ast_tests/README.md) and writes build/offline/mutation.json.
Slow (one pytest run per block): not part of ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from materialize.series import PatchEntry, Series, load_series

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


@dataclass
class Block:
    """One revertable block: lines ``start..end`` (indexes into the patch's lines) of one hunk."""

    patch: str
    file: str
    hunk: int  # index of the hunk's header line
    start: int
    end: int  # exclusive
    new_line: int  # first line of the block in the patched file (for the table)
    summary: str  # its first changed line, stripped
    replace: tuple[str, str] | None = None  # a value mutant: (old, new) inside one added line


@dataclass
class Outcome:
    block: Block
    killed_by: list[tuple[str, str]] = field(default_factory=list)  # (test, "assertion" | "error")
    detail: str = ""

    @property
    def verdict(self) -> str:
        if not self.killed_by:
            return "SURVIVED"
        return "assertion" if any(how == "assertion" for _, how in self.killed_by) else "error only"


def _files(lines: list[str]) -> list[tuple[str, list[int]]]:
    """(target path, [hunk header indexes]) for each file of a unified diff."""
    files: list[tuple[str, list[int]]] = []
    for i, line in enumerate(lines):
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append((lines[i + 1][4:].strip().split("\t")[0], []))
        elif line.startswith("@@ ") and files:
            files[-1][1].append(i)
    return files


def hunk_body(lines: list[str], header: int) -> range:
    """Indexes of the body lines (and ``\\`` markers) of the hunk whose ``@@`` line is at ``header``."""
    m = HUNK_HEADER.match(lines[header])
    assert m is not None, lines[header]
    old, new = int(m.group(2) or 1), int(m.group(4) or 1)
    i = header + 1
    while old > 0 or new > 0:
        tag = lines[i][:1]
        if tag in (" ", "\n", ""):
            old, new = old - 1, new - 1
        elif tag == "-":
            old -= 1
        elif tag == "+":
            new -= 1
        i += 1
        while i < len(lines) and lines[i].startswith("\\"):
            i += 1
    return range(header + 1, i)


def blocks(entry: PatchEntry) -> list[Block]:
    lines = entry.read().decode("utf-8").splitlines(keepends=True)
    out: list[Block] = []
    for path, headers in _files(lines):
        for header in headers:
            m = HUNK_HEADER.match(lines[header])
            new_no = int(m.group(3))  # type: ignore[union-attr]
            runs: list[tuple[int, int, int]] = []  # (start, end, new line)
            start = None
            start_new = new_no
            for i in hunk_body(lines, header):
                tag = lines[i][:1]
                changed = tag in "+-" and tag != ""
                if changed and start is None:
                    start, start_new = i, new_no
                if not changed and tag != "\\" and start is not None:
                    runs.append((start, i, start_new))
                    start = None
                if tag in (" ", "+", "\n", ""):
                    new_no += 1 if tag != "\\" else 0
            if start is not None:
                runs.append((start, hunk_body(lines, header).stop, start_new))
            for run_start, run_end, run_new in runs:
                for sub_start, sub_end, sub_new in dict.fromkeys(_paragraphs(lines, run_start, run_end, run_new)):
                    first = next(
                        (lines[k][1:].strip() for k in range(sub_start, sub_end) if lines[k][1:].strip()), ""
                    )
                    out.append(Block(entry.name, path, header, sub_start, sub_end, sub_new, first[:70]))
    return out


def _paragraphs(lines: list[str], start: int, end: int, new_line: int) -> list[tuple[int, int, int]]:
    """Split a run of only ``+`` lines at blank added lines; mixed runs stay whole."""
    if any(lines[k].startswith("-") for k in range(start, end)):
        return [(start, end, new_line)]
    out = []
    cur, cur_new, n = None, new_line, new_line
    for k in range(start, end):
        blank = lines[k].startswith("+") and not lines[k][1:].strip()
        if not blank and cur is None:
            cur, cur_new = k, n
        if blank and cur is not None:
            out.append((cur, k, cur_new))
            cur = None
        if lines[k].startswith("+"):
            n += 1
    if cur is not None:
        out.append((cur, end, cur_new))
    return (out or [(start, end, new_line)]) + _branches(lines, start, end, new_line)


_BRANCH = re.compile(r"^(\s+)(if|elif)\b.*:\s*(#.*)?$")


def _branches(lines: list[str], start: int, end: int, new_line: int) -> list[tuple[int, int, int]]:
    """Each indented ``if``/``elif`` branch (its line and its body) of an added run: dropping one
    is the mutation "this case is no longer handled". An ``if`` followed by ``elif``/``else`` is
    left alone (dropping it would not parse)."""
    out = []
    for k in range(start, end):
        m = _BRANCH.match(lines[k][1:])
        if m is None:
            continue
        indent = len(m.group(1))
        j = k + 1
        while j < end and (not lines[j][1:].strip() or len(lines[j][1:]) - len(lines[j][1:].lstrip()) > indent):
            j += 1
        follower = lines[j][1:].strip() if j < end else ""
        if m.group(2) == "if" and (follower.startswith("elif") or follower.startswith("else")):
            continue
        if j - k < 2:
            continue
        out.append((k, j, new_line + (k - start)))
    return out


VALUE_MUTANTS: list[tuple[str, str, str, str]] = [
    # (patch, text in an added line, replacement, what the mutant means): the weak spots issue 13
    # found, kept here so a test that stops seeing them shows up as SURVIVED
    ("0002", "return q_chunk, max(q_chunk, SDPA_RESUME_K_CHUNK)", "return q_chunk, q_chunk", "k chunk may drop below 128"),
    ("0004", '"boolean", ', "", '"boolean" values no longer decoded'),
    ("0006", '"0") == "1"', '"0") != "0"', "flag engages on any value but 0"),
]


def value_mutants(entry: PatchEntry) -> list[Block]:
    lines = entry.read().decode("utf-8").splitlines(keepends=True)
    out = []
    for patch, old, new, why in VALUE_MUTANTS:
        if not entry.name.startswith(patch):
            continue
        hits = [i for i, line in enumerate(lines) if line.startswith("+") and old in line]
        if len(hits) != 1:
            raise SystemExit(f"{entry.path}: value mutant {old!r} matches {len(hits)} added lines, expected 1")
        files = _files(lines)
        path, header = next((f, max(h for h in hs if h < hits[0])) for f, hs in files if any(h < hits[0] for h in hs)
                            and hits[0] < (min((g[1][0] for g in files if g[1] and g[1][0] > hs[0]), default=10**9)))
        out.append(Block(entry.name, path, header, hits[0], hits[0] + 1, 0, why, replace=(old, new)))
    return out


def mutant(text: str, block: Block) -> str:
    """The patch with ``block`` reverted (``-`` -> context, ``+`` dropped), headers recomputed."""
    lines = text.splitlines(keepends=True)
    if block.replace is not None:
        old, new = block.replace
        lines[block.start] = lines[block.start].replace(old, new, 1)
        return "".join(lines)
    files = _files(lines)
    headers = next(h for _, h in files if block.hunk in h)
    dropped = sum(1 for k in range(block.start, block.end) if lines[k].startswith("+"))
    restored = sum(1 for k in range(block.start, block.end) if lines[k].startswith("-"))
    delta = restored - dropped
    out: list[str] = []
    skip_marker = False
    for i, line in enumerate(lines):
        if skip_marker and line.startswith("\\"):
            continue
        skip_marker = False
        if block.start <= i < block.end:
            if line.startswith("+"):
                skip_marker = True
                continue
            if line.startswith("-"):
                line = " " + line[1:]
        elif i == block.hunk or (i in headers and i > block.hunk):
            m = HUNK_HEADER.match(line)
            assert m is not None
            old_start, old_len = int(m.group(1)), int(m.group(2) or 1)
            new_start, new_len = int(m.group(3)), int(m.group(4) or 1)
            if i == block.hunk:
                new_len += delta
            else:
                new_start += delta
            if old_len == 0 and new_len == 0:
                return ""  # the block was the whole of a new file: the hunk test covers that
            line = f"@@ -{old_start},{old_len} +{new_start},{new_len} @@{m.group(5)}\n"
        out.append(line)
    return "".join(out)


def _copy(repo: Path, dest: Path) -> None:
    for name in ("series", "patches", "ast_tests"):
        shutil.copytree(repo / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))


def run_block(repo: Path, series: Series, block: Block, work: Path) -> Outcome:
    entry = series.find(block.patch)
    ws = Path(tempfile.mkdtemp(prefix="mutant-", dir=work))
    try:
        _copy(repo, ws)
        patch = ws / "patches" / entry.spec.patch
        text = mutant(patch.read_text(), block)
        if not text:
            return Outcome(block, detail="whole new file (see the hunk reversion test)")
        patch.write_text(text)
        later = [e for e in series.patches[entry.position - 1 :] if e.target == entry.target]
        tests = sorted({str(ws / "ast_tests" / t.split("::")[0]) for e in later for t in e.spec.tests})
        results = ws / "results.json"
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x" if False else "-q",
             "--tree-source", "overlay", "--series", str(ws / "series" / "default.yaml"),
             "--offline-results", str(results), "-k", "patched", *tests],
            cwd=ws, env=env, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        if not results.exists():
            return Outcome(block, detail=f"no results (pytest rc={proc.returncode}): {proc.stdout[-500:]}")
        data = json.loads(results.read_text())
        outcome = Outcome(block)
        for patch_row in data["patches"]:
            for r in patch_row["results"]:
                if r["arm"] == "patched" and not r["ok"]:
                    how = "assertion" if r["outcome"] == "failed" else "error"
                    test = f"{patch_row['name'][:4]}:{r['test'].replace('[patched-', '[').replace('[patched]', '')}"
                    outcome.killed_by.append((test, how))
                    if how == "error" and not outcome.detail:
                        outcome.detail = r["detail"][:160]
        return outcome
    finally:
        shutil.rmtree(ws, ignore_errors=True)


def table(outcomes: list[Outcome]) -> list[str]:
    lines = [
        "| patch | file:line (patched) | block | killed by | how |",
        "| --- | --- | --- | --- | --- |",
    ]
    for o in outcomes:
        b = o.block
        tests: dict[str, set[str]] = {}
        for test, how in o.killed_by:
            tests.setdefault(test.split("[")[0], set()).add(how)
        killers = ", ".join(f"{t} ({'/'.join(sorted(h))})" for t, h in sorted(tests.items())) or "-"
        short = b.file.split("/", 1)[-1].rsplit("/", 1)[-1]
        summary = b.summary.replace("|", "\\|").replace("`", "'")
        where = f"{short}:{b.new_line}" if b.replace is None else f"{short} (value)"
        block = f"`{summary}`" if b.replace is None else f"mutant: {summary}"
        lines.append(f"| {b.patch[:4]} | {where} | {block} | {killers} | {o.verdict} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=Path, default=Path("series/default.yaml"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--patch", action="append", default=[], help="only these patches (name or number)")
    parser.add_argument("--out", type=Path, default=Path("build/offline/mutation.json"))
    args = parser.parse_args(argv)
    series = load_series(args.series)
    repo = series.path.resolve().parent.parent
    selected = [e for e in series.patches if not args.patch or any(e.name.startswith(p) for p in args.patch)]
    todo = [b for e in selected for b in blocks(e) + value_mutants(e)]
    print(f"{len(todo)} blocks in {len(selected)} patches", flush=True)
    work = Path(tempfile.mkdtemp(prefix="materialize-mutation-"))
    try:
        def one(block: Block) -> Outcome:
            outcome = run_block(repo, series, block, work)
            print(f"  {block.patch[:4]} {block.file.rsplit('/', 1)[-1]}:{block.new_line} {outcome.verdict}", flush=True)
            return outcome

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            outcomes = list(pool.map(one, todo))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for line in table(outcomes):
        print(line)
    survived = [o for o in outcomes if o.verdict == "SURVIVED" and not o.detail]
    errors_only = [o for o in outcomes if o.verdict == "error only"]
    print(
        f"\n{len(outcomes)} blocks: {len(outcomes) - len(survived) - len(errors_only)} killed by an assertion, "
        f"{len(errors_only)} only by an error, {len(survived)} survived"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([{**asdict(o.block), "killed_by": o.killed_by, "verdict": o.verdict,
                                     "detail": o.detail} for o in outcomes], indent=2) + "\n")  # fmt: skip
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
