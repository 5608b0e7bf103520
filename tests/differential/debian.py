"""Real Debian ``3.0 (quilt)`` source packages: our import-quilt + apply against ``quilt push -a``.

Shared by ``tests/differential/test_debian_quilt.py`` (``make test-differential``) and
``bench/debian_quilt.py`` (the identical/total table). Sources are fetched once with
``apt-get source --download-only`` into the user cache (``$MATERIALIZE_TEST_DATA``, else
``~/.cache/materialize-testdata``); the packages are small on purpose (the whole list is ~20 MB and
a few minutes on two cores).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

# 3.0 (quilt) packages of bookworm whose debian/patches series quilt applies (74 packages,
# 1,961 patches). All are identical to quilt push -a (2026-11-30; nodejs, grub2, samba, protobuf
# 2026-12-01), jq's two empty directories included (bench/README.md, "Exact").
PACKAGES = [
    "acl", "arj", "attr", "bc", "bzip2", "cowsay", "cpio", "diffutils", "dtach", "expat", "figlet",
    "grep", "gzip", "indent", "jq", "less", "libcap2", "lsof", "lua5.3", "lz4", "lzip", "m4", "nano",
    "ncompress", "patch", "screen", "sed", "sharutils", "sl", "tree", "units", "unzip", "xz-utils", "zlib",
    # Larger series, and strace, whose orig tarball holds tar hard links (refused until 2026-11-30).
    "cron", "curl", "dash", "libxml2", "nginx", "openssh", "rsync", "strace",
    # grub2: 206 patches; nodejs: two patches of one file name in two folders (riscv/, mips/);
    # samba: an orig tarball that holds 27 members twice; protobuf: git index lines that say 100755 for
    # files its tarball ships 0644 (GNU patch changes a mode only where old and new modes differ).
    "grub2", "nodejs", "samba", "protobuf",
    # 2026-12-01 (session 7): many patches on tiny tarballs, cheap to keep: chkrootkit 84, netcat 24.
    "chkrootkit", "netcat",
    # 2026-12-02 (session 11): the series of 15-83 patches of a sweep of 89 more packages (64 that apt-get
    # could fetch and quilt push, 788 patches, every tree identical; the rest were missing on the mirror,
    # had no series, or were perl, whose second orig component the helper does not unpack): python3.11 83, exim4 66, util-linux 48,
    # php8.2 47, procmail 32, gnupg2 30, cups 26, tiff 22, libpng1.6 20, bash 19, file 18, groff 17,
    # krb5 16, postfix 16, apr 15, busybox 15, libxslt 15, openldap 15, shadow 15.
    "python3.11", "exim4", "util-linux", "php8.2", "procmail", "gnupg2", "cups", "tiff", "libpng1.6", "bash",
    "file", "groff", "krb5", "postfix", "apr", "busybox", "libxslt", "openldap", "shadow",
    # 2026-12-02 (session 14, red team "exact"): a sweep of 217 more packages (113 that apt-get could fetch
    # and quilt push, 1,251 patches, every tree identical but xl2tpd's, refused at import: its tarball
    # holds a member named .git; glibc 109, ghostscript 52, vim, ruby3.1, squid, openssl, ...); kept here: the longest series that are cheap (imagemagick 193, gnutls28 90,
    # sgt-puzzles 68) and sendmail (25).
    "imagemagick", "gnutls28", "sgt-puzzles", "sendmail",
    # 2026-12-05 (session 15, red team "exact"): a sweep of 59 packages (55 with a series quilt pushes,
    # 358 patches, every tree identical; zsh, readline, sudo, sqlite3, tcl8.6, gettext, binutils, coreutils,
    # tar, e2fsprogs, iproute2, openvpn, pam, isc-dhcp, nfs-utils, apache2, ...; freetype skipped: its
    # second orig component; mawk, dosfstools, mtools: no series); kept here: three cheap series of 11-13 patches.
    "ppp", "mdadm", "giflib",
]
SKIP = {".pc"}  # quilt's own folder, in its tree only
# extraction filters exist from Python 3.11.4 (and 3.12); an older 3.11 extracts as before them
_TAR_FILTER = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}


def cache_dir() -> Path:
    return Path(os.environ.get("MATERIALIZE_TEST_DATA", Path.home() / ".cache" / "materialize-testdata")) / "debian"


def fetch(package: str) -> tuple[Path, Path] | None:
    """(orig tarball, debian tarball), downloaded once; None when the package has no such pair."""
    where = cache_dir() / package
    if not any(where.glob("*.orig.tar.*")):  # (a signature is never fetched alone)
        where.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["apt-get", "source", "--download-only", "-qq", package], cwd=where,
                              capture_output=True)
        if proc.returncode != 0:
            shutil.rmtree(where, ignore_errors=True)
            return None
    origs = [p for p in sorted(where.glob("*.orig.tar.*")) if not p.name.endswith(".asc")]  # not signatures
    debians = sorted(where.glob("*.debian.tar.*"))
    if len(origs) != 1 or len(debians) != 1:
        return None
    return origs[0], debians[0]


@dataclass
class Snapshot:
    """What a tree holds: files (kind, executable, bytes or link target) and its empty directories."""

    files: dict[str, tuple[str, bool, bytes]] = field(default_factory=dict)
    empty_dirs: set[str] = field(default_factory=set)


def snapshot(root: Path) -> Snapshot:
    snap = Snapshot()
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in SKIP]
        links = [d for d in dirnames if (Path(dirpath) / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d not in links]
        if not dirnames and not filenames and not links and rel_dir != Path("."):
            snap.empty_dirs.add(rel_dir.as_posix())
        for name in filenames + links:
            full = Path(dirpath) / name
            rel = (rel_dir / name).as_posix()
            if full.is_symlink():
                snap.files[rel] = ("link", False, os.readlink(full).encode())
            else:
                mode = full.stat().st_mode
                snap.files[rel] = ("file", bool(mode & stat.S_IXUSR), full.read_bytes())
    return snap


@dataclass
class Outcome:
    package: str
    patches: int
    differences: list[str]  # contents, links, x bits, empty files
    dir_differences: list[str]  # empty directories
    skipped: str | None = None

    @property
    def identical(self) -> bool:
        return self.skipped is None and not self.differences and not self.dir_differences


def _quilt(orig: Path, patches: Path, work: Path) -> Path | str:
    work.mkdir()
    with tarfile.open(orig) as tar:
        tar.extractall(work, **_TAR_FILTER)
    tops = list(work.iterdir())
    top = tops[0] if len(tops) == 1 and tops[0].is_dir() else work
    # quilt reads the series where it lies: an upstream may ship a patches/ folder of its own
    # (sane-backends does), which a copy into the tree would collide with and the comparison miss.
    env = {**os.environ, "QUILT_PATCHES": str(patches.resolve()), "QUILTRC": "/dev/null"}
    proc = subprocess.run(["quilt", "push", "-a", "-q"], cwd=top, env=env, capture_output=True, text=True)
    if proc.returncode != 0 and "No patches in series" not in proc.stdout + proc.stderr:
        return f"quilt push -a failed: {proc.stdout[-300:]}{proc.stderr[-300:]}"
    return top  # (a series of comments only: quilt says so and exits 2, its tree is the tarball's)


def _ours(quilt_dir: Path, orig: Path, work: Path) -> Path | str:
    from materialize.cli import main

    work.mkdir()
    series = work / "imported.yaml"
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = main(["import-quilt", str(quilt_dir), "--upstream", str(orig), "--target", "debian-upstream",
                     "-o", str(series)])
        if code == 0:
            code = main(["apply", "--series", str(series), "--out", str(work / "out")])
    if code != 0:
        return f"materialize exit {code}: {sink.getvalue()[-600:]}"
    return work / "out" / "debian-upstream"


def compare(package: str, work: Path) -> Outcome:
    """Our tree and quilt's tree of ``package`` compared: the differences, or why it was skipped."""
    fetched = fetch(package)
    if fetched is None:
        return Outcome(package, 0, [], [], skipped="apt-get source failed, or no orig + debian tarball pair")
    orig, debian = fetched
    unpacked = work / "debian-src"
    unpacked.mkdir(parents=True)
    with tarfile.open(debian) as tar:
        tar.extractall(unpacked, **_TAR_FILTER)
    quilt_dir = unpacked / "debian" / "patches"
    series = quilt_dir / "series"
    if not series.is_file():
        return Outcome(package, 0, [], [], skipped="no debian/patches/series")
    count = sum(1 for line in series.read_text(errors="replace").splitlines() if line.strip() and not line.startswith("#"))
    theirs = _quilt(orig, quilt_dir, work / "quilt")
    if isinstance(theirs, str):
        return Outcome(package, count, [], [], skipped=theirs)
    ours = _ours(quilt_dir, orig, work / "ours")
    if isinstance(ours, str):
        return Outcome(package, count, [f"materialize failed where quilt applied: {ours}"], [])
    a, b = snapshot(ours), snapshot(theirs)
    differences = []
    for path in sorted(set(a.files) | set(b.files)):
        mine, quilts = a.files.get(path), b.files.get(path)
        if mine == quilts:
            continue
        if mine is None or quilts is None:
            differences.append(f"{path}: only in {'quilt' if mine is None else 'ours'}")
        elif mine[0] != quilts[0]:
            differences.append(f"{path}: {mine[0]} here, {quilts[0]} in quilt")
        elif mine[1] != quilts[1]:
            differences.append(f"{path}: executable bit {mine[1]} here, {quilts[1]} in quilt")
        else:
            differences.append(f"{path}: contents differ")
    dirs = [f"{d}/: empty directory only in {'quilt' if d in b.empty_dirs else 'ours'}"
            for d in sorted(a.empty_dirs ^ b.empty_dirs)]
    return Outcome(package, count, differences, dirs)
