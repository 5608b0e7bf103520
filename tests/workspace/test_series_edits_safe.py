"""Every edit of the series file is checked before it is written (red team, workspace findings 01, 05):
the bytes must parse, load as a series and say what the edit meant; else the command is refused and the
file stays byte-identical. Comment lines at the end of the file stay at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from materialize.series import load_series
from materialize.workspace import seriesedit
from tests.workspace.test_edit import run

HEAD = """\
version: 1
patches_dir: ../patches
targets:
  tt-metal:
    pin: {kind: path, path: ../upstream/tt-metal}
  plugin:
    pin: {kind: path, path: ../upstream/plugin}
"""
# red team 01: a comment above the list, a flow entry with a comment, a block entry whose first key is target
GROUPED = HEAD + """\
patches:
  # --- group A ---
  - patch: tt-metal/a.patch
    target: tt-metal
  - {patch: tt-metal/b.patch, target: tt-metal, status: held}   # flow B
  - target: tt-metal
    patch: tt-metal/c.patch
"""
# red team 05: a comment block at the end that belongs to no entry
TRAILING = HEAD + """\
patches:
  - patch: tt-metal/a.patch
    target: tt-metal
  - patch: tt-metal/c.patch
    target: tt-metal

# TODO(ada): tt-metal/d.patch goes here once upstream merges #123
# (keep this note)
"""


def _project(project: Path, text: str, names: str = "abc") -> Path:
    series = project / "series" / "default.yaml"
    series.write_text(text)
    for n in names:
        (project / "patches" / "tt-metal" / f"{n}.patch").write_text(f"Subject: {n}\n")
    return series


def _names(series: Path) -> list[str]:
    return [p.name for p in load_series(series).patches]


@pytest.mark.parametrize(("args", "order"), [
    (("move", "a", "--after", "c"), ["b", "c", "a"]),
    (("move", "a", "--after", "b"), ["b", "a", "c"]),
    (("move", "c", "--after", "0"), ["c", "a", "b"]),
    (("move", "b", "--after", "c"), ["a", "c", "b"]),
    (("delete", "a"), ["b", "c"]),
    (("delete", "b"), ["a", "c"]),
])
def test_edits_next_to_a_flow_entry_with_a_comment_keep_the_file_valid(project: Path, args, order) -> None:
    series = _project(project, GROUPED)
    assert run(project, *args) == 0
    assert _names(series) == order
    text = series.read_text()
    assert "# --- group A ---" in text
    assert ("# flow B" in text) == ("b" in order)
    assert "target: tt-metal patch:" not in text


def test_the_emitter_fix_keeps_the_flow_entry_first_after_a_comment() -> None:
    doc = seriesedit.SeriesDoc(Path("/nonexistent/series.yaml"), GROUPED)
    doc.remove(0)
    import io

    buf = io.StringIO()
    doc._yaml.dump(doc.doc, buf)
    assert buf.getvalue().endswith("  # --- group A ---\n  - {patch: tt-metal/b.patch, target: tt-metal, status: held}"
                                   "   # flow B\n  - target: tt-metal\n    patch: tt-metal/c.patch\n")


def _broken_dump(monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """ruamel writing bytes that do not read back (``invalid``) or read back as another series (``other``)."""
    real = seriesedit._yaml

    def fake():
        yaml = real()
        dump = yaml.dump

        def broken(doc, buf):
            dump(doc, buf)
            if how == "invalid":
                buf.write("  - target: tt-metal patch: tt-metal/x.patch\n")
            else:
                buf.write("  - {patch: tt-metal/a.patch, target: tt-metal, name: other-a}\n")
        yaml.dump = broken
        return yaml
    monkeypatch.setattr(seriesedit, "_yaml", fake)


@pytest.mark.parametrize("how", ["invalid", "other"])
@pytest.mark.parametrize("args", [
    ("move", "a", "--after", "c"),
    ("delete", "b"),
    ("delete", "c", "-r"),
    ("rename", "c2", "-P", "c"),
    ("new", "n", "--target", "tt-metal", "--after", "c"),  # a flow entry: new goes through ruamel
])
def test_a_series_edit_that_would_not_read_back_is_refused_and_writes_nothing(
        project: Path, monkeypatch: pytest.MonkeyPatch, capsys, how, args) -> None:
    series = _project(project, GROUPED)
    before = {p: p.read_bytes() for p in (project / "patches").rglob("*") if p.is_file()}
    series_before = series.read_bytes()
    _broken_dump(monkeypatch, how)
    with pytest.raises(seriesedit.RenderError) as caught:
        run(project, *args)
    assert caught.value.exit_code == 1
    err = str(caught.value)
    assert f"{args[0]} refused" in err and "nothing was written" in err
    if how == "invalid":
        assert "as " + args[0] + " would write it" in err
    assert series.read_bytes() == series_before
    assert {p: p.read_bytes() for p in (project / "patches").rglob("*") if p.is_file()} == before
    assert not (project / "work" / ".materialize" / "journal").exists()
    assert not [p for p in series.parent.iterdir() if p.name != "default.yaml"]  # no temporary left


def test_a_comment_block_at_the_end_stays_at_the_end(project: Path) -> None:
    series = _project(project, TRAILING, "ac")
    tail = "\n# TODO(ada): tt-metal/d.patch goes here once upstream merges #123\n# (keep this note)\n"
    assert run(project, "move", "c", "--after", "0") == 0
    assert _names(series) == ["c", "a"]
    assert series.read_text().endswith("  - patch: tt-metal/a.patch\n    target: tt-metal\n" + tail)
    series.write_text(TRAILING)
    assert run(project, "delete", "c") == 0
    assert series.read_text() == TRAILING.replace("  - patch: tt-metal/c.patch\n    target: tt-metal\n", "")
    series.write_text(TRAILING)
    assert run(project, "new", "n", "--target", "tt-metal", "--after", "c") == 0
    assert series.read_text().endswith("  - patch: tt-metal/n.patch\n    target: tt-metal\n" + tail)
    series.write_text(TRAILING)
    assert run(project, "rename", "c2", "-P", "c") == 0
    assert series.read_text().endswith("  - patch: tt-metal/c2.patch\n    target: tt-metal\n" + tail)


@pytest.mark.parametrize("args", [["rename", "-P", "b", "bb"], ["delete", "b"], ["move", "b", "--after", "0"],
                                  ["new", "c", "--target", "tt-metal", "--after", "a"]])
def test_a_crlf_series_keeps_its_line_endings(project: Path, args: list[str]) -> None:
    """(rt-ws 12) A series file written with CRLF line endings: rename, delete and move rewrote every line
    with LF (a review diff of the file showed all of it changed); `new` kept CRLF. Only the lines the edit
    must change change."""
    series = project / "series" / "default.yaml"
    for name in ("a", "b"):
        (project / "patches" / "tt-metal" / f"{name}.patch").write_bytes(b"Subject: " + name.encode() + b"\n")
    text = series.read_text().replace("patches: []\n", "patches:\n  - patch: tt-metal/a.patch\n    target: tt-metal\n"
                                      "  - patch: tt-metal/b.patch\n    target: tt-metal\n")
    series.write_bytes(text.replace("\n", "\r\n").encode())
    assert run(project, *args) == 0
    data = series.read_bytes()
    assert data.count(b"\n") == data.count(b"\r\n") and b"\r\r" not in data
    old = set(text.replace("\n", "\r\n").encode().splitlines(keepends=True))
    assert len([line for line in data.splitlines(keepends=True) if line not in old]) <= 3
