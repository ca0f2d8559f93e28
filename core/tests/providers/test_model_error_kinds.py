"""What a failed call's ``ModelError`` says about the failure, through the real SDK clients:
``status`` and ``transient`` (another attempt elsewhere could succeed and nothing reached the
caller), the classification a fallback middleware switches models on."""

from __future__ import annotations

import json
from collections.abc import Callable

import anthropic
import httpx2
import openai
import pytest

from hango.provider import Message, ModelError, Request, accumulate
from hango.provider.anthropic import AnthropicModel
from hango.provider.model import Model
from hango.provider.openai import OpenAIChatModel
from hango.testing.providers import FakeServer as Replay
from hango.testing.providers import Served

pytestmark = pytest.mark.anyio

USER = Request(model="m", messages=(Message.user("hi"),))


def anthropic_error(status: int, kind: str, text: str) -> Served:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": text}})
    return Served(status, "application/json", body.encode())


def openai_error(status: int, text: str, code: str | None = None) -> Served:
    body = {"error": {"message": text, "type": "invalid_request_error", "code": code}}
    return Served(status, "application/json", json.dumps(body).encode())


def on_anthropic(http: httpx2.AsyncClient) -> Model:
    client = anthropic.AsyncAnthropic(api_key="k", http_client=http)
    return AnthropicModel(client, "claude-test", max_retries=1, base_delay=0.001)


def on_openai(http: httpx2.AsyncClient) -> Model:
    client = openai.AsyncOpenAI(api_key="k", http_client=http)
    return OpenAIChatModel(client, "gpt-test", max_retries=1, base_delay=0.001)


async def failure(
    build: Callable[[httpx2.AsyncClient], Model],
    handler: Callable[[httpx2.Request], httpx2.Response],
) -> ModelError:
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as http:
        with pytest.raises(ModelError) as caught:
            await accumulate(build(http).stream(USER))
    return caught.value


@pytest.mark.parametrize(
    ("build", "served", "status"),
    [
        (on_anthropic, anthropic_error(529, "overloaded_error", "Overloaded"), 529),
        (on_anthropic, anthropic_error(500, "api_error", "Internal error"), 500),
        (on_anthropic, anthropic_error(429, "rate_limit_error", "Slow down"), 429),
        (on_openai, openai_error(503, "Service unavailable"), 503),
    ],
    ids=["anthropic-529", "anthropic-500", "anthropic-429", "openai-503"],
)
async def test_a_server_failure_retries_did_not_cure_is_transient(
    build: Callable[[httpx2.AsyncClient], Model], served: Served, status: int
) -> None:
    replay = Replay([served] * 2)
    error = await failure(build, replay)
    assert len(replay.requests) == 2  # the provider's own retry ran first
    assert (error.status, error.transient) == (status, True)


@pytest.mark.parametrize(
    ("build", "served"),
    [
        (
            on_anthropic,
            anthropic_error(
                400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
            ),
        ),
        (on_anthropic, anthropic_error(400, "invalid_request_error", "messages: bad role")),
        (
            on_openai,
            openai_error(
                400,
                "This model's maximum context length is 128000 tokens.",
                "context_length_exceeded",
            ),
        ),
    ],
    ids=["anthropic-context-overflow", "anthropic-bad-request", "openai-context-overflow"],
)
async def test_a_rejected_request_is_not_transient(
    build: Callable[[httpx2.AsyncClient], Model], served: Served
) -> None:
    replay = Replay([served] * 2)
    error = await failure(build, replay)
    assert len(replay.requests) == 1
    assert (error.status, error.transient) == (400, False)


async def test_no_connection_is_transient_without_a_status() -> None:
    attempts: list[httpx2.Request] = []

    def refuse(request: httpx2.Request) -> httpx2.Response:
        attempts.append(request)
        raise httpx2.ConnectError("connection refused", request=request)

    error = await failure(on_anthropic, refuse)
    assert len(attempts) == 2
    assert (error.status, error.transient) == (None, True)


async def test_a_failure_after_content_reached_the_caller_is_not_transient() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    }
    events = [
        ("message_start", start),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"},
            },
        ),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    ]
    body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
    replay = Replay([Served(200, "text/event-stream", body.encode())] * 2)
    error = await failure(on_anthropic, replay)
    assert len(replay.requests) == 1
    assert (error.status, error.transient) == (529, False)
