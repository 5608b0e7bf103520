"""Red team findings on the workspace (ws-redteam): each test is its reproducer, failing before the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.errors import MaterializeError

from .test_edit import ATTN, patch_file, run, wfile


def _refreshed(project: Path, name: str, old: str, new: str, path: str = ATTN) -> None:
    run(project, "new", name, "--target", "tt-metal", "-m", name)
    run(project, "add", path)
    f = wfile(project, path)
    f.write_text(f.read_text().replace(old, new, 1))
    run(project, "refresh")


# -- refresh of a lower patch while the top added one of its files ------------------------------------

def test_refresh_of_a_lower_patch_refuses_a_file_the_top_added_but_has_not_refreshed(project: Path) -> None:
    """quilt: 'More recent patches modify files in patch A' (its .pc/B/ holds the added file). We took
    B's unrefreshed edit into A: B's change silently became A's."""
    _refreshed(project, "a", "ID_LENGTH = 16", "ID_LENGTH = 20")
    run(project, "new", "b", "--target", "tt-metal", "-m", "b")
    run(project, "add", ATTN)
    f = wfile(project)
    f.write_text(f.read_text() + "# b's edit\n")
    before = patch_file(project, "a").read_bytes()
    with pytest.raises(MaterializeError, match="later applied patch b also changes"):
        run(project, "refresh", "a")
    assert patch_file(project, "a").read_bytes() == before
    run(project, "refresh")
    assert b"+# b's edit" in patch_file(project, "b").read_bytes()
