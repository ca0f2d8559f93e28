"""Anthropic's strict rules for a conversation, applied to hango messages
(``history_problems``) and to a Messages API request body (``wire_problems``).

Anthropic's Messages API is the strictest of the providers hango speaks to, so a history it
accepts is one every provider accepts: the kit's fake provider servers and ``RecordingModel``
(``strict=True``) hold every request to these rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hango.provider.messages import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock


def history_problems(messages: Sequence[Message], *, open_tail: bool = False) -> list[str]:
    """What a strict provider would reject in ``messages``, one line per problem (empty: valid).

    Anthropic's Messages API is the strictest of the providers hango speaks to, so its rules are
    the ones applied: consecutive messages of one role are merged (the API combines them), after
    which the first message is from the user; no message is empty and no text block is blank;
    a tool call appears only in an assistant message and is answered by a result in the very
    next (merged) user message, where results come before any other block; every result
    answers a call of the assistant message right before it; tool-call ids are unique, and so
    are result ids.

    ``open_tail``: the history may end in an unfinished batch, as a suspended run's frontier
    does: the calls of the last assistant message may have no results yet, or only some.
    """
    problems: list[str] = []
    if not messages:
        return ["the history is empty"]
    for i, m in enumerate(messages):
        if not m.content:
            problems.append(f"messages[{i}] ({m.role}) is empty")
        for block in m.content:
            if isinstance(block, TextBlock) and not block.text.strip():
                problems.append(f"messages[{i}] has a blank text block")
            if isinstance(block, ToolUseBlock) and m.role != "assistant":
                problems.append(f"messages[{i}] is a {m.role} message holding tool call {block.id}")
            if isinstance(block, ToolResultBlock) and m.role != "user":
                problems.append(
                    f"messages[{i}] is an {m.role} message holding a result for {block.tool_use_id}"
                )
    merged: list[tuple[str, list[Block], list[int]]] = []  # role, blocks, original indexes
    for i, m in enumerate(messages):
        if merged and merged[-1][0] == m.role:
            merged[-1][1].extend(m.content)
            merged[-1][2].append(i)
        else:
            merged.append((m.role, list(m.content), [i]))
    if merged[0][0] != "user":
        problems.append("the first message (after merging same-role neighbours) is not a user one")
    seen_calls: set[str] = set()
    seen_results: set[str] = set()
    for k, (role, blocks, where) in enumerate(merged):
        at = f"messages{where}"
        if role == "assistant":
            calls = [b.id for b in blocks if isinstance(b, ToolUseBlock)]
            for call_id in calls:
                if call_id in seen_calls:
                    problems.append(f"{at}: tool call id {call_id} is not unique")
                seen_calls.add(call_id)
            reply = merged[k + 1][1] if k + 1 < len(merged) else None
            answered = {b.tool_use_id for b in reply or () if isinstance(b, ToolResultBlock)}
            missing = [c for c in calls if c not in answered]
            if missing and not (open_tail and k + 2 >= len(merged)):
                problems.append(f"{at}: tool calls without a result in the next message: {missing}")
            continue
        previous = merged[k - 1][1] if k > 0 else []
        asked = {b.id for b in previous if isinstance(b, ToolUseBlock)}
        results_done = False
        for block in blocks:
            if not isinstance(block, ToolResultBlock):
                results_done = True
                continue
            if results_done:
                problems.append(f"{at}: result for {block.tool_use_id} comes after other content")
            if block.tool_use_id not in asked:
                problems.append(
                    f"{at}: result for {block.tool_use_id} answers no call of the message before"
                )
            if block.tool_use_id in seen_results:
                problems.append(f"{at}: a second result for {block.tool_use_id}")
            seen_results.add(block.tool_use_id)
    return problems


def assert_valid_history(messages: Sequence[Message], *, open_tail: bool = False) -> None:
    """Raise ``AssertionError`` listing every ``history_problems`` of ``messages``."""
    problems = history_problems(messages, open_tail=open_tail)
    assert not problems, "a provider would reject this history:\n" + "\n".join(problems)


def wire_problems(body: Mapping[str, Any]) -> list[str]:
    """``history_problems`` of a Messages API request body (the JSON the Anthropic SDK sent):
    its ``messages`` are read back into hango messages first. A text block's string content,
    a tool result's content of any shape and the kinds of block hango does not model (images,
    thinking, server tool blocks) count as non-empty content; an empty ``text`` still counts
    as blank. A body that forces a tool choice (``any`` or ``tool``) with thinking enabled is
    refused as the API refuses it. Raises ``KeyError`` or ``TypeError`` for a body with no list
    of messages."""
    messages = []
    for raw in body["messages"]:
        content = raw["content"]
        blocks: list[Block] = []
        for block in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            kind = block.get("type")
            if kind == "text":
                blocks.append(TextBlock(str(block.get("text", ""))))
            elif kind == "tool_use":
                blocks.append(ToolUseBlock(str(block["id"]), str(block["name"]), block["input"]))
            elif kind == "tool_result":
                blocks.append(ToolResultBlock(str(block["tool_use_id"]), "sent"))
            else:  # a block the rules say nothing about: it only makes the message non-empty
                blocks.append(TextBlock(f"<{kind}>"))
        messages.append(Message(raw["role"], tuple(blocks)))
    problems = history_problems(messages)
    thinking = body.get("thinking") or {}
    forced = (body.get("tool_choice") or {}).get("type") in ("any", "tool")
    if forced and thinking.get("type") not in (None, "disabled"):
        problems.append("thinking may not be used when tool_choice forces tool use")
    return problems
