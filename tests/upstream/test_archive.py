import io
import tarfile
import zipfile

import pytest

from materialize.errors import UnsafePathError
from materialize.upstream.archive import read_archive, single_top_folder, stream_archive


def make_tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def file_info(name, data=b"x", mode=0o644):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    return info, data


def test_tar_members_modes_and_top_folder(tmp_path):
    link = tarfile.TarInfo("pkg-1.0/link")
    link.type = tarfile.SYMTYPE
    link.linkname = "src/a.py"
    archive = make_tar(tmp_path / "a.tar.gz", [file_info("pkg-1.0/src/a.py"), file_info("pkg-1.0/run", mode=0o755),
                                               (link, None)])
    members = {m.path: m for m in read_archive(archive)}
    assert members["pkg-1.0/run"].mode == "100755"
    assert members["pkg-1.0/link"].mode == "120000" and members["pkg-1.0/link"].data == b"src/a.py"
    assert single_top_folder(list(members.values())) == "pkg-1.0"


@pytest.mark.parametrize("name", ["../evil.txt", "/abs/evil.txt", "pkg/../../evil.txt"])
def test_tar_slip_is_refused(tmp_path, name):
    archive = make_tar(tmp_path / "slip.tar.gz", [file_info(name)])
    with pytest.raises(UnsafePathError, match="evil.txt"):
        read_archive(archive)


def test_tar_link_out_and_device_are_refused(tmp_path):
    link = tarfile.TarInfo("pkg/link")
    link.type = tarfile.SYMTYPE
    link.linkname = "../../etc/passwd"
    with pytest.raises(UnsafePathError, match="points outside"):
        read_archive(make_tar(tmp_path / "l.tar.gz", [(link, None)]))
    dev = tarfile.TarInfo("pkg/dev")
    dev.type = tarfile.CHRTYPE
    with pytest.raises(UnsafePathError, match="device"):
        read_archive(make_tar(tmp_path / "d.tar.gz", [(dev, None)]))


def test_zip_slip_is_refused(tmp_path):
    archive = tmp_path / "slip.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("ok/file.txt", "fine")
        zf.writestr("../../outside.txt", "evil")
    with pytest.raises(UnsafePathError, match="outside.txt"):
        read_archive(archive)


def test_wheel_without_single_top_is_rooted_at_archive_root(tmp_path):
    archive = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("x/__init__.py", "")
        zf.writestr("x-1.0.dist-info/METADATA", "Name: x\n")
    assert single_top_folder(read_archive(archive)) == ""


def _hard(name, target):
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE
    info.linkname = target
    return info, None


def test_a_hard_link_is_the_earlier_members_content_again(tmp_path):
    """tar records a second name of a file as a hard link (strace's orig tarball has some): it is that
    file again, with its mode; a hard link to a symlink is that symlink again."""
    link = tarfile.TarInfo("pkg/l")
    link.type = tarfile.SYMTYPE
    link.linkname = "src/a.h"
    archive = make_tar(tmp_path / "h.tar.gz", [
        file_info("pkg/src/a.h", b"A\n", mode=0o755), (link, None),
        _hard("pkg/other/a.h", "pkg/src/a.h"), _hard("pkg/l2", "pkg/l"),
    ])
    members = {m.path: m for m in read_archive(archive)}
    assert members["pkg/other/a.h"].data == b"A\n" and members["pkg/other/a.h"].mode == "100755"
    assert members["pkg/l2"].mode == "120000" and members["pkg/l2"].data == b"src/a.h"


@pytest.mark.parametrize(("target", "error"), [("../../etc/passwd", "UnsafePathError"), ("/etc/passwd", "UnsafePathError"),
                                               ("pkg/later.h", "UpstreamError")])
def test_a_hard_link_must_name_an_earlier_member_inside(tmp_path, target, error):
    archive = make_tar(tmp_path / "h.tar.gz", [_hard("pkg/x.h", target), file_info("pkg/later.h")])
    with pytest.raises(Exception) as info:  # noqa: PT011 - the class is checked by name below
        read_archive(archive)
    assert type(info.value).__name__ == error
    assert "pkg/x.h" in str(info.value)


def test_a_member_that_appears_again_replaces_the_earlier_one_as_gnu_tar_does(tmp_path):
    """Debian's samba 4.17 orig tarball holds 27 members twice (identical copies); tar -x writes each
    again over the first, so quilt's tree has the last one. GNU tar is the oracle, hard links included
    (a link made before its target was replaced keeps the old content)."""
    import os
    import subprocess

    def symlink(name, target):
        info = tarfile.TarInfo(name)
        info.type = tarfile.SYMTYPE
        info.linkname = target
        return info, None

    archive = make_tar(tmp_path / "d.tar.gz", [
        file_info("pkg/a.txt", b"v1\n"), _hard("pkg/hl", "pkg/a.txt"), file_info("pkg/a.txt", b"v2\n", mode=0o755),
        file_info("pkg/same.txt", b"same\n"), file_info("pkg/same.txt", b"same\n"),
        symlink("pkg/s", "a.txt"), file_info("pkg/s", b"a file now\n"),
        file_info("pkg/f", b"a file first\n"), symlink("pkg/f", "same.txt"),
    ])
    ours = {m.path: (m.mode, m.data) for m in read_archive(archive)}
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(out)], check=True)
    theirs = {}
    for path in sorted((out / "pkg").iterdir()):
        rel = f"pkg/{path.name}"
        if path.is_symlink():
            theirs[rel] = ("120000", os.readlink(path).encode())
        else:
            theirs[rel] = ("100755" if os.access(path, os.X_OK) else "100644", path.read_bytes())
    assert ours == theirs
    assert ours["pkg/hl"] == ("100644", b"v1\n") and ours["pkg/a.txt"] == ("100755", b"v2\n")


def test_a_link_that_appears_again_pointing_out_is_still_refused(tmp_path):
    info = tarfile.TarInfo("pkg/f")
    info.type = tarfile.SYMTYPE
    info.linkname = "../../etc/passwd"
    archive = make_tar(tmp_path / "d.tar.gz", [file_info("pkg/f", b"x\n"), (info, None)])
    with pytest.raises(UnsafePathError):
        read_archive(archive)


def test_a_zip_name_that_appears_again_is_the_last_one_as_unzip_and_pip_extract(tmp_path):
    import warnings

    path = tmp_path / "w.whl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it writes
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("pkg/a.py", b"first\n")
            zf.writestr("pkg/a.py", b"second\n")
    out = tmp_path / "x"
    with zipfile.ZipFile(path) as zf:
        zf.extractall(out)
    assert {m.path: m.data for m in read_archive(path)} == {"pkg/a.py": (out / "pkg" / "a.py").read_bytes()}


def test_a_link_target_longer_than_path_max_is_refused(tmp_path):
    import io

    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("p/a")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
        info = tarfile.TarInfo("p/l")
        info.type, info.linkname = tarfile.SYMTYPE, "./" * 3000 + "a"
        tar.addfile(info)
    with pytest.raises(UnsafePathError, match=r"member 'p/l': symlink target longer than 4095 bytes"):
        read_archive(archive)


@pytest.mark.parametrize("name", ["p/.gitmodules", "p/sub/.GitModules"])
def test_a_symlink_named_gitmodules_in_a_pin_is_refused_as_in_a_patch(tmp_path, name):
    """git refuses a .gitmodules symlink (CVE-2018-11235); a patch could not make one, nor may a pin."""
    from materialize.cli import main

    up = tmp_path / "up.tar.gz"
    link = tarfile.TarInfo(name)
    link.type, link.linkname = tarfile.SYMTYPE, "a"
    make_tar(up, [file_info("p/a"), file_info("p/sub/a"), (link, None)])
    series = tmp_path / "s.yaml"
    series.write_text(f"version: 1\ntargets:\n  t:\n    pin: {{kind: tarball, path: {up}}}\n")
    assert main(["apply", "--series", str(series), "--out", str(tmp_path / "out")]) == 4
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mode", ["w:xz", "w:gz", "w:bz2"])
def test_a_piped_tarball_gives_every_member_with_its_bytes(tmp_path, mode):
    """The decompressor's pipe is read as a forward-only file (tarfile's "r:" mode over it): members of
    every size, including ones whose data ends on a block boundary and empty ones, keep their bytes."""
    files = {f"pkg-1/f{size}.bin": bytes(range(256)) * (size // 256) + b"x" * (size % 256)
             for size in (0, 1, 511, 512, 513, 10240, 10241, 300_000)}
    archive = tmp_path / f"p.tar.{mode[2:]}"
    with tarfile.open(archive, mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    got = {m.path: m.reader.read() for m in stream_archive(archive) if m.mode != "040000"}
    assert got == files


def test_the_forward_reader_refuses_to_seek_back():
    from materialize.upstream.archive import _ForwardReader

    reader = _ForwardReader(io.BytesIO(b"abcdef"))
    assert reader.seek(4) == 4 and reader.read(1) == b"e" and reader.tell() == 5
    with pytest.raises(io.UnsupportedOperation):
        reader.seek(2)
    assert reader.seek(100) == 6  # past the end: stops there, as the next read then finds nothing


def test_the_header_checksums_are_tarfiles_own():
    """archive.py replaces tarfile's checksum function by a faster one with the same results."""
    import os
    import random

    from materialize.upstream.archive import _TARFILE_CALC_CHKSUMS, _calc_chksums

    rng = random.Random(7)
    blocks = [os.urandom(512), bytes(512), b"\xff" * 512, b"\x80" * 512, b"\x7f" * 512,
              tarfile.TarInfo("pkg/é.py").tobuf(tarfile.PAX_FORMAT)[:512]]
    blocks += [bytes(rng.choice((0, 32, 127, 128, 255)) for _ in range(512)) for _ in range(200)]
    for block in blocks:
        assert _calc_chksums(block) == _TARFILE_CALC_CHKSUMS(block)
    assert tarfile.calc_chksums is _calc_chksums
