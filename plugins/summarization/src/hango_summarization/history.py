"""The pure half of compaction: token estimates, where the history may be cut, and the
compacted view of the history that a request carries.

Indices here are positions in ``messages`` (the history as loaded, ``State.messages``); the
middleware turns them into session indices with ``State.history_start``.

A cut at ``k`` keeps ``messages[k:]`` verbatim and replaces what is before it. ``k`` is a cut
point when ``messages[k]`` is an assistant message right after a user message and no tool
result at or after ``k`` answers a call before ``k``: so the kept part never holds a result
without its call, and an assistant message (its thinking, text and calls) is always kept or
replaced whole. The view starts with one user message (the goal and the summary), so it
always opens with the user's turn and alternates from there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Final

from hango import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

#: Characters per token of the estimate (a common average for English text and JSON).
CHARS_PER_TOKEN: Final = 4
#: Tokens counted per block and per message for their framing.
_BLOCK_TOKENS: Final = 4


def block_chars(block: object) -> int:
    if isinstance(block, TextBlock):
        return len(block.text)
    if isinstance(block, ToolResultBlock):
        return len(block.content) + len(block.tool_use_id)
    if isinstance(block, ToolUseBlock):
        return len(block.name) + len(block.id) + len(json.dumps(block.input, ensure_ascii=False))
    if isinstance(block, ThinkingBlock):
        return len(block.thinking) + len(block.signature)
    return len(str(block))


def message_tokens(message: Message) -> int:
    """An estimate of ``message``'s input tokens: its characters / ``CHARS_PER_TOKEN``."""
    chars = sum(block_chars(b) for b in message.content)
    return chars // CHARS_PER_TOKEN + _BLOCK_TOKENS * (len(message.content) + 1)


def tokens(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


def cut_points(messages: Sequence[Message]) -> list[int]:
    """Every index the history may be cut at (see the module docstring), in order."""
    n = len(messages)
    where: dict[str, int] = {}
    blocked = [0] * (n + 2)  # +1 at the first index a cut may not be, -1 after the last
    for j, m in enumerate(messages):
        if m.role == "assistant":
            for use in m.tool_uses:
                where[use.id] = j
        else:
            for result in m.tool_results:
                i = where.get(result.tool_use_id)
                if i is not None and i < j:
                    blocked[i + 1] += 1
                    blocked[j + 1] -= 1
    out: list[int] = []
    open_spans = 0
    for k in range(n):
        open_spans += blocked[k]
        if (
            k > 0
            and open_spans == 0
            and messages[k].role == "assistant"
            and messages[k - 1].role == "user"
        ):
            out.append(k)
    return out


def sendable(message: Message) -> Message | None:
    """``message`` as a request carries it: without blank text blocks, None when nothing is
    left (providers refuse both, and the loop never sends them)."""
    if any(isinstance(b, TextBlock) and not b.text.strip() for b in message.content):
        kept = tuple(
            b for b in message.content if not (isinstance(b, TextBlock) and not b.text.strip())
        )
        message = Message(message.role, kept)
    return message if message.content else None


def _blank(block: object) -> bool:
    return isinstance(block, TextBlock) and not block.text.strip()


def cleared(message: Message, names: dict[str, str], exclude: frozenset[str]) -> Message:
    """``message`` with each tool result's content replaced by a placeholder naming the tool
    and the call (tier 1), except the results of tools in ``exclude``. ``names`` maps call ids
    to tool names."""
    if not message.tool_results:
        return message
    blocks = []
    for b in message.content:
        name = names.get(b.tool_use_id, "unknown") if isinstance(b, ToolResultBlock) else ""
        if isinstance(b, ToolResultBlock) and name not in exclude:
            b = ToolResultBlock(b.tool_use_id, placeholder(name, b), b.is_error)
        blocks.append(b)
    return Message(message.role, tuple(blocks))


def placeholder(tool: str, result: ToolResultBlock) -> str:
    """What a cleared tool result says instead of its content."""
    text = (
        f"[result of tool {tool!r} (call {result.tool_use_id}) cleared to save context: "
        f"{len(result.content)} characters"
    )
    path = offloaded_path(result.content)
    return text + (f"; the full result is in the file {path}]" if path else "]")


def offloaded_path(content: str) -> str | None:
    """The file path of a result hango-filesystem offloaded (its preview says ``It is saved
    in full at <path>:``), or None."""
    found = _SAVED.search(content)
    return found.group(1) if found else None


_SAVED = re.compile(r"saved (?:in full )?(?:at|to) (/\S*?)[:,;.]?(?:\s|$)")


def head(goal: str | None, summary: str, covered: int) -> Message:
    """The first message of a compacted view: the session's goal (verbatim) and the summary
    of the ``covered`` messages it replaces."""
    blocks = []
    if goal:
        blocks.append(TextBlock(goal))
    blocks.append(
        TextBlock(
            f"<summary>\nThe {covered} earlier messages of this conversation were compacted "
            f"into this summary:\n\n{summary}\n</summary>"
        )
    )
    return Message("user", tuple(blocks))


def with_instruction(messages: list[Message], instruction: str) -> list[Message]:
    """``messages`` (ending with a user message) with ``instruction`` as the last block of the
    last message: the request's prefix stays what was sent before (a prompt-cache hit)."""
    last = messages[-1]
    return [*messages[:-1], Message(last.role, (*last.content, TextBlock(instruction)))]


def goal_text(message: Message) -> str:
    """The text of the session's first message (its goal)."""
    return "\n\n".join(b.text for b in message.content if isinstance(b, TextBlock) and b.text)
