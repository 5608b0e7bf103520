"""``materialize gc``: remove old outputs under build/materialized (each full output of the shipped
series is ~400 MB, and a bisect makes one per candidate). The store is left alone: any removed
output can be re-published from it in seconds."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from materialize.console import out
from materialize.output import DEFAULT_ROOT, MANIFEST


def outputs(root: Path) -> list[Path]:
    """Our outputs (folders with a manifest), newest first."""
    found = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / MANIFEST).is_file()]
    return sorted(found, key=lambda p: (p / MANIFEST).stat().st_mtime, reverse=True)


def run(keep: int, dry_run: bool, root: Path = DEFAULT_ROOT) -> int:
    if not root.is_dir():
        out.print(f"nothing to collect: {root} does not exist")
        return 0
    latest = (root / "latest").resolve() if (root / "latest").is_symlink() else None
    doomed = [p for p in outputs(root)[keep:] if p.resolve() != latest]
    for path in doomed:
        out.print(f"{'would remove' if dry_run else 'removing'} {path}")
        if not dry_run:
            # Rename first so a reader never sees a half-deleted output under its published name.
            trash = Path(tempfile.mkdtemp(prefix=".gc-", dir=root))
            os.replace(path, trash / path.name)
            shutil.rmtree(trash)
    out.print(f"kept {len(outputs(root)) if not dry_run else len(outputs(root)) - len(doomed)} outputs")
    return 0
