"""``ReplayModel``: a ``Model`` that answers each user turn of a task with its ground truth.

It stands in for the model so that what is under test is the harness: hango must carry the
calls to the APIs, and their results back, without changing either.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Sequence

from bench.bfcl.calls import Call
from hango import Message, ModelError, Request, StopReason, TextBlock, Usage
from hango.provider.events import (
    MessageStop,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango_repair import INTERRUPTED

#: hango-summarization's summary requests end with a text block starting so; the replay's
#: summary says how many user turns after the first it covers, and a compacted request's first
#: message carries it.
SUMMARY_REQUEST = "<summarize>"
_SUMMARIZED = re.compile(r"\[replay summary: (\d+) turns\]")


def _prompt(message: Message) -> bool:
    return message.role == "user" and any(isinstance(b, TextBlock) for b in message.content)


def _summarized(messages: Sequence[Message]) -> int:
    """The user turns an earlier replay summary in the first message covers (0: none)."""
    first = messages[0].content if messages else ()
    for block in first:
        if isinstance(block, TextBlock) and (found := _SUMMARIZED.search(block.text)):
            return int(found.group(1))
    return 0


def summary_request(messages: Sequence[Message]) -> bool:
    last = messages[-1].content[-1] if messages and messages[-1].content else None
    return isinstance(last, TextBlock) and last.text.startswith(SUMMARY_REQUEST)


def position(messages: Sequence[Message]) -> tuple[int, int]:
    """``(turn, start)`` of a request: ``turn`` counts user messages with text (tool results
    come in user messages without text) from 0, after the turns a summary in the first message
    covers; ``start`` is the index of the last one."""
    turn, start = -1 + _summarized(messages), 0
    for index, message in enumerate(messages):
        if _prompt(message):
            turn, start = turn + 1, index
    return turn, start


def call_id(turn: int, index: int, attempt: int = 0) -> str:
    """The tool_use id of ground-truth call ``index`` of ``turn``: unique in the session and the
    same in every process. A call re-issued after an interrupted one gets ``_r<attempt>``."""
    base = f"toolu_bfcl_{turn}_{index}"
    return base if attempt == 0 else f"{base}_r{attempt}"


def call_index(tool_use_id: str) -> int | None:
    """The ground-truth index a ``call_id`` names (None for an id the replay did not make)."""
    parts = tool_use_id.removeprefix("toolu_bfcl_").split("_")
    return int(parts[1]) if tool_use_id.startswith("toolu_bfcl_") and len(parts) >= 2 else None


def progress(messages: Sequence[Message]) -> tuple[dict[int, int], set[int]]:
    """For the messages of one turn: how many times each ground-truth index was issued, and
    the indices that are done (answered by anything but the repair plugin's ``INTERRUPTED``
    result, which says the call never completed)."""
    results = {r.tool_use_id: r for m in messages for r in m.tool_results}
    issued: dict[int, int] = {}
    done: set[int] = set()
    for message in messages:
        for use in message.tool_uses:
            index = call_index(use.id)
            if index is None:
                continue
            issued[index] = issued.get(index, 0) + 1
            result = results.get(use.id)
            if result is not None and not (result.is_error and result.content == INTERRUPTED):
                done.add(index)
    return issued, done


class ReplayModel:
    """Replays ``calls[t]`` (the parsed ground truth of turn t) for task ``task_id``.

    The first model call of turn t streams every call of the turn as tool_use blocks of one
    assistant message (stop reason ``tool_use``); once every call has a result, a closing text
    (``end_turn``); a turn without ground truth gets the closing text at once. A call answered
    as interrupted (a resumed run whose repair plugin closed the batch a crash left open) is
    issued again, with the calls after it, as a model that reads "call it again" would. What
    to emit comes from the request alone, like ``ScriptedModel``, so a run resumed in another
    process continues where its saved history says it is. Raises ``ModelError`` for a request
    outside the task.

    ``offered`` records, per turn, the tool names of the turn's first request; it is what the
    allowlist check reads and never decides what is emitted.
    """

    name = "replay"

    def __init__(self, task_id: str, calls: Sequence[Sequence[Call]]) -> None:
        self.task_id = task_id
        self.calls = tuple(tuple(turn) for turn in calls)
        self.offered: dict[int, frozenset[str]] = {}

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        if summary_request(request.messages):
            # The turns the summarized messages hold after the first (the session's goal, kept
            # verbatim in front of the summary), the instruction's own block left out.
            *before, last = request.messages
            asked = [*before, Message(last.role, last.content[:-1])]
            covered = _summarized(asked) + sum(1 for m in asked[1:] if _prompt(m))
            text = (
                f"[replay summary: {covered} turns] The earlier turns of {self.task_id} are done."
            )
            for event in self._text(text):
                yield event
            return
        turn, start = position(request.messages)
        if not 0 <= turn < len(self.calls):
            raise ModelError(f"replay of {self.task_id}: no turn {turn}")
        history = request.messages[start + 1 :]
        if not history:
            self.offered[turn] = frozenset(spec.name for spec in request.tools)
        elif history[-1].role == "assistant":
            raise ModelError(f"replay of {self.task_id}: turn {turn} already ended")
        issued, done = progress(history)
        todo = [(i, issued.get(i, 0)) for i in range(len(self.calls[turn])) if i not in done]
        if todo:
            events = self._tool_uses(turn, todo)
        else:
            events = self._text(f"Turn {turn + 1} of {self.task_id} is done.")
        for event in events:
            yield event

    @staticmethod
    def _text(text: str) -> list[StreamEvent]:
        words = text.split(" ")
        pieces = [w + " " for w in words[:-1]] + [words[-1]]
        return [
            *(TextDelta(0, piece) for piece in pieces),
            MessageStop(StopReason.END_TURN, Usage()),
        ]

    def _tool_uses(self, turn: int, todo: Sequence[tuple[int, int]]) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        for block, (index, attempt) in enumerate(todo):
            call = self.calls[turn][index]
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            third = max(1, len(arguments) // 3)
            events.append(ToolUseStart(block, call_id(turn, index, attempt), call.name))
            events += [
                ToolInputDelta(block, arguments[i : i + third])
                for i in range(0, len(arguments), third)
            ]
            events.append(ToolUseStop(block))
        events.append(MessageStop(StopReason.TOOL_USE, Usage()))
        return events
