"""The run ledger: one JSON object per line in ``bench/runs/*.jsonl``, one line per hardware run.

Hardware runs are slow and scarce, so every run is written down once and reused by every later
question (``runs validate``, ``bisect infer``). A record says *which code ran* (materialization id
and the series prefix with each patch's sha256), *how* (flags, profile, host, time) and *what
happened* (gates as request/failure counts, metrics as raw samples, banners seen, outputs). Raw
counts and samples, never percentages: n=1 quoted as a percentage is how the seeds went wrong.

Schema v1 (documented for harness authors in ``bench/runs/README.md``)::

    {"schema": 1,
     "materialization_id": "<hex>",
     "series_prefix": [{"name": "0001-foo", "sha256": "<64 hex>"}, ...],   # in series order
     "flags": {"QWEN36_SDPA_STREAMING": "1"} | ["QWEN36_SDPA_STREAMING"],
     "profile": "prod" | null, "profile_hash": "<hex>" | null,
     "host": "cfx-llm2", "time": "2026-09-19T11:20:00Z",
     "gates": [{"name": "stage3", "requests": 32, "failures": 1, "censored": false}],
     "metrics": [{"name": "makespan_conc8", "unit": "s", "samples": [294.7, 295.1]}],
     "banners_seen": ["QWEN36_SDPA_STREAMING engaged"],
     "outputs": [{"name": "stage3-q17", "text": "...", "sha256": null, "expect_sha256": null}],
     "notes": "free text"}

Keys starting with ``x_`` are allowed for harness-specific extras; any other unknown key is a
schema error (a typo must not silently drop a gate).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from materialize.atomic import read_regular
from materialize.errors import MaterializeError, UnsafePathError
from materialize.locking import exclusive

SCHEMA_VERSION = 1
# A ledger is a few KB per run; a file past this is refused before it is read (memory is 1-4x it).
MAX_LEDGER_BYTES = 256 << 20
_HEX = r"^[0-9a-f]{6,128}$"
_SHA256 = r"^[0-9a-f]{64}$"

# Counts are JSON integers and samples JSON numbers: never a bool (``true`` is not 1 request), a
# string ("32") or, for counts, a float (32.0); samples are finite (NaN compares false to everything).
Count = Annotated[int, Field(strict=True)]
Sample = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Flag = Annotated[bool, Field(strict=True)]


def _one_line(value: str) -> str:
    """Names, units, hosts and flags are printed as they are (``runs list``, ``bisect`` tables): a
    record is other people's text, and an escape sequence in it (clear the screen, retitle the
    terminal, OSC 52 to write the clipboard) would be obeyed by the reader's terminal. A TAB is
    harmless. ``notes``, output ``text`` and ``banners_seen`` (the series' own banners, which ``serve
    up`` records after a hardware run and messages show with repr) stay free text."""
    for char in value:
        if (char < " " and char != "\t") or "\x7f" <= char <= "\x9f":
            raise ValueError(f"control character {char!r} in a one-line field (a terminal would obey it); refused")
    return value


Line = Annotated[str, AfterValidator(_one_line)]


class LedgerError(MaterializeError):
    """A ledger file or record is malformed; the message names file and line."""

    exit_code = 2


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PrefixEntry(_Strict):
    """One applied patch of the prefix that ran: its series name and the sha256 of its bytes."""

    name: Line
    sha256: Annotated[str, Field(pattern=_SHA256)]


class Gate(_Strict):
    """A correctness gate: ``failures`` of ``requests`` failed.

    ``censored`` is true when only pass/fail is known (an exit code): ``failures`` is then a lower
    bound (1 for a failing run), which the bisect statistics treat as "at least one failure".
    """

    name: Line
    requests: Annotated[Count, Field(ge=1)]
    failures: Annotated[Count, Field(ge=0)]
    censored: Flag = False

    @model_validator(mode="after")
    def _failures_within_requests(self) -> Gate:
        if self.failures > self.requests:
            raise ValueError(f"gate {self.name!r}: failures ({self.failures}) > requests ({self.requests})")
        return self

    @property
    def passed(self) -> bool:
        return self.failures == 0


class Metric(_Strict):
    """Raw samples of one measurement (never a pre-averaged percentage)."""

    name: Line
    unit: Line
    samples: Annotated[list[Sample], Field(min_length=1)]


class Output(_Strict):
    """A model output the harness captured, so degenerate or non-baseline text can be detected."""

    name: Line
    text: str | None = None
    sha256: Annotated[str, Field(pattern=_SHA256)] | None = None
    expect_sha256: Annotated[str, Field(pattern=_SHA256)] | None = None


class RunRecord(BaseModel):
    """One hardware run (schema v1)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    schema_: Literal[1] = Field(alias="schema")
    materialization_id: Annotated[str, Field(pattern=_HEX)]
    series_prefix: list[PrefixEntry]
    flags: dict[Line, Line] | list[Line] = Field(default_factory=dict)
    profile: Line | None = None
    profile_hash: Line | None = None
    host: Line
    time: str
    gates: list[Gate] = Field(default_factory=list)
    metrics: list[Metric] = Field(default_factory=list)
    banners_seen: list[str] = Field(default_factory=list)  # the series' banners (shown with repr)
    outputs: list[Output] = Field(default_factory=list)
    notes: str = ""

    @field_validator("time")
    @classmethod
    def _iso_time(cls, value: str) -> str:
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("time must be ISO 8601, e.g. 2026-09-19T11:20:00Z") from None
        return value

    @model_validator(mode="after")
    def _only_x_extras(self) -> RunRecord:
        unknown = sorted(k for k in (self.model_extra or {}) if not k.startswith("x_"))
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)} (harness extras must start with 'x_')")
        return self

    @model_validator(mode="after")
    def _one_unit_per_metric(self) -> RunRecord:
        units: dict[str, str] = {}
        for index, m in enumerate(self.metrics):
            first = units.setdefault(m.name, m.unit)
            if m.unit != first:
                raise ValueError(
                    f"metrics.{index}: metric {m.name!r} is in unit {m.unit!r} here and {first!r} in an earlier "
                    "entry of this record (one unit per metric; samples are never converted)"
                )
        return self

    @property
    def position(self) -> int:
        """Number of patches in the prefix that ran (0 = upstream alone)."""
        return len(self.series_prefix)

    def enabled_flags(self) -> set[str]:
        """Flags the run engaged: list entries, or mapping entries whose value is not falsy."""
        if isinstance(self.flags, list):
            return set(self.flags)
        return {
            k for k, v in self.flags.items() if str(v).strip().lower() not in ("", "0", "false", "no", "off")
        }

    def gate(self, name: str) -> Gate | None:
        found = [g for g in self.gates if g.name == name]
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        # Several entries for one gate in one run add up (e.g. one per conc level).
        return Gate(
            name=name,
            requests=sum(g.requests for g in found),
            failures=sum(g.failures for g in found),
            censored=any(g.censored for g in found),
        )

    def metric(self, name: str) -> Metric | None:
        """Every sample of ``name`` in this record (its entries share one unit: the record is refused otherwise)."""
        samples = [s for m in self.metrics if m.name == name for s in m.samples]
        if not samples:
            return None
        unit = next(m.unit for m in self.metrics if m.name == name)
        return Metric(name=name, unit=unit, samples=samples)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(by_alias=True, exclude_none=False), sort_keys=False)

    @property
    def identity(self) -> str:
        """What names this run wherever its line is copied: sha256 (16 hex) of the canonical record.

        The same run fed through another path, a copy of the file, or re-serialized (key order,
        spacing, a default spelled out) has the same identity, and is evidence once. Two runs differ
        in something (time, host, counts; ``bisect run`` writes an ``x_run`` id).
        """
        import hashlib

        canon = json.dumps(
            self.model_dump(by_alias=True, mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class LedgerLine:
    """One line of a ledger file: a parsed record, or the error that prevents parsing it."""

    source: Path
    line: int
    record: RunRecord | None
    error: str | None = None
    raw: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def format_validation(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(record)"
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "required key is missing"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice: ``json.loads`` would keep the last silently."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"key {key!r} appears twice in one object (which one counts?)")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str) -> Any:
    """``json.loads`` for run records and result lines: a key given twice, ``NaN`` or ``Infinity``
    is a ``ValueError`` (``json.JSONDecodeError`` for malformed JSON, a subclass). Arrays or objects
    nested past Python's recursion limit (``[[[...`` 100k deep) are malformed JSON too: json's
    RecursionError was a traceback that no handler of bad input took."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except RecursionError:
        raise json.JSONDecodeError("arrays or objects nested too deeply to read", text, 0) from None


def parse_record(data: Any) -> RunRecord:
    """Validate one decoded record; raises ValueError with a readable message."""
    if not isinstance(data, dict):
        raise ValueError("a record is a JSON object")
    if type(data.get("schema")) is not int or data.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"schema must be {SCHEMA_VERSION} (got {data.get('schema')!r})")
    try:
        return RunRecord.model_validate(data)
    except ValidationError as exc:
        raise ValueError(format_validation(exc)) from None


def _read_bytes(path: Path) -> bytes:
    """A ledger file's bytes: a regular file (after its links) of at most ``MAX_LEDGER_BYTES``. A
    ledger folder is other people's records, and a symlink is a file git keeps: one to /dev/zero was
    read whole into memory, one to a fifo (or /dev/tty) never returned."""
    try:
        data = read_regular(path, MAX_LEDGER_BYTES)
    except FileNotFoundError:
        raise LedgerError(f"{path}: no such ledger file") from None
    except OSError as exc:
        raise LedgerError(f"{path}: {exc.strerror or exc}; a ledger is a .jsonl file of records") from None
    if len(data) > MAX_LEDGER_BYTES:
        raise LedgerError(f"{path}: larger than {MAX_LEDGER_BYTES} bytes; refused (split the ledger)")
    return data


def read_ledger(path: str | Path) -> list[LedgerLine]:
    """Every non-blank line of one JSONL file, parsed or with its error (never silently dropped)."""
    path = Path(path)
    try:
        text = _read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    out: list[LedgerLine] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = loads(line)
        except json.JSONDecodeError as exc:
            out.append(LedgerLine(path, number, None, f"invalid JSON: {exc.msg} (column {exc.colno})"))
            continue
        except ValueError as exc:  # a key twice, NaN, Infinity
            out.append(LedgerLine(path, number, None, f"invalid JSON: {exc}"))
            continue
        try:
            out.append(
                LedgerLine(path, number, parse_record(data), None, data if isinstance(data, dict) else None)
            )
        except ValueError as exc:
            out.append(LedgerLine(path, number, None, str(exc), data if isinstance(data, dict) else None))
    return out


def ledger_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories to their ``*.jsonl`` files (sorted), keep files as given."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(sorted(p.glob("*.jsonl")))
        else:
            files.append(p)
    return files


def iter_ledger(paths: Iterable[str | Path]) -> Iterator[LedgerLine]:
    for f in ledger_files(paths):
        yield from read_ledger(f)


def append_record(path: str | Path, record: RunRecord | dict[str, Any]) -> RunRecord:
    """Validate and append one record as a single line, under a lock, flushed to disk.

    One ``write`` of a whole line to a file opened with O_APPEND, under a lock file, so concurrent
    writers (``serve up`` and ``bisect run`` on the same ledger) never interleave half-lines.
    """
    path = Path(path)
    if isinstance(record, dict):
        try:
            record = parse_record(record)
        except ValueError as exc:
            raise LedgerError(f"{path}: refusing to append an invalid record: {exc}") from None
    line = (record.to_json() + "\n").encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(str(path) + ".lock"):
        try:  # never through a link: a ledger folder is a checkout's, and `prod.jsonl -> ~/.bashrc` got records
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if not path.is_symlink():
                raise
            raise UnsafePathError(f"{path}: the ledger is a symlink (to {os.readlink(path)}); refused: a record is"
                                  " appended to the ledger file itself, never through a link") from exc
        try:
            # A previous writer killed mid-line would glue our record onto its fragment: start fresh.
            size = os.fstat(fd).st_size
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":  # the file we hold, not its name again
                line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
    return record


def now_iso() -> str:
    """UTC time in the format records use."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
