"""Helpers for testing agents and middlewares: build a run in a temporary SQLite store, and
check that a history is one a strict provider accepts (``history_problems``).

::

    async def test_my_middleware(tmp_path):
        async with agent_harness(tmp_path, turns=[{"text": "hi"}], stack=[MyMiddleware()]) as h:
            finished = await h.run(h.agent, "hello")
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from hango.agent.definition import AgentDefinition
from hango.agent.middleware import Middleware
from hango.provider.messages import Block, Message, TextBlock, ToolResultBlock, ToolUseBlock
from hango.provider.model import Model
from hango.provider.scripted import ScriptedModel
from hango.run.runner import Harness
from hango.store.sqlite import SqliteRunStore
from hango.tool.base import Tool
from hango.tool.registry import ToolRegistry


class TestHarness(Harness):
    """A Harness with the ``agent`` it was made for."""

    __test__ = False  # not a pytest test class
    agent: AgentDefinition


@contextlib.asynccontextmanager
async def agent_harness(
    tmp_path: Path,
    *,
    turns: Sequence[Mapping[str, Any]] | None = None,
    model: Model | None = None,
    stack: Sequence[Middleware] = (),
    tools: Sequence[Tool] = (),
    tool_allowlist: Sequence[str] | None = None,
    max_turns: int = 10,
    settings: Mapping[str, str] | None = None,
) -> AsyncIterator[TestHarness]:
    """A harness on a fresh SQLite file under ``tmp_path`` whose agent replays ``turns`` (or
    uses ``model``) with the given middlewares and tools."""
    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    if model is None:
        model = ScriptedModel.from_turns(list(turns or []))
    harness = TestHarness(
        store,
        model=model,
        stack=lambda _config: list(stack),
        tools=ToolRegistry(tools),
        settings=settings or {},
    )
    harness.agent = AgentDefinition(
        name="test",
        model="scripted:inline",
        tool_allowlist=None if tool_allowlist is None else tuple(tool_allowlist),
        max_turns=max_turns,
    )
    try:
        yield harness
    finally:
        await store.aclose()


def history_problems(messages: Sequence[Message]) -> list[str]:
    """What a strict provider would reject in ``messages``, one line per problem (empty: valid).

    Anthropic's Messages API is the strictest of the providers hango speaks to, so its rules are
    the ones applied: consecutive messages of one role are merged (the API combines them), after
    which the first message is from the user; no message is empty and no text block is blank;
    a tool call appears only in an assistant message and is answered by a result in the very
    next (merged) user message, where results come before any other block; every result
    answers a call of the assistant message right before it; tool-call ids are unique, and so
    are result ids.
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
            if missing:
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


def assert_valid_history(messages: Sequence[Message]) -> None:
    """Raise ``AssertionError`` listing every ``history_problems`` of ``messages``."""
    problems = history_problems(messages)
    assert not problems, "a provider would reject this history:\n" + "\n".join(problems)
