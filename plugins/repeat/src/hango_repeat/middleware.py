"""``RepeatCallMiddleware`` (slot ``repeat_call``): stops a model that repeats itself.

A ToolWrapper. It counts every tool call of a run by its key (tool name + canonical
arguments, ``hango_repeat.keys``); the Nth identical call and every one after it is answered
with an error result and NOT executed. The counts are per run and live in the run's private
state, so a resumed run keeps counting where it stopped.
"""

from __future__ import annotations

from typing import Final

from attrs import define, field

from hango import ToolResult, error_result
from hango.middleware import (
    REPEAT_CALL_BLOCKED,
    TOOL_NAME,
    State,
    ToolCallRequest,
    ToolHandler,
    load_private,
    record,
    store_private,
)
from hango_repeat.keys import call_key

THRESHOLD_VARIABLE: Final = "HANGO_REPEAT_CALL_THRESHOLD"
DEFAULT_THRESHOLD: Final = 3


@define
class RepeatCounts:
    """The private state: how many times each call key was called in this run, counting the
    calls that got a result and the blocked ones."""

    counts: dict[str, int] = field(factory=dict)


class RepeatCallMiddleware:
    """Blocks a call whose key has already been called ``threshold - 1`` times in the run."""

    name = "repeat_call"
    #: The counts belong to one run: a new run of the session starts from zero.
    state_scope = "run"

    def __init__(self, threshold: int = DEFAULT_THRESHOLD) -> None:
        if threshold < 2:
            raise ValueError(f"threshold must be at least 2, got {threshold}")
        self.threshold = threshold

    def _count(self, state: State, seen: RepeatCounts, key: str) -> None:
        # ``seen`` as loaded for this call: loading again would report state_missing twice.
        seen.counts[key] = seen.counts.get(key, 0) + 1
        store_private(state, self.name, seen)

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        call = req.call
        key = call_key(call.name, call.input)
        seen, _ = load_private(req.state, self.name, RepeatCounts)
        before = seen.counts.get(key, 0)
        if before + 1 < self.threshold:
            result = await next(req)
            # Counted once it has a result: a call cut short by a cancel gave the model
            # nothing to reuse, so calling it again after a resume is not a repeat. Loaded
            # again when a sibling of a concurrent batch stored counts meanwhile (none stored
            # yet: ``seen`` is still all there is, and the absence is reported once).
            if self.name in req.state.private:
                seen, _ = load_private(req.state, self.name, RepeatCounts)
            self._count(req.state, seen, key)
            return result
        self._count(req.state, seen, key)
        record(
            REPEAT_CALL_BLOCKED,
            middleware=self.name,
            attributes={TOOL_NAME: call.name},
        )
        times = "once" if before == 1 else f"{before} times"
        return error_result(
            "Not executed: this exact call was already made %s in this run (%s, same "
            "arguments). Use the earlier result or change your approach.",
            times,
            call.name,
        )
