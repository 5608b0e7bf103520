"""Sources a unit mounts live in a durable, content-addressed folder that `gc` never touches, and
nothing in serve republishes an output or moves `latest` (issue 14.7, 14.8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from materialize.serve.install import install_prepared
from materialize.serve.up import prepare
from materialize.serve.verify import verify

from .conftest import base_profile


def failed(checks):
    return {(c.layer, c.name): c.detail for c in checks if not c.ok}


def test_installed_sources_survive_gc_and_verify_never_recreates_them(write_profile, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prep = prepare(write_profile("d", base_profile()), sources_dir=Path("/var/lib/materialize/serve/sources"))
    root = tmp_path / "root"
    install_prepared(prep, root)
    plan = prep.plan
    # The unit mounts from the content-addressed folder named by the materialization id ...
    assert plan.sources == f"/var/lib/materialize/serve/sources/{plan.materialization_id}-overlay"
    assert all(m.source.startswith(plan.sources + "/") for m in plan.mounts)
    assert all((root / m.source.lstrip("/")).is_file() for m in plan.mounts)
    # ... which `materialize gc` (even keeping nothing) does not touch: it only prunes build/materialized.
    Path("build/materialized").mkdir(parents=True)
    gc = subprocess.run([sys.executable, "-m", "materialize", "gc", "--keep", "0"], capture_output=True, text=True,
                        check=False)
    assert gc.returncode == 0, gc.stderr
    assert all((root / m.source.lstrip("/")).is_file() for m in plan.mounts)

    # Sources gone (removed by hand): verify FAILS and does not quietly re-create them.
    sources = root / plan.sources.lstrip("/")
    os.rename(sources, sources.with_name("moved-away"))
    bad = failed(verify(plan, url=None, unit_root=root))
    assert "the unit will refuse to start" in bad[("unit", "sources")]
    assert not sources.exists()
    assert not Path("build/materialized/latest").exists()


def test_plan_sources_are_not_a_throwaway_output(write_profile, tmp_path):
    prep = prepare(write_profile("d", base_profile()), sources_dir=tmp_path / "durable")
    assert all("build/materialized" not in m.source for m in prep.plan.mounts)
    assert not (tmp_path / "durable").exists()  # planning writes nothing
