"""Transient database faults: telling the infrastructure's failures from the run's, and how long
to retry them.

A connection terminated under a query (a server restart, ``pg_terminate_backend``, a failover),
a server that refuses connections for a while, or a pool with no connection to hand out in time
is not the run's fault. A store retries such a call on a fresh connection, waiting with
exponential backoff and jitter (tenacity) for at most ``StoreRetryPolicy.seconds``
(``HANGO_DB_RETRY_SECONDS``), then raises ``StoreUnavailable``. Every other failure (a
constraint, a value the database refuses, a syntax error) is raised at once: retrying it would
only fail again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

import anyio
from attrs import frozen
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from hango.config import duration_setting
from hango.store.base import StoreUnavailable

T = TypeVar("T")

log = logging.getLogger("hango.store")

#: Seconds a store call keeps retrying a transient fault before ``StoreUnavailable``.
DEFAULT_RETRY_SECONDS = 15.0


@frozen
class StoreRetryPolicy:
    """How long to retry a transient fault: for at most ``seconds`` in all, the first wait
    ``first_wait`` seconds, doubling (with jitter) up to ``max_wait``. ``seconds=0`` tries once.
    """

    seconds: float = DEFAULT_RETRY_SECONDS
    first_wait: float = 0.05
    max_wait: float = 2.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, str]) -> StoreRetryPolicy:
        """The policy of ``HANGO_DB_RETRY_SECONDS`` (a number of seconds >= 0; default
        ``DEFAULT_RETRY_SECONDS``). Raises ``ConfigError`` naming the variable."""
        return cls(duration_setting(settings, "HANGO_DB_RETRY_SECONDS", DEFAULT_RETRY_SECONDS))


async def with_retries(
    call: Callable[[int], Awaitable[T]],
    *,
    policy: StoreRetryPolicy,
    transient: Callable[[BaseException], bool],
    what: str,
) -> T:
    """``await call(attempt)`` (``attempt`` is 1 for the first try), again while it raises a
    ``transient`` failure and ``policy.seconds`` have not passed; each retry is logged on the
    ``hango.store`` logger. ``call`` must be safe to repeat: an attempt whose connection died
    may have committed, so the calls with writes check for their own earlier write.

    Raises ``StoreUnavailable`` (naming ``what`` and the last failure) once the time is up, and
    any other failure at once."""

    def announce(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        # The first retry of a call is worth a warning; the rest of a long outage is the
        # caller's to report (a worker says it waits for the database).
        level = logging.WARNING if state.attempt_number == 1 else logging.INFO
        log.log(
            level,
            "%s: database unavailable (%s); retrying on a fresh connection in %.2f s",
            what,
            one_line(failure),
            wait,
        )

    try:
        return await call(1)  # most calls: no retry machinery at all (it costs tens of µs)
    except Exception as exc:
        if not transient(exc):
            raise
        first_failure = exc

    async def again(attempt: int) -> T:
        # Tenacity's first attempt is the one that just failed: it logs it and waits as for
        # any other, and the time limit runs from here.
        if attempt == 1:
            raise first_failure
        return await call(attempt)

    retrying = AsyncRetrying(
        sleep=anyio.sleep,
        stop=stop_after_delay(policy.seconds),
        wait=wait_exponential_jitter(
            multiplier=policy.first_wait, max=policy.max_wait, jitter=policy.first_wait
        ),
        retry=retry_if_exception(transient),
        before_sleep=announce,
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                return await again(attempt.retry_state.attempt_number)
    except Exception as exc:
        if transient(exc):
            raise StoreUnavailable(
                f"{what}: the database was unavailable for {policy.seconds:g} s "
                f"(HANGO_DB_RETRY_SECONDS): {one_line(exc)}"
            ) from exc
        raise
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover


def one_line(exc: BaseException | None) -> str:
    text = " ".join(str(exc).split()) if exc is not None else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
