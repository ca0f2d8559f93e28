"""The retry policy the HTTP providers share: what is retried, how long to wait, what is recorded.

A provider attempt is one HTTP request and its event stream. An attempt that fails before it has
yielded any stream event is retried when the failure is transient: HTTP 429 (rate limited),
529 (Anthropic overloaded) or another 5xx, or no response at all (connection error). Once an
event has reached the caller, a failure ends the call: replaying the stream would hand the
accumulator the same content twice. Every other failure (400, 401, 404, ...) ends the call at
once with ``ModelError`` carrying the provider's own message.

The wait before retry ``n`` (1-based) is ``base_delay * 2 ** (n - 1)`` seconds, or the server's
``retry-after`` when it sends one, capped at ``max_delay``. It is deterministic (no jitter) so a
run's telemetry says exactly what happened. Each retry adds the span event ``provider.retry`` to
the current span with ``http.response.status_code`` (omitted for a connection error),
``hango.retry.attempt`` and ``hango.retry.delay_s``. Waiting uses ``anyio.sleep``, so a
cancelled run stops waiting at once.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from typing import Final, TypeVar

import anyio
from attrs import frozen
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from hango.provider.model import ModelError

RETRY_EVENT: Final = "provider.retry"
STATUS_CODE: Final = "http.response.status_code"
ATTEMPT: Final = "hango.retry.attempt"
DELAY_S: Final = "hango.retry.delay_s"

T = TypeVar("T")


@frozen
class Failure:
    """What a provider learned from one failed attempt.

    ``message`` becomes the ``ModelError`` text. ``status`` is the HTTP status (``None`` when no
    response arrived); ``retry_after`` is the server's requested wait in seconds, if any.
    """

    message: str
    transient: bool
    status: int | None = None
    retry_after: float | None = None


def is_transient_status(status: int) -> bool:
    """429 and every 5xx (Anthropic's 529 included) are worth another attempt."""
    return status == 429 or status >= 500


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a response asks for: ``retry-after-ms`` or ``retry-after`` in seconds.

    Both Anthropic and OpenAI send the number-of-seconds form; the HTTP-date form is not used by
    either API, so it is treated as absent.
    """
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None


@frozen
class RetryPolicy:
    """How often and how long to retry: ``max_retries`` further attempts after the first,
    waits in seconds starting at ``base_delay`` and never above ``max_delay``."""

    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        wanted = retry_after if retry_after is not None else self.base_delay * 2 ** (attempt - 1)
        return min(wanted, self.max_delay)


def _record_retry(attempt: int, delay: float, status: int | None) -> None:
    attributes: dict[str, AttributeValue] = {ATTEMPT: attempt, DELAY_S: delay}
    if status is not None:
        attributes[STATUS_CODE] = status
    trace.get_current_span().add_event(RETRY_EVENT, attributes)


async def stream_with_retries(
    attempt: Callable[[], AsyncGenerator[T, None]],
    policy: RetryPolicy,
    explain: Callable[[Exception], Failure | None],
) -> AsyncGenerator[T, None]:
    """Yield the items of ``attempt()``, starting it again after a transient failure.

    ``explain`` turns an SDK exception into a ``Failure``; it returns ``None`` for anything else,
    which propagates unchanged (a bug should not be reported as a provider error). Raises
    ``ModelError`` (with the failure's ``status`` and ``transient``) when the failure is not
    transient, when retries are used up, or when the attempt had already yielded an item.
    """
    retries = 0
    while True:
        yielded = False
        try:
            # aclosing: closing or cancelling this generator must close the attempt's HTTP
            # stream now, not whenever the garbage collector finalizes it.
            async with aclosing(attempt()) as items:
                async for item in items:
                    yielded = True
                    yield item
            return
        except Exception as exc:
            failure = explain(exc)
            if failure is None:
                raise
            if yielded or not failure.transient or retries >= policy.max_retries:
                # Transient only while nothing reached the caller: a fallback that repeated
                # the call elsewhere would hand the accumulator a second answer.
                transient = failure.transient and not yielded
                raise ModelError(
                    failure.message, status=failure.status, transient=transient
                ) from exc
            retries += 1
            delay = policy.delay(retries, failure.retry_after)
            _record_retry(retries, delay, failure.status)
        await anyio.sleep(delay)
