"""The APIs' wire formats for these tests: mock servers behind the real SDK clients (through
``httpx2.MockTransport``), streaming answers in each API's documented SSE shape, and keeping the
request bodies the SDKs really sent."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anthropic
import httpx2
import openai

from hango.provider.anthropic import AnthropicModel
from hango.provider.openai import OpenAIChatModel

JSONDict = dict[str, Any]


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
