"""Serving profiles (``serve/profiles/*.yaml``): everything a serve run needs, as validated data.

A profile is the only place a serving option lives. The seeds show what happens otherwise: a flag
kept in a hand-written ``-e`` list that missed one, a parser baked into a unit that a /run override
papered over, a profile that never booted on its own defaults. So the profile is typed (pydantic,
unknown keys refused), every error names file:line, and the plan is derived from it and the series,
never typed by hand.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from materialize.errors import SeriesError
from materialize.yamlpos import LocatedYaml, load_located

PROFILE_FORMAT_VERSION = 1
GATE_NAMES = ("models", "tool_call_stream", "tool_call_nonstream")


class ProfileError(SeriesError):
    """A profile is malformed or breaks a serving rule (exit code 2: invalid input)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Launcher(_Strict):
    """How the server process is started.

    ``docker`` runs ``image`` with ``command`` inside it; ``process`` runs ``command`` on this host
    (a local virtualenv). ``sources`` says how the materialized code reaches the server: ``mounts``
    bind-mounts every changed file over the image's install path (docker, overlay output),
    ``pythonpath`` puts the full materialized trees first on PYTHONPATH (process), ``none`` runs the
    unpatched install (only valid when no flag-gated patch is enabled).
    """

    kind: Literal["docker", "process"]
    command: list[str] = Field(default_factory=lambda: ["python3", "-m", "vllm.entrypoints.openai.api_server"])
    image: str | None = None
    container_name: str | None = None
    stop_timeout_s: Annotated[int, Field(ge=1, le=600)] = 60
    docker_args: list[str] = Field(default_factory=list)
    sources: Literal["mounts", "pythonpath", "none"] = "mounts"

    @model_validator(mode="after")
    def _kind_fits(self) -> Launcher:
        if not self.command:
            raise ValueError("command must name the server executable")
        if self.kind == "docker":
            if not self.image:
                raise ValueError("a docker launcher needs 'image'")
            if self.sources == "pythonpath":
                raise ValueError("sources: pythonpath is for the process launcher; docker uses mounts")
        else:
            if self.image or self.container_name or self.docker_args:
                raise ValueError("image / container_name / docker_args only apply to the docker launcher")
            if self.sources == "mounts":
                raise ValueError("sources: mounts is for the docker launcher; a process uses pythonpath")
        return self


class Model(_Strict):
    """The model served and what it emits: ``tool_call_format`` is checked against the parser."""

    path: str
    served_name: str
    tool_call_format: Literal["qwen3_xml", "hermes_json", "none"] | None = Field(
        default=None, description="optional; must equal what the model's chat template or the pinned model "
                                  "table says (a profile cannot declare its way out of the parser rule)")
    hybrid: bool = Field(default=False, description="GDN/mamba + attention layers: block-size rules apply")


class Vllm(_Strict):
    """vLLM server options; rendered to argv in one fixed order so plans diff cleanly."""

    tool_call_parser: str | None = None
    enable_auto_tool_choice: bool = True
    max_model_len: Annotated[int, Field(gt=0)]
    block_size: Annotated[int, Field(gt=0)] | None = None
    mamba_block_size: Annotated[int, Field(gt=0)] | None = None
    enable_prefix_caching: bool = False
    async_scheduling: bool = True
    max_num_seqs: Annotated[int, Field(gt=0)] | None = None
    tensor_parallel_size: Annotated[int, Field(gt=0)] = 1
    extra_args: list[str] = Field(default_factory=list)


class TtConfig(_Strict):
    """Tenstorrent plugin options passed as ``--override-tt-config`` JSON."""

    device_argmax: bool = False
    trace_mode: Literal["all", "decode_only", "none"] | None = None


class Server(_Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000


class Preflight(_Strict):
    """Seed 002: a boot below ~4 GB MemAvailable can hard-freeze the host, so it is checked first."""

    min_mem_available_gb: Annotated[float, Field(ge=0)] = 4.0


class Readiness(_Strict):
    timeout_s: Annotated[float, Field(gt=0)] = 1800.0
    poll_interval_s: Annotated[float, Field(gt=0)] = 2.0
    banner_grace_s: Annotated[float, Field(ge=0)] = 0.0


class Gate(_Strict):
    """One correctness gate. Tool-call gates are sized by the profile's ``max_failure_rate`` (rule of
    three) and sent at the profile's concurrency; ``requests`` / ``concurrency`` may only raise those."""

    name: Literal["models", "tool_call_stream", "tool_call_nonstream"]
    requests: Annotated[int, Field(ge=1, le=65536)] | None = None
    concurrency: Annotated[int, Field(ge=1, le=1024)] | None = None
    timeout_s: Annotated[float, Field(gt=0)] = 300.0


def parse_rate(value: str | float) -> Fraction:
    """``1/128``, ``0.0078125`` or ``0.78%`` as an exact fraction in (0, 1)."""
    text = str(value).strip()
    rate = Fraction(text[:-1]) / 100 if text.endswith("%") else Fraction(text)
    if not 0 < rate < 1:
        raise ValueError(f"max_failure_rate {value!r} must be between 0 and 1 (e.g. 1/128)")
    return rate


def rule_of_three(rate: Fraction) -> int:
    """Requests with 0 failures needed to bound the failure rate below ``rate`` at ~95%: ceil(3/r)."""
    return math.ceil(Fraction(3) / rate)


class ProfileSpec(_Strict):
    version: Literal[1]
    description: str = ""
    series: str = Field(description="series file, relative to this profile's directory")
    launcher: Launcher
    model: Model
    vllm: Vllm
    tt: TtConfig = TtConfig()
    server: Server = Server()
    enable: list[str] = Field(default_factory=list, description="flag-gated patches (names or flags)")
    env: dict[str, str] = Field(default_factory=dict)
    devices: list[str] = Field(default_factory=list)
    preflight: Preflight = Preflight()
    readiness: Readiness = Readiness()
    max_failure_rate: str | float | None = Field(
        default=None, description="the failure rate the gates must rule out (e.g. 1/128): 0 failures in "
                                  "ceil(3/r) requests bound it at ~95%")
    unverified: dict[str, str] = Field(
        default_factory=dict, description="option / config key / environment variable names that come from "
                                          "something the series does not pin, each with where it comes from")
    gates: list[Gate] = Field(default_factory=lambda: [Gate(name=n) for n in GATE_NAMES])

    @field_validator("max_failure_rate")
    @classmethod
    def _rate(cls, value: str | float | None) -> str | float | None:
        if value is not None:
            parse_rate(value)
        return value


@dataclass(frozen=True)
class Profile:
    """A validated profile plus where it came from (for file:line messages)."""

    name: str
    path: Path
    spec: ProfileSpec
    located: LocatedYaml

    @property
    def series_path(self) -> Path:
        return (self.path.parent / self.spec.series).resolve()

    def where(self, *keys: str | int) -> str:
        """``file:line`` of a field, for messages that send the user to the right place."""
        return f"{self.path}:{self.located.line_of(tuple(keys))}"

    def canonical(self) -> dict:
        """The profile's data with defaults filled in: what the hash and the plan are built from."""
        return self.spec.model_dump(mode="json")

    def hash(self) -> str:
        """sha256 of the canonical data: comments and key order do not change it, any value does."""
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


def load_profile(path: str | Path) -> Profile:
    """Load and validate one profile; every error names the file, line and field."""
    path = Path(path).resolve()
    try:
        located = load_located(path)
    except SeriesError as exc:
        raise ProfileError(str(exc)) from None
    spec = located.validate(ProfileSpec, ProfileError, "profile", "'version', 'series', 'launcher', ...")
    return Profile(name=path.stem, path=path, spec=spec, located=located)


def find_profile(ref: str | Path, profiles_dir: Path) -> Path:
    """A profile given by path, or by name in ``profiles_dir`` (``prod`` -> profiles/prod.yaml)."""
    candidate = Path(ref)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        if not candidate.exists():
            raise ProfileError(f"{candidate}: no such profile file")
        return candidate
    for suffix in (".yaml", ".yml"):
        named = profiles_dir / f"{ref}{suffix}"
        if named.exists():
            return named
    known = sorted(p.stem for p in profiles_dir.glob("*.y*ml")) if profiles_dir.is_dir() else []
    raise ProfileError(f"no profile {str(ref)!r} in {profiles_dir} (known: {', '.join(known) or 'none'})")
