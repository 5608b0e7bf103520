"""``materialize import-quilt``: turn a quilt series directory into a series file.

quilt's ``series`` file lists one patch per line with optional ``-pN``; comments and blank lines are
allowed. quilt applies with GNU patch's default fuzz of 2, so the imported series records
``max_fuzz: 2`` to reproduce exactly what quilt does (``check`` will still say where fuzz is needed).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from materialize.atomic import read_json, read_regular
from materialize.errors import MaterializeError, SeriesError, UpstreamError
from materialize.series import MAX_FUZZ, MAX_STRIP, SeriesSpec, check_inside, patch_name
from materialize.upstream import parse_spec
from materialize.yamlpos import MAX_BYTES

QUILT_DEFAULT_FUZZ = 2


# quilt reads ``series`` with sed and awk, which split fields at spaces and TABs only (a CR, a form
# feed or a vertical tab is part of a word, and Python's ``split()``/``splitlines()`` would cut there).
_BLANKS = re.compile(r"[ \t]+")
_COMMENT = re.compile(r"(^|[ \t]+)#.*")  # patch_args' awk: sub(/(^|[ \t]+)#.*/, "")
_NUMBER = r"\+?(\d+)"  # GNU patch's numeric_string: "-p01" and "-p+1" are 1


def parse_quilt_series(series_file: Path) -> list[tuple[str, int, bool, int | None]]:
    """(patch path, strip, reverse, fuzz or None) per entry, read exactly as quilt 0.67 reads ``series``.

    quilt takes the entries with ``cat_series`` (a line starting with ``#`` is dropped; otherwise the
    first word, after leading blanks, is the patch) and each one's options with ``patch_args`` (the
    line without its comment, ``#`` at the start or after a blank, then the words after the first),
    and runs ``patch OPTIONS -p1`` unless an option starts with ``-p``. So ``-p 0``, ``--strip=N`` (then
    overridden by that ``-p1``), ``-F N`` and ``--fuzz=N`` are read as GNU patch reads them. What quilt
    cannot apply is refused here, naming file:line, rather than imported as something quilt never
    does: an indented comment (quilt looks for a patch named ``#``), a CR (a CRLF series file: quilt
    looks for ``x.patch\r``, or GNU patch refuses ``-p1\r``), a name with a space (quilt takes its
    first word), an option we do not model (``-E``, ``-l``, ``-Rp1`` …), and a patch listed twice (quilt
    refuses that; ``./x.patch`` after ``x.patch`` too, which quilt compares as another name).
    """
    entries: list[tuple[str, int, bool, int | None]] = []
    lines: dict[str, int] = {}  # each patch as listed -> its line
    try:
        # not read_text (it drops CRs); a regular file of a series file's size: a quilt folder is often
        # someone else's (a source package), and its series as a link to /dev/zero or a fifo was read
        # without end or waited forever
        raw = read_regular(series_file, MAX_BYTES)
    except FileNotFoundError:
        raise SeriesError(f"{series_file}: no quilt series file here") from None
    except OSError as exc:
        raise SeriesError(f"{series_file}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise SeriesError(f"{series_file}: larger than {MAX_BYTES >> 20} MiB; refused as a quilt series file")
    text = raw.decode("utf-8", "surrogateescape")
    for number, raw in enumerate(text.split("\n"), start=1):
        where = f"{series_file}:{number}"
        if raw.startswith("#"):
            continue
        words = _BLANKS.split(_COMMENT.sub("", raw, count=1).strip(" \t"))
        name = _BLANKS.split(raw.lstrip(" \t"), maxsplit=1)[0]
        if not name:
            continue
        if name.startswith("#"):
            raise SeriesError(f"{where}: quilt reads {name!r} as a patch name here (a comment line must start "
                              "with '#' in its first column): quilt push fails on it, so the series is refused")
        if "\r" in name or any("\r" in word for word in words):
            raise SeriesError(f"{where}: a carriage return (a CRLF series file?): quilt reads it as part of the "
                              "patch name or of an option and fails, so the series is refused; convert it to LF")
        strip, reverse, fuzz = _quilt_options(words[1:], where)
        check_inside(series_file.parent, name, where)  # not /etc/x, not ../../x
        listed = Path(name).as_posix()
        if listed in lines:  # quilt push: "Patch X is already applied; check your series file", nothing pushed
            raise SeriesError(f"{where}: {name!r} is already listed at line {lines[listed]}: quilt push refuses a "
                              "series that names a patch twice, so the series is refused")
        lines[listed] = number
        entries.append((name, strip, reverse, fuzz))
    return entries


def _quilt_options(options: list[str], where: str) -> tuple[int, bool, int | None]:
    """(strip, reverse, fuzz) from a series line's options, as ``patch OPTIONS [-p1]`` reads them.

    GNU patch takes the last ``-p``/``--strip`` and the last ``-F``/``--fuzz``; quilt appends ``-p1``
    when no option starts with ``-p``, so a lone ``--strip=0`` is overridden (``-p1`` comes last).
    """
    strip: int | None = None
    reverse = False
    fuzz: int | None = None
    i = 0
    while i < len(options):
        option = given = options[i]
        value: str | None = None
        if option in ("-p", "--strip", "-F", "--fuzz") and i + 1 < len(options):
            i += 1
            value = options[i]
            given = f"{option} {value}"
        elif match := re.fullmatch(r"(-p|--strip=|-F|--fuzz=)(.+)", option):
            option, value = match.group(1).rstrip("="), match.group(2)
        elif option in ("-R", "--reverse"):
            reverse = True
            i += 1
            continue
        elif not option.startswith("-"):
            raise SeriesError(f"{where}: quilt reads the first word as the patch and {option!r} as an option to "
                              "GNU patch (a patch name with a space?): refused")
        number = re.fullmatch(_NUMBER, value) if value is not None else None
        if number is None:
            raise SeriesError(f"{where}: unsupported quilt option {given!r} "
                              "(only -pN, -p N, --strip=N, -R, --reverse, -FN, -F N, --fuzz=N)")
        if option in ("-p", "--strip"):
            strip = int(number.group(1))
        else:
            fuzz = int(number.group(1))
        i += 1
    if not any(o.startswith("-p") for o in options):
        strip = 1  # quilt's own -p1, after the line's options
    strip = 1 if strip is None else strip
    # What the series file cannot hold is refused here, naming the line, not written out to fail later.
    if fuzz is not None and fuzz > MAX_FUZZ:
        raise SeriesError(f"{where}: fuzz {fuzz}: a series entry's max_fuzz is 0 to {MAX_FUZZ}")
    if strip > MAX_STRIP:
        raise SeriesError(f"{where}: -p{strip}: a series entry's strip is 0 to {MAX_STRIP}")
    return strip, reverse, fuzz


def resolve_git_rev(url: str, rev: str) -> str:
    """The full SHA of ``rev`` (abbreviated SHA, branch, tag) so the written pin is fetchable.

    A remote that refuses to serve an abbreviated SHA would make ``apply`` fail later; resolve it
    now: locally with ``rev-parse``, remotely by matching ``ls-remote``'s refs (or a full SHA as is).
    """
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        return rev
    local = Path(url).expanduser()
    if local.exists():
        proc = subprocess.run(["git", "-C", str(local), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            return proc.stdout.strip()
        raise UpstreamError(f"git+{url}@{rev}: no such revision in {local}")
    proc = subprocess.run(["git", "ls-remote", url], capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        raise UpstreamError(f"git+{url}@{rev}: git ls-remote failed: {proc.stderr.strip()}")
    refs = dict(reversed(line.split("\t", 1)) for line in proc.stdout.splitlines() if "\t" in line)
    for name in (rev, f"refs/heads/{rev}", f"refs/tags/{rev}^{{}}", f"refs/tags/{rev}"):
        if name in refs:
            return refs[name]
    matches = {sha for sha in refs.values() if sha.startswith(rev)}
    if len(matches) == 1:
        return matches.pop()
    raise UpstreamError(f"git+{url}@{rev}: cannot resolve {rev!r} to a full SHA from the remote's refs; give the full SHA")


def build_series(quilt_dir: Path, upstream: str, target: str, output: Path) -> dict:
    quilt_dir = quilt_dir.resolve()
    series_file = quilt_dir / "series"
    if not series_file.exists() and (quilt_dir / "patches" / "series").exists():
        quilt_dir = quilt_dir / "patches"
        series_file = quilt_dir / "series"
    entries = parse_quilt_series(series_file)
    for name, _strip, _reverse, _fuzz in entries:
        if not (quilt_dir / name).is_file():
            raise SeriesError(f"{series_file}: patch {name} is listed but {quilt_dir / name} does not exist")
    pin = parse_spec(upstream)
    pin_data = pin.model_dump(exclude_none=True)
    if pin_data.get("kind") == "git":
        pin_data["rev"] = pin_data["sha"] = resolve_git_rev(pin_data["url"], pin_data["rev"])
    for key in ("path",):
        if key in pin_data:
            pin_data[key] = os.path.relpath(pin_data[key], output.parent.resolve())
    document = {
        "version": 1,
        "patches_dir": os.path.relpath(quilt_dir, output.parent.resolve()),
        "defaults": {"strip": 1, "max_fuzz": QUILT_DEFAULT_FUZZ},
        "targets": {target: {"pin": pin_data}},
        "patches": [
            {"patch": path, **({"name": name} if name else {}), "target": target,
             **({"strip": strip} if strip != 1 else {}), **({"reverse": True} if reverse else {}),
             **({"max_fuzz": fuzz} if fuzz is not None else {})}
            for (path, strip, reverse, fuzz), name in zip(entries, own_names([e[0] for e in entries]), strict=True)
        ],
    }
    errors: list[dict] = []
    SeriesSpec.parse(document, (), errors)  # the file written must load: the series model's own rules
    if errors:
        raise SeriesError(f"{series_file}: the imported series would not load: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors))
    return document


def own_names(paths: list[str]) -> list[str | None]:
    """A ``name:`` for each entry whose file name another entry shares (None: its file name will do).

    quilt names a patch by its path (riscv/flaky_tests.patch, mips/flaky_tests.patch), we by its file
    name; the ones that share one are named by their path instead, "/" made "-" (a name is one path
    component), with "-2", "-3"… if that is taken too.
    """
    bases = [patch_name(p) for p in paths]
    shared = {b for b in bases if bases.count(b) > 1}
    taken = {b for b in bases if b not in shared}
    names: list[str | None] = []
    for path, base in zip(paths, bases, strict=True):
        if base not in shared:
            names.append(None)
            continue
        stem = patch_name(path.replace("/", "-"))
        if stem.isdigit():  # a name that is a number would be read as a position
            stem = f"{stem}-patch"
        name, n = stem, 1
        while name in taken:
            n += 1
            name = f"{stem}-{n}"
        taken.add(name)
        names.append(name)
    return names


def run(quilt_dir: Path, upstream: str, target: str, output: Path | None, *, force: bool = False) -> int:
    """Print the imported series, or write it to ``output``: a file that exists is replaced only with
    ``force``, under the lock of the workspace working from it, and kept first (``keep_copy``)."""
    destination = output or Path("series") / f"{quilt_dir.resolve().name}.yaml"
    if output is not None:  # before the upstream is read (a git remote may be slow)
        _refuse_existing(output) if not force else _refuse_unkeepable(output)
    document = build_series(quilt_dir, upstream, target, destination)
    text = "# imported from quilt series " + str(quilt_dir) + "\n" + yaml.safe_dump(document, sort_keys=False)
    if output is None:
        print(text, end="")
        return 0
    from materialize.atomic import atomic_write

    kept = None
    with _workspace_of(output):
        if not force:
            _refuse_existing(output)  # written meanwhile
        elif output.exists() or output.is_symlink():
            _refuse_unkeepable(output)
            kept = keep_copy(output)
        atomic_write(output, text.encode())
    if kept is not None:
        print(f"materialize: the series that was in {output} is kept in {kept}", file=sys.stderr)
    return 0


def _refuse_existing(output: Path) -> None:
    if output.exists() or output.is_symlink():
        raise MaterializeError(f"import-quilt: {output} already exists; nothing was written (`--force` replaces it, "
                               f"keeping it as {output}.orig)")


def _refuse_unkeepable(output: Path) -> None:
    """What ``--force`` replaces must be a file or a symlink (``keep_copy`` keeps either): a folder
    or a fifo there is refused, not read (a traceback, a hang)."""
    try:
        mode = os.lstat(output).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise MaterializeError(f"import-quilt: {output} is not a file (a folder, a fifo or a device); nothing was"
                               " written")


def keep_copy(path: Path) -> Path:
    """Keep ``path`` as ``<path>.orig`` (patch's and quilt's habit), or ``.orig.1``, ``.orig.2``…: never
    over an older copy. A file's bytes are kept with its permissions (a 0600 series stays private); a
    symlink is kept as the same link, never read through: the write that follows replaces the link,
    not its target, so a link to a secret must not leave the secret's bytes in a 0644 copy."""
    from materialize.atomic import new_temporary, sweep_dead_temporaries

    copy, n = path.with_name(f"{path.name}.orig"), 0
    while copy.exists() or copy.is_symlink():
        n += 1
        copy = path.with_name(f"{path.name}.orig.{n}")
    if path.is_symlink():
        os.symlink(os.readlink(path), copy)  # fails, never overwrites, if a copy appeared meanwhile
        return copy
    sweep_dead_temporaries(path.parent)
    fd, tmp = new_temporary(path.parent)  # 0600 until it holds the kept bytes and permissions
    try:
        with os.fdopen(fd, "wb") as handle:
            source = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with open(source, "rb") as original:
                st = os.fstat(source)
                if not stat.S_ISREG(st.st_mode):  # swapped for something else since it was checked
                    raise MaterializeError(f"import-quilt: {path} is not a file; nothing was written")
                handle.write(original.read())
            os.fchmod(handle.fileno(), stat.S_IMODE(st.st_mode))
        os.replace(tmp, copy)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return copy


@contextlib.contextmanager
def _workspace_of(series_path: Path) -> Iterator[None]:
    """The lock of the workspace working from ``series_path`` (``work/`` beside its ``series/`` folder,
    or MATERIALIZE_WORK), once its state allows a change (no interrupted operation, no rebase), as
    every workspace command takes it: a `pop -a` running from the old series is not written under.
    Nothing when there is no workspace, or it records another series."""
    from materialize.workspace.session import guarded
    from materialize.workspace.state import WORK_ENV

    override = os.environ.get(WORK_ENV)
    root = Path(override).resolve() if override else series_path.absolute().parent.parent / "work"
    meta = root / ".materialize"
    if not meta.is_dir() or not _records(meta, series_path):
        yield
        return
    with guarded(meta, "import-quilt"):
        yield


def _records(meta: Path, series_path: Path) -> bool:
    """Whether the workspace in ``meta`` works from ``series_path`` (or says nothing else)."""
    from materialize.workspace.journal import RECORD_LIMIT

    try:  # a record of a checkout's work/ (a link to /dev/zero, a fifo, [[[... 100k deep) says nothing else
        recorded = read_json(meta / "state.json", RECORD_LIMIT)["series"]
    except (OSError, ValueError, KeyError, TypeError):
        return True
    return Path(recorded).resolve() == series_path.resolve()
