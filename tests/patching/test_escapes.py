"""Hostile patches (issue 10, items 1-4): nothing a patch says may escape the tree, refused before writing.

Links a patch publishes must resolve inside the tree the way the kernel follows them, ``.git`` in
any case and at any depth is refused, and only the modes git trees may hold for files are accepted.
"""

from __future__ import annotations

import pytest

from materialize.engine import materialize
from materialize.errors import PatchApplyError, PatchFormatError, UnsafePathError
from materialize.paths import check_links, link_stays_inside, resolve_link, safe_relpath
from materialize.series import load_series

from .test_gnu_rules import DictView


def _apply(files: dict[str, tuple[str, bytes]], patch: bytes):
    from materialize.patching.tree import apply_to_tree

    return apply_to_tree(DictView(dict(files)), patch, source="evil.patch", strip=1)


def _new_link(path: str, target: str) -> bytes:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
        f"+++ b/{path}\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    ).encode()


# -- 1. links published by a patch ---------------------------------------------------------------


@pytest.mark.parametrize("target", ["/etc/passwd", "../../etc", "../..", "pkg/../../x", "a/../../.."])
def test_new_link_pointing_outside_is_refused(target: str) -> None:
    result = _apply({}, _new_link("pkg/b.py", target))
    assert isinstance(result.error, UnsafePathError) and result.error.exit_code == 4
    assert result.changes == {}


def test_a_link_target_longer_than_path_max_is_refused_naming_the_patch() -> None:
    """'./' * 3000 + 'src' stays inside, but no filesystem can hold it: `apply` failed publishing (naming
    a temporary folder) and `push` printed the 6 KB target as a file name."""
    result = _apply({}, _new_link("lnk", "./" * 3000 + "src"))
    assert isinstance(result.error, UnsafePathError)
    assert str(result.error).startswith("evil.patch:1: symlink lnk has a target of 6003 bytes (at most 4095)")
    assert _apply({}, _new_link("lnk", "./" * 2046 + "src")).ok  # 4095 bytes


def test_mode_change_to_link_pointing_outside_is_refused() -> None:
    patch = (
        b"diff --git a/pkg/b.py b/pkg/b.py\nold mode 100644\nnew mode 120000\n--- a/pkg/b.py\n+++ b/pkg/b.py\n"
        b"@@ -1 +1 @@\n-x = 1\n+/etc/passwd\n\\ No newline at end of file\n"
    )
    result = _apply({"pkg/b.py": ("100644", b"x = 1\n")}, patch)
    # refused before the link is even looked at: a section never changes a file's type (GNU: "can't
    # change file type"); as a deletion and a creation, the link itself is refused
    assert not result.ok and "can't change file type" in str(result.failed[0].error)
    created = (b"diff --git a/pkg/b.py b/pkg/b.py\ndeleted file mode 100644\n--- a/pkg/b.py\n+++ /dev/null\n"
               b"@@ -1 +0,0 @@\n-x = 1\n" + _new_link("pkg/b.py", "/etc/passwd"))
    assert isinstance(_apply({"pkg/b.py": ("100644", b"x = 1\n")}, created).error, UnsafePathError)


def test_link_inside_is_fine() -> None:
    result = _apply({"pkg/real.py": ("100644", b"x\n")}, _new_link("pkg/b.py", "real.py"))
    assert result.ok and result.changes["pkg/b.py"] == ("120000", b"real.py")


# -- 2. chains of links, resolved like the kernel -----------------------------------------------


def test_chain_through_an_existing_link_is_refused() -> None:
    tree = {"a/b/c/x": ("120000", b"../../.."), "a/b/c/f": ("100644", b"")}
    assert link_stays_inside("a/b/c/y", "x/../../../../outside")  # lexically it looks fine
    result = _apply(tree, _new_link("a/b/c/y", "x/../../../../outside"))
    assert isinstance(result.error, UnsafePathError)


def test_chain_within_one_patch_is_refused_whatever_the_order() -> None:
    first = _new_link("a/b/c/x", "../../..")
    second = _new_link("a/b/c/y", "x/../../../../outside")
    for patch in (first + second, second + first):
        result = _apply({"a/b/c/f": ("100644", b"")}, patch)
        assert isinstance(result.error, UnsafePathError), patch


def test_resolve_link_follows_links_relative_to_their_directory() -> None:
    links = {"a/b/c/x": "../../..", "d/l": "../a/b"}

    def lookup(path: str):
        return links.get(path, True if path in {"a", "a/b", "a/b/c", "d", "a/b/c/f"} else None)

    assert resolve_link("a/b/c/y", "x/a/b/c/f", lookup) == "a/b/c/f"
    assert resolve_link("a/b/c/y", "x/..", lookup) is None
    assert resolve_link("z", "d/l/c", lookup) == "a/b/c"
    # A loop never resolves (the kernel's ELOOP), so it leads nowhere, outside included (quilt creates it).
    assert resolve_link("loop", "loop/x", lambda p: "loop" if p == "loop" else None) == "loop"


@pytest.mark.parametrize("links", [{"l": "m", "m": "l"}, {"x": "x"}, {"l": "m", "m": "l", "y": "l/../../etc"},
                                   {"a/l": "../b/l", "b/l": "../a/l/.."}])
def test_links_that_loop_are_created_as_quilt_creates_them(links) -> None:
    """quilt creates l -> m, m -> l; a path through a loop fails with ELOOP, so it leads nowhere."""
    check_links(links, {"a/f", "b/f"}, origin="pin")


def test_a_chain_longer_than_the_kernel_follows_is_refused() -> None:
    """Past 40 links we cannot be sure to count as the kernel counts: refused, never trusted."""
    links = {f"l{i}": f"l{i + 1}" for i in range(45)}
    links["l45"] = "f"
    with pytest.raises(UnsafePathError, match="l0 "):
        check_links(links, {"f"}, origin="pin")
    check_links({f"l{i}": f"l{i + 1}" for i in range(30)} | {"l30": "f"}, {"f"}, origin="pin")


def test_check_links_over_a_whole_pin() -> None:
    with pytest.raises(UnsafePathError, match="a/b/c/y"):
        check_links({"a/b/c/x": "../../..", "a/b/c/y": "x/../../../../outside"}, {"a/b/c/f"}, origin="pin")
    check_links({"a/b/c/x": "../../..", "a/b/c/y": "x/a/b/c/f"}, {"a/b/c/f"}, origin="pin")


# -- 3. .git at any depth, in any case -------------------------------------------------------------


@pytest.mark.parametrize("name", ["pkg/.git/config", ".GIT/hooks/post-checkout", "x/.Git/HEAD", ".git./config"])
def test_git_components_are_refused(name: str) -> None:
    patch = f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1 @@\n+evil\n".encode()
    result = _apply({}, patch)
    assert isinstance(result.error, UnsafePathError) and ".git" in str(result.error)
    with pytest.raises(UnsafePathError):
        safe_relpath(name, origin="x")


def test_gitmodules_symlink_is_refused() -> None:
    result = _apply({"f": ("100644", b"")}, _new_link(".gitmodules", "f"))
    assert isinstance(result.error, UnsafePathError)


def test_names_git_allows_stay_allowed() -> None:
    assert safe_relpath(".gitignore", origin="x") == ".gitignore"
    assert safe_relpath("a/.github/x", origin="x") == "a/.github/x"


# -- 4. modes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "line"),
    [
        ("old mode 100644\nnew mode 040000\n", 3),
        ("old mode 100644\nnew mode 160000\n", 3),
        ("old mode 100644\nnew mode 104755\n", 3),
        ("new file mode 040000\n", 2),
        ("index 1111111..2222222 160000\n", 2),
    ],
)
def test_only_file_modes_git_trees_hold_are_accepted(header: str, line: int) -> None:
    patch = f"diff --git a/f b/f\n{header}--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n".encode()
    result = _apply({"f": ("100644", b"a\n")}, patch)
    assert isinstance(result.error, PatchFormatError) and result.error.exit_code == 2
    assert str(result.error).startswith(f"evil.patch:{line}: unsupported file mode")


# -- through the engine: exit 4, nothing written ------------------------------------------------


def test_engine_refuses_a_link_out_and_writes_no_prefix(builder) -> None:
    b = builder({"pkg/b.py": "x = 1\n"})
    series_path = b.write()
    (b.root / "patches" / "0001-evil.patch").write_bytes(_new_link("pkg/c.py", "/etc/passwd"))
    series_path.write_text(series_path.read_text().replace(
        "patches: []", "patches:\n- patch: 0001-evil.patch\n  target: plugin"))
    series = load_series(series_path)
    with pytest.raises(UnsafePathError) as info:
        materialize(series)
    assert info.value.exit_code == 4
    from materialize.engine import PREFIX_REF
    from materialize.store import Store

    assert Store.open().read_refs(PREFIX_REF) == {}


def _tar_with_links(path, links: dict[str, str]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        data = b"f\n"
        info = tarfile.TarInfo("pkg/a/b/c/f")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            link = tarfile.TarInfo(f"pkg/{name}")
            link.type = tarfile.SYMTYPE
            link.linkname = target
            tar.addfile(link)


def test_pin_with_a_chain_of_links_out_is_refused(builder, tmp_path) -> None:
    b = builder({"x": "x\n"})
    series_path = b.write()
    evil = tmp_path / "evil.tar.gz"
    _tar_with_links(evil, {"a/b/c/x": "../../..", "a/b/c/y": "x/../../../../outside"})
    series_path.write_text(series_path.read_text().replace(
        "kind: path\n      path: upstream", f"kind: tarball\n      path: {evil}"))
    with pytest.raises(UnsafePathError, match="a/b/c/y"):
        materialize(load_series(series_path))
    fine = tmp_path / "fine.tar.gz"
    _tar_with_links(fine, {"a/b/c/x": "../../..", "a/b/c/y": "x/a/b/c/f"})
    series_path.write_text(series_path.read_text().replace(str(evil), str(fine)))
    m = materialize(load_series(series_path))
    assert m.store.read_blob(m.trees["plugin"], "a/b/c/y") == b"x/a/b/c/f"


def test_a_patch_that_turns_a_link_into_a_directory_cannot_set_older_links_free(builder) -> None:
    """Patch 1 adds ``s -> a/b/c`` and ``x -> s/../../..``: x resolves inside, through s. Patch 2
    replaces the link ``s`` by a real directory ``s/``, and x would climb out of the tree. GNU patch
    deletes ``s`` only at the end of the patch, so it cannot create ``s/f`` ("Invalid file name"): the
    patch fails, naming patch 2, and no prefix of patch 2 is kept."""
    b = builder({"a/b/c/f": "f\n"})
    series_path = b.write()
    (b.root / "patches" / "0001-links.patch").write_bytes(_new_link("s", "a/b/c") + _new_link("x", "s/../../.."))
    (b.root / "patches" / "0002-free.patch").write_text(
        "diff --git a/s b/s\ndeleted file mode 120000\n--- a/s\n+++ /dev/null\n@@ -1 +0,0 @@\n-a/b/c\n"
        "\\ No newline at end of file\n"
        "diff --git a/s/f b/s/f\nnew file mode 100644\n--- /dev/null\n+++ b/s/f\n@@ -0,0 +1 @@\n+f\n"
    )
    series_path.write_text(series_path.read_text().replace(
        "patches: []", "patches:\n- patch: 0001-links.patch\n  target: plugin\n- patch: 0002-free.patch\n  target: plugin"))
    series = load_series(series_path)
    first = materialize(series, upto=1)
    assert first.store.read_blob(first.trees["plugin"], "x") == b"s/../../.."
    # GNU deletes s only at the end of the patch, so it cannot create s/f ("Invalid file name s/f"): refused
    with pytest.raises(PatchApplyError, match=r"0002-free(.|\n)*Invalid file name s/f"):
        materialize(series)
    from materialize.engine import PREFIX_REF

    assert len(first.store.read_refs(PREFIX_REF)) == 1


def _delete_file(path: str, text: str) -> bytes:
    return (f"diff --git a/{path} b/{path}\ndeleted file mode 100644\n--- a/{path}\n+++ /dev/null\n"
            f"@@ -1 +0,0 @@\n-{text}\n").encode()


def test_a_link_where_a_folder_was_cannot_set_older_links_free(builder) -> None:
    """Patch 1 adds a/b/c/f, etc/passwd and ``l -> a/b/c/../../../etc/passwd`` (inside: through the
    real folders). Patch 2 deletes f, which empties (so removes) a/b/c; patch 3 puts a link
    ``a/b/c -> ..`` where the folder was, and l would climb one level above the tree. Neither touches
    l, and the new link alone stays inside: only re-checking the tree's older links after the
    deletion finds it (l then climbs through a folder that is gone: exit 4 at patch 2)."""
    b = builder({"README": "r\n"})
    series_path = b.write()
    patches = b.root / "patches"
    (patches / "0001-links.patch").write_bytes(
        b"diff --git a/a/b/c/f b/a/b/c/f\nnew file mode 100644\n--- /dev/null\n+++ b/a/b/c/f\n@@ -0,0 +1 @@\n+f\n"
        b"diff --git a/etc/passwd b/etc/passwd\nnew file mode 100644\n--- /dev/null\n+++ b/etc/passwd\n"
        b"@@ -0,0 +1 @@\n+in tree\n" + _new_link("l", "a/b/c/../../../etc/passwd"))
    (patches / "0002-empty.patch").write_bytes(_delete_file("a/b/c/f", "f"))
    (patches / "0003-link.patch").write_bytes(_new_link("a/b/c", ".."))
    names = ["0001-links.patch", "0002-empty.patch", "0003-link.patch"]
    series_path.write_text(series_path.read_text().replace(
        "patches: []", "patches:\n" + "".join(f"- patch: {n}\n  target: plugin\n" for n in names)))
    series = load_series(series_path)
    first = materialize(series, upto=1)
    assert first.store.read_blob(first.trees["plugin"], "l") == b"a/b/c/../../../etc/passwd"
    with pytest.raises(UnsafePathError, match=r"0002-empty.*symlink l -> .* points outside") as info:
        materialize(series)
    assert info.value.exit_code == 4
