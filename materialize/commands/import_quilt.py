"""``materialize import-quilt``: turn a quilt series directory into a series file.

quilt's ``series`` file lists one patch per line with optional ``-pN``; comments and blank lines are
allowed. quilt applies with GNU patch's default fuzz of 2, so the imported series records
``max_fuzz: 2`` to reproduce exactly what quilt does (``check`` will still say where fuzz is needed).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from materialize.errors import SeriesError, UpstreamError
from materialize.series import check_inside, patch_name
from materialize.upstream import parse_spec

QUILT_DEFAULT_FUZZ = 2


def parse_quilt_series(series_file: Path) -> list[tuple[str, int, bool]]:
    """(patch path, strip, reverse) per entry, read as quilt reads ``series``.

    ``#`` starts a comment only at the start of a line or after whitespace (``fix#12.patch`` is one
    name); options are ``-pN`` and ``-R``; anything else is refused with file:line.
    """
    entries: list[tuple[str, int, bool]] = []
    try:
        text = series_file.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        raise SeriesError(f"{series_file}: no quilt series file here") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        words = line.split()
        strip, reverse = 1, False
        for option in words[1:]:
            match = re.fullmatch(r"-p(\d+)", option)
            if match:
                strip = int(match.group(1))
            elif option == "-R":
                reverse = True
            else:
                raise SeriesError(f"{series_file}:{number}: unsupported quilt option {option!r} (only -pN and -R)")
        check_inside(series_file.parent, words[0], f"{series_file}:{number}")  # not /etc/x, not ../../x
        entries.append((words[0], strip, reverse))
    return entries


def resolve_git_rev(url: str, rev: str) -> str:
    """The full SHA of ``rev`` (abbreviated SHA, branch, tag) so the written pin is fetchable.

    A remote that refuses to serve an abbreviated SHA would make ``apply`` fail later; resolve it
    now: locally with ``rev-parse``, remotely by matching ``ls-remote``'s refs (or a full SHA as is).
    """
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        return rev
    local = Path(url).expanduser()
    if local.exists():
        proc = subprocess.run(["git", "-C", str(local), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return proc.stdout.strip()
        raise UpstreamError(f"git+{url}@{rev}: no such revision in {local}")
    proc = subprocess.run(["git", "ls-remote", url], capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise UpstreamError(f"git+{url}@{rev}: git ls-remote failed: {proc.stderr.strip()}")
    refs = dict(reversed(line.split("\t", 1)) for line in proc.stdout.splitlines() if "\t" in line)
    for name in (rev, f"refs/heads/{rev}", f"refs/tags/{rev}^{{}}", f"refs/tags/{rev}"):
        if name in refs:
            return refs[name]
    matches = {sha for sha in refs.values() if sha.startswith(rev)}
    if len(matches) == 1:
        return matches.pop()
    raise UpstreamError(f"git+{url}@{rev}: cannot resolve {rev!r} to a full SHA from the remote's refs; give the full SHA")


def build_series(quilt_dir: Path, upstream: str, target: str, output: Path) -> dict:
    quilt_dir = quilt_dir.resolve()
    series_file = quilt_dir / "series"
    if not series_file.exists() and (quilt_dir / "patches" / "series").exists():
        quilt_dir = quilt_dir / "patches"
        series_file = quilt_dir / "series"
    entries = parse_quilt_series(series_file)
    for name, _strip, _reverse in entries:
        if not (quilt_dir / name).is_file():
            raise SeriesError(f"{series_file}: patch {name} is listed but {quilt_dir / name} does not exist")
    pin = parse_spec(upstream)
    pin_data = pin.model_dump(exclude_none=True)
    if pin_data.get("kind") == "git":
        pin_data["rev"] = pin_data["sha"] = resolve_git_rev(pin_data["url"], pin_data["rev"])
    for key in ("path",):
        if key in pin_data:
            pin_data[key] = os.path.relpath(pin_data[key], output.parent.resolve())
    return {
        "version": 1,
        "patches_dir": os.path.relpath(quilt_dir, output.parent.resolve()),
        "defaults": {"strip": 1, "max_fuzz": QUILT_DEFAULT_FUZZ},
        "targets": {target: {"pin": pin_data}},
        "patches": [
            {"patch": path, **({"name": name} if name else {}), "target": target,
             **({"strip": strip} if strip != 1 else {}), **({"reverse": True} if reverse else {})}
            for (path, strip, reverse), name in zip(entries, own_names([e[0] for e in entries]), strict=True)
        ],
    }


def own_names(paths: list[str]) -> list[str | None]:
    """A ``name:`` for each entry whose file name another entry shares (None: its file name will do).

    quilt names a patch by its path (riscv/flaky_tests.patch, mips/flaky_tests.patch), we by its file
    name; the ones that share one are named by their path instead, "/" made "-" (a name is one path
    component), with "-2", "-3"… if that is taken too.
    """
    bases = [patch_name(p) for p in paths]
    shared = {b for b in bases if bases.count(b) > 1}
    taken = {b for b in bases if b not in shared}
    names: list[str | None] = []
    for path, base in zip(paths, bases, strict=True):
        if base not in shared:
            names.append(None)
            continue
        stem = patch_name(path.replace("/", "-"))
        if stem.isdigit():  # a name that is a number would be read as a position
            stem = f"{stem}-patch"
        name, n = stem, 1
        while name in taken:
            n += 1
            name = f"{stem}-{n}"
        taken.add(name)
        names.append(name)
    return names


def run(quilt_dir: Path, upstream: str, target: str, output: Path | None) -> int:
    destination = output or Path("series") / f"{quilt_dir.resolve().name}.yaml"
    document = build_series(quilt_dir, upstream, target, destination)
    text = "# imported from quilt series " + str(quilt_dir) + "\n" + yaml.safe_dump(document, sort_keys=False)
    if output is None:
        print(text, end="")
    else:
        tmp = output.with_name(f".{output.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, output)
    return 0
