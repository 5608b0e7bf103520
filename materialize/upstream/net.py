"""Every network call of materialize goes through here: bounded waits, retries where safe, one error.

A package index that accepts the connection and never answers must not hang a run: each request has
a connect timeout and a read timeout (seconds without a byte), both configurable, and idempotent GETs
are retried with exponential backoff on connection errors, timeouts, 429 and 5xx. When the retries
run out the error is an ``UpstreamError`` (exit 3) that names the URL and the limit that was hit.

  MATERIALIZE_CONNECT_TIMEOUT  seconds to establish a connection (default 10)
  MATERIALIZE_READ_TIMEOUT     seconds a response may go silent (default 60)
  MATERIALIZE_RETRIES          extra attempts after the first (default 2)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from materialize.errors import UpstreamError

CONNECT_ENV = "MATERIALIZE_CONNECT_TIMEOUT"
READ_ENV = "MATERIALIZE_READ_TIMEOUT"
RETRIES_ENV = "MATERIALIZE_RETRIES"
T = TypeVar("T")


def _number(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UpstreamError(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise UpstreamError(f"{name}={raw!r}: must be positive")
    return value


def network_timeouts() -> tuple[float, float]:
    """(connect, read) timeouts in seconds, from the environment or the defaults."""
    return _number(CONNECT_ENV, 10.0), _number(READ_ENV, 60.0)


def httpx_timeout():  # noqa: ANN201 - httpx.Timeout, imported only when the network is used
    """The timeouts as httpx wants them: connect, and read/write/pool waits."""
    import httpx  # noqa: PLC0415

    connect, read = network_timeouts()
    return httpx.Timeout(read, connect=connect)


def retries() -> int:
    raw = os.environ.get(RETRIES_ENV) or "2"
    if not raw.isdigit():
        raise UpstreamError(f"{RETRIES_ENV}={raw!r}: expected a whole number of retries")
    return int(raw)


def _retryable(exc: BaseException) -> bool:
    import httpx  # noqa: PLC0415 - only runs when the network is used

    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return status == 429 or status >= 500
    return isinstance(exc, httpx.TransportError)


def describe(exc: BaseException) -> str:
    """A one-line reason; timeouts say which limit and how to raise it."""
    import httpx  # noqa: PLC0415

    connect, read = network_timeouts()
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return f"no connection within {connect:g} s ({CONNECT_ENV})"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {read:g} s ({READ_ENV})"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} {exc.response.reason_phrase}"
    return f"{type(exc).__name__}: {exc}"


def with_retries(url: str, what: str, attempt: Callable[[], T]) -> T:
    """Run ``attempt`` (one idempotent request to ``url``), retrying transient failures with backoff."""
    import httpx  # noqa: PLC0415

    tries = retries() + 1
    for number in range(1, tries + 1):
        try:
            return attempt()
        except httpx.HTTPError as exc:
            if number == tries or not _retryable(exc):
                suffix = f" (after {tries} attempts)" if tries > 1 and _retryable(exc) else ""
                raise UpstreamError(f"{what} {url}: {describe(exc)}{suffix}") from None
            time.sleep(min(8.0, 0.5 * 2 ** (number - 1)))
    raise AssertionError("unreachable")
