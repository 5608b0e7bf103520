"""The control's counterfactual: is it the TREE that makes the control's assertion fail?

A control counts only when the test's own assertion fails *because of the tree*. A test can fail its
control for other reasons that are not in the tree at all: it reads the arm it runs in (the node's
name, ``PYTEST_CURRENT_TEST``), or state it keeps between runs (``_RUNS.append(tree); assert
len(_RUNS) == 1`` fails the second run in the process, whatever the tree holds).

So before a control runs, the process is forked. The child waits. If the control then fails by the
test's own assertion, the child runs the same test (same item, same arm name, same fixtures, the
process state the control started from) with one difference: ``tree`` is the PATCHED tree. Only if
that run passes did the tree make the difference. The child never reports to pytest, never writes
into pytest's captured output, and ends with ``os._exit``; the parent waits for it (the two never
run at once, so the store's reader and any other shared pipe or file is used by one process at a
time).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time

import pytest


class Probe:
    """A forked copy of the process, taken just before a control test starts."""

    def __init__(self, item: pytest.Item, patched_tree: object, on_child) -> None:
        go_r, go_w = os.pipe()
        res_r, res_w = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()  # a buffer copied into the child would be written twice
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, reported through the pipe
            status = 0
            try:
                os.close(go_w)
                os.close(res_r)
                if os.read(go_r, 1) == b"1":
                    _write_all(res_w, json.dumps(_run_child(item, patched_tree, on_child)).encode())
            except BaseException:  # noqa: BLE001 - nothing may escape into the parent's pytest
                status = 1
            finally:
                os._exit(status)
        os.close(go_r)
        os.close(res_w)
        self.pid, self.go, self.res = pid, go_w, res_r
        self.result: dict | None = None

    def run(self, timeout: float) -> dict:
        """Let the child run the test on the patched tree; ``{"passed": bool, "detail": str, ...}``."""
        if self.result is not None:
            return self.result
        chunks: list[bytes] = []
        try:
            os.write(self.go, b"1")
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.res], [], [], left)[0]:
                    self.result = {"passed": False, "detail": f"did not finish in {timeout:.0f} s"}
                    break
                chunk = os.read(self.res, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError as exc:
            self.result = {"passed": False, "detail": f"could not run ({exc})"}
        if self.result is None:
            try:
                self.result = json.loads(b"".join(chunks).decode())
            except ValueError:
                self.result = {"passed": False, "detail": "the probe process ended without a result"}
        self.close()
        return self.result

    def close(self) -> None:
        """End the child (it exits by itself when told not to run) and reap it."""
        if self.pid:
            with contextlib.suppress(OSError):
                os.close(self.go)  # the child reads end-of-file and exits
            deadline = time.monotonic() + 10
            while True:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    break
                if time.monotonic() > deadline:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    break
                time.sleep(0.01)
            os.close(self.res)
            self.pid = 0


def _write_all(fd: int, data: bytes) -> None:  # pragma: no cover - child
    while data:
        data = data[os.write(fd, data) :]


def _run_child(item: pytest.Item, patched_tree: object, on_child) -> dict:  # pragma: no cover - child
    from _pytest.runner import call_and_report

    # leave pytest's captured output alone: the parent's capture files are shared with this process
    capman = item.config.pluginmanager.getplugin("capturemanager")
    capturing = getattr(capman, "_global_capturing", None)
    if capturing is not None:
        from _pytest.capture import MultiCapture

        capturing.stop_capturing()
        # no pytest API stops capturing without reading (and emptying) the shared capture file
        capman._global_capturing = MultiCapture(in_=None, out=None, err=None)  # noqa: SLF001
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    on_child(patched_tree)
    report = call_and_report(item, "setup", log=False)
    when = "setup"
    if report.passed:
        report = call_and_report(item, "call", log=False)
        when = "call"
    detail = ""
    if not report.passed:
        crash = getattr(report.longrepr, "reprcrash", None)
        detail = f"{when} {report.outcome}: " + (crash.message if crash is not None else str(report.longrepr))
        detail = detail.strip().splitlines()[0][:300] if detail.strip() else when
    return {"passed": bool(report.passed), "detail": detail}
