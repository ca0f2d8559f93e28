"""``RepeatCallMiddleware`` (slot ``repeat_call``): stops a model that repeats itself.

A ToolWrapper. It counts every tool call of a run by its key (tool name + canonical
arguments, ``hango_repeat.keys``); the Nth identical call and every one after it is answered
with an error result and NOT executed. The counts are per run and live in the run's private
state, so a resumed run keeps counting where it stopped.
"""

from __future__ import annotations

import math
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
)
from hango_repeat.keys import call_key

THRESHOLD_VARIABLE: Final = "HANGO_REPEAT_CALL_THRESHOLD"
DEFAULT_THRESHOLD: Final = 3


#: ``RepeatCounts.counts`` is folded into ``settled`` once it holds more keys than this, or
#: than the square root of ``settled``'s size if that is larger.
FOLD_AT: Final = 32


@define(eq=False)
class RepeatCounts:
    """The private state: how many times each call key was called in this run, counting the
    calls that got a result and the blocked ones.

    The newest counts are in ``counts``, older ones in ``settled``: ``counts`` is folded into
    ``settled`` once it grows past ``FOLD_AT`` keys (or the square root of ``settled``'s
    size), and ``settled`` is stored only when it holds something. A checkpoint encodes only
    the part that changed (``hango.agent.state.StateEncoder``), so a run of a thousand
    distinct calls does not re-encode a thousand keys at every save. Two values are equal
    when they count the same calls alike, wherever the counts sit."""

    counts: dict[str, int] = field(factory=dict)
    settled: dict[str, int] = field(factory=dict)

    def of(self, key: str) -> int:
        """How often ``key`` was called."""
        return self.counts.get(key, self.settled.get(key, 0))

    def merged(self) -> dict[str, int]:
        """Every count, by key."""
        return {**self.settled, **self.counts}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RepeatCounts):
            return NotImplemented
        return self.merged() == other.merged()

    __hash__ = None  # type: ignore[assignment]


class RepeatCallMiddleware:
    """Blocks a call whose key has already been called ``threshold - 1`` times in the run."""

    name = "repeat_call"
    #: The counts belong to one run: a new run of the session starts from zero.
    state_scope = "run"

    def __init__(self, threshold: int = DEFAULT_THRESHOLD) -> None:
        if threshold < 2:
            raise ValueError(f"threshold must be at least 2, got {threshold}")
        self.threshold = threshold
        # The private value this middleware stored last, and its counts: while a run's state
        # still holds that very object, nothing changed it (values are replaced, never
        # mutated), so the counts need no loading: a run with a thousand distinct calls does
        # not convert a thousand keys on every call.
        self._stored: tuple[object, RepeatCounts] | None = None

    def _counts(self, state: State) -> RepeatCounts:
        """The run's counts; read-only (``_count`` copies what it changes)."""
        raw = state.private.get(self.name)
        stored = self._stored
        if stored is not None and raw is not None and raw is stored[0]:
            return stored[1]
        seen, _ = load_private(state, self.name, RepeatCounts)
        return seen

    def _count(self, state: State, seen: RepeatCounts, key: str) -> None:
        # Copy on count: the value in the state (and in the last checkpoint's document) is
        # never changed in place. Only ``counts`` is copied (a dict copy runs in C);
        # ``settled`` stays the same object between folds, so a checkpoint re-encodes the
        # small part only.
        counts, settled = {**seen.counts, key: seen.of(key) + 1}, seen.settled
        if len(counts) > max(FOLD_AT, math.isqrt(len(settled))):
            counts, settled = {}, {**settled, **counts}
        # What store_private of RepeatCounts writes, without converting every key again:
        # str keys, int values, JSON by construction.
        raw: dict[str, dict[str, int]] = {"counts": counts}
        if settled:
            raw["settled"] = settled
        state.private[self.name] = raw
        self._stored = (raw, RepeatCounts(counts, settled))

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        call = req.call
        key = call_key(call.name, call.input)
        held = req.state.private.get(self.name)
        counts = self._counts(req.state)
        before = counts.of(key)
        if before + 1 < self.threshold:
            result = await next(req)
            # Counted once it has a result: a call cut short by a cancel gave the model
            # nothing to reuse, so calling it again after a resume is not a repeat. Read again
            # only if the value changed meanwhile (another call of the batch counted).
            if req.state.private.get(self.name) is not held:
                counts = self._counts(req.state)
            self._count(req.state, counts, key)
            return result
        self._count(req.state, counts, key)
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
