"""``ToolRetryMiddleware`` (slot ``tool_retry``): runs a failed tool call again.

A ToolWrapper, inside the approval gate (a retried attempt re-runs the approved call without
asking again) and outside the allowlist. It sees results, not exceptions: the chain's
innermost guard turns what a tool raised into an error result carrying the exception
(``ToolResult.exception``), and that exception decides. So a call is never retried when:

- its arguments failed validation, its tool is unknown or refused, or the tool returned an
  error result itself: nothing was raised;
- the run is cancelled (or suspended): cancellation is never turned into a result, it leaves
  the attempt and the backoff wait at once;
- its tool declares ``idempotent = False`` and the policy does not allow retrying those.

Backoff, jitter and the bounds come from tenacity. Attempts are not persisted: a run resumed
after a crash mid-call starts the call afresh, with a fresh attempt budget.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
from tenacity import AsyncRetrying, RetryCallState, retry_if_result, stop_after_attempt
from tenacity.stop import stop_base
from tenacity.wait import wait_exponential, wait_random

from hango import ToolResult
from hango.middleware import ERROR_TYPE, RETRIED, TOOL_NAME, ToolCallRequest, ToolHandler, record
from hango_retry.policy import RetryPolicy

#: Span attribute of ``middleware.retried``: the number of the attempt that failed.
ATTEMPT_ATTRIBUTE: Final = "hango.retry.attempt"


class _StopBeforeDeadline(stop_base):
    """Stop when the next attempt would begin ``max_seconds`` or more after the first one
    (tenacity's ``stop_before_delay``, on an injectable clock)."""

    def __init__(self, clock: Callable[[], float], max_seconds: float) -> None:
        self.clock = clock
        self.deadline = clock() + max_seconds

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.clock() + retry_state.upcoming_sleep >= self.deadline


class ToolRetryMiddleware:
    """Retries tool calls per ``policy``. ``sleep`` and ``clock`` (seconds) are the wait and
    the time the bounds are measured on."""

    name = "tool_retry"

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = policy
        self._sleep = sleep
        self._clock = clock

    def _may_retry(self, req: ToolCallRequest) -> bool:
        if req.tool is None or self.policy.max_attempts == 1:
            return False
        if self.policy.tools is not None and req.call.name not in self.policy.tools:
            return False
        # ``idempotent`` is optional on a Tool: absent means idempotent.
        return self.policy.retry_non_idempotent or getattr(req.tool, "idempotent", True)

    def _retryable(self, result: ToolResult) -> bool:
        # getattr: a wrapper inside that returned no ToolResult is named by the chain, not here.
        return isinstance(getattr(result, "exception", None), self.policy.retry_on)

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if not self._may_retry(req):
            return await next(req)
        policy = self.policy
        tool_name = req.call.name

        def retried(state: RetryCallState) -> None:
            assert state.outcome is not None  # tenacity calls this after an attempt
            failed: ToolResult = state.outcome.result()
            record(
                RETRIED,
                middleware=self.name,
                reason="tool raised",
                attributes={
                    TOOL_NAME: tool_name,
                    ERROR_TYPE: type(failed.exception).__qualname__,
                    ATTEMPT_ATTRIBUTE: state.attempt_number,
                },
            )

        retrying = AsyncRetrying(
            sleep=self._sleep,
            stop=stop_after_attempt(policy.max_attempts)
            | _StopBeforeDeadline(self._clock, policy.max_seconds),
            wait=wait_exponential(
                multiplier=policy.initial_delay, max=policy.max_delay, exp_base=policy.backoff
            )
            + wait_random(0, policy.jitter),
            retry=retry_if_result(self._retryable),
            before_sleep=retried,
            # Out of attempts or time: the last attempt's error result goes to the model.
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )

        async def attempt() -> ToolResult:
            # ``next`` may be a plain function returning an awaitable (the chain's bound
            # layers are); tenacity awaits only what it sees is a coroutine function.
            return await next(req)

        result: ToolResult = await retrying(attempt)
        return result
