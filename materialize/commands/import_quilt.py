"""``materialize import-quilt``: turn a quilt series directory into a series file.

quilt's ``series`` file lists one patch per line with optional ``-pN``; comments and blank lines are
allowed. quilt applies with GNU patch's default fuzz of 2, so the imported series records
``max_fuzz: 2`` to reproduce exactly what quilt does (``check`` will still say where fuzz is needed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from materialize.errors import SeriesError
from materialize.upstream import parse_spec

QUILT_DEFAULT_FUZZ = 2


def parse_quilt_series(series_file: Path) -> list[tuple[str, int]]:
    """(patch path, strip) per entry; unknown options are refused with file:line."""
    entries: list[tuple[str, int]] = []
    try:
        text = series_file.read_text()
    except FileNotFoundError:
        raise SeriesError(f"{series_file}: no quilt series file here") from None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        strip = 1
        for option in words[1:]:
            match = re.fullmatch(r"-p(\d+)", option)
            if not match:
                raise SeriesError(f"{series_file}:{number}: unsupported quilt option {option!r} (only -pN)")
            strip = int(match.group(1))
        entries.append((words[0], strip))
    return entries


def build_series(quilt_dir: Path, upstream: str, target: str, output: Path) -> dict:
    quilt_dir = quilt_dir.resolve()
    series_file = quilt_dir / "series"
    if not series_file.exists() and (quilt_dir / "patches" / "series").exists():
        quilt_dir = quilt_dir / "patches"
        series_file = quilt_dir / "series"
    entries = parse_quilt_series(series_file)
    for name, _strip in entries:
        if not (quilt_dir / name).is_file():
            raise SeriesError(f"{series_file}: patch {name} is listed but {quilt_dir / name} does not exist")
    pin = parse_spec(upstream)
    pin_data = pin.model_dump(exclude_none=True)
    for key in ("path",):
        if key in pin_data:
            pin_data[key] = os.path.relpath(pin_data[key], output.parent.resolve())
    return {
        "version": 1,
        "patches_dir": os.path.relpath(quilt_dir, output.parent.resolve()),
        "defaults": {"strip": 1, "max_fuzz": QUILT_DEFAULT_FUZZ},
        "targets": {target: {"pin": pin_data}},
        "patches": [
            {"patch": name, "target": target, **({"strip": strip} if strip != 1 else {})}
            for name, strip in entries
        ],
    }


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
