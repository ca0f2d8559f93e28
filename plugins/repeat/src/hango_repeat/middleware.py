"""``RepeatCallMiddleware`` (slot ``repeat_call``): stops a model that repeats itself.

A ToolWrapper. It counts every tool call of a run by its key (tool name + canonical
arguments, ``hango_repeat.keys``); the Nth identical call and every one after it is answered
with an error result and NOT executed. The counts are per run and live in the run's private
state, so a resumed run keeps counting where it stopped.
"""

from __future__ import annotations

from typing import Final

from attrs import define, field
from hango import (
    State,
    ToolCallRequest,
    ToolHandler,
    ToolResult,
    error_result,
    load_private,
    store_private,
    telemetry,
)

from hango_repeat.keys import call_key

THRESHOLD_VARIABLE: Final = "HANGO_REPEAT_CALL_THRESHOLD"
DEFAULT_THRESHOLD: Final = 3


@define
class RepeatCounts:
    """The private state: how many times each call key was called in this run (blocked calls
    included)."""

    counts: dict[str, int] = field(factory=dict)


class RepeatCallMiddleware:
    """Blocks a call whose key has already been called ``threshold - 1`` times in the run."""

    name = "repeat_call"

    def __init__(self, threshold: int = DEFAULT_THRESHOLD) -> None:
        if threshold < 2:
            raise ValueError(f"threshold must be at least 2, got {threshold}")
        self.threshold = threshold

    def _count(self, state: State, key: str) -> int:
        """Count one more call of ``key`` and store it; returns the calls before this one."""
        seen, _ = load_private(state, self.name, RepeatCounts)
        before = seen.counts.get(key, 0)
        seen.counts[key] = before + 1
        # Stored before the call runs, so a run that stops inside the call still counted it.
        store_private(state, self.name, seen)
        return before

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        call = req.call
        before = self._count(req.state, call_key(call.name, call.input))
        if before + 1 < self.threshold:
            return await next(req)
        telemetry.record(
            telemetry.REPEAT_CALL_BLOCKED,
            middleware=self.name,
            attributes={telemetry.TOOL_NAME: call.name},
        )
        times = "once" if before == 1 else f"{before} times"
        return error_result(
            "Not executed: this exact call was already made %s in this run (%s, same "
            "arguments). Use the earlier result or change your approach.",
            times,
            call.name,
        )
