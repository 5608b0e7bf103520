"""The series: upstream pins per target plus one ordered list of patches (``series/*.yaml``).

Every command that loads a series pays for its validation at start-up, so the schema below is
checked by one small explicit validator (``_Model.parse``) instead of pydantic, whose import and
schema building cost more than the rest of ``status``. The validator keeps pydantic's error
vocabulary (``patches.3.strip: Input should be a valid integer``), collects every problem, and
``yamlpos`` turns each field path into the file and line the user has to edit.
All relative paths in a series file are relative to the directory that holds the series file.
"""


# No `from __future__ import annotations`: typing compiles a NamedTuple's string annotations, and a
# process's first compile() costs ~10M instructions, 5% of `materialize new` (tests/test_startup.py).
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from materialize import digest
from materialize.errors import SeriesError, UnsafePathError
from materialize.yamlpos import LocatedYaml, load_located

SERIES_FORMAT_VERSION = 1
# Targets are named by the series file; any safe identifier will do (it becomes a folder name).
TARGET_NAME = r"^(?!manifest\.json$)[A-Za-z0-9][A-Za-z0-9._+-]*$"  # a folder of the output, beside its manifest.json
# quilt reads a patch file through the tool its name's last suffix says, case and all (patchfns:
# cat_file; refresh writes it back the same way, create_db): x.patch.GZ is a plain diff to quilt.
# The suffixes quilt push decompresses (its apply_patch); a .tgz goes to patch as it is, and quilt's
# refresh writes it plain (patchfns cat_file reads it through gzip, but push never does).
_CODECS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".lzma": "lzma", ".lz": "lzip"}
# What a compressed patch may expand to: the archive's rule (upstream/archive.py, which imports these).
EXPANSION_ENV = "MATERIALIZE_MAX_EXPANSION"
DEFAULT_EXPANSION = 100
EXPANSION_FLOOR = 64 << 20
_SHA256 = r"^[0-9a-f]{64}$"

# --- the validator: each rule checks one value and returns it (normalized) or raises _Invalid ------
Loc = tuple[str | int, ...]
Rule = Callable[[Any, Loc, list[dict[str, Any]]], Any]


class _Invalid(Exception):
    """One problem with one value: pydantic's error ``type`` and message, so messages stay familiar."""

    def __init__(self, kind: str, msg: str) -> None:
        super().__init__(msg)
        self.kind, self.msg = kind, msg


def _checked(rule: Rule, value: Any, loc: Loc, errors: list[dict[str, Any]]) -> Any:
    """Run ``rule``; a problem is recorded as a pydantic-style error dict (``yamlpos`` locates it)."""
    try:
        return rule(value, loc, errors)
    except _Invalid as problem:
        errors.append({"loc": loc, "type": problem.kind, "msg": problem.msg, "input": value})
        return None


def _str(pattern: str | None = None, max_length: int | None = None) -> Rule:
    """A string (never a number: YAML's unquoted ``1234`` stays an error), optionally bounded and
    matching ``pattern`` as a whole (``$`` does not let a trailing newline through)."""
    compiled: list[re.Pattern[str]] = []  # on first use: most rules never run in a command (~0.5M instructions each)

    def rule(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> str:
        if not isinstance(value, str):
            raise _Invalid("string_type", "Input should be a valid string")
        if "\x00" in value:  # no path, URL or name holds one; os calls raised ValueError (a traceback)
            raise _Invalid("string_nul", "String should not contain a NUL character")
        if max_length is not None and len(value) > max_length:
            raise _Invalid("string_too_long", f"String should have at most {max_length} characters")
        if pattern:
            if not compiled:
                compiled.append(re.compile(pattern.removeprefix("^").removesuffix("$")))
            if not compiled[0].fullmatch(value):
                raise _Invalid("string_pattern_mismatch", f"String should match pattern '{pattern}'")
        return value
    return rule


def _int(ge: int, le: int) -> Rule:
    """A strict integer: ``true`` or ``'2'`` is not read as a number."""
    def rule(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> int:
        if type(value) is not int:
            raise _Invalid("int_type", "Input should be a valid integer")
        if value < ge:
            raise _Invalid("greater_than_equal", f"Input should be greater than or equal to {ge}")
        if value > le:
            raise _Invalid("less_than_equal", f"Input should be less than or equal to {le}")
        return value
    return rule


def _bool(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> bool:
    """A YAML boolean only: ``reverse: 'yes'`` or ``reverse: 1`` is refused, as ``strip: true`` is,
    rather than guessed (a quoted "no" read as false by one tool and as a string by another)."""
    if isinstance(value, bool):
        return value
    raise _Invalid("bool_type", f"Input should be a valid boolean (true or false), not {value!r}")


def _literal(*allowed: Any) -> Rule:
    shown = [repr(a) for a in allowed]
    expected = shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"

    def rule(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> Any:
        for candidate in allowed:  # of the same type: `version: true` is not 1, nor is `'1'`
            if type(value) is type(candidate) and value == candidate:
                return candidate
        raise _Invalid("literal_error", f"Input should be {expected}")
    return rule


def _optional(rule: Rule) -> Rule:
    return lambda value, loc, errors: None if value is None else rule(value, loc, errors)


def _list(item: Rule) -> Rule:
    def rule(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> list[Any]:
        if not isinstance(value, list | tuple):
            raise _Invalid("list_type", "Input should be a valid list")
        return [_checked(item, v, loc + (i,), errors) for i, v in enumerate(value)]
    return rule


def _dict(key: Rule, item: Rule) -> Rule:
    def rule(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise _Invalid("dict_type", "Input should be a valid dictionary")
        out = {}
        for k, v in value.items():
            _checked(key, k, loc + (k, "[key]"), errors)
            out[k] = _checked(item, v, loc + (k,), errors)
        return out
    return rule


_STR = _str()


def _nonblank_banner(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> str:
    value = _STR(value, loc, errors)
    if not value.strip():
        raise _Invalid("value_error", "Value error, banner must be a non-empty log line")
    return value


_MISSING: Any = object()


class _Field:
    """One field of a schema class: its rule and its default (a value, or a factory for lists)."""

    __slots__ = ("default", "factory", "name", "rule")

    def __init__(self, rule: Rule, default: Any, factory: Callable[[], Any] | None) -> None:
        self.rule, self.default, self.factory, self.name = rule, default, factory, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name


def _field(rule: Rule, *, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None) -> Any:
    """A model field: its rule, and optionally ``default=`` or ``default_factory=``."""
    return _Field(rule, default, default_factory)


class _Model:
    """Base of the schema classes: frozen, keyword-only value objects whose fields carry a rule.

    ``parse`` validates a YAML mapping (unknown keys refused, missing ones reported) and collects
    every problem with its path; constructing one in code runs the same rules. Written by hand rather
    than as dataclasses: generating their methods cost more at start-up than loading a series.
    """

    _fields: tuple[_Field, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = tuple(v for v in vars(cls).values() if isinstance(v, _Field))

    def __init__(self, **values: Any) -> None:
        errors: list[dict[str, Any]] = []
        for f in self._fields:
            if f.name in values:
                value = values.pop(f.name)
            elif f.factory is not None:
                value = f.factory()
            elif f.default is not _MISSING:
                value = f.default
            else:
                raise TypeError(f"{type(self).__name__}() missing required keyword argument: {f.name!r}")
            checked = _checked(f.rule, value, (f.name,), errors)
            object.__setattr__(self, f.name, value if errors else checked)
        if values:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {next(iter(values))!r}")
        if errors:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors)
            raise SeriesError(f"invalid {type(self).__name__}: {problems}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot assign {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: cannot delete {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f.name}={getattr(self, f.name)!r}' for f in self._fields)})"

    @classmethod
    def parse(cls, value: Any, loc: Loc, errors: list[dict[str, Any]]) -> Any:
        """``value`` as an instance of ``cls``, or None with its problems appended to ``errors``."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            errors.append({"loc": loc, "type": "model_type", "input": value,
                           "msg": f"Input should be a valid dictionary or instance of {cls.__name__}"})
            return None
        before = len(errors)
        values = {}
        for f in cls._fields:
            if f.name in value:
                values[f.name] = _checked(f.rule, value[f.name], loc + (f.name,), errors)
            elif f.default is _MISSING and f.factory is None:
                errors.append({"loc": loc + (f.name,), "type": "missing", "msg": "Field required", "input": value})
        names = {f.name for f in cls._fields}
        for extra in value:
            if extra not in names:
                errors.append({"loc": loc + (extra,), "type": "extra_forbidden", "input": value[extra],
                               "msg": "Extra inputs are not permitted"})
        return cls(**values) if len(errors) == before else None

    def model_dump(self, *, exclude_none: bool = False) -> dict[str, Any]:
        """The fields as a plain dict, in declaration order (the name and output pydantic had: pins
        are recorded in manifests and cache keys this way)."""
        return {f.name: getattr(self, f.name) for f in self._fields
                if not (exclude_none and getattr(self, f.name) is None)}


_NO_OPTION = r"^(?!-)[^\x00-\x1f\x7f]+$"
# ``root``: a folder inside what the pin names (relative, no '..' component): `root: ../../` made a path
# pin read the folders above it, `root: /etc` read /etc
_ROOT_RE = r"(?!/)(?!(.*/)?\.\.(/|$))[^\x00-\x1f\x7f]*"


def _ROOT(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> str:  # noqa: N802 - a rule, named like one
    value = _str()(value, loc, errors)
    if not re.fullmatch(_ROOT_RE, value):
        raise _Invalid("root_outside", "root is a folder inside the pinned tree: relative, no '..', no control "
                                       "characters")
    return value


class GitPin(_Model):
    """A git repository (local path or URL) at a revision; ``sha`` records the resolved full SHA."""

    kind: str = _field(_literal("git"))
    # neither starts with "-": git would read `--upload-pack=CMD` as an option and run CMD. A rev is a
    # fetch refspec's source: a ":" would give it a destination, a ref `git fetch` writes into the
    # shared store (`x:refs/materialize/prefix/<key>`: a planted prefix another series reuses). No ref
    # name holds one (git check-ref-format), nor does a SHA.
    url: str = _field(_str(_NO_OPTION))
    rev: str = _field(_str(r"^(?![-+^])[^\s\x00-\x1f\x7f:]+$"))
    sha: str | None = _field(_optional(_str(r"^[0-9a-f]{40}$")), default=None)
    root: str = _field(_ROOT, default="")


class PypiPin(_Model):
    """One exact file of a release on the configured package index, verified by sha256."""

    kind: str = _field(_literal("pypi"))
    requirement: str = _field(_str(r"^[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+$"))
    # a file name of the index (it names the artifact in the cache: '../../x.tar.gz' was read from there)
    file: str = _field(_str(r"^(?!\.\.?$)(?!-)[^/\\\x00-\x1f\x7f]+$"))
    sha256: str = _field(_str(_SHA256))
    index_url: str | None = _field(_optional(_str()), default=None)
    root: str | None = _field(_optional(_ROOT), default=None)


class PathPin(_Model):
    """A local directory, taken as it is (no hash: it is the user's own checkout)."""

    kind: str = _field(_literal("path"))
    path: str = _field(_str())
    root: str = _field(_ROOT, default="")


class TarballPin(_Model):
    """A local .tar.gz / .tar.xz / .zip archive, optionally verified by sha256."""

    kind: str = _field(_literal("tarball"))
    path: str = _field(_str())
    sha256: str | None = _field(_optional(_str(_SHA256)), default=None)
    root: str | None = _field(_optional(_ROOT), default=None)


Pin = GitPin | PypiPin | PathPin | TarballPin
_PINS: dict[str, type[_Model]] = {"git": GitPin, "pypi": PypiPin, "path": PathPin, "tarball": TarballPin}


def _pin(value: Any, loc: Loc, errors: list[dict[str, Any]]) -> Any:
    """The pin kinds are told apart by ``kind``; the member's name joins the path, as pydantic did."""
    if isinstance(value, tuple(_PINS.values())):
        return value
    if not isinstance(value, dict):
        raise _Invalid("model_attributes_type", "Input should be a valid dictionary or object to extract fields from")
    if "kind" not in value:
        raise _Invalid("union_tag_not_found", "Unable to extract tag using discriminator 'kind'")
    member = _PINS.get(value["kind"]) if isinstance(value["kind"], str) else None
    if member is None:
        tags = ", ".join(repr(k) for k in _PINS)
        raise _Invalid("union_tag_invalid", f"Input tag '{value['kind']}' found using 'kind' does not match any "
                                            f"of the expected tags: {tags}")
    return member.parse(value, loc + (value["kind"],), errors)


_TARGET = _str(TARGET_NAME, max_length=100)
# A name is one path component (it names files under work/ and in a rebase's backup) and not a
# position: "12" would be read as the 12th patch.
PATCH_NAME = r"^(?![0-9]+$)(?!\.\.?$)[^/\x00-\x1f]+$"
# A name taken from the file (``patch_name``) may be a number (quilt's 12.patch; `find` reads "12" as
# a position, "12.patch" as the file), but not empty, "." / "..", or carry a control character.
_FILE_NAME = r"^(?!\.\.?$)[^/\x00-\x1f\x7f]+$"
MAX_STRIP, MAX_FUZZ = 16, 3
_STRIP = _int(0, MAX_STRIP)
_FUZZ = _int(0, MAX_FUZZ)


class TargetSpec(_Model):
    pin: Pin = _field(_pin)
    # where this target's root sits inside the serving image (overlay mounts)
    install_path: str | None = _field(_optional(_str()), default=None)


class PatchSpec(_Model):
    patch: str = _field(_str())  # patch file, relative to patches_dir
    # the patch's name where its file name (without .patch/.diff) is taken by another entry: quilt
    # names patches by path, so riscv/flaky_tests.patch and mips/flaky_tests.patch can share a series
    name: str | None = _field(_optional(_str(PATCH_NAME, max_length=200)), default=None)
    target: str = _field(_TARGET)
    strip: int | None = _field(_optional(_STRIP), default=None)
    max_fuzz: int | None = _field(_optional(_FUZZ), default=None)
    reverse: bool = _field(_bool, default=False)  # apply as `patch -R` (a quilt series entry with -R)
    flag: str | None = _field(_optional(_str(r"^[A-Z_][A-Z0-9_]*$")), default=None)
    banner: str | None = _field(_optional(_nonblank_banner), default=None)
    # with banner: none, why no log line can show the flag engaged (serve records it as unobservable)
    banner_none_why: str | None = _field(_optional(_str()), default=None)
    tests: list[str] = _field(_list(_str()), default_factory=list)
    status: str = _field(_literal("cleared", "held", "experimental"), default="experimental")
    evidence: list[str] = _field(_list(_str()), default_factory=list)
    why: str = _field(_str(), default="")


class Defaults(_Model):
    strip: int = _field(_STRIP, default=1)
    max_fuzz: int = _field(_FUZZ, default=0)


class SeriesSpec(_Model):
    version: int = _field(_literal(1))
    patches_dir: str = _field(_str(), default="../patches")
    tests_dir: str = _field(_str(), default="../ast_tests")
    defaults: Defaults = _field(Defaults.parse, default=Defaults())
    targets: dict[str, TargetSpec] = _field(_dict(_TARGET, TargetSpec.parse))
    patches: list[PatchSpec] = _field(_list(PatchSpec.parse), default_factory=list)


class PatchEntry(NamedTuple):
    """One resolved series entry: position is 1-based, as quilt counts."""

    position: int
    name: str
    target: str
    path: Path
    strip: int
    max_fuzz: int
    spec: PatchSpec
    line: int
    series_path: str = ""

    @property
    def flag(self) -> str | None:
        return self.spec.flag

    @property
    def banner(self) -> str | None:
        return self.spec.banner

    @property
    def reverse(self) -> bool:
        return self.spec.reverse

    def read(self) -> bytes:
        """The patch bytes, decompressed when the file is ``.gz``/``.bz2``/``.xz``/``.lzma`` (as quilt).

        A compressed patch may expand to ``MATERIALIZE_MAX_EXPANSION`` (default 100) times its size, at
        least 64 MB, as an archive may: beyond that it is a bomb, refused (exit 4) while it is read.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise SeriesError(f"{self.where}: patch {self.name}: file {self.path} does not exist") from None
        except OSError as exc:  # a folder, no permission: the patch is named, not the cache
            raise SeriesError(f"{self.where}: patch {self.name}: cannot read {self.path}: {exc.strerror or exc}") from None
        codec = _CODECS.get(self.path.suffix)
        if codec is None:
            return data
        ratio = float(os.environ.get(EXPANSION_ENV) or DEFAULT_EXPANSION)
        limit = max(EXPANSION_FLOOR, int(len(data) * ratio))
        try:
            out = _decompress(codec, data, limit + 1)
        except (OSError, EOFError, ValueError) as exc:
            raise SeriesError(f"{self.where}: patch {self.name}: cannot decompress {self.path}: {exc}") from None
        if len(out) > limit:
            raise UnsafePathError(
                f"{self.where}: patch {self.name}: {self.path.name} expands past {limit} bytes: refused as a "
                f"compression bomb (raise {EXPANSION_ENV} if it is genuine)"
            )
        return out

    def encode(self, data: bytes) -> bytes:
        """``data`` (a patch text) as this entry's file keeps it: compressed again when the file is
        ``.gz``/``.bz2``/``.xz``/``.lzma``, as quilt's refresh does. Every command that writes a patch file
        goes through here (refresh, header, rebase, import-git): a plain diff written under a ``.gz`` name
        left a series that no command could load. Deterministic (no timestamp in the gzip header), so
        the same text gives the same file."""
        return encode_patch(self.path, data)

    def raw(self) -> bytes:
        """The file's bytes as they are on disk (compressed or not): what a copy, a backup or a rename
        keeps, so restoring it is byte for byte."""
        try:
            return self.path.read_bytes()
        except OSError as exc:
            raise SeriesError(f"{self.where}: patch {self.name}: cannot read {self.path}: {exc.strerror or exc}") from None

    @property
    def suffixes(self) -> str:
        """The file name's ending that a rename keeps: ``.patch.gz`` of ``0001-x.patch.gz``, ``.diff``; a
        file named otherwise (``fix.txt``, ``fix.gz``) becomes ``.patch`` plus its compression, so the new
        file's name is the new patch name and it is still read the way it is written."""
        name, stem = self.path.name, patch_name(self.path.name)
        if stem != name:
            return name[len(stem):]
        return ".patch" + (self.path.suffix if self.path.suffix in _CODECS else "")

    @property
    def where(self) -> str:
        """``series-file:line`` of this entry (set by ``load_series``)."""
        return f"{self.series_path}:{self.line}" if self.series_path else f"line {self.line}"

    def sha256(self) -> str:
        return digest.sha256(self.read()).hexdigest()


class Series(NamedTuple):
    """A validated series file."""

    path: Path
    spec: SeriesSpec
    patches: tuple[PatchEntry, ...]

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    @property
    def targets(self) -> dict[str, TargetSpec]:
        return dict(self.spec.targets)

    def resolve(self, relative: str) -> Path:
        return (self.base_dir / relative).resolve()

    def find(self, ref: str | int) -> PatchEntry:
        """Look a patch up by 1-based position, name, file name, or unique name prefix (like quilt)."""
        if isinstance(ref, int) or (isinstance(ref, str) and ref.isdigit() and len(ref) < 4):
            pos = int(ref)
            if not 1 <= pos <= len(self.patches):
                raise SeriesError(f"{self.path}: no patch at position {pos} (series has {len(self.patches)})")
            return self.patches[pos - 1]
        ref = str(ref)
        exact = [p for p in self.patches if ref in (p.name, p.spec.patch, Path(p.spec.patch).name)]
        if len(exact) == 1:
            return exact[0]
        if exact:  # one file name in two folders (see PatchSpec.name): the path or the name tells them apart
            choices = ", ".join(f"{p.name} ({p.spec.patch})" for p in exact)
            raise SeriesError(f"{self.path}: {ref!r} is ambiguous ({choices})")
        prefixed = [p for p in self.patches if p.name.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if not prefixed:
            raise SeriesError(f"{self.path}: no patch named {ref!r}")
        names = ", ".join(p.name for p in prefixed)
        raise SeriesError(f"{self.path}: {ref!r} is ambiguous ({names})")

    def position(self, ref: str | int | None) -> int:
        """Position of ``ref``; 0 means "the pinned upstreams alone"; None means the whole series."""
        if ref is None:
            return len(self.patches)
        if ref in (0, "0", "base"):
            return 0
        return self.find(ref).position


def encode_patch(path: Path, data: bytes) -> bytes:
    """A patch text as a file named ``path`` keeps it (see ``PatchEntry.encode``; import-git writes files
    a series does not list yet)."""
    codec = _CODECS.get(path.suffix)
    if codec is None:
        return data
    if codec == "gzip":
        import gzip

        return gzip.compress(data, mtime=0)
    if codec == "bzip2":
        import bz2

        return bz2.compress(data)
    if codec == "lzip":
        return _codec_tool("lzip", ["-c"], data, None, f"writing {path}")
    import lzma

    return lzma.compress(data, format=lzma.FORMAT_XZ if codec == "xz" else lzma.FORMAT_ALONE)


def _decompress(codec: str, data: bytes, most: int) -> bytes:
    """Up to ``most`` bytes of ``data`` decompressed (several members or streams, as ``zcat`` reads
    them). Damage raises OSError, EOFError or ValueError with the codec's own words."""
    if codec == "lzip":  # no lzip in Python's standard library: the tool itself, as quilt runs it
        return _codec_tool("lzip", ["-dc"], data, most, "lzip")
    if codec in ("xz", "lzma"):
        import shutil

        if shutil.which("xz"):
            # The tool quilt runs (``xz -cd``, ``lzma -cd``): each suffix reads its own format only (an
            # .lzma file holding xz data is refused, where Python's codec took it), and xz's stream
            # padding is read as the format allows (Python's codec stopped at it).
            return _codec_tool("xz", ["-dc"] if codec == "xz" else ["--format=lzma", "-dc"], data, most, codec)
    import io

    raw = io.BytesIO(data)
    try:
        if codec == "gzip":
            import gzip

            with gzip.GzipFile(fileobj=raw) as stream:
                return stream.read(most)
        if codec == "bzip2":
            import bz2

            with bz2.BZ2File(raw) as stream:
                return stream.read(most)
        import lzma

        with lzma.LZMAFile(raw, format=lzma.FORMAT_ALONE if codec == "lzma" else lzma.FORMAT_AUTO) as stream:
            return stream.read(most)
    except Exception as exc:  # lzma.LZMAError is no OSError
        if isinstance(exc, (OSError, EOFError, ValueError)):
            raise
        raise ValueError(str(exc)) from None


def _codec_tool(tool: str, args: list[str], data: bytes, most: int | None, what: str) -> bytes:
    """``tool ARGS`` (lzip, xz) of ``data``, reading at most ``most`` bytes of its output (a bomb is
    stopped there, not held whole). A missing ``lzip`` says so: quilt needs it for these files too."""
    import contextlib
    import subprocess
    import threading

    try:
        proc = subprocess.Popen([tool, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise OSError(f"{tool} is not installed (quilt reads and writes these patches with it too)") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(data)  # type: ignore[union-attr]
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()  # type: ignore[union-attr]

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    out = proc.stdout.read() if most is None else proc.stdout.read(most)
    if most is not None and len(out) >= most:
        proc.kill()
    proc.stdout.close()
    errors = proc.stderr.read().decode(errors="replace").strip().splitlines()
    proc.stderr.close()
    writer.join()
    if proc.wait() != 0 and not (most is not None and len(out) >= most):
        raise OSError(f"{what}: {errors[-1] if errors else f'exit {proc.returncode}'}")
    return out


def patch_name(patch: str) -> str:
    """The name a series entry gets from its file: the file name without .patch/.diff (and .gz…)."""
    name = Path(patch).name
    return re.sub(r"\.(patch|diff)(\.(gz|bz2|xz|lzma|lz))?$", "", name)


def check_inside(patches_dir: Path, patch: str, where: str) -> None:
    """The series' rule for a ``patch:`` path, for a command that reads one from elsewhere
    (import-quilt from a quilt ``series`` file): inside ``patches_dir``. SeriesError naming ``where``."""
    _check_inside(patches_dir, patch, where, {})


def check_patch_file(patches_dir: Path, patch: str, where: str) -> None:
    """What the series demands of an entry's ``patch:`` (inside ``patches_dir``, a file name that can be
    a patch name), for a command about to write one that a series does not list yet (import-git reads
    it from a commit's trailer). SeriesError naming ``where``."""
    check_inside(patches_dir, patch, where)
    if not re.match(_FILE_NAME, patch_name(patch)) or not re.match(r"^[^\x00-\x1f\x7f]+$", patch):
        raise SeriesError(f"{where}: the file name {Path(patch).name!r} cannot be a patch name")


def _check_inside(patches_dir: Path, patch: str, where: str, links: dict[str, bool], folder: str = "patches_dir",
                  kind: str = "patch") -> None:
    """A patch file lies inside ``patches_dir`` (a test file inside ``tests_dir``: ``folder``): a series
    that names ``/etc/shadow`` or ``../../secret.key`` would otherwise have it read, hashed, and shown
    whole on the report page. A symlink on the way is followed, so one that leads out is refused too
    (``links`` remembers which folders are symlinks: one lstat per file and per folder, not a full
    resolve per patch)."""
    if "\0" in patch:  # lstat would raise ValueError
        raise SeriesError(f"{where}: {patch!r} holds a NUL; no file name does")
    try:
        patch.encode("utf-8")
    except UnicodeEncodeError:  # a name read from bytes (a quilt series): no YAML series file can hold it
        raise SeriesError(f"{where}: {patch!r} is not UTF-8; a series file (YAML) cannot name it") from None
    rel = Path(patch)
    if rel.is_absolute() or ".." in rel.parts:
        raise SeriesError(f"{where}: {patch!r} is outside {folder} (a {kind} path is relative to it and has no '..')")
    steps = [str(patches_dir.joinpath(*rel.parts[:i])) for i in range(1, len(rel.parts) + 1)]
    for step in steps:
        if step not in links:
            try:
                links[step] = stat.S_ISLNK(os.lstat(step).st_mode)
            except OSError:
                links[step] = False  # a missing file is reported when it is read
        if links[step]:
            resolved = Path(steps[-1]).resolve()
            if not resolved.is_relative_to(patches_dir):
                raise SeriesError(f"{where}: {patch!r} is a symlink that leads out of {folder} (to {resolved})")
            return


def load_series(path: str | Path, *, located: LocatedYaml | None = None) -> Series:
    """Load and validate a series file; every error names file, line and field. ``located``: the
    file's parse, given by a caller validating bytes before it writes them there (``seriesedit``)."""
    path = Path(path).resolve()
    if located is None:
        located = load_located(path)
    source = str(path)
    if not isinstance(located.data, dict):
        raise SeriesError(f"{source}:1: a series file is a mapping with 'version', 'targets' and 'patches'")
    errors: list[dict[str, Any]] = []
    spec = SeriesSpec.parse(located.data, (), errors)
    if errors:
        raise SeriesError("invalid series file:\n  " + "\n  ".join(located.describe(e) for e in errors))

    patches_dir = (path.parent / spec.patches_dir).resolve()
    tests_dir = (path.parent / spec.tests_dir).resolve()
    entries: list[PatchEntry] = []
    seen: dict[str, int] = {}
    files_seen: dict[str, int] = {}
    links: dict[str, bool] = {}
    for index, p in enumerate(spec.patches):
        line = located.line_of(("patches", index))
        name = p.name or patch_name(p.patch)
        if p.name is None and not re.match(_FILE_NAME, name):
            at = located.line_of(("patches", index, "patch"))
            raise SeriesError(f"{source}:{at}: patches.{index}.patch: the file name {Path(p.patch).name!r} cannot be"
                              f" a patch name: give the entry a `name:` (one path component, no control characters)")
        if name in seen:
            raise SeriesError(f"{source}:{line}: patches.{index}: {name!r} is already listed at position {seen[name]}"
                              + ("" if p.name else " (two patch files of that name: give one a `name:`)"))
        patch_at = f"{source}:{located.line_of(('patches', index, 'patch'))}: patches.{index}.patch"
        _check_inside(patches_dir, p.patch, patch_at, links)
        listed = Path(p.patch).as_posix()  # "./x.patch" and "x.patch" are one file
        if listed in files_seen:
            # a second `name:` got it past the name check and it was applied twice; quilt refuses a series
            # naming a patch twice ("already applied; check your series file")
            raise SeriesError(f"{patch_at}: {p.patch!r} is already listed at position {files_seen[listed]}: a patch "
                              "file is applied once (quilt refuses a series that names one twice)")
        files_seen[listed] = index + 1
        for k, test in enumerate(p.tests):
            _check_inside(tests_dir, test.partition("::")[0], f"{source}:{located.line_of(('patches', index, 'tests', k))}:"
                          f" patches.{index}.tests.{k}", links, "tests_dir", "test")
        if p.target not in spec.targets:
            at = located.line_of(("patches", index, "target"))
            raise SeriesError(f"{source}:{at}: patches.{index}.target: target {p.target!r} has no pin in 'targets'")
        seen[name] = index + 1
        entries.append(
            PatchEntry(
                position=index + 1,
                name=name,
                target=p.target,
                path=patches_dir / p.patch,
                strip=spec.defaults.strip if p.strip is None else p.strip,
                max_fuzz=spec.defaults.max_fuzz if p.max_fuzz is None else p.max_fuzz,
                spec=p,
                line=line,
                series_path=source,
            )
        )
    return Series(path=path, spec=spec, patches=tuple(entries))
