"""Helpers for testing agents and middlewares: build a run in a temporary SQLite store.

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
