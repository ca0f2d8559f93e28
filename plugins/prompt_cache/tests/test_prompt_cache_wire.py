"""hango-prompt-cache on the wire, through the real SDK clients: the golden test (two
consecutive requests of one run are byte-identical up to the last breakpoint unless a block
before it changed), and langchain#33709 (caching plus a fallback to OpenAI sends OpenAI no
``cache_control``)."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import pytest

from hango import AgentDefinition, Model, Request, RunStatus, TextBlock, tool
from hango.middleware import State
from hango.provider.anthropic import AnthropicModel
from hango.provider.events import StreamEvent
from hango.provider.openai import OpenAIChatModel
from hango.testing import (
    FakeAnthropic,
    FakeOpenAI,
    FakeServer,
    agent_harness,
    anthropic_answer,
    anthropic_error,
    openai_answer,
)
from hango_fallback import ModelFallbackMiddleware
from hango_prompt_cache import PromptCacheMiddleware

JSONDict = dict[str, Any]

pytestmark = pytest.mark.anyio


# -- the APIs' wire formats: hango.testing's fake servers behind the real SDK clients ------


def anthropic_model(server: FakeServer) -> AnthropicModel:
    return server.anthropic_model("claude-test", max_retries=1)


def openai_model(server: FakeServer) -> OpenAIChatModel:
    return server.openai_model("gpt-test", max_retries=1)


# -- the prompt as Anthropic caches it ------------------------------------------------------


def prompt_elements(body: JSONDict) -> list[tuple[str, JSONDict]]:
    """The request's prompt in the order Anthropic caches it: each tool, each system block,
    then each message block (tagged with its message index and role)."""
    out: list[tuple[str, JSONDict]] = [("tool", t) for t in body.get("tools", [])]
    out += [("system", b) for b in body.get("system", [])]
    for i, message in enumerate(body["messages"]):
        out += [(f"message {i} {message['role']}", b) for b in message["content"]]
    return out


def breakpoints(body: JSONDict) -> list[int]:
    """Indexes in ``prompt_elements(body)`` of the elements carrying ``cache_control``."""
    return [i for i, (_, e) in enumerate(prompt_elements(body)) if "cache_control" in e]


def cache_key_bytes(body: JSONDict, upto: int) -> list[bytes]:
    """The first ``upto + 1`` prompt elements as the bytes the SDK sent them (compact JSON in
    the SDK's key order). A message block's own marker is left out: the conversation breakpoint
    moves to the newest block on every call, and a marker is not part of the cached content."""
    out = []
    for where, element in prompt_elements(body)[: upto + 1]:
        if where.startswith("message"):
            element = {k: v for k, v in element.items() if k != "cache_control"}
        out.append(json.dumps([where, element], separators=(",", ":")).encode())
    return out


@pytest.fixture
def anyio_backend() -> str:
    # The vendors' async SDK clients run on asyncio only.
    return "asyncio"


@tool
def search(query: str) -> str:
    """Search the notes."""
    return f"3 notes about {query}"


@tool
def read_note(note: str) -> str:
    """Read one note."""
    return f"the text of {note}"


class Contributor:
    """A prompt contributor named after a slot; ``texts`` gives its block per call (the last
    one repeats)."""

    def __init__(self, name: str, *texts: str) -> None:
        self.name = name
        self.texts = list(texts)
        self.calls = 0

    def system_blocks(self, state: State) -> tuple[TextBlock, ...]:
        text = self.texts[min(self.calls, len(self.texts) - 1)]
        self.calls += 1
        return (TextBlock(text),)


SCRIPT = [
    anthropic_answer(calls=[("toolu_1", "search", {"query": "risks"})], written=1500),
    anthropic_answer(calls=[("toolu_2", "read_note", {"note": "n1"})], read=1500, written=80),
    anthropic_answer("Two risks.", read=1580, written=60),
]


async def run_on_anthropic(
    tmp_path: Path, planner: Contributor, memory: Contributor
) -> list[dict[str, Any]]:
    server = FakeAnthropic(SCRIPT)
    stack = [planner, PromptCacheMiddleware(), memory]
    async with agent_harness(
        tmp_path, model=anthropic_model(server), stack=stack, tools=[search, read_note]
    ) as h:
        h.agent = AgentDefinition(name="t", model="scripted:inline", system=("Be careful.",))
        finished = await h.run(h.agent, "What are the open risks?")
    assert finished.status is RunStatus.COMPLETED
    return server.bodies


async def test_golden_consecutive_requests_are_identical_up_to_the_last_breakpoint(
    tmp_path: Path,
) -> None:
    bodies = await run_on_anthropic(
        tmp_path, Contributor("todo", "Plan: find the risks."), Contributor("memory", "Notes: -")
    )
    first = bodies[0]
    # Where the breakpoints are: the last tool, the plan (the last system block contributed at
    # or before the prompt_cache slot; memory comes after it), the last message block.
    assert [where for where, _ in prompt_elements(first)] == [
        "tool",
        "tool",
        "system",
        "system",
        "system",
        "message 0 user",
    ]
    assert breakpoints(first) == [1, 3, 5]
    for earlier, later in itertools.pairwise(bodies):
        last = breakpoints(earlier)[-1]
        assert cache_key_bytes(later, last) == cache_key_bytes(earlier, last)
        assert len(breakpoints(later)) == 3


async def test_a_changed_block_before_a_breakpoint_is_the_first_difference(
    tmp_path: Path,
) -> None:
    planner = Contributor("todo", "Plan: find the risks.", "Plan: read note n1.")
    bodies = await run_on_anthropic(tmp_path, planner, Contributor("memory", "Notes: -"))
    first, second = cache_key_bytes(bodies[0], 5), cache_key_bytes(bodies[1], 5)
    differing = [i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b]
    assert differing == [3]  # the plan block; the tools before it still match byte for byte
    assert first[:2] == second[:2]


async def test_memory_edits_land_after_the_system_breakpoint(tmp_path: Path) -> None:
    memory = Contributor("memory", "Notes: none yet.", "Notes: n1 read.", "Notes: done.")
    bodies = await run_on_anthropic(tmp_path, Contributor("todo", "Plan: same."), memory)
    for earlier, later in itertools.pairwise(bodies):
        system_breakpoint = breakpoints(earlier)[1]
        # Tools, agent block and plan are read back; memory, after them, is free to change.
        assert cache_key_bytes(later, system_breakpoint) == cache_key_bytes(
            earlier, system_breakpoint
        )
        assert (
            prompt_elements(later)[system_breakpoint + 1]
            != prompt_elements(earlier)[system_breakpoint + 1]
        )
        assert "cache_control" not in prompt_elements(later)[system_breakpoint + 1][1]


# -- langchain#33709: caching plus fallback must not send Anthropic markers to OpenAI -------


class Recorded:
    """Keeps the hango ``Request`` a model was handed, and is that model otherwise."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "")
        self.provider_name = getattr(inner, "provider_name", "")
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        async for event in self.inner.stream(request):
            yield event


def markers(request: Request) -> list[object]:
    items: Sequence[Any] = (
        *request.tools,
        *request.system,
        *(b for m in request.messages for b in m.content),
    )
    return [item for item in items if getattr(item, "cache_control", None) is not None]


async def test_langchain_33709_fallback_to_openai_sends_no_cache_control(tmp_path: Path) -> None:
    overloaded = anthropic_error(529, "overloaded_error", "Overloaded")
    anthropic_server = FakeAnthropic([overloaded, overloaded])
    openai_server = FakeOpenAI([openai_answer("Answered by the fallback.")])
    run_model = Recorded(anthropic_model(anthropic_server))
    backup = Recorded(openai_model(openai_server))
    stack = [ModelFallbackMiddleware([("openai:gpt-test", backup)]), PromptCacheMiddleware()]
    async with agent_harness(tmp_path, model=run_model, stack=stack, tools=[search]) as h:
        h.agent = AgentDefinition(name="t", model="scripted:inline", system=("Be careful.",))
        finished = await h.run(h.agent, "What are the open risks?")
    assert finished.status is RunStatus.COMPLETED
    # Caching was on: the Anthropic attempts carried breakpoints.
    assert len(anthropic_server.requests) == 2
    assert all(len(breakpoints(body)) == 3 for body in anthropic_server.bodies)
    # The same call on OpenAI: no marker in what hango handed the provider, none on the wire.
    (sent,) = backup.requests
    assert markers(sent) == []
    (raw,) = openai_server.requests
    assert b"cache_control" not in raw.content
    assert openai_server.bodies[0]["messages"][0] == {"role": "system", "content": "Be careful."}


async def test_fallback_from_openai_to_anthropic_gets_breakpoints(tmp_path: Path) -> None:
    unavailable = httpx2.Response(503, json={"error": {"message": "unavailable"}})
    down = FakeOpenAI([unavailable, unavailable])
    anthropic_server = FakeAnthropic([anthropic_answer("Answered by Claude.")])
    stack = [
        ModelFallbackMiddleware([("anthropic:claude-test", anthropic_model(anthropic_server))]),
        PromptCacheMiddleware(ttl="1h"),
    ]
    async with agent_harness(tmp_path, model=openai_model(down), stack=stack, tools=[search]) as h:
        finished = await h.run(h.agent, "hi")
    assert finished.status is RunStatus.COMPLETED
    assert b"cache_control" not in down.requests[0].content
    (body,) = anthropic_server.bodies
    assert [prompt_elements(body)[i][1]["cache_control"] for i in breakpoints(body)] == [
        {"type": "ephemeral", "ttl": "1h"},
        {"type": "ephemeral", "ttl": "1h"},
    ]  # the last tool and the user's message; the agent has no system blocks


async def test_a_tool_result_carries_the_conversation_breakpoint_on_the_wire(
    tmp_path: Path,
) -> None:
    bodies = await run_on_anthropic(
        tmp_path, Contributor("todo", "Plan."), Contributor("memory", "Notes.")
    )
    last_block = bodies[1]["messages"][-1]["content"][-1]
    assert last_block == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": "3 notes about risks",
        "is_error": False,
        "cache_control": {"type": "ephemeral"},
    }
