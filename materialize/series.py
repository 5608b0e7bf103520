"""The series: upstream pins per target plus one ordered list of patches (``series/*.yaml``).

The YAML is validated with pydantic so that every error says which field is wrong and what was
expected; ``yamlpos`` turns the field path into the file and line the user has to edit.
All relative paths in a series file are relative to the directory that holds the series file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from materialize.errors import SeriesError
from materialize.yamlpos import load_located

SERIES_FORMAT_VERSION = 1
# Targets are named by the series file; any safe identifier will do (it becomes a folder name).
TARGET_NAME = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"
TargetName = Annotated[str, Field(pattern=TARGET_NAME, max_length=100)]
# quilt reads these compressed patches through the matching decompressor (patchfns: cat_file).
_COMPRESSED = (".gz", ".bz2", ".xz", ".lzma")
_SHA256 = r"^[0-9a-f]{64}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GitPin(_Strict):
    """A git repository (local path or URL) at a revision; ``sha`` records the resolved full SHA."""

    kind: Literal["git"]
    url: str
    rev: str
    sha: Annotated[str, Field(pattern=r"^[0-9a-f]{40}$")] | None = None
    root: str = ""


class PypiPin(_Strict):
    """One exact file of a release on the configured package index, verified by sha256."""

    kind: Literal["pypi"]
    requirement: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+$")]
    file: str
    sha256: Annotated[str, Field(pattern=_SHA256)]
    index_url: str | None = None
    root: str | None = None


class PathPin(_Strict):
    """A local directory, taken as it is (no hash: it is the user's own checkout)."""

    kind: Literal["path"]
    path: str
    root: str = ""


class TarballPin(_Strict):
    """A local .tar.gz / .tar.xz / .zip archive, optionally verified by sha256."""

    kind: Literal["tarball"]
    path: str
    sha256: Annotated[str, Field(pattern=_SHA256)] | None = None
    root: str | None = None


Pin = Annotated[GitPin | PypiPin | PathPin | TarballPin, Field(discriminator="kind")]


class TargetSpec(_Strict):
    pin: Pin
    install_path: str | None = Field(
        default=None, description="where this target's root sits inside the serving image (overlay mounts)"
    )


class PatchSpec(_Strict):
    patch: str = Field(description="patch file, relative to patches_dir")
    target: TargetName
    strip: Annotated[StrictInt, Field(ge=0, le=16)] | None = None
    max_fuzz: Annotated[StrictInt, Field(ge=0, le=3)] | None = None
    reverse: bool = Field(default=False, description="apply as `patch -R` (a quilt series entry with -R)")
    flag: Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")] | None = None
    banner: str | None = None
    banner_none_why: str | None = Field(default=None, description="with banner: none, why no log line can show "
                                                                   "the flag engaged (serve records it as unobservable)")
    tests: list[str] = Field(default_factory=list)
    status: Literal["cleared", "held", "experimental"] = "experimental"
    evidence: list[str] = Field(default_factory=list)
    why: str = ""

    @field_validator("banner")
    @classmethod
    def _banner_needs_text(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("banner must be a non-empty log line")
        return value


class Defaults(_Strict):
    strip: Annotated[StrictInt, Field(ge=0, le=16)] = 1
    max_fuzz: Annotated[StrictInt, Field(ge=0, le=3)] = 0


class SeriesSpec(_Strict):
    version: Literal[1]
    patches_dir: str = "../patches"
    tests_dir: str = "../ast_tests"
    defaults: Defaults = Defaults()
    targets: dict[TargetName, TargetSpec]
    patches: list[PatchSpec] = Field(default_factory=list)


@dataclass(frozen=True)
class PatchEntry:
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
        """The patch bytes, decompressed when the file is ``.gz``/``.bz2``/``.xz``/``.lzma`` (as quilt)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise SeriesError(f"{self.where}: patch {self.name}: file {self.path} does not exist") from None
        suffix = self.path.suffix.lower()
        if suffix not in _COMPRESSED:
            return data
        import bz2
        import gzip
        import lzma

        try:
            if suffix == ".gz":
                return gzip.decompress(data)
            if suffix == ".bz2":
                return bz2.decompress(data)
            return lzma.decompress(data)
        except (OSError, EOFError, ValueError, lzma.LZMAError) as exc:
            raise SeriesError(f"{self.where}: patch {self.name}: cannot decompress {self.path} ({exc})") from None

    @property
    def where(self) -> str:
        """``series-file:line`` of this entry (set by ``load_series``)."""
        return f"{self.series_path}:{self.line}" if self.series_path else f"line {self.line}"

    def sha256(self) -> str:
        return hashlib.sha256(self.read()).hexdigest()


@dataclass(frozen=True)
class Series:
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


def _patch_name(patch: str) -> str:
    name = Path(patch).name
    return re.sub(r"\.(patch|diff)(\.(gz|bz2|xz|lzma))?$", "", name)


def load_series(path: str | Path) -> Series:
    """Load and validate a series file; every error names file, line and field."""
    path = Path(path).resolve()
    located = load_located(path)
    source = str(path)
    spec = located.validate(SeriesSpec, SeriesError, "series file", "'version', 'targets' and 'patches'")

    patches_dir = (path.parent / spec.patches_dir).resolve()
    entries: list[PatchEntry] = []
    seen: dict[str, int] = {}
    for index, p in enumerate(spec.patches):
        line = located.line_of(("patches", index))
        name = _patch_name(p.patch)
        if name in seen:
            raise SeriesError(f"{source}:{line}: patches.{index}: {name!r} is already listed at position {seen[name]}")
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
