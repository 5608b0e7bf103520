"""Bisect knows no target names: a series whose targets are `linux` and `docs` bisects like the
shipped one, each candidate holding the right prefix under its own target's folder."""

from __future__ import annotations

import re
from pathlib import Path

from .test_cli import ok


def test_deterministic_bisect_over_targets_named_linux_and_docs(invoke, builder, tmp_path: Path, monkeypatch) -> None:
    b = builder({"kernel/main.c": "int step = 0;\n"}, target="linux")
    for k in range(1, 7):
        b.add_patch(f"{k:04d}-step-{k}", {"kernel/main.c": f"int step = {k};\n"})
    docs = b.root / "docs-up"
    docs.mkdir()
    (docs / "index.md").write_text("# docs\n")
    series = b.write(extra_targets={"docs": {"pin": {"kind": "path", "path": "docs-up"}}})
    monkeypatch.chdir(tmp_path)
    common = ["--series", series, "--work-dir", tmp_path / "work"]
    ok(invoke, "bisect", "start", *common, "--good", "0", "--bad", "6", "--deterministic")
    culprit = 4
    for _ in range(8):
        out = ok(invoke, "bisect", "next", *common)
        if "first bad patch" in out:
            break
        pos = int(re.search(r"^position (\d+)", out, re.M).group(1))
        directory = Path(re.search(r"^dir (.+)$", out, re.M).group(1))
        changed = directory / "linux" / "kernel" / "main.c"  # an overlay: only what the prefix changed
        step = int(changed.read_text().split("=")[1].strip(" ;\n")) if changed.exists() else 0
        assert step == pos
        ok(invoke, "bisect", "bad" if step >= culprit else "good", *common)
    assert "0004-step-4 at position 4 is the first bad patch" in out
