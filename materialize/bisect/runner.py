"""``bisect run``: run the user's command on candidates until the culprit is known.

The command sees ``MATERIALIZED_DIR``, ``MATERIALIZATION_ID``, ``MATERIALIZE_BISECT_POSITION`` and
``MATERIALIZE_LEDGER`` (a fresh JSONL file it may append run records to); ``{job}``, ``{id}``,
``{dir}`` and ``{position}`` in its arguments are substituted (``{job}`` is the slot 0..N-1, so a
template can pick one of N hardware hosts). Its result, in order of preference:

1. run records it appended to ``MATERIALIZE_LEDGER`` (validated; their gate counts / metric samples);
2. JSON lines on stdout: ``{"metric": NAME, "value": X}``, ``{"name": NAME, "samples": [...]}`` or
   ``{"gate": NAME, "requests": N, "failures": F}``, validated like a record's gate or metric (a
   key twice, a missing ``failures``, ``true`` or ``"0"`` for a count stop the bisect);
3. the exit code, as git bisect reads it: 0 pass, 125 skip, 1-124 fail (126+ aborts the bisect).

A result and the exit code must agree, so that a crashed harness is never read as a pass: exit 0
with a result, or exit 1-124 with a gate result that has failures, counts; exit 1-124 with a result
of 0 failures (or with metric samples) stops the bisect (``HarnessError``, exit 1), naming the
position, the exit code and the end of stderr; 125 skips whatever was printed. Once a run of this
bisect has reported a gate result, a run that reports none is stopped the same way rather than
read by its exit code.

State is saved after every single result, so killing ``run`` loses at most the runs in flight. With
``--ledger``, a run's records are appended (fsynced) before the state that counts it is saved: the
ledger never lacks a run the state counts (a kill in between leaves one it has and the state not).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import ValidationError

from materialize.bisect import session
from materialize.bisect.api import child_environ
from materialize.bisect.candidates import Candidate
from materialize.bisect.state import BisectError, BisectState, StateStore
from materialize.errors import MaterializeError
from materialize.ledger import (
    Gate,
    LedgerError,
    Metric,
    RunRecord,
    append_record,
    format_validation,
    loads,
    now_iso,
    parse_record,
    read_ledger,
)

SKIP = 125


class HarnessError(BisectError):
    """A run's result cannot be evidence (invalid, or at odds with its exit code): the bisect stops.

    Exit 1, as for invalid records: the command ran, its output is what is wrong.
    """

    exit_code = 1


@dataclass(frozen=True)
class Task:
    """One hardware run of one candidate."""

    slot: int
    candidate: Candidate
    argv: list[str]
    env: dict[str, str]
    ledger: Path
    timeout: float | None = None


@dataclass(frozen=True)
class TaskResult:
    task: Task
    returncode: int
    stdout: str
    stderr: str


class Executor(Protocol):
    """Runs tasks, at most ``jobs`` at once, yielding results as they finish."""

    jobs: int

    def run(self, tasks: Sequence[Task]) -> Iterator[TaskResult]: ...


# The keeper: leader of the run's own process group. It runs the command, and kills the whole group
# when the command ends (stray background processes of a run do not outlive it) or when its parent
# dies in any way, even ``kill -9``: the parent holds the only write end of a pipe, and EOF on the
# read end is the kernel telling the keeper that its parent is gone.
KEEPER = r"""
import os, signal, subprocess, sys, threading
fd = int(sys.argv[1])
def watch():
    try:
        while os.read(fd, 1):
            pass
    except OSError:
        pass
    os.killpg(0, signal.SIGKILL)
threading.Thread(target=watch, daemon=True).start()
try:
    child = subprocess.Popen(sys.argv[2:])
except FileNotFoundError:
    sys.stderr.write("command not found: %s\n" % sys.argv[2])
    sys.exit(127)
except PermissionError:
    sys.stderr.write("command not executable: %s\n" % sys.argv[2])
    sys.exit(126)
rc = child.wait()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.killpg(0, signal.SIGTERM)
sys.exit(rc if rc >= 0 else 128 - rc)
"""


def run_task(task: Task) -> TaskResult:
    """Execute one task locally (argv list, never a shell), in its own process group.

    The group is ended with the run: on timeout, on an exception here (Ctrl-C), and by the keeper
    when this process dies.
    """
    import signal
    import sys

    env = child_environ()
    env.update(task.env)
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", KEEPER, str(read_end), *task.argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(read_end,),
            start_new_session=True,
        )
    finally:
        os.close(read_end)
    # The keeper ends its group when the command ends; killed itself by a signal, it cannot: the command
    # and its children would run on, holding the output pipes this process reads to their end. So the
    # group is ended here once the keeper is gone (waited for without reaping it: its pid, the group's
    # id, stays taken until communicate() reaps it).
    import threading

    threading.Thread(target=_end_group_after, args=(proc.pid,), daemon=True).start()
    try:
        try:
            out, err = proc.communicate(timeout=task.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.communicate()
            return TaskResult(task, SKIP, "", f"timed out after {task.timeout}s (counted as skip)")
        except BaseException:
            _kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    finally:
        os.close(write_end)
    return TaskResult(task, proc.returncode, out, err)


def _end_group_after(keeper: int) -> None:
    import signal

    try:
        os.waitid(os.P_PID, keeper, os.WEXITED | os.WNOWAIT)
    except ChildProcessError:  # already reaped: communicate() returned, the group was ended
        return
    _kill_group(keeper, signal.SIGKILL)


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


@dataclass
class LocalExecutor:
    """The default: N subprocesses at once on this machine (``{job}`` tells them apart)."""

    jobs: int = 1

    def run(self, tasks: Sequence[Task]) -> Iterator[TaskResult]:
        pending = list(tasks)
        with ThreadPoolExecutor(max_workers=max(1, self.jobs)) as pool:
            running: set[Future[TaskResult]] = set()
            while pending or running:
                while pending and len(running) < self.jobs:
                    running.add(pool.submit(run_task, pending.pop(0)))
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()


def substitute(template: Sequence[str], slot: int, cand: Candidate) -> list[str]:
    values = {
        "job": str(slot),
        "id": cand.materialization_id,
        "dir": str(cand.directory),
        "position": str(cand.position),
    }
    out = []
    for arg in template:
        for key, val in values.items():
            arg = arg.replace("{" + key + "}", val)
        out.append(arg)
    return out


@dataclass
class Outcome:
    """What one finished run told us."""

    kind: str  # "gate", "metric", "skip", "none"
    requests: int = 0
    failures: int = 0
    censored: bool = False
    samples: list[float] = field(default_factory=list)
    records: list[RunRecord] = field(default_factory=list)
    unit: str | None = None  # a metric's unit (one per run: mixed units are refused)
    note: str = ""
    source: str = "exit"  # where the result came from: "run records", "JSON lines" or "exit" (the code)


def _tail(result: TaskResult) -> str:
    err = result.stderr.strip()
    return f"; stderr ends: {err[-300:]}" if err else "; stderr was empty"


def _where(result: TaskResult) -> str:
    return f"bisect run: position {result.task.candidate.position} (exit {result.returncode})"


Vet = Callable[[RunRecord, int], list[str]]
"""What is wrong with a run record the command wrote, as evidence about the candidate at a position."""


def interpret(state: BisectState, result: TaskResult, vet: Vet | None = None) -> Outcome:
    """Turn a finished run into evidence (records > JSON lines > exit code); see the module doc.

    The command's own run records must each be a new run (an identity this bisect has not counted,
    once in the file) and pass ``vet`` (the checks ``runs validate`` makes), else the bisect stops."""
    cand = result.task.candidate
    rc = result.returncode
    if rc >= 126 or rc < 0:
        raise BisectError(
            f"bisect run: command exited {rc} at position {cand.position}; aborting "
            f"(126+ and signals mean the command itself is broken){_tail(result)}"
        )
    if rc == SKIP:
        return Outcome("skip", note="exit 125")
    out = _from_records(state, result, vet)
    printed = _from_stdout(state, result)
    if out is None:
        out = printed
    elif printed is not None and _counts(printed) != _counts(out):
        # two results of one run that disagree: neither can be taken for the run
        raise HarnessError(
            f"{_where(result)}: its run records give {state.gate or state.metric!r} {_counts(out)} but its "
            f"JSON lines {_counts(printed)}: one run, two results; fix the harness{_tail(result)}"
        )
    if state.mode == "metric":
        if out is None:
            return Outcome("skip", note=f"exit {rc} and no {state.metric!r} metric on stdout")
        if rc != 0:
            raise HarnessError(
                f"bisect run: position {cand.position}: the command exited {rc} but reported "
                f"{state.metric!r} samples {out.samples[:5]}: a failing command's numbers are not a "
                f"measurement; exit 0 when it measured, 125 to skip{_tail(result)}"
            )
        if bad := [s for s in out.samples if not s > 0]:
            raise HarnessError(
                f"{_where(result)}: its {out.source} give {state.metric!r} sample {bad[0]!r}: a metric sample "
                f"is a positive number (the model compares relative shifts){_tail(result)}"
            )
        return out
    if out is not None:
        if rc != 0 and out.failures == 0:
            raise HarnessError(
                f"bisect run: position {cand.position}: the command exited {rc} but its {out.source} "
                f"say {state.gate!r} had 0 failures of {out.requests}: a crash is not a pass; fix the "
                f"harness (exit 0 with the counts, 1-124 only with failures, 125 to skip){_tail(result)}"
            )
        return out
    if state.run_results == "reported":
        raise HarnessError(
            f"bisect run: position {cand.position}: the command exited {rc} with no {state.gate!r} "
            "result (no run record, no JSON line), though earlier runs of this bisect reported "
            f"one: a harness that stopped before reporting is not a pass or a fail{_tail(result)}"
        )
    failed = rc != 0
    return Outcome("gate", state.requests, 1 if failed else 0, censored=failed, note=f"exit {rc}")


def _counts(out: Outcome) -> str:
    if out.kind == "metric":
        return f"samples {sorted(out.samples)} ({out.unit!r})"
    return f"{out.failures}{'+' if out.censored else ''} failures of {out.requests} requests"


def _from_records(state: BisectState, result: TaskResult, vet: Vet | None = None) -> Outcome | None:
    cand = result.task.candidate
    lines = _own_records(result.task, result)
    if not lines:
        return None
    records = [rec for _, rec in lines]
    want_metric = state.mode == "metric"
    out = Outcome("none", records=records, source="run records", note="run records")
    counted = session.recorded(state)
    here: dict[str, str] = {}
    for where, rec in lines:
        if rec.materialization_id != cand.materialization_id:
            raise HarnessError(
                f"{where}: record names materialization {rec.materialization_id[:12]} "
                f"but the candidate was {cand.materialization_id[:12]}"
            )
        # A run is its record's content (as in 'record' and 'infer'): the same record again, in this
        # file or counted from an earlier run, is not a new run; counting it would count one run twice.
        rid = rec.identity
        again = f"{here[rid]}" if rid in here else "an earlier run of this bisect" if rid in counted else None
        if again:
            raise HarnessError(
                f"{_where(result)}: {where}: the command wrote a run record this bisect already has "
                f"(identity {rid}, as {again}): a run's record must be its own, counted once; give each "
                f"run a unique 'x_run' (or a time to the second that differs){_tail(result)}"
            )
        here[rid] = where
        problems = vet(rec, cand.position) if vet is not None else []
        if problems:
            raise HarnessError(
                f"{_where(result)}: {where}: the command's run record is not evidence about this "
                f"candidate: {'; '.join(problems)}{_tail(result)}"
            )
        if want_metric and (m := rec.metric(state.metric or "")):
            if out.unit is not None and m.unit != out.unit:
                raise HarnessError(
                    f"{result.task.ledger}: the run's records give {state.metric!r} in {out.unit!r} and in "
                    f"{m.unit!r} (one unit per metric; samples are never converted)"
                )
            out.kind = "metric"
            out.unit = m.unit
            out.samples.extend(m.samples)
        elif not want_metric and (g := rec.gate(state.gate)):
            out.kind = "gate"
            out.requests += g.requests
            out.failures += g.failures
            out.censored = out.censored or g.censored
    return out if out.kind != "none" else None


# Keys a result line may carry besides its own (``x_*`` extras are allowed too, as in records).
_GATE_LINE = {"gate", "requests", "failures", "censored"}
_VALUE_LINE = {"metric", "value", "unit"}
_SAMPLES_LINE = {"name", "samples", "unit"}


def _from_stdout(state: BisectState, result: TaskResult) -> Outcome | None:
    """Every stdout line that is a result for this bisect's gate/metric, validated; None if none.

    Lines that are not JSON objects, and results for other gates or metrics, are the harness's own
    business. A line for this gate or metric that does not validate stops the bisect: a missing
    ``failures`` is not 0. Several lines add up, as a record's entries of one gate do.
    """
    found: Outcome | None = None
    for line in result.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = loads(line)
        except json.JSONDecodeError:
            continue  # not JSON: a log line
        except ValueError as exc:  # a key twice, NaN: ours if it names our gate or metric
            try:  # (read loosely: a number past Python's 4300 digits, which loads refused, as text)
                loose = json.loads(line, parse_int=str)
            except (ValueError, RecursionError):
                loose = None
            if isinstance(loose, dict) and _names_ours(state, loose):
                raise HarnessError(f"{_where(result)}: invalid result line {line[:200]!r}: {exc}{_tail(result)}") from None
            continue
        if not isinstance(obj, dict) or not _names_ours(state, obj):
            continue
        try:
            got = _validate_line(state, obj)
        except ValueError as exc:
            raise HarnessError(f"{_where(result)}: invalid result line {line[:200]!r}: {exc}{_tail(result)}") from None
        if found is None:
            found = got
        elif got.unit != found.unit:
            raise HarnessError(
                f"{_where(result)}: result line {line[:200]!r} gives {state.metric!r} in {got.unit!r}, an earlier "
                f"line in {found.unit!r} (one unit per metric; samples are never converted){_tail(result)}"
            )
        else:
            found.requests += got.requests
            found.failures += got.failures
            found.censored = found.censored or got.censored
            found.samples.extend(got.samples)
    return found


def _names_ours(state: BisectState, obj: dict) -> bool:
    if state.mode == "metric":
        return obj.get("metric") == state.metric or ("metric" not in obj and obj.get("name") == state.metric)
    return obj.get("gate") == state.gate


def _validate_line(state: BisectState, obj: dict) -> Outcome:
    extras = {k for k in obj if k.startswith("x_")}
    allowed = _GATE_LINE if state.mode == "gate" else _VALUE_LINE if "metric" in obj else _SAMPLES_LINE
    unknown = sorted(set(obj) - allowed - extras)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)} (a result line has {', '.join(sorted(allowed))}; extras start with 'x_')"
        )
    try:
        if state.mode == "gate":
            fields = {("name" if k == "gate" else k): v for k, v in obj.items() if k not in extras}
            g = Gate.model_validate(fields)
            return Outcome("gate", g.requests, g.failures, g.censored, source="JSON lines", note="JSON line")
        if "metric" in obj:
            if "value" not in obj:
                raise ValueError("value: required key is missing")
            fields = {"name": obj["metric"], "unit": obj.get("unit", ""), "samples": [obj["value"]]}
        else:
            fields = {"name": obj["name"], "unit": obj.get("unit", ""), "samples": obj.get("samples")}
        m = Metric.model_validate(fields)
    except ValidationError as exc:
        msg = format_validation(exc)
        if "metric" in obj:
            msg = msg.replace("samples.0", "value")
        raise ValueError(msg) from None
    return Outcome("metric", samples=list(m.samples), unit=m.unit, source="JSON lines", note="JSON line")


def _own_records(task: Task, result: TaskResult) -> list[tuple[str, RunRecord]]:
    """The records the command appended to its ledger, each with its ``FILE:LINE``."""
    if not task.ledger.exists() or task.ledger.stat().st_size == 0:
        return []
    lines = read_ledger(task.ledger)
    bad = [ln for ln in lines if ln.record is None]
    if bad:
        raise HarnessError(
            f"{_where(result)}: {bad[0].where}: the command wrote an invalid run record: {bad[0].error}{_tail(result)}"
        )
    return [(ln.where, ln.record) for ln in lines if ln.record is not None]


def make_record(
    state: BisectState, cand: Candidate, prefix: list[dict[str, str]], out: Outcome, argv: list[str]
) -> dict:
    """A run record for a run whose command did not write its own."""
    rec: dict = {
        "schema": 1,
        "materialization_id": cand.materialization_id,
        "series_prefix": prefix,
        "flags": {},
        "profile": None,
        "profile_hash": None,
        "host": socket.gethostname(),
        "time": now_iso(),
        "gates": [],
        "metrics": [],
        "banners_seen": [],
        "notes": f"bisect run: {' '.join(argv)} ({out.note})",
        "x_run": uuid.uuid4().hex[:16],  # two runs alike to the second are still two runs
    }
    if out.kind == "gate":
        rec["gates"] = [
            {"name": state.gate, "requests": out.requests, "failures": out.failures, "censored": out.censored}
        ]
    elif out.kind == "metric":
        rec["metrics"] = [{"name": state.metric, "unit": out.unit or "", "samples": out.samples}]
    return rec


def run_loop(
    store: StateStore,
    template: Sequence[str],
    prepare: Callable[[int], Candidate],
    prefix_of: Callable[[int], list[dict[str, str]]],
    *,
    executor: Executor,
    ledger: Path | None = None,
    max_runs: int | None = None,
    timeout: float | None = None,
    echo: Callable[[str], None] = print,
    check_series: Callable[[], None] | None = None,
    vet: Vet | None = None,
) -> session.Step:
    """Decide, materialize, run, record; repeat until decided, inconclusive or out of budget.

    The caller holds ``store.locked()`` for the whole loop: a second ``bisect run`` or a ``bisect
    good`` in the middle is refused (exit 5) instead of interleaving with this one. ``max_runs``
    is a budget for the whole bisect: runs done by earlier, interrupted invocations count.
    ``check_series`` raises when the series changed since the bisect started; it is called before
    and after each candidate is built, so no candidate of an edited series is run or skipped.
    """
    check = check_series or (lambda: None)
    metric_failures: dict[int, int] = {}
    store.dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".run-", dir=store.dir))
    try:
        while True:
            state = store.load()
            step = session.decide(state, jobs=executor.jobs)
            if step.status != "run":
                return step
            runs = state.run_count
            if max_runs is not None and runs >= max_runs:
                best = f"best so far position {step.culprit} at P={step.probability:.3f}" if (
                    step.culprit is not None and step.probability is not None) else "no verdict yet"
                step.status = "inconclusive"
                step.message = (
                    f"stopped before a verdict: --max-runs {max_runs} reached ({runs} runs in this bisect); "
                    f"{best}; run again with a larger --max-runs to continue"
                )
                return step
            tasks: list[Task] = []
            check()
            for position, repeats in step.runs:
                try:
                    cand = prepare(position)
                except MaterializeError as exc:
                    check()  # a patch refreshed meanwhile is the reason, not this prefix
                    # A prefix that does not materialize cannot be tested: git bisect's "skip".
                    echo(f"position {position}: cannot materialize ({exc}); skipping it")
                    session.skip(state, position)
                    continue
                check()  # built from the series the bisect started on, not from an edit in between
                session.note_candidate(state, position, cand.materialization_id)
                for _ in range(repeats):
                    slot = len(tasks) % executor.jobs
                    own = scratch / f"run-{runs + len(tasks)}.jsonl"
                    env = {
                        "MATERIALIZED_DIR": str(cand.directory),
                        "MATERIALIZATION_ID": cand.materialization_id,
                        "MATERIALIZE_BISECT_POSITION": str(position),
                        "MATERIALIZE_LEDGER": str(own),
                    }
                    tasks.append(Task(slot, cand, substitute(template, slot, cand), env, own, timeout))
            if max_runs is not None:
                tasks = tasks[: max(1, max_runs - runs)]
            store.save(state)
            for result in executor.run(tasks):
                state = store.load()
                out = interpret(state, result, vet)
                pos = result.task.candidate.position
                if out.kind == "gate":  # once a run reported its counts, every run must
                    state.run_results = "reported" if out.source != "exit" else (state.run_results or "exit")
                # The records of this run: its own, or one made for it (with a fresh x_run id, so two
                # runs alike to the second stay two). Their identities go with the observation, so
                # feeding the --ledger copy to 'bisect record' or 'infer' later does not count them again.
                written: list[RunRecord] = []
                if out.kind in ("gate", "metric"):
                    written = out.records or [
                        _parsed(make_record(state, result.task.candidate, prefix_of(pos), out, result.task.argv))
                    ]
                _record(state, result, out, pos, metric_failures, echo, [r.identity for r in written])
                state.run_count += 1
                # The ledger first (each line fsynced), the state second: a kill between the two
                # leaves a run the ledger keeps and the state does not count (it is run again, and
                # 'bisect record' can still add the kept one), never a counted run the ledger lacks.
                if ledger is not None:
                    for rec in written:
                        append_record(ledger, rec)
                store.save(state)
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


def _parsed(record: dict) -> RunRecord:
    try:
        return parse_record(record)
    except ValueError as exc:
        raise LedgerError(f"bisect run: cannot make a valid run record: {exc}") from None


def _record(
    state: BisectState,
    result: TaskResult,
    out: Outcome,
    pos: int,
    metric_failures: dict[int, int],
    echo: Callable[[str], None],
    records: list[str],
) -> None:
    cid = result.task.candidate.materialization_id
    src = "run"
    if out.kind == "gate":
        session.observe(
            state,
            pos,
            source=src,
            materialization_id=cid,
            requests=out.requests,
            failures=out.failures,
            censored=out.censored,
            records=records,
        )
        verdict = (
            "pass"
            if out.failures == 0
            else f"FAIL ({out.failures}{'+' if out.censored else ''}/{out.requests})"
        )
        echo(f"position {pos} [{cid[:12]}] slot {result.task.slot}: {verdict}")
    elif out.kind == "metric":
        session.observe(
            state, pos, source=src, materialization_id=cid, samples=out.samples, records=records, unit=out.unit
        )
        echo(f"position {pos} [{cid[:12]}] slot {result.task.slot}: {state.metric}={out.samples}")
    else:
        echo(f"position {pos} [{cid[:12]}] slot {result.task.slot}: skip ({out.note})")
        metric_failures[pos] = metric_failures.get(pos, 0) + 1
        if out.note == "exit 125" or metric_failures[pos] >= 3:
            session.skip(state, pos)
