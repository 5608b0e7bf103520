"""Exceptions a control test caught on its way to its failing assertion.

``try: value = f(1, b=2) except TypeError: value = None`` then ``assert value == 3``: on the control
tree the assertion fails, but only because an error was raised and swallowed on the way. Uncaught,
the same ``TypeError`` makes the control *errored*; catching it must not turn it into a proven one.

While a control's test body runs, a trace function watches the frames of the test's own files (its
folder: the test module, its conftest and helpers there; nothing else is traced, the rest of the
process only pays for one dictionary lookup per call). An exception that reaches such a frame and
does not leave it (an ``except``, ``contextlib.suppress``, a ``with`` whose ``__exit__`` swallows
it) is *caught by the test*. Those the test declared are not errors on the way: what a
``pytest.raises`` block matched, and ``StopIteration``/``GeneratorExit`` (iteration).
"""

from __future__ import annotations

import dis
import sys
from pathlib import Path

_NORMAL_EXIT = {dis.opmap["RETURN_VALUE"], dis.opmap["YIELD_VALUE"]}
_ITERATION = (StopIteration, StopAsyncIteration, GeneratorExit)


def _raises_exits() -> set:
    """The code of pytest.raises' ``__exit__`` methods (a ``True`` return: the exception was expected)."""
    codes = set()
    try:
        from _pytest import raises as module
    except ImportError:  # pragma: no cover - older pytest
        from _pytest import python_api as module  # type: ignore[no-redef]
    for name in ("RaisesExc", "RaisesGroup", "RaisesContext"):
        exit_ = getattr(getattr(module, name, None), "__exit__", None)
        code = getattr(exit_, "__code__", None)
        if code is not None:
            codes.add(code)
    return codes


class CaughtByTest:
    """``with CaughtByTest(test_dir) as watch: …`` then ``watch.caught``: the exceptions caught by test code."""

    def __init__(self, test_dir: Path) -> None:
        self.test_dir = test_dir
        self.caught: list[BaseException] = []
        self.expected: list[BaseException] = []  # matched by a pytest.raises block
        self._pending: dict = {}  # frame -> the exception that last reached it
        self._is_test: dict[str, bool] = {}
        self._raises = _raises_exits()
        self._previous = None
        self.intact = True

    def __enter__(self) -> CaughtByTest:
        self._previous = sys.gettrace()
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc_info: object) -> None:
        # a test that replaced the trace function hid whatever it caught after that
        self.intact = sys.gettrace() == self._call
        sys.settrace(self._previous)
        self._pending.clear()

    def result(self, final: BaseException | None) -> list[BaseException]:
        """What the test caught, without what it declared, iteration, and the exception it ended with."""
        expected = {id(e) for e in self.expected}
        out, seen = [], set()
        if not self.intact:
            out.append(RuntimeError("the test replaced the trace function (sys.settrace) that watches what it catches"))
        for exc in self.caught:
            if exc is final or id(exc) in expected or id(exc) in seen or isinstance(exc, _ITERATION):
                continue
            seen.add(id(exc))
            out.append(exc)
        return out

    # -- the trace functions ------------------------------------------------------------------
    def _test_file(self, filename: str) -> bool:
        known = self._is_test.get(filename)
        if known is None:
            try:
                known = Path(filename).resolve().parent == self.test_dir
            except (OSError, ValueError):
                known = False
            self._is_test[filename] = known
        return known

    def _call(self, frame, event, arg):  # noqa: ARG002 - the trace protocol
        code = frame.f_code
        if code in self._raises:
            return self._raises_exit
        if self._test_file(code.co_filename):
            frame.f_trace_lines = False
            return self._local
        return None

    def _local(self, frame, event, arg):
        if event == "exception":
            exc = arg[1]
            pending = self._pending.get(frame)
            if pending is not None and pending is not exc:
                self._note(pending)  # the frame went on after it: handled here
            self._pending[frame] = exc
        elif event == "return":
            pending = self._pending.pop(frame, None)
            if pending is not None and frame.f_code.co_code[frame.f_lasti] in _NORMAL_EXIT:
                self._note(pending)  # returned (or yielded) normally after it: handled here
        return self._local

    def _raises_exit(self, frame, event, arg):
        if event == "return" and arg is True:
            exc = frame.f_locals.get("exc_val")
            if exc is not None:
                self.expected.append(exc)
        return self._raises_exit

    def _note(self, exc: BaseException) -> None:
        self.caught.append(exc)
