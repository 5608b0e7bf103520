"""`new` adds its series entry as lines (no ruamel round trip, no YAML parse): every other byte of the
file stays, the parse it keeps for the new bytes is exactly what parsing them gives (data and every
line), and layouts it does not handle go through ruamel's round trip instead."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from materialize import yamlpos
from materialize.workspace.seriesedit import insert_entry, with_entry
from materialize.yamlpos import load_located

HEAD = "version: 1\n# the pins\ntargets:\n  tt-metal:\n    pin: {kind: path, path: ../up}\n"
INDENTED = HEAD + ("patches:\n  - patch: tt-metal/0001-a.patch\n    target: tt-metal\n    # why b\n"
                   "  - patch: tt-metal/0002-b.patch  # trailing\n    target: tt-metal\n    strip: 1\n\n# the end\n")
FLUSH = HEAD + "patches:\n- patch: tt-metal/0001-a.patch\n  target: tt-metal\n- patch: tt-metal/0002-b.patch\n  target: tt-metal\n"
ENTRY = {"patch": "tt-metal/0009-new.patch", "target": "tt-metal"}


@pytest.mark.parametrize("text", [INDENTED, FLUSH, FLUSH + "defaults: {strip: 1}\n", FLUSH.rstrip("\n"),
                                  FLUSH.replace("\n", "\r\n")])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_insert_entry_keeps_every_other_line(text: str, index: int) -> None:
    new = insert_entry(text, index, ENTRY)
    assert new is not None
    old_data, new_data = yaml.safe_load(text), yaml.safe_load(new)
    assert new_data["patches"] == [*old_data["patches"][:index], ENTRY, *old_data["patches"][index:]]
    assert {k: v for k, v in new_data.items() if k != "patches"} == {k: v for k, v in old_data.items() if k != "patches"}
    old_lines, new_lines = text.splitlines(), new.splitlines()
    assert len(new_lines) == len(old_lines) + 2
    for line in old_lines:  # nothing removed or rewritten (comments included)
        assert line in new_lines


def test_insert_entry_follows_the_list_style_and_keeps_trailing_comments_last() -> None:
    new = insert_entry(INDENTED, 2, ENTRY)
    assert new is not None
    assert "    strip: 1\n  - patch: tt-metal/0009-new.patch\n    target: tt-metal\n\n# the end\n" in new
    new = insert_entry(FLUSH, 0, ENTRY)
    assert new is not None and "patches:\n- patch: tt-metal/0009-new.patch\n  target: tt-metal\n- patch: tt-metal/0001" in new


@pytest.mark.parametrize("value", ["yes", "null", "1", "0.5", "2026-01-01", "a: b", "#x", "it's", "*star", ""])
def test_values_yaml_would_misread_are_quoted(value: str) -> None:
    new = insert_entry(FLUSH, 2, {"patch": "tt-metal/x.patch", "target": value})
    assert new is not None
    assert yaml.safe_load(new)["patches"][2]["target"] == value


@pytest.mark.parametrize("text", [
    HEAD + "patches: []\n",
    HEAD,
    HEAD + "patches: [{patch: a.patch, target: tt-metal}]\n",
    HEAD + "patches:\n\t- patch: a.patch\n",
    FLUSH + "- patch: tt-metal/x.patch\n  target: tt-metal\n  tests:\n    - a\n",  # a nested value
    FLUSH + "- patch: \"tt-metal/q.patch\"\n  target: tt-metal\n",  # quoting
    FLUSH + "- patch: tt-metal/y.patch\n  target: tt-metal\n  why: |\n    - patch: z\n",  # a block scalar
    FLUSH + "- &a\n  patch: tt-metal/z.patch\n  target: tt-metal\n",  # an anchor
    FLUSH + "- patch: tt-metal/w.patch\n  target: tt-metal\n  why: -x\n",
])
def test_layouts_it_does_not_handle_are_left_to_ruamel(text: str, tmp_path: Path) -> None:
    assert insert_entry(text, 0, ENTRY) is None
    path = tmp_path / "default.yaml"
    path.write_text(text.replace("\t", "  "))
    old = yaml.safe_load(path.read_text())
    data = yaml.safe_load(with_entry(path, 0, ENTRY))
    assert data["patches"] == [ENTRY, *(old.get("patches") or [])]


@pytest.mark.parametrize("text", [INDENTED, FLUSH, FLUSH + "defaults: {strip: 1}\n# after\nother: 2\n",
                                  FLUSH.rstrip("\n"), INDENTED.replace("\n", "\r\n")])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_the_parse_kept_for_the_new_bytes_is_the_parse_of_them(text: str, index: int, tmp_path: Path) -> None:
    """with_entry keeps a parse for the bytes it returns; reading them back (kept) and parsing a copy
    of them elsewhere (not kept) agree on the data and on the line of every key and item."""
    path = tmp_path / "series" / "default.yaml"
    path.parent.mkdir()
    path.write_bytes(text.encode())
    load_located(path)  # the old bytes' parse, as every command has it
    new = with_entry(path, index, ENTRY)
    assert yamlpos._read_parsed(yamlpos._parsed_file(str(path)), hashlib.sha256(new).hexdigest()) is not None
    path.write_bytes(new)
    kept = load_located(path)
    copy = tmp_path / "copy.yaml"
    copy.write_bytes(new)
    parsed = load_located(copy)
    assert kept.data == parsed.data and kept.lines == parsed.lines
    assert kept.data["patches"][index] == ENTRY


def test_with_entry_keeps_bytes_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "default.yaml"
    path.write_bytes(INDENTED.replace("\n", "\r\n").encode())
    new = with_entry(path, 1, ENTRY)
    assert new.count(b"\r\n") == INDENTED.count("\n") + 2 and b"\n" not in new.replace(b"\r\n", b"")
    assert b"# why b\r\n" in new and b"# the end\r\n" in new
