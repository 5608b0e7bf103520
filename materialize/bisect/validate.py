"""Is a run record evidence about this series? ``runs validate`` and every bisect input go through here.

A record is rejected (never silently used) when its schema is wrong, its prefix or materialization id
is not one of this series' prefixes, the banners it saw do not match the flags it enabled, or its
outputs look degenerate / are not the declared baseline (the seeds' invalidated benchmark: a wrong
prompt, "HT#3333…" text, a sha that was not the baseline's).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from materialize.bisect.candidates import SeriesIndex
from materialize.ledger import LedgerLine, RunRecord


@dataclass
class Checked:
    line: LedgerLine
    position: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.line.record is not None


def degenerate_reason(text: str) -> str | None:
    """Why ``text`` looks like a degenerate model output, or None.

    Declared checks: empty text; one character repeated over much of the text; a short pattern
    (period <= 8) repeated over much of the text; one whitespace token dominating the text.
    """
    stripped = text.strip()
    if not stripped:
        return "empty output"
    n = len(stripped)
    for period in range(1, 9):
        run = best = 0
        for i in range(period, n):
            run = run + 1 if stripped[i] == stripped[i - period] else 0
            best = max(best, run)
        covered = best + period
        if covered >= 16 and covered >= 0.5 * n:
            what = "one character" if period == 1 else f"a {period}-character pattern"
            return f"repeats {what} over {covered}/{n} characters"
    tokens = stripped.split()
    if len(tokens) >= 8:
        top = max(tokens.count(t) for t in set(tokens))
        if top >= 0.5 * len(tokens):
            return f"one token makes up {top}/{len(tokens)} tokens"
    return None


def banner_problems(record: RunRecord, flagged: Iterable[tuple[str, str, str]]) -> list[str]:
    """Compare enabled flags with banners seen, for the patches (name, flag, banner) in the prefix."""
    enabled = record.enabled_flags()
    seen = record.banners_seen
    problems = []
    for name, flag, banner in flagged:
        shown = any(banner in b for b in seen)
        if flag in enabled and not shown:
            problems.append(f"flag {flag} is enabled but patch {name}'s banner {banner!r} was not seen")
        elif flag not in enabled and shown:
            problems.append(f"banner {banner!r} of patch {name} was seen but flag {flag} is not enabled")
    return problems


def output_problems(record: RunRecord) -> list[str]:
    problems = []
    for out in record.outputs:
        if out.text is not None:
            reason = degenerate_reason(out.text)
            if reason:
                problems.append(f"output {out.name!r} looks degenerate: {reason}")
        sha = out.sha256 or (
            hashlib.sha256(out.text.encode("utf-8")).hexdigest() if out.text is not None else None
        )
        if out.expect_sha256 and sha != out.expect_sha256:
            problems.append(
                f"output {out.name!r} sha256 {str(sha)[:12]}... is not the baseline {out.expect_sha256[:12]}..."
            )
    return problems


def unit_problems(record: RunRecord, where: str, seen: dict[str, tuple[str, str]]) -> list[str]:
    """A metric of ``record`` in another unit than ``seen`` holds for it (``seen`` learns the new ones)."""
    problems = []
    for m in record.metrics:
        unit, first = seen.setdefault(m.name, (m.unit, where))
        if m.unit != unit:
            problems.append(
                f"metric {m.name!r} is in unit {m.unit!r} but in {unit!r} at {first} "
                "(one unit per metric; samples are never converted)"
            )
    return problems


def check_records(
    lines: Iterable[LedgerLine],
    index: SeriesIndex | None,
    id_of: Callable[[int], str | None] | None = None,
    units: dict[str, tuple[str, str]] | None = None,
) -> list[Checked]:
    """Validate every ledger line; ``id_of(position)`` (optional) gives the expected materialization id.

    A metric has one unit across every record checked together: the first record that gives a metric
    fixes its unit (or ``units``: metric name -> (unit, where it was fixed), e.g. a bisect's), and a
    record that gives it in another unit is invalid, naming both places (samples are never converted:
    0.3 s and 300 ms would be a 1000x "regression").
    """
    seen_units: dict[str, tuple[str, str]] = dict(units or {})
    flagged_by_pos: list[tuple[str, str, str]] = []
    if index is not None:
        flagged_by_pos = [(p.name, p.flag, p.banner) for p in index.series.patches if p.flag and p.banner]
    out = []
    for line in lines:
        checked = Checked(line)
        out.append(checked)
        rec = line.record
        if rec is None:
            checked.problems.append(f"schema: {line.error}")
            continue
        checked.problems.extend(output_problems(rec))
        checked.problems.extend(unit_problems(rec, line.where, seen_units))
        if index is None:
            continue
        pos = index.position_of_prefix([(e.name, e.sha256) for e in rec.series_prefix])
        if pos is None:
            checked.problems.append(
                f"series_prefix is not a prefix of {index.series.path} (edited or foreign patches)"
            )
            continue
        checked.position = pos
        if id_of is not None:
            expected = id_of(pos)
            if expected is not None and expected != rec.materialization_id:
                checked.problems.append(
                    f"materialization_id {rec.materialization_id[:12]} is not prefix {pos}'s id {expected[:12]}"
                )
        applied = [f for f in flagged_by_pos if index.names.index(f[0]) < pos]
        checked.problems.extend(banner_problems(rec, applied))
    return out


def candidate_problems(record: RunRecord, index: SeriesIndex, position: int) -> list[str]:
    """Why a record that ``bisect run``'s command wrote for the candidate at ``position`` is not
    evidence about it: the checks ``runs validate`` makes (degenerate or non-baseline outputs, banners
    that disagree with flags), and its prefix must be that candidate's, patch for patch. A record the
    ledger would later call invalid must not have been counted by the run that wrote it."""
    problems = output_problems(record)
    pos = index.position_of_prefix([(e.name, e.sha256) for e in record.series_prefix])
    if pos != position:
        what = "is not a prefix of the series" if pos is None else f"is position {pos}'s"
        problems.append(f"series_prefix {what}, not the candidate's (position {position})")
        return problems
    flagged = [
        (p.name, p.flag, p.banner) for p in index.series.patches[:position] if p.flag and p.banner
    ]
    problems.extend(banner_problems(record, flagged))
    return problems
