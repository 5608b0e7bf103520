"""Hostile tar headers: a GNU long name/link or pax header is read whole into memory by tarfile, so an
oversized one is refused (exit 4) before it is read, its bytes count against the expansion budget, and
a name no file system could hold (a component past NAME_MAX) is refused naming the member, with the
name cut short in the message."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from materialize.errors import UnsafePathError
from materialize.series import TarballPin
from materialize.store import Store
from materialize.upstream import resolve


class _Filler(io.RawIOBase):
    """``size`` bytes: ``head``, then ``fill`` repeated, then ``tail``; produced lazily."""

    def __init__(self, size: int, head: bytes = b"", fill: bytes = b"a", tail: bytes = b"") -> None:
        self.size, self.head, self.fill, self.tail, self.pos = size, head, fill, tail, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # noqa: ANN001
        n = min(len(buffer), self.size - self.pos)
        chunk = bytearray(self.fill * (n // len(self.fill) + 1))[:n]
        if self.pos < len(self.head):
            part = self.head[: n] if self.pos == 0 else b""
            chunk[: len(part)] = part
        tail_at = self.size - len(self.tail)
        if self.tail and self.pos + n > tail_at:
            chunk[tail_at - self.pos:] = self.tail[max(0, self.pos - tail_at):]
        buffer[:n] = chunk
        self.pos += n
        return n


def _pax_record(keyword: str, size: int) -> tuple[bytes, bytes]:
    """The head and tail of one pax record ``<size> <keyword>=aaaa…\\n`` that is ``size`` bytes long."""
    return f"{size} {keyword}=".encode(), b"\n"


def header_tar(path: Path, kind: str, size: int, count: int = 1) -> Path:
    """A .tar.gz whose members are each preceded by an extended header of ``size`` bytes: a GNU long
    name ("L") or link ("K"), a pax extended ("x") or global ("g") header."""
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT, compresslevel=6) as tar:
        for index in range(count):
            head = tarfile.TarInfo("././@LongLink" if kind in "LK" else "././@PaxHeader")
            head.type = {"L": tarfile.GNUTYPE_LONGNAME, "K": tarfile.GNUTYPE_LONGLINK,
                         "x": tarfile.XHDTYPE, "g": tarfile.XGLTYPE}[kind]
            head.size = size
            if kind in "LK":
                body = _Filler(size, tail=b"\0")
            else:
                start, end = _pax_record(f"comment{index}", size)
                body = _Filler(size, head=start, tail=end)
            tar.addfile(head, io.BufferedReader(body, 1 << 20))
            member = tarfile.TarInfo(f"p/f{index}")
            if kind == "K":
                member.type, member.linkname = tarfile.SYMTYPE, "x"
            member.size = 0
            tar.addfile(member)
    return path


def series_for(tmp_path: Path, archive: Path) -> Path:
    doc = {"version": 1, "targets": {"t": {"pin": {"kind": "tarball", "path": str(archive)}}}, "patches": []}
    path = tmp_path / "series.yaml"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("kind", ["L", "K", "x", "g"])
def test_an_oversized_extended_header_is_refused_before_it_is_read(tmp_path, kind):
    archive = header_tar(tmp_path / "h.tar.gz", kind, 8 << 20)
    store = Store.open()
    with pytest.raises(UnsafePathError, match=r"h\.tar\.gz: .*header.* 8388608 bytes") as info:
        resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert len(str(info.value)) < 400
    assert store.read_refs("refs/materialize/pins/") == {}


def test_extended_header_bytes_count_against_the_expansion_budget(tmp_path):
    """Each pax header is under the per-header cap, but together they pass the 64 MiB floor."""
    archive = header_tar(tmp_path / "many.tar.gz", "x", 900 << 10, count=80)
    store = Store.open()
    with pytest.raises(UnsafePathError, match="compression bomb"):
        resolve(TarballPin(kind="tarball", path=str(archive)), store, base_dir=tmp_path)
    assert store.read_refs("refs/materialize/pins/") == {}


def test_a_500_mb_long_name_is_one_line_exit_4_in_bounded_memory(tmp_path):
    """The red team's case: a ~0.5 MB .tar.gz whose GNU long name declares 500 MB (2.4 GB peak before)."""
    archive = header_tar(tmp_path / "L.tar.gz", "L", 500_000_000)
    assert archive.stat().st_size < 4 << 20
    code = ("import resource, subprocess, sys;"
            "p = subprocess.run([sys.executable, '-m', 'materialize', *sys.argv[1:]], capture_output=True, text=True);"
            "sys.stderr.write(p.stderr); print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    proc = subprocess.run([sys.executable, "-c", code, "apply", "--series", str(series_for(tmp_path, archive)),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          env=os.environ.copy())
    code_seen, peak_kb = map(int, proc.stdout.split()[-2:])
    assert code_seen == 4, proc.stderr
    assert peak_kb < 200 << 10, f"peaked at {peak_kb} kB"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "L.tar.gz" in lines[0] and "Traceback" not in proc.stderr
    assert len(lines[0]) < 400
    assert not (tmp_path / "out").exists()


def _long_named(path: Path, name: str, fmt: int) -> Path:
    with tarfile.open(path, "w:gz", format=fmt) as tar:
        info = tarfile.TarInfo(name)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    return path


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_a_path_component_past_name_max_is_refused_naming_the_member(tmp_path, fmt):
    archive = _long_named(tmp_path / "n.tar.gz", "p/" + "a" * 256 + "/f", fmt)
    with pytest.raises(UnsafePathError, match=r"n\.tar\.gz: member 'p/aaa.*more than 255") as info:
        resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)
    assert len(str(info.value)) < 400


def test_a_component_of_exactly_255_bytes_is_accepted(tmp_path):
    archive = _long_named(tmp_path / "ok.tar.gz", "p/" + "é" * 127 + "a", tarfile.PAX_FORMAT)
    resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)


def test_a_long_name_under_the_header_cap_is_cut_short_in_the_message(tmp_path):
    """900 KB of name: refused (a component past NAME_MAX), and the message does not print all of it."""
    archive = _long_named(tmp_path / "big.tar.gz", "p/" + "b" * (900 << 10), tarfile.GNU_FORMAT)
    with pytest.raises(UnsafePathError, match=r"big\.tar\.gz: member 'p/bbb") as info:
        resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)
    assert len(str(info.value)) < 400


def test_a_zip_member_with_a_component_past_name_max_is_refused(tmp_path):
    import zipfile

    archive = tmp_path / "n.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("p/" + "z" * 300, b"x")
    with pytest.raises(UnsafePathError, match=r"n\.zip: member 'p/zzz.*more than 255") as info:
        resolve(TarballPin(kind="tarball", path=str(archive)), Store.open(), base_dir=tmp_path)
    assert len(str(info.value)) < 400
