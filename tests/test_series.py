from pathlib import Path

import pytest

from materialize.errors import SeriesError
from materialize.series import load_series

REPO = Path(__file__).resolve().parents[1]

GOOD = """\
version: 1
patches_dir: p
targets:
  plugin:
    pin: {kind: path, path: up}
patches:
  - patch: 0001-a.patch
    target: plugin
    flag: MY_FLAG
    banner: "MY_FLAG engaged"
  - patch: 0002-b.patch
    target: plugin
    strip: 0
    max_fuzz: 2
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_shipped_series_is_valid():
    series = load_series(REPO / "series" / "default.yaml")
    assert set(series.targets) == {"tt-metal", "plugin"}
    for entry in series.patches:
        assert entry.path.is_file(), entry.path


def test_defaults_and_lookup(tmp_path):
    series = load_series(write(tmp_path, GOOD))
    first, second = series.patches
    assert (first.strip, first.max_fuzz, first.flag) == (1, 0, "MY_FLAG")
    assert (second.strip, second.max_fuzz) == (0, 2)
    assert series.find("0002").name == "0002-b"
    assert series.find(1).name == "0001-a"
    assert series.position("base") == 0 and series.position(None) == 2
    with pytest.raises(SeriesError, match="no patch named"):
        series.find("nope")


@pytest.mark.parametrize(
    ("mutation", "expected"),
    [
        (("strip: 0", "strp: 0"), r"s.yaml:13: patches.1.strp: unknown field"),
        (("max_fuzz: 2", "max_fuzz: 9"), r"s.yaml:14: patches.1.max_fuzz: Input should be less than or equal to 3"),
        (("flag: MY_FLAG", "flag: lower-case"), r"s.yaml:9: patches.0.flag: String should match pattern"),
        (("target: plugin\n    strip", "target: tt-metal\n    strip"), r"s.yaml:12: patches.1.target: target 'tt-metal' has no pin"),
        (("kind: path", "kind: svn"), r"s.yaml:5: targets.plugin.pin: Input tag 'svn'"),
        (("version: 1", "version: 2"), r"s.yaml:1: version: Input should be 1"),
        (("strip: 0", "strip: true"), r"s.yaml:13: patches.1.strip: Input should be a valid integer"),
        (("max_fuzz: 2", "max_fuzz: '2'"), r"s.yaml:14: patches.1.max_fuzz: Input should be a valid integer"),
        (("patch: 0002-b.patch", "patch: 0001-a.patch"), r"s.yaml:11: patches.1: '0001-a' is already listed"),
        (("flag: MY_FLAG", 'flag: "MY_FLAG\\n"'), r"s.yaml:9: patches.0.flag: String should match pattern"),
        (("max_fuzz: 2", "max_fuzz: 2.0"), r"s.yaml:14: patches.1.max_fuzz: Input should be a valid integer"),
        (("strip: 0", "strip: -1"), r"s.yaml:13: patches.1.strip: Input should be greater than or equal to 0"),
        (("strip: 0", "reverse: maybe"), r"s.yaml:13: patches.1.reverse: Input should be a valid boolean"),
        (("target: plugin\n    strip", "target: " + "x" * 101 + "\n    strip"),
         r"s.yaml:12: patches.1.target: String should have at most 100 characters"),
        (("  plugin:\n", "  -plugin:\n"), r"s.yaml:4: targets.-plugin.\[key\]: String should match pattern"),
        (("path: up", "path: up, extra: 1"), r"s.yaml:5: targets.plugin.pin.path.extra: unknown field"),
        (("{kind: path, path: up}", "{path: up}"), r"s.yaml:5: targets.plugin.pin: Unable to extract tag"),
        (("patch: 0001-a.patch\n", "patch: 0001-a.patch\n    status: done\n"),
         r"s.yaml:8: patches.0.status: Input should be 'cleared', 'held' or 'experimental'"),
        (('banner: "MY_FLAG engaged"', 'banner: " "'), r"s.yaml:10: patches.0.banner: Value error, banner must be"),
        (("patches:\n", "defaults: 3\npatches:\n"), r"s.yaml:6: defaults: Input should be a valid dictionary"),
        (("    target: plugin\n    flag", "    flag"), r"s.yaml:7: patches.0.target: required field is missing"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path, mutation, expected):
    old, new = mutation
    assert old in GOOD
    with pytest.raises(SeriesError, match=expected):
        load_series(write(tmp_path, GOOD.replace(old, new, 1)))


def test_yaml_syntax_error_names_line(tmp_path):
    with pytest.raises(SeriesError, match=r"s.yaml:\d+: invalid YAML"):
        load_series(write(tmp_path, "version: 1\ntargets:\n  - [unclosed\n"))


def test_unsafe_yaml_tags_are_refused(tmp_path):
    with pytest.raises(SeriesError, match=r"s.yaml:1: YAML tag .* is not allowed"):
        load_series(write(tmp_path, "version: !!python/object/apply:os.system ['true']\n"))


def test_duplicate_keys_are_refused(tmp_path):
    with pytest.raises(SeriesError, match=r"s.yaml:2: duplicate key 'version'"):
        load_series(write(tmp_path, "version: 1\nversion: 1\n"))


def test_all_problems_are_reported_at_once(tmp_path):
    text = GOOD.replace("strip: 0", "strip: true").replace("flag: MY_FLAG", "flag: bad")
    with pytest.raises(SeriesError) as info:
        load_series(write(tmp_path, text))
    assert "s.yaml:9: patches.0.flag" in str(info.value) and "s.yaml:13: patches.1.strip" in str(info.value)


@pytest.mark.parametrize(("old", "new", "field"), [
    ("version: 1", "version: true", "s.yaml:1: version"),
    ("max_fuzz: 2", "max_fuzz: 2\n    reverse: 'yes'", "patches.1.reverse"),
    ("max_fuzz: 2", "max_fuzz: 2\n    reverse: 1", "patches.1.reverse"),
])
def test_no_value_of_another_type_is_coerced(tmp_path, old, new, field):
    """`version: true` is not 1 and `reverse: 'yes'` or `reverse: 1` is not true, as `strip: true` is
    not 1: a value of the wrong type is exit 2 naming its line, never a guess."""
    with pytest.raises(SeriesError, match=field) as info:
        load_series(write(tmp_path, GOOD.replace(old, new)))
    assert info.value.exit_code == 2


def test_pins_built_in_code_are_checked_and_dump_in_field_order():
    from materialize.series import GitPin, PypiPin

    pin = GitPin(kind="git", url="u", rev="r")
    assert pin.model_dump() == {"kind": "git", "url": "u", "rev": "r", "sha": None, "root": ""}
    assert pin.model_dump(exclude_none=True) == {"kind": "git", "url": "u", "rev": "r", "root": ""}
    with pytest.raises(SeriesError, match="requirement: String should match pattern"):
        PypiPin(kind="pypi", requirement="no version", file="f", sha256="0" * 64)


def test_an_unchanged_series_is_read_back_without_yaml(tmp_path):
    """The parse is kept in the cache for those exact bytes: the next command does not import PyYAML,
    sees the same series, and an edit (or a damaged cache file) means a fresh parse."""
    import subprocess
    import sys

    path = write(tmp_path, GOOD)
    first = load_series(path)
    probe = ("import sys; from materialize.series import load_series; s = load_series(sys.argv[1]); "
             "print('yaml' in sys.modules, [(p.name, p.strip, p.max_fuzz) for p in s.patches])")
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == f"False {[(p.name, p.strip, p.max_fuzz) for p in first.patches]}"

    path.write_text(GOOD.replace("max_fuzz: 2", "max_fuzz: 9"))
    with pytest.raises(SeriesError, match=r"s.yaml:14: patches.1.max_fuzz"):
        load_series(path)
    path.write_text(GOOD.replace("max_fuzz: 2", "max_fuzz: 3"))
    assert load_series(path).patches[1].max_fuzz == 3

    from materialize.store import default_cache_dir

    for kept in (default_cache_dir() / "parsed").iterdir():
        kept.write_bytes(b"\x00damaged")
    assert load_series(path).patches[1].max_fuzz == 3


def test_a_refused_document_is_refused_every_time(tmp_path):
    path = write(tmp_path, "version: 1\nversion: 1\n")
    for _ in range(2):
        with pytest.raises(SeriesError, match=r"s.yaml:2: duplicate key 'version'"):
            load_series(path)


def test_a_patch_may_carry_its_own_name_which_is_one_path_component_and_not_a_number(tmp_path):
    (tmp_path / "p" / "a").mkdir(parents=True)
    (tmp_path / "p" / "b").mkdir()
    head = "version: 1\npatches_dir: p\ntargets:\n  t:\n    pin: {kind: path, path: up}\npatches:\n"
    series = tmp_path / "s.yaml"
    series.write_text(head + "  - {patch: a/x.patch, target: t}\n  - {patch: b/x.patch, target: t}\n")
    with pytest.raises(SeriesError, match=r"s.yaml:8: patches.1: 'x' is already listed at position 1 .*`name:`"):
        load_series(series)
    series.write_text(head + "  - {patch: a/x.patch, target: t}\n  - {patch: b/x.patch, target: t, name: b-x}\n")
    assert [p.name for p in load_series(series).patches] == ["x", "b-x"]
    assert load_series(series).find("b-x").position == 2
    assert load_series(series).find("b/x.patch").position == 2
    with pytest.raises(SeriesError, match=r"'x.patch' is ambiguous \(x \(a/x.patch\), b-x \(b/x.patch\)\)"):
        load_series(series).find("x.patch")
    for bad in ("b/x", "12", "..", "a\\tb"):
        series.write_text(head + '  - {patch: b/x.patch, target: t, name: "' + bad + '"}\n')
        with pytest.raises(SeriesError, match=r"patches\.0\.name"):
            load_series(series)


@pytest.mark.parametrize("patch", ["/etc/passwd", "../outside.patch", "a/../../outside.patch", "link.patch",
                                   "sub/outside.patch"])
def test_a_patch_path_that_leaves_patches_dir_is_refused_with_file_and_line(tmp_path, patch):
    """A shared series must not make us read (and show on the report page) a file outside its patches."""
    (tmp_path / "p").mkdir()
    (tmp_path / "outside.patch").write_text("secret\n")
    (tmp_path / "p" / "link.patch").symlink_to(tmp_path / "outside.patch")
    (tmp_path / "p" / "sub").symlink_to(tmp_path)
    (tmp_path / "p" / "inner.patch").symlink_to("real.patch")  # a link that stays inside is fine
    (tmp_path / "s.yaml").write_text("version: 1\npatches_dir: p\ntargets:\n  t:\n    pin: {kind: path, path: up}\n"
                                     "patches:\n  - target: t\n    patch: inner.patch\n")
    assert load_series(tmp_path / "s.yaml").patches[0].name == "inner"
    (tmp_path / "s.yaml").write_text("version: 1\npatches_dir: p\ntargets:\n  t:\n    pin: {kind: path, path: up}\n"
                                     f"patches:\n  - target: t\n    patch: {patch}\n")
    with pytest.raises(SeriesError, match=r"s.yaml:8: patches.0.patch: .*(outside|leads out of) patches_dir"):
        load_series(tmp_path / "s.yaml")


@pytest.mark.parametrize("test", ["/etc/passwd", "../../../../etc/passwd", "a/../../x.py::test_x", "out/t.py"])
def test_a_test_path_that_leaves_tests_dir_is_refused_with_file_and_line(tmp_path, test):
    """``tests:`` entries follow the rule of ``patch:`` entries: inside their folder (tests_dir)."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "out").symlink_to(tmp_path)
    (tmp_path / "s.yaml").write_text("version: 1\npatches_dir: p\ntests_dir: t\ntargets:\n  t:\n    pin: {kind: path,"
                                     " path: up}\npatches:\n  - target: t\n    patch: a.patch\n    tests:\n"
                                     "      - ok.py::test_ok\n      - " + test + "\n")
    with pytest.raises(SeriesError, match=r"s.yaml:12: patches.0.tests.1: .*(outside|leads out of) tests_dir"):
        load_series(tmp_path / "s.yaml")


def test_a_target_cannot_be_named_like_the_outputs_manifest(tmp_path):
    """A target is a folder of the output beside manifest.json: a target named so crashed publishing."""
    path = write(tmp_path, "version: 1\ntargets:\n  manifest.json:\n    pin: {kind: path, path: up}\npatches: []\n")
    with pytest.raises(SeriesError, match=r"s.yaml:3: targets.manifest.json"):
        load_series(path)


@pytest.mark.parametrize("patch", ["t/.patch", '"t/x\\ny.patch"', "t/...patch", '"t/a\\tb.diff"'])
def test_a_name_taken_from_the_file_is_one_printable_path_component(tmp_path, patch):
    """`materialize new .patch` made an entry named '' and `new 'x<newline>y'` one whose name breaks every
    listing: a file name that cannot be a patch name needs its own `name:`."""
    (tmp_path / "p" / "t").mkdir(parents=True)
    path = write(tmp_path, f"version: 1\npatches_dir: p\ntargets:\n  t:\n    pin: {{kind: path, path: up}}\n"
                           f"patches:\n  - patch: {patch}\n    target: t\n")
    with pytest.raises(SeriesError, match=r"s.yaml:7: patches.0.patch: .* cannot be a patch name: give the entry a `name:`"):
        load_series(path)


def _one_patch(tmp_path: Path, patch: str) -> Path:
    (tmp_path / "p").mkdir(exist_ok=True)
    return write(tmp_path, f"version: 1\npatches_dir: p\ntargets:\n  t:\n    pin: {{kind: path, path: up}}\n"
                           f"patches:\n  - patch: {patch}\n    target: t\n")


_TEXT = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"


def _compressed(suffix: str, data: bytes) -> bytes:
    """``data`` as quilt's refresh would write a patch file ending in ``suffix`` (patchfns: create_db)."""
    import subprocess

    tool = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "lzma", ".lz": "lzip"}[suffix]
    return subprocess.run([tool, "-c"], input=data, capture_output=True, check=True).stdout


_NEEDS_LZIP = pytest.mark.skipif(__import__("shutil").which("lzip") is None,
                                 reason="lzip is not installed (.ci/run installs it)")


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".lzma", pytest.param(".lz", marks=_NEEDS_LZIP)])
def test_a_compressed_patch_that_expands_past_the_cap_is_refused_while_reading(tmp_path, monkeypatch, suffix):
    """x.patch.gz of 200 KB that expands to 200 MB of zeros was read whole into memory (2 GB: 4 GB of RSS,
    then 'Only garbage'): it is capped like an archive (MATERIALIZE_MAX_EXPANSION, floor 64 MB), through
    whichever tool reads it (lzip's output is read only up to the cap)."""
    from materialize.errors import UnsafePathError

    def compress(data: bytes) -> bytes:
        return _compressed(suffix, data)

    path = _one_patch(tmp_path, f"x.patch{suffix}")
    (tmp_path / "p" / f"x.patch{suffix}").write_bytes(compress(b"\0" * (65 << 20)))
    entry = load_series(path).patches[0]
    with pytest.raises(UnsafePathError, match=rf"s.yaml:7: patch x: x.patch{suffix} expands past 67108864 bytes"):
        entry.read()
    text = b"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
    several = suffix in (".gz", ".lz")
    (tmp_path / "p" / f"x.patch{suffix}").write_bytes(compress(text) + (compress(text) if several else b""))
    assert entry.read() == text * (2 if several else 1)  # several members, as zcat and lzip -dc read them


def test_a_patch_path_that_is_a_folder_is_exit_2_naming_it(tmp_path):
    """It said 'cannot write the materialize cache: Is a directory' (exit 1)."""
    path = _one_patch(tmp_path, "sub")
    (tmp_path / "p" / "sub").mkdir()
    with pytest.raises(SeriesError, match=r"s.yaml:7: patch sub: cannot read .*/p/sub: Is a directory"):
        load_series(path).patches[0].read()


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".lzma", pytest.param(".lz", marks=_NEEDS_LZIP)])
def test_a_patch_file_is_decompressed_by_its_name_as_quilts_cat_file(tmp_path, suffix):
    """quilt push reads x.patch.lz through lzip (push: apply_patch); we read the .lz bytes as a plain
    diff: garbage, where quilt pushed the patch."""
    path = _one_patch(tmp_path, f"x.patch{suffix}")
    (tmp_path / "p" / f"x.patch{suffix}").write_bytes(_compressed(suffix, _TEXT))
    entry = load_series(path).patches[0]
    assert entry.name == "x"
    assert entry.read() == _TEXT
    assert entry.encode(_TEXT) and load_series(path).patches[0].read() == _TEXT
    (tmp_path / "p" / f"x.patch{suffix}").write_bytes(entry.encode(_TEXT + b"\n"))  # refresh writes it back
    assert load_series(path).patches[0].read() == _TEXT + b"\n"


@pytest.mark.parametrize("python_codec", [False, True], ids=["xz tool", "python codec"])
def test_each_lzma_suffix_reads_its_own_format_as_quilts_tools(tmp_path, monkeypatch, python_codec):
    """quilt reads .xz with ``xz -cd`` and .lzma with ``lzma -cd``: an .lzma file holding xz data is
    refused (quilt's lzma says "File format not recognized" and pushes an empty patch; we applied the
    diff in it), an .xz file with stream padding (NUL bytes after the stream, as the format allows)
    is read (Python's codec stopped at the padding)."""
    if python_codec:
        monkeypatch.setattr("shutil.which", lambda _name: None)
    path = _one_patch(tmp_path, "x.patch.lzma")
    (tmp_path / "p" / "x.patch.lzma").write_bytes(_compressed(".xz", _TEXT))
    with pytest.raises(Exception, match=r"x.patch.lzma|format") as info:
        load_series(path).patches[0].read()
    assert getattr(info.value, "exit_code", None) == 2
    if not python_codec:
        padded = _one_patch(tmp_path, "y.patch.xz")
        (tmp_path / "p" / "y.patch.xz").write_bytes(_compressed(".xz", _TEXT) + bytes(4))
        assert load_series(padded).patches[0].read() == _TEXT


@pytest.mark.skipif(__import__("shutil").which("quilt") is None, reason="quilt is not installed (.ci/run installs it)")
@pytest.mark.parametrize("compressed", [True, False], ids=["gzip-bytes", "plain"])
def test_a_tgz_patch_is_plain_as_quilt_push_reads_it(tmp_path, compressed):
    """quilt push decompresses .gz/.bz2/.xz/.lzma/.lz only: a gzip .tgz is garbage to it, a plain one
    applies (and its refresh writes .tgz plain). We read .tgz through gzip: the first applied, the
    second failed. quilt itself is the oracle."""
    import gzip
    import subprocess

    data = gzip.compress(_TEXT) if compressed else _TEXT
    work = tmp_path / "q"
    (work / "patches").mkdir(parents=True)
    (work / "f").write_bytes(b"a\n")
    (work / "patches" / "x.patch.tgz").write_bytes(data)
    (work / "patches" / "series").write_text("x.patch.tgz\n")
    pushed = subprocess.run(["quilt", "push", "-a"], cwd=work, capture_output=True, env={
        **__import__("os").environ, "QUILT_PATCHES": "patches", "HOME": str(tmp_path)}, check=False)
    path = _one_patch(tmp_path, "x.patch.tgz")
    (tmp_path / "p" / "x.patch.tgz").write_bytes(data)
    entry = load_series(path).patches[0]
    assert entry.name == "x.patch.tgz" and entry.read() == data and entry.encode(_TEXT) == _TEXT
    assert (pushed.returncode == 0) == (not compressed), pushed.stdout


@pytest.mark.parametrize("name", ["x.patch.GZ", "x.patch.Xz", "x.PATCH.BZ2"])
def test_a_suffix_in_other_case_is_no_compression_as_for_quilt(tmp_path, name):
    """quilt's ``case "$filename" in *.gz)`` is case-sensitive: x.patch.GZ goes to patch as it is (and
    fails as garbage). We decompressed it: a series that quilt cannot push applied here."""
    import gzip

    path = _one_patch(tmp_path, name)
    (tmp_path / "p" / name).write_bytes(gzip.compress(_TEXT))
    assert load_series(path).patches[0].read() == gzip.compress(_TEXT)


def test_an_lz_patch_without_lzip_is_a_clear_error(tmp_path, monkeypatch):
    path = _one_patch(tmp_path, "x.patch.lz")
    (tmp_path / "p" / "x.patch.lz").write_bytes(b"LZIP\x01" + b"\0" * 40)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(SeriesError, match=r"s.yaml:7: patch x: cannot decompress .*x.patch.lz: lzip is not installed"):
        load_series(path).patches[0].read()


@pytest.mark.parametrize("again", ["x.patch", "./x.patch", ".//x.patch"])
def test_a_patch_file_listed_twice_is_refused_even_under_two_names(tmp_path, again):
    """Two entries naming one patch file applied it twice (a `name:` on the second let it past the
    name check; import-quilt wrote such a series from a quilt series listing a patch twice, which quilt
    refuses): refused with both lines, whatever the spelling of the path."""
    (tmp_path / "p" / "d").mkdir(parents=True)
    (tmp_path / "p" / "x.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    head = "version: 1\npatches_dir: p\ntargets:\n  t:\n    pin: {kind: path, path: up}\npatches:\n"
    series = tmp_path / "s.yaml"
    series.write_text(head + f"  - {{patch: x.patch, target: t}}\n  - {{patch: {again}, target: t, name: x-2}}\n")
    with pytest.raises(SeriesError, match=r"s.yaml:8: patches.1.patch: .*x.patch.* is already listed at position 1"):
        load_series(series)
