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

import anthropic
import httpx2
import openai
import pytest

from hango import AgentDefinition, Model, Request, RunStatus, TextBlock, tool
from hango.middleware import State
from hango.provider.anthropic import AnthropicModel
from hango.provider.events import StreamEvent
from hango.provider.openai import OpenAIChatModel
from hango.testing import agent_harness
from hango_fallback import ModelFallbackMiddleware
from hango_prompt_cache import PromptCacheMiddleware

JSONDict = dict[str, Any]

pytestmark = pytest.mark.anyio


# -- the APIs' wire formats: mock servers behind the real SDK clients ----------------------


def _sse(events: Sequence[tuple[str | None, object]]) -> bytes:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


def anthropic_answer(
    text: str = "",
    *,
    calls: Sequence[tuple[str, str, JSONDict]] = (),
    read: int = 0,
    written: int = 0,
    uncached: int = 10,
) -> httpx2.Response:
    """A streamed Messages answer: ``text``, then ``calls`` as ``(id, name, input)``, with
    ``read`` / ``written`` cache tokens and ``uncached`` input tokens in its usage
    (https://platform.claude.com/docs/en/build-with-claude/streaming)."""
    usage = {
        "input_tokens": uncached,
        "output_tokens": 1,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
    }
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events: list[tuple[str | None, object]] = [
        ("message_start", {"type": "message_start", "message": message})
    ]
    blocks: list[tuple[JSONDict, JSONDict]] = []
    if text:
        blocks.append(({"type": "text", "text": ""}, {"type": "text_delta", "text": text}))
    for id_, name, arguments in calls:
        opening = {"type": "tool_use", "id": id_, "name": name, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(arguments)}
        blocks.append((opening, delta))
    for i, (opening, delta) in enumerate(blocks):
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": opening},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    stop = {"stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None}
    events += [
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": usage}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=_sse(events))


def anthropic_error(status: int, kind: str, text: str) -> httpx2.Response:
    return httpx2.Response(status, json={"type": "error", "error": {"type": kind, "message": text}})


def openai_answer(text: str) -> httpx2.Response:
    """A streamed Chat Completions answer with the usage chunk and ``[DONE]``
    (https://platform.openai.com/docs/api-reference/chat-streaming)."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "gpt"}
    chunks: list[object] = [
        {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}
            ],
        },
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        },
        "[DONE]",
    ]
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=_sse([(None, c) for c in chunks]),
    )


class Server:
    """Answers the requests in order with ``answers`` and keeps what was sent."""

    def __init__(self, answers: Sequence[httpx2.Response]) -> None:
        self.answers = list(answers)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return self.answers[len(self.requests) - 1]

    @property
    def bodies(self) -> list[JSONDict]:
        return [json.loads(r.content) for r in self.requests]

    def http(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self))


def anthropic_model(server: Server) -> AnthropicModel:
    client = anthropic.AsyncAnthropic(api_key="k", http_client=server.http())
    return AnthropicModel(client, "claude-test", max_retries=1, base_delay=0.001)


def openai_model(server: Server) -> OpenAIChatModel:
    client = openai.AsyncOpenAI(api_key="k", http_client=server.http())
    return OpenAIChatModel(client, "gpt-test", max_retries=1, base_delay=0.001)


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
    server = Server(SCRIPT)
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
    anthropic_server = Server([overloaded, overloaded])
    openai_server = Server([openai_answer("Answered by the fallback.")])
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
    down = Server([unavailable, unavailable])
    anthropic_server = Server([anthropic_answer("Answered by Claude.")])
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
