"""The retry policy the HTTP providers share: what is retried, how long to wait, what is recorded.

A provider attempt is one HTTP request and its event stream. An attempt that fails before it has
yielded any content event is retried when the failure is transient: HTTP 429 (rate limited),
529 (Anthropic overloaded) or another 5xx, or no response at all (connection error). A 5xx
whose body says the REQUEST is invalid (``request_rejected``: some OpenAI-compatible servers
answer a request they cannot handle with 500) is not transient: the same request fails the same
way. Once content has reached the caller, a failure ends the call: replaying the stream would
hand the accumulator the same content twice. Every other failure (400, 401, 404, ...) ends the
call at once with ``ModelError`` carrying the provider's own message.

The wait before retry ``n`` (1-based) is ``base_delay * 2 ** (n - 1)`` seconds, or the server's
``retry-after`` when it sends one, capped at ``max_delay``. It is deterministic (no jitter) so a
run's telemetry says exactly what happened. Each retry is visible as it happens: the stream
yields a ``ProviderRetry`` event before waiting (the CLI prints it as one line), and the span
event ``provider.retry`` is added to the current span with ``http.response.status_code``
(omitted for a connection error), ``hango.retry.attempt`` and ``hango.retry.delay_s``. Waiting
uses ``anyio.sleep``, so a cancelled run stops waiting at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing

import anyio
import httpx2
from attrs import frozen
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from hango.provider.errors import ModelError
from hango.provider.events import ProviderRetry, StreamEvent
from hango.telemetry.names import HTTP_STATUS_CODE, PROVIDER_RETRY, RETRY_ATTEMPT, RETRY_DELAY_S


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


# How a server error body reports that the server failed to validate OUR request: a pydantic /
# FastAPI validation report ("1 validation error for X", "7 validation errors:"), which
# llama-cpp-python's server sends with HTTP 500. Only the text decides: error types are not
# used consistently enough across compatible servers to tell a bad request from a bad server.
_REQUEST_REJECTED = re.compile(r"\b\d+ validation errors?\b")


def request_rejected(status: int, message: str) -> bool:
    """True when a 5xx response's error ``message`` says the request itself is invalid, which no
    retry can fix."""
    return status >= 500 and bool(_REQUEST_REJECTED.search(message))


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


def connection_failure(provider: str, url: object, exc: BaseException) -> Failure:
    """A transient failure with no HTTP answer, naming the ``url`` tried: the connection could not
    be made, or it broke while the answer streamed (the SDKs wrap both alike)."""
    chain = _chain(exc)
    reason = _root_reason(chain)
    if any(isinstance(e, httpx2.ConnectError | httpx2.ConnectTimeout) for e in chain):
        return Failure(f"{provider}: cannot connect to {url} ({reason})", True)
    return Failure(f"{provider}: the connection to {url} broke ({reason})", True)


def _chain(exc: BaseException) -> list[BaseException]:
    chain = [exc]
    while (inner := chain[-1].__cause__ or chain[-1].__context__) and inner not in chain:
        chain.append(inner)
    return chain


def _root_reason(chain: list[BaseException]) -> str:
    """What the operating system said, if it said anything (``Connection refused``), else the
    innermost message: the SDKs' own is only "Connection error."."""
    for error in reversed(chain):
        if isinstance(error, OSError) and error.errno is not None:
            return os.strerror(error.errno)
    return next((str(e) for e in reversed(chain) if str(e)), type(chain[0]).__name__)


@frozen
class ProviderRetryPolicy:
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
    attributes: dict[str, AttributeValue] = {RETRY_ATTEMPT: attempt, RETRY_DELAY_S: delay}
    if status is not None:
        attributes[HTTP_STATUS_CODE] = status
    trace.get_current_span().add_event(PROVIDER_RETRY, attributes)


async def stream_with_retries(
    attempt: Callable[[], AsyncGenerator[StreamEvent, None]],
    policy: ProviderRetryPolicy,
    explain: Callable[[Exception], Failure | None],
    provider: str,
) -> AsyncGenerator[StreamEvent, None]:
    """Yield the events of ``attempt()``, starting it again after a transient failure, and a
    ``ProviderRetry`` naming ``provider`` before each wait.

    ``explain`` turns an SDK exception into a ``Failure``; it returns ``None`` for anything else,
    which propagates unchanged (a bug should not be reported as a provider error). Raises
    ``ModelError`` (with the failure's ``status`` and ``transient``) when the failure is not
    transient, when retries are used up, or when the attempt had already yielded an event.
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
        yield ProviderRetry(
            provider, failure.status, retries, policy.max_retries, delay, failure.message
        )
        await anyio.sleep(delay)
