"""import-quilt on real quilt series, compared byte for byte with what quilt itself produces."""

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from materialize.cli import main
from materialize.commands.import_quilt import own_names, parse_quilt_series
from materialize.errors import SeriesError

DEBIAN_PACKAGES = ["bzip2"]  # a real Debian source package whose debian/patches is a quilt series


# extraction filters exist from Python 3.11.4 (and 3.12); an older 3.11 extracts as before them
_TAR_FILTER = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}


def test_parse_quilt_series_file(tmp_path):
    series = tmp_path / "series"
    series.write_text("# comment\n\nfirst.patch\nsecond.diff -p0  # trailing comment\nfix#12.patch\nrev.patch -R -p2\n")
    assert parse_quilt_series(series) == [
        ("first.patch", 1, False, None), ("second.diff", 0, False, None), ("fix#12.patch", 1, False, None),
        ("rev.patch", 2, True, None),
    ]
    series.write_text("ok.patch\nbad.patch -E\n")  # quilt passes -E to patch; we do not model it
    with pytest.raises(SeriesError, match=r"series:2: unsupported quilt option '-E'"):
        parse_quilt_series(series)


def tree_bytes(root: Path) -> dict[str, bytes]:
    skip = {".pc", "debian"}
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.relative_to(root).parts[0] not in skip
    }


def quilt_push_all(upstream_tar: Path, patches: Path, work: Path) -> Path:
    work.mkdir()
    with tarfile.open(upstream_tar) as tar:
        tar.extractall(work, **_TAR_FILTER)
    (top,) = list(work.iterdir())
    env = {**os.environ, "QUILT_PATCHES": str(patches.resolve()), "QUILTRC": "/dev/null"}  # the series where it lies
    subprocess.run(["quilt", "push", "-a", "-q"], cwd=top, env=env, check=True, capture_output=True)
    return top


def import_and_apply(quilt_dir: Path, upstream: Path, tmp_path: Path) -> Path:
    series = tmp_path / "imported.yaml"
    assert main(["import-quilt", str(quilt_dir), "--upstream", str(upstream), "--target", "plugin",
                 "-o", str(series)]) == 0
    out = tmp_path / "out"
    assert main(["apply", "--series", str(series), "--out", str(out)]) == 0
    return out / "plugin"


def ours_and_quilts(upstream: Path, quilt_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """``upstream`` as a release tarball, then our tree of ``quilt_dir`` on it and quilt's."""
    upstream_tar = tmp_path / "up-1.0.tar.gz"
    with tarfile.open(upstream_tar, "w:gz") as tar:
        tar.add(upstream, arcname="up-1.0")
    return import_and_apply(quilt_dir, upstream_tar, tmp_path), quilt_push_all(upstream_tar, quilt_dir, tmp_path / "quilt")


@pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed (.ci/run installs it)")
def test_synthetic_series_with_fuzz_and_p0_matches_quilt(builder, tmp_path):
    b = builder({"src/m.c": "".join(f"int v{i} = {i};\n" for i in range(30))})
    b.add_patch("one", {"src/m.c": (b.current / "src/m.c").read_text().replace("v10 = 10", "v10 = 100")})
    b.add_patch("two", {"src/n.c": "int n;\n"})
    # Upstream drifts: a context line of patch "one" changes, so quilt (fuzz 2) needs fuzz 1.
    text = (b.upstream / "src/m.c").read_text().replace("v7 = 7", "v7 = 77").replace("v0 = 0", "v0 = 0;\nint extra")
    (b.upstream / "src/m.c").write_text(text)
    quilt_dir = b.root / "patches"
    (quilt_dir / "series").write_text("one.patch\n# a comment\ntwo.patch\n")
    ours, theirs = ours_and_quilts(b.upstream, quilt_dir, tmp_path)
    assert tree_bytes(ours) == tree_bytes(theirs)
    assert main(["check", "--series", str(tmp_path / "imported.yaml")]) == 1  # fuzz is refused by check


def debian_source(package: str) -> tuple[Path, Path]:
    """(orig tarball, debian tarball) of a Debian source package, fetched once with apt-get source."""
    cache = Path(os.environ.get("MATERIALIZE_TEST_DATA", Path.home() / ".cache" / "materialize-testdata"))
    where = cache / "debian" / package
    if not any(where.glob("*.orig.tar.*")):
        if not os.environ.get("MATERIALIZE_NETWORK_TESTS"):
            pytest.skip("set MATERIALIZE_NETWORK_TESTS=1 to fetch Debian sources (CI does)")
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "source", "--download-only", "-qq", package], cwd=where, check=True,
                       capture_output=True)
    (orig,) = where.glob("*.orig.tar.*")
    (debian,) = where.glob("*.debian.tar.*")
    return orig, debian


@pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed (.ci/run installs it)")
@pytest.mark.parametrize("package", DEBIAN_PACKAGES)
def test_real_debian_quilt_series_matches_quilt(package, tmp_path):
    orig, debian = debian_source(package)
    unpacked = tmp_path / "debian-src"
    unpacked.mkdir()
    with tarfile.open(debian) as tar:
        tar.extractall(unpacked, **_TAR_FILTER)
    quilt_dir = unpacked / "debian" / "patches"
    ours = import_and_apply(quilt_dir, orig, tmp_path)
    theirs = quilt_push_all(orig, quilt_dir, tmp_path / "quilt")
    assert tree_bytes(ours) == tree_bytes(theirs)
    assert len(parse_quilt_series(quilt_dir / "series")) >= 5


def test_git_pin_by_abbreviated_rev_is_written_as_the_full_sha(tmp_path):
    from materialize.commands.import_quilt import build_series

    repo = tmp_path / "up"
    repo.mkdir()
    (repo / "f").write_text("a\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    for argv in (["init", "-q"], ["add", "f"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, env=env)
    full = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    quilt = tmp_path / "q"
    quilt.mkdir()
    (quilt / "series").write_text("# none\n")
    doc = build_series(quilt, f"git+{repo}@{full[:7]}", "linux", tmp_path / "s.yaml")
    assert doc["targets"]["linux"]["pin"]["rev"] == full and doc["targets"]["linux"]["pin"]["sha"] == full


@pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed (.ci/run installs it)")
def test_patches_sharing_a_file_name_in_different_folders_import_and_apply_as_quilt_does(builder, tmp_path):
    """Debian's nodejs lists riscv/flaky_tests.patch and mips/flaky_tests.patch: quilt names a patch by its
    path, we by its file name, so the import gives the ones that share a name a name of their own."""
    b = builder({"src/m.c": "".join(f"int v{i} = {i};\n" for i in range(40))})
    quilt_dir = b.root / "quilt"
    for folder, old, new in (("riscv", "v3 = 3", "v3 = 30"), ("mips", "v13 = 13", "v13 = 130"),
                             ("", "v23 = 23", "v23 = 230"), ("", "v33 = 33", "v33 = 330")):
        before = (b.current / "src/m.c").read_text()
        name = "riscv-flaky.patch" if old == "v33 = 33" else f"{folder}/flaky.patch" if folder else "flaky.diff"
        (quilt_dir / name).parent.mkdir(parents=True, exist_ok=True)
        b.add_patch(f"p{len(b.patches)}", {"src/m.c": before.replace(old, new)}).rename(quilt_dir / name)
    (quilt_dir / "series").write_text("riscv/flaky.patch\nmips/flaky.patch\nflaky.diff\nriscv-flaky.patch\n")
    ours, theirs = ours_and_quilts(b.upstream, quilt_dir, tmp_path)
    assert tree_bytes(ours) == tree_bytes(theirs)
    from materialize.series import load_series

    names = [p.name for p in load_series(tmp_path / "imported.yaml").patches]
    # riscv-flaky is the last patch's own file name, so the first one's path-name takes a suffix
    assert names == ["riscv-flaky-2", "mips-flaky", "flaky", "riscv-flaky"]


def test_own_names_are_valid_series_names_and_unique():
    from materialize.series import PATCH_NAME, patch_name

    paths = ["12.patch", "x/12.patch", "a/b.diff", "c/b.patch.gz", "b.patch", "b-2.patch", "solo.patch", "a/b.diff"]
    names = [own or patch_name(p) for p, own in zip(paths, own_names(paths), strict=True)]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(PATCH_NAME.strip("^$"), n) for n in names), names
    assert own_names(["solo.patch"]) == [None]


@pytest.mark.parametrize("listed", ["/etc/hostname", "../../../../etc/hostname", "../outside.patch"])
def test_a_quilt_series_that_lists_a_file_outside_its_folder_is_refused_at_import(tmp_path, listed):
    """The series file that import-quilt writes must load: a quilt series naming a file outside
    its folder is refused here, naming the series line, not written out to fail later."""
    quilt = tmp_path / "debian" / "patches"
    quilt.mkdir(parents=True)
    (tmp_path / "debian" / "outside.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    (quilt / "series").write_text(f"# comment\nok.patch\n{listed}\n")
    (quilt / "ok.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(SeriesError, match=rf"series:3: {re.escape(repr(listed))} is outside patches_dir"):
        parse_quilt_series(quilt / "series")


@pytest.mark.parametrize(("listed", "says"), [(b"a\x00b.patch", "a NUL"), (b"\xff.patch", "not UTF-8")])
def test_a_quilt_series_line_no_series_file_can_hold_is_refused_naming_the_line(tmp_path, listed, says):
    """A NUL in a series line was a ValueError traceback (lstat of the name); a name that is not UTF-8
    was written as a `"\\uDCFF.patch"` escape the YAML reader then refused: every later command failed
    on the series import-quilt had just written. Both refused at import, naming the line."""
    quilt = tmp_path / "patches"
    quilt.mkdir()
    (quilt / "series").write_bytes(b"ok.patch\n" + listed + b"\n")
    (quilt / "ok.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    if b"\x00" not in listed:
        (quilt / os.fsdecode(listed)).write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(SeriesError, match=rf"series:2: .*{says}"):
        parse_quilt_series(quilt / "series")


# Series lines against quilt itself. Each is run by ``quilt push -a`` and by import-quilt + apply on the
# same tree: where quilt applies, our tree must be quilt's; where quilt fails, we must refuse (at import,
# or apply exits non-zero). KNOWN_REFUSALS are lines quilt applies that we refuse on purpose, loudly.
_TEN = "".join(f"{i}\n" for i in range(1, 11))
_QUILT_PATCHES = {
    "p1.diff": "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n 1\n-2\n+two\n 3\n",
    "p0.diff": "--- f\n+++ f\n@@ -8,3 +8,3 @@\n 8\n-9\n+nine\n 10\n",
    "rev.diff": "--- a/f\n+++ b/f\n@@ -6,3 +6,3 @@\n 6\n-seven\n+7\n 8\n",  # applies only reversed
    "fuzzy.diff": "--- a/f\n+++ b/f\n@@ -4,3 +4,3 @@\n four\n-5\n+five\n 6\n",  # needs fuzz 1
    "h#sh.diff": "--- a/f\n+++ b/f\n@@ -3,3 +3,3 @@\n 3\n-4\n+4#\n 5\n",
    "sp ace.diff": "--- a/f\n+++ b/f\n@@ -3,3 +3,3 @@\n 3\n-4\n+4 \n 5\n",
    "twice.diff": "--- a/f\n+++ b/f\n@@ -1,3 +1,4 @@\n 1\n+x\n 2\n 3\n",  # applies again at fuzz 1
}
SERIES_LINES = [
    "p1.diff\n", "p0.diff -p0\n", "p0.diff -p 0\n", "p0.diff\t-p0\t# c\n", "p0.diff -p0 # -R\n",
    "p0.diff --strip=0\n", "p0.diff --strip=0 -p0\n", "p0.diff -p0 --strip 1\n", "p1.diff -p01\n",
    "p1.diff -p+1\n", "p0.diff -p0 -p1\n", "rev.diff -R\n", "rev.diff --reverse\n", "rev.diff -R -R\n",
    "rev.diff\n", "fuzzy.diff\n", "fuzzy.diff -F0\n", "fuzzy.diff -F 1\n", "fuzzy.diff --fuzz=0\n",
    "fuzzy.diff --fuzz 2\n", "p1.diff\r\n", "p1.diff # c\r\n", "p1.diff -p1\r\n", "p1.diff\r\np0.diff -p0\r\n",
    "  # indented comment\np1.diff\n", "p1.diff\n\t#x\n", "#p0.diff\np1.diff\n", "p1.diff\n  p0.diff -p0\n",
    "p1.diff\n\n \t\n", "h#sh.diff\n", "sp ace.diff\n", "p1.diff -pab\n", "p1.diff -p\n", "p1.diff -E\n",
    "p1.diff\np1.diff\n", "p1.diff\x0b\n", "p1.diff#x\n",
    # quilt refuses a series naming a patch twice ("already applied; check your series file"): we applied
    # this one twice (the second entry renamed, its fuzz 2 finding the context again)
    "twice.diff\ntwice.diff\n", "twice.diff\np1.diff\n./twice.diff\n",
]
KNOWN_REFUSALS = {
    "p1.diff -E\n",  # quilt runs patch -E (remove files left empty): not modelled, refused
    "twice.diff\np1.diff\n./twice.diff\n",  # one file listed twice; quilt compares the names as written
}


@pytest.mark.skipif(shutil.which("quilt") is None, reason="quilt is not installed (.ci/run installs it)")
@pytest.mark.parametrize("lines", SERIES_LINES)
def test_series_lines_are_read_as_quilt_reads_them(lines, tmp_path):
    upstream = tmp_path / "up"
    upstream.mkdir()
    (upstream / "f").write_text(_TEN)
    quilt_dir = tmp_path / "patches"
    quilt_dir.mkdir()
    for name, text in _QUILT_PATCHES.items():
        (quilt_dir / name).write_text(text)
    (quilt_dir / "series").write_bytes(lines.encode())
    upstream_tar = tmp_path / "up-1.0.tar.gz"
    with tarfile.open(upstream_tar, "w:gz") as tar:
        tar.add(upstream, arcname="up-1.0")
    work = tmp_path / "quilt"
    work.mkdir()
    with tarfile.open(upstream_tar) as tar:
        tar.extractall(work, **_TAR_FILTER)
    env = {**os.environ, "QUILT_PATCHES": str(quilt_dir), "QUILTRC": "/dev/null"}
    quilt = subprocess.run(["quilt", "push", "-a", "-q"], cwd=work / "up-1.0", env=env, capture_output=True)
    series = tmp_path / "imported.yaml"
    try:
        code = main(["import-quilt", str(quilt_dir), "--upstream", str(upstream_tar), "--target", "t",
                     "-o", str(series)])
    except SeriesError:
        code = 2
    if code == 0:
        code = main(["apply", "--series", str(series), "--out", str(tmp_path / "out")])
    if lines in KNOWN_REFUSALS:
        assert quilt.returncode == 0 and code != 0
    elif quilt.returncode != 0:
        assert code != 0, f"quilt fails on {lines!r}, we applied it"
    else:
        assert code == 0, f"quilt applies {lines!r}, we refused it"
        assert tree_bytes(tmp_path / "out" / "t") == tree_bytes(work / "up-1.0")


def _quilt_and_upstream(tmp_path: Path) -> tuple[Path, Path]:
    quilt_dir, upstream = tmp_path / "debian" / "patches", tmp_path / "upstream"
    quilt_dir.mkdir(parents=True)
    upstream.mkdir()
    (quilt_dir / "series").write_text("a.patch\n")
    (quilt_dir / "a.patch").write_text("--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+x\n")
    return quilt_dir, upstream


def test_import_quilt_never_overwrites_a_series_without_force_and_keeps_the_old_one(tmp_path, capsys):
    quilt_dir, upstream = _quilt_and_upstream(tmp_path)
    out = tmp_path / "series" / "default.yaml"
    out.parent.mkdir()
    out.write_text("# hand-written\nversion: 1\n")
    args = ["import-quilt", str(quilt_dir), "--upstream", str(upstream), "--target", "t", "-o", str(out)]
    assert main(args) == 1
    assert "already exists" in capsys.readouterr().err and out.read_text() == "# hand-written\nversion: 1\n"
    assert main([*args, "--force"]) == 0
    assert "a.patch" in out.read_text()
    assert (tmp_path / "series" / "default.yaml.orig").read_text() == "# hand-written\nversion: 1\n"
    assert str(out) + ".orig" in capsys.readouterr().err
    out.write_text("# second hand\n")
    assert main([*args, "--force"]) == 0  # never over an older copy
    assert (tmp_path / "series" / "default.yaml.orig").read_text() == "# hand-written\nversion: 1\n"
    assert (tmp_path / "series" / "default.yaml.orig.1").read_text() == "# second hand\n"


def test_import_quilt_force_waits_for_no_one_working_in_the_series_workspace(tmp_path, monkeypatch):
    from filelock import FileLock

    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    quilt_dir, upstream = _quilt_and_upstream(tmp_path)
    out = tmp_path / "series" / "default.yaml"
    out.parent.mkdir()
    out.write_text("# hand-written\n")
    (tmp_path / "work" / ".materialize").mkdir(parents=True)
    args = ["import-quilt", str(quilt_dir), "--upstream", str(upstream), "--target", "t", "-o", str(out), "--force"]
    with FileLock(str(tmp_path / "work" / ".materialize" / "lock")):
        assert main(args) == 5  # busy: a `pop -a` is working from this series
    assert out.read_text() == "# hand-written\n" and not (tmp_path / "series" / "default.yaml.orig").exists()
    assert main(args) == 0


@pytest.mark.parametrize(("options", "field"), [("-p 99999999999999999", "strip"), ("-p17", "strip"),
                                                ("-F4", "max_fuzz"), ("--fuzz=99999999999999999999", "max_fuzz")])
def test_a_series_option_the_series_file_cannot_hold_is_refused_at_import(tmp_path, options, field):
    """import-quilt never writes a series file that then fails to load: an option out of the series
    model's range is refused naming the quilt series line (exit 2), whichever option it is."""
    from materialize.cli import main

    quilt = tmp_path / "patches"
    quilt.mkdir()
    (quilt / "series").write_text(f"p1.patch {options}\n")
    (quilt / "p1.patch").write_text("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "f").write_text("a\n")
    with pytest.raises(SeriesError, match=rf"series:1: .*{field} is 0 to"):
        parse_quilt_series(quilt / "series")
    out = tmp_path / "s.yaml"
    assert main(["import-quilt", str(quilt), "--upstream", str(tmp_path / "up"), "--target", "t", "-o", str(out)]) == 2
    assert not out.exists()


@pytest.mark.timeout(60)
def test_import_quilt_force_keeps_a_link_as_a_link_and_refuses_what_is_not_a_file(tmp_path, capsys):
    """`--force` kept the old series by reading it through any symlink: `-o series/x.yaml` that was a
    link to a 0600 secret copied the secret into a 0644 `x.yaml.orig`; a folder there was an
    IsADirectoryError traceback and a fifo hung the command. The link is kept as a link (the write
    replaces the link, never its target), a kept file keeps its permissions, and anything else is
    refused before anything is read or written."""
    import stat

    quilt_dir, upstream = _quilt_and_upstream(tmp_path)
    series = tmp_path / "series"
    series.mkdir()
    secret = tmp_path / "secret"
    secret.write_text("SECRET\n")
    secret.chmod(0o600)
    (series / "link.yaml").symlink_to(secret)
    args = ["import-quilt", str(quilt_dir), "--upstream", str(upstream), "--target", "t", "--force", "-o"]
    assert main([*args, str(series / "link.yaml")]) == 0
    kept = series / "link.yaml.orig"
    assert kept.is_symlink() and os.readlink(kept) == str(secret)
    assert secret.read_text() == "SECRET\n" and "a.patch" in (series / "link.yaml").read_text()
    private = series / "private.yaml"
    private.write_text("# mine\n")
    private.chmod(0o600)
    assert main([*args, str(private)]) == 0
    assert stat.S_IMODE((series / "private.yaml.orig").stat().st_mode) == 0o600
    (series / "dir.yaml").mkdir()
    os.mkfifo(series / "fifo.yaml")
    capsys.readouterr()
    for name in ("dir.yaml", "fifo.yaml"):
        assert main([*args, str(series / name)]) == 1
        err = capsys.readouterr().err
        assert name in err and "not a file" in err and "Traceback" not in err
        assert not (series / f"{name}.orig").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder"])
def test_a_quilt_series_that_is_not_a_regular_file_is_refused_naming_it(tmp_path, kind):
    """A quilt folder is often someone else's (a source package): its ``series`` as a link to /dev/zero
    was read without end, as a fifo it waited forever, as a folder it was a traceback."""
    series = tmp_path / "series"
    if kind == "dev-zero":
        series.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(series)
    else:
        series.mkdir()
    with pytest.raises(SeriesError, match=rf"{series}: cannot read it: (not a regular file|Is a directory)"):
        parse_quilt_series(series)


def test_a_quilt_series_past_the_size_cap_is_refused(tmp_path, monkeypatch):
    import materialize.commands.import_quilt as import_quilt

    monkeypatch.setattr(import_quilt, "MAX_BYTES", 100)
    series = tmp_path / "series"
    series.write_text("a.patch\n" * 20)
    with pytest.raises(SeriesError, match=rf"{series}: larger than"):
        parse_quilt_series(series)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("state", ["dev-zero", "fifo", "deep"])
def test_import_quilt_force_reads_a_checkout_s_workspace_record_in_bounded_time_and_memory(tmp_path, monkeypatch,
                                                                                         state):
    """--force asks the workspace beside the series whether it works from it: its state.json (a file
    of the checkout) as a link to /dev/zero was read without end, as a fifo waited forever, nested
    100k deep was a RecursionError traceback. Such a record says nothing else: the lock is taken."""
    monkeypatch.delenv("MATERIALIZE_WORK", raising=False)
    quilt_dir, upstream = _quilt_and_upstream(tmp_path)
    out = tmp_path / "series" / "default.yaml"
    out.parent.mkdir()
    out.write_text("# hand-written\n")
    meta = tmp_path / "work" / ".materialize"
    meta.mkdir(parents=True)
    if state == "dev-zero":
        (meta / "state.json").symlink_to("/dev/zero")
    elif state == "fifo":
        os.mkfifo(meta / "state.json")
    else:
        (meta / "state.json").write_text("[" * 100_000)
    from materialize.commands.import_quilt import _records

    assert _records(meta, out) is True
