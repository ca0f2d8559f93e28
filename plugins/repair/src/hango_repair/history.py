"""Repairing a history whose tool calls and tool results do not pair up.

A provider accepts a history only when every assistant ``tool_use`` is answered by a
``tool_result`` in the user message right after it, and every ``tool_result`` answers a call
of the assistant message right before it. A crash, a cancel or an edited history can break
that. ``repair_history`` restores it with the least change: each call without a result gets a
synthetic error result, each result without its call (or answering a call a second time) is
dropped. A result counts only in the user message right after its call: a result further on
is an orphan there, and its call is answered as interrupted. Calls the run finishes itself
(``hold``: a batch suspended for a decision, a call whose outcome is unknown) are left
unanswered.

A history also opens with the user. When the first messages are orphan results (a history cut
in the middle of a batch), what remains before the first user prompt answers a conversation
that is no longer there, and is dropped as well.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Final

from attrs import frozen

from hango import Block, Message, ToolResultBlock, ToolUseBlock

INTERRUPTED: Final = (
    "This tool call did not complete because the run was interrupted; it has no result. "
    "Call it again if you still need its result."
)


@frozen
class Repair:
    """A repaired history: the new ``messages`` (unchanged messages are the same objects),
    how many synthetic results were ``added``, how many orphan results ``dropped`` and how
    many messages before the first user prompt were ``trimmed``."""

    messages: list[Message]
    added: int
    dropped: int
    trimmed: int = 0


def _answer(
    calls: tuple[ToolUseBlock, ...], reply: Message | None, hold: Set[str] = frozenset()
) -> tuple[list[Message], int, int]:
    """The user message(s) that answer ``calls``, made from ``reply`` (the message after the
    assistant message, if it is a user message): ``(messages, added, dropped)``.

    Results for other calls, and second results for a call, are dropped. Synthetic results
    for unanswered calls go among the reply's own results, in call order (a provider wants
    results before any text), or into a new message before the reply when it carries none.
    """
    unanswered = {c.id for c in calls}
    content = reply.content if reply is not None else ()
    kept: list[Block] = []
    for block in content:
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id not in unanswered:
                continue  # no such call here, or a second result for it
            unanswered.discard(block.tool_use_id)
        kept.append(block)
    dropped = len(content) - len(kept)
    answered = len(calls) - len(unanswered)
    missing = tuple(
        ToolResultBlock(c.id, INTERRUPTED, True)
        for c in calls
        if c.id in unanswered and c.id not in hold
    )
    body = reply if not dropped else (Message("user", tuple(kept)) if kept else None)
    out: list[Message] = []
    if missing and answered:
        # In call order, as the loop answers a batch: a concurrent batch cancelled mid-way
        # has results for calls on both sides of the unanswered ones.
        order = {c.id: i for i, c in enumerate(calls)}
        last = max(i for i, b in enumerate(kept) if isinstance(b, ToolResultBlock))
        head = kept[: last + 1]
        results = sorted(
            [b for b in head if isinstance(b, ToolResultBlock)] + list(missing),
            key=lambda b: order[b.tool_use_id],
        )
        others = [b for b in head if not isinstance(b, ToolResultBlock)]
        body = Message("user", (*results, *others, *kept[last + 1 :]))
    elif missing:
        out.append(Message("user", missing))
    if body is not None:
        out.append(body)
    return out, len(missing), dropped


def repair_history(messages: Sequence[Message], hold: Set[str] = frozenset()) -> Repair | None:
    """The repaired history, or None when ``messages`` needs no repair.

    Idempotent: a repaired history needs no repair. Everything before the first user prompt is
    dropped (a history without any prompt is left to open as it does), then a user message
    left empty by dropping orphan results is removed. Calls whose id is in ``hold`` are never
    answered.
    """
    trimmed = next((i for i, m in enumerate(messages) if _is_prompt(m)), 0)
    out: list[Message] = []
    added = dropped = 0
    i = trimmed
    while i < len(messages):
        message = messages[i]
        i += 1
        if message.role == "assistant":
            out.append(message)
            reply = messages[i] if i < len(messages) and messages[i].role == "user" else None
            if reply is not None:
                i += 1
            answer, a, d = _answer(message.tool_uses, reply, hold)
        else:
            # A user message that follows a user message (or opens the history) answers no call.
            answer, a, d = _answer((), message)
        out.extend(answer)
        added += a
        dropped += d
    if not added and not dropped and not trimmed:
        return None
    return Repair(out, added, dropped, trimmed)


def _is_prompt(message: Message) -> bool:
    """A user message with something other than tool results: where a conversation can open."""
    return message.role == "user" and len(message.tool_results) < len(message.content)
