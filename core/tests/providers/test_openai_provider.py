"""OpenAIChatModel against real recorded Chat Completions exchanges, and synthetic cases for what
no recording has (malformed arguments, 429 then success, cached tokens, refusals)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
import httpx2
import openai
import pytest

from hango.provider import (
    Message,
    ModelError,
    ProviderRetry,
    Request,
    StopReason,
    TextBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
    accumulate,
)
from hango.provider.events import MessageStop, TextDelta, ToolInputDelta, ToolUseStart, ToolUseStop
from hango.provider.openai import MaxTokensField, OpenAIChatModel
from hango.testing.providers import FakeServer as Replay
from hango.testing.providers import Served

from .provider_cassettes import (
    Turn,
    load,
    openai_first_request,
    openai_messages,
    openai_request,
    recorded_span,
    served,
    with_messages,
)

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def model_on(
    replay: Replay,
    name: str = "gpt-test",
    field: MaxTokensField = "max_completion_tokens",
    **options: Any,
) -> AsyncIterator[OpenAIChatModel]:
    async with replay.client() as http:
        client = openai.AsyncOpenAI(api_key="test-key", http_client=http)
        yield OpenAIChatModel(client, name, base_delay=0.001, max_tokens_field=field, **options)


FINAL_ANSWERS = {
    "answers": [
        {"label": "Capital", "answer": "The capital of Mexico is Mexico City."},
        {"label": "Weather", "answer": "The weather in Mexico City is currently sunny."},
        {"label": "Product Name", "answer": "The product name is Pydantic AI."},
    ]
}

CONVERSATIONS = {
    "test_tool_choice_matrix[auto-openai].yaml": [
        Turn(StopReason.TOOL_USE, Usage(132, 23)),
        Turn(StopReason.END_TURN, Usage(167, 171)),
    ],
    "test_temporal_agent_with_hitl_tool.yaml": [
        Turn(StopReason.TOOL_USE, Usage(71, 46)),
        Turn(StopReason.END_TURN, Usage(133, 19)),
    ],
    "test_run_stream_sync_streams_real_model.yaml": [
        Turn(StopReason.TOOL_USE, Usage(53, 15)),
        Turn(StopReason.END_TURN, Usage(78, 9), (TextBlock("The capital of the UK is London."),)),
    ],
    "test_complex_agent_run.yaml": [
        Turn(StopReason.TOOL_USE, Usage(364, 40)),
        Turn(StopReason.TOOL_USE, Usage(423, 15)),
        Turn(
            StopReason.TOOL_USE,
            Usage(448, 62),
            (ToolUseBlock("call_CCGIWaMeYWmxOQ91orkmTvzn", "final_result", FINAL_ANSWERS),),
        ),
    ],
    "test_count_tokens_with_tool_calls.yaml": [Turn(StopReason.MAX_TOKENS, Usage(41, 1))],
}


def recorded_reply(completion: dict[str, Any]) -> Message:
    _, (reply,) = openai_messages([completion["choices"][0]["message"]])
    return reply


@pytest.mark.parametrize("cassette", sorted(CONVERSATIONS))
async def test_recorded_conversation(cassette: str) -> None:
    """Each turn: the accumulated message, stop reason and usage equal the recording, and the
    request hango sends (the follow-up built from hango's own accumulated message, tool results
    as ``role: tool`` replies) carries the recorded client's content."""
    interactions = load(f"openai/{cassette}")
    replay = Replay([served(i, "openai") for i in interactions])
    async with model_on(replay, interactions[0].request["model"]) as model:
        request = openai_first_request(interactions[0].request)
        response = None
        for k, (interaction, turn) in enumerate(
            zip(interactions, CONVERSATIONS[cassette], strict=True)
        ):
            if response is not None:
                sent_before = len(interactions[k - 1].request["messages"]) + 1
                _, new = openai_messages(interaction.request["messages"][sent_before:])
                request = with_messages(request, response.message, *new)
            response = await accumulate(model.stream(request))

            assert openai_request(replay.bodies[k]) == openai_request(interaction.request)
            assert response.stop_reason == turn.stop_reason
            assert response.usage == turn.usage
            if not interaction.streamed:
                expected = recorded_reply(interaction.json())
            elif turn.final is None:  # the next recorded request repeats this assistant turn
                _, history = openai_messages(interactions[k + 1].request["messages"])
                expected = history[len(request.messages)]
            else:
                expected = Message("assistant", turn.final)
            assert response.message == expected


async def test_recorded_history_and_output_limit() -> None:
    """The recorded request already holds a tool call and its reply, and a 1-token limit."""
    (interaction,) = load("openai/test_count_tokens_with_tool_calls.yaml")
    replay = Replay([served(interaction, "openai")])
    async with model_on(replay) as model:
        await accumulate(model.stream(openai_first_request(interaction.request)))
    assert replay.bodies[0]["max_completion_tokens"] == 1
    assert replay.bodies[0]["messages"] == [
        {"role": "user", "content": "What is the weather in Tokyo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_123",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_123", "content": "Sunny, 25°C"},
    ]


async def test_recorded_bad_request_fails_with_the_server_message() -> None:
    (interaction,) = load("openai/test_openai_o1_mini_system_role[developer].yaml")
    replay = Replay([served(interaction, "openai")] * 3)
    async with model_on(replay) as model:
        with pytest.raises(ModelError) as caught:
            await accumulate(model.stream(openai_first_request(interaction.request)))
    assert (
        "Unsupported value: 'messages[0].role' does not support 'developer' with this model."
        in str(caught.value)
    )
    assert "HTTP 400" in str(caught.value)
    assert len(replay.requests) == 1


async def test_stream_events_accumulate_per_tool_call_index() -> None:
    (first, _) = load("openai/test_complex_agent_run.yaml")[:2]
    async with model_on(Replay([served(first, "openai")])) as model:
        events = [e async for e in model.stream(openai_first_request(first.request))]
    assert events == [
        ToolUseStart(0, "call_q2UyBRP7eXNTzAoR8lEhjc9Z", "get_country"),
        ToolInputDelta(0, "{}"),
        ToolUseStart(1, "call_b51ijcpFkDiTQG1bQzsrmtW5", "get_product_name"),
        ToolInputDelta(1, "{}"),
        ToolUseStop(0),
        ToolUseStop(1),
        MessageStop(
            StopReason.TOOL_USE,
            Usage(364, 40),
            response_id="chatcmpl-C2QD1kGWsTW5OWiqAtOSFEAOfPfQH",
            response_model="gpt-4o-2024-08-06",
        ),
    ]


# --- synthetic cases ------------------------------------------------------------------------

USER = Request(model="gpt-test", messages=(Message.user("hi"),))


def chunks(
    *deltas: dict[str, Any],
    finish: str | None = "stop",
    usage: dict[str, Any] | bool = True,
) -> Served:
    """A streamed completion: one chunk per delta, the finish reason (``None``: no chunk), a usage
    chunk (``False``: none, as llama-cpp-python's server), [DONE]."""
    base = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-test",
    }
    lines = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    if finish is not None:
        lines.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage is not False:
        if not isinstance(usage, dict):
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        lines.append({**base, "choices": [], "usage": usage})
    body = "".join(f"data: {json.dumps(line)}\n\n" for line in lines) + "data: [DONE]\n\n"
    return Served(200, "text/event-stream", body.encode())


HELLO = chunks({"role": "assistant", "content": "Hello."})


def call(
    index: int, id_: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    piece: dict[str, Any] = {"index": index, "function": function}
    if id_ is not None:
        piece.update(id=id_, type="function")
    return {"tool_calls": [piece]}


async def test_malformed_arguments_stay_raw_and_go_back_as_the_raw_string() -> None:
    stream = chunks(
        call(0, "call_1", "get"), call(0, arguments='{"city": "Utr'), finish="tool_calls"
    )
    replay = Replay([stream, HELLO])
    async with model_on(replay) as model:
        response = await accumulate(model.stream(USER))
        (tool_call,) = response.message.tool_uses
        assert tool_call.input == '{"city": "Utr'
        result = Message("user", (ToolResultBlock("call_1", "arguments are not JSON", True),))
        await accumulate(model.stream(with_messages(USER, response.message, result)))
    assert replay.bodies[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"city": "Utr'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "arguments are not JSON"},
    ]


async def test_interleaved_parallel_calls_and_text() -> None:
    stream = chunks(
        {"role": "assistant", "content": "Checking both."},
        call(0, "call_a", "get", '{"q":'),
        call(1, "call_b", "put", '{"k":'),
        call(0, arguments=' "x"}'),
        call(1, arguments=" 2}"),
        finish="tool_calls",
    )
    async with model_on(Replay([stream])) as model:
        response = await accumulate(model.stream(USER))
    assert response.message.content == (
        TextBlock("Checking both."),
        ToolUseBlock("call_a", "get", {"q": "x"}),
        ToolUseBlock("call_b", "put", {"k": 2}),
    )


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("stop", StopReason.END_TURN),
        ("length", StopReason.MAX_TOKENS),
        ("tool_calls", StopReason.TOOL_USE),
        ("content_filter", StopReason.REFUSAL),
    ],
)
async def test_finish_reasons(finish: str, stop_reason: StopReason) -> None:
    async with model_on(Replay([chunks({"content": "The"}, finish=finish)])) as model:
        response = await accumulate(model.stream(USER))
    assert response.stop_reason is stop_reason


async def test_tool_calls_reported_with_stop_are_a_tool_use_turn() -> None:
    stream = chunks(call(0, "call_1", "get", "{}"), finish="stop")
    async with model_on(Replay([stream])) as model:
        response = await accumulate(model.stream(USER))
    assert response.stop_reason is StopReason.TOOL_USE


async def test_a_refusal_is_text_and_a_refusal_stop() -> None:
    stream = chunks({"role": "assistant", "content": None, "refusal": "I can't help with that."})
    async with model_on(Replay([stream])) as model:
        response = await accumulate(model.stream(USER))
    assert (response.message.text, response.stop_reason) == (
        "I can't help with that.",
        StopReason.REFUSAL,
    )


async def test_cached_prompt_tokens_are_cache_reads() -> None:
    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920},
    }
    async with model_on(Replay([chunks({"content": "ok"}, usage=usage)])) as model:
        response = await accumulate(model.stream(USER))
    assert response.usage == Usage(86, 300, cache_read_input_tokens=1920)


def error(
    status: int, text: str, code: str | None = None, headers: dict[str, str] | None = None
) -> Served:
    body = {"error": {"message": text, "type": "server_error", "code": code, "param": None}}
    return Served(status, "application/json", json.dumps(body).encode(), headers or {})


async def test_rate_limit_then_success_is_retried_visibly() -> None:
    replay = Replay([error(429, "Rate limit reached", headers={"retry-after-ms": "20"}), HELLO])
    async with model_on(replay) as model:
        with recorded_span() as spans:
            events = [e async for e in model.stream(USER)]
    assert events[0] == ProviderRetry(
        "openai", 429, 1, 4, 0.02, "openai server_error (HTTP 429): Rate limit reached"
    )
    assert TextDelta(0, "Hello.") in events
    (event,) = spans[0].events
    assert (event.name, dict(event.attributes or {})) == (
        "provider.retry",
        {"http.response.status_code": 429, "hango.retry.attempt": 1, "hango.retry.delay_s": 0.02},
    )


async def test_server_errors_are_retried_until_the_limit() -> None:
    replay = Replay([error(502, "Bad gateway")] * 2)
    async with model_on(replay, max_retries=1) as model:
        with pytest.raises(ModelError, match="Bad gateway"):
            await accumulate(model.stream(USER))
    assert len(replay.requests) == 2


#: What llama-cpp-python's server answered hango's old ``content: null`` beside tool calls with
#: (HTTP 500, shortened): a validation report of the request, which no retry can fix.
LLAMA_CPP_500 = (
    "7 validation errors:\n  {'type': 'string_type', 'loc': ('body', 'messages', 1, "
    "'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid "
    "string', 'input': None}"
)


async def test_a_500_that_rejects_the_request_is_not_retried() -> None:
    body = {"error": {"message": LLAMA_CPP_500, "type": "internal_server_error"}}
    replay = Replay([Served(500, "application/json", json.dumps(body).encode())] * 2)
    async with model_on(replay) as model:
        with pytest.raises(ModelError, match="7 validation errors") as caught:
            await accumulate(model.stream(USER))
    assert len(replay.requests) == 1
    # not transient: a fallback middleware must not send the same bad request elsewhere either
    assert (caught.value.status, caught.value.transient) == (500, False)


async def test_a_server_that_sends_no_usage_gives_unknown_usage() -> None:
    async with model_on(Replay([chunks({"content": "Hi"}, usage=False)])) as model:
        response = await accumulate(model.stream(USER))
    assert response.usage == Usage.unknown()
    assert not response.usage.known


async def test_a_stream_without_a_finish_reason_names_the_server() -> None:
    replay = Replay([chunks({"content": "Hi"}, finish=None, usage=False)])
    async with model_on(replay) as model:
        with pytest.raises(ModelError) as caught:
            await accumulate(model.stream(USER))
    assert str(caught.value) == (
        "openai: the stream from https://api.openai.com/v1/chat/completions ended without a "
        "finish reason"
    )


async def test_a_connection_broken_mid_stream_names_the_url() -> None:
    async def body() -> AsyncIterator[bytes]:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        chunk["choices"] = [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]
        yield f"data: {json.dumps(chunk)}\n\n".encode()
        raise httpx2.RemoteProtocolError("peer closed connection")

    broken = httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())
    replay = Replay([broken, HELLO])
    async with model_on(replay) as model:
        with pytest.raises(ModelError) as caught:
            await accumulate(model.stream(USER))
    assert str(caught.value) == (
        "openai: the connection to https://api.openai.com/v1/chat/completions broke "
        "(peer closed connection)"
    )
    assert len(replay.requests) == 1


async def test_tool_options_map_onto_chat_completions() -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    request = attrs.evolve(
        USER,
        tools=(ToolSpec("get", "Get a thing.", schema, strict=True), ToolSpec("bash", "Run.", {})),
        # Anthropic's ways of declaring hango's own tools: Chat Completions gets them as functions
        server_tools=(
            {"name": "get", "defer_loading": True},
            {"type": "bash_20250124", "name": "bash"},
        ),
        parallel_tool_calls=False,
    )
    choices = [ToolChoice("auto"), ToolChoice("any"), ToolChoice("none"), ToolChoice.tool("get")]
    replay = Replay([HELLO] * 5)
    async with model_on(replay) as model:
        for choice in choices:
            await accumulate(model.stream(attrs.evolve(request, tool_choice=choice)))
        await accumulate(model.stream(attrs.evolve(USER, tool_choice=ToolChoice("any"))))
    sent = replay.bodies
    assert [b["tool_choice"] for b in sent[:4]] == [
        "auto",
        "required",
        "none",
        {"type": "function", "function": {"name": "get"}},
    ]
    assert sent[0]["parallel_tool_calls"] is False
    assert sent[0]["tools"][0]["function"]["strict"] is True
    assert "strict" not in sent[0]["tools"][1]["function"]
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["get", "bash"]
    # without tools there is nothing to choose from: neither option is sent
    assert "tool_choice" not in sent[4] and "parallel_tool_calls" not in sent[4]


async def test_a_server_tool_fails_the_call_with_one_line() -> None:
    request = attrs.evolve(
        USER, server_tools=({"type": "web_search_20250305", "name": "web_search"},)
    )
    replay = Replay([HELLO])
    async with model_on(replay) as model:
        with pytest.raises(ModelError) as caught:
            await accumulate(model.stream(request))
    assert str(caught.value) == (
        "openai: Chat Completions has no server tools; remove web_search_20250305 from "
        "server_tools or use an anthropic: model"
    )
    assert replay.requests == []


async def test_exhausted_quota_is_not_retried() -> None:
    replay = Replay([error(429, "You exceeded your current quota", "insufficient_quota")] * 2)
    async with model_on(replay) as model:
        with pytest.raises(ModelError, match="exceeded your current quota"):
            await accumulate(model.stream(USER))
    assert len(replay.requests) == 1


async def test_request_mapping() -> None:
    ephemeral = {"type": "ephemeral"}
    request = attrs.evolve(
        USER,
        system=(TextBlock("You are terse."), TextBlock("Tools: ...", ephemeral)),
        messages=(
            Message("user", (TextBlock("Look this up."),)),
            Message("assistant", (TextBlock("On it."), ToolUseBlock("call_1", "get", {"q": "ß"}))),
            Message("user", (ToolResultBlock("call_1", "found"), TextBlock("And then?"))),
        ),
        tools=(ToolSpec("get", "Get a thing.", {"type": "object"}),),
        temperature=0.0,
        stop_sequences=("END",),
        max_tokens=256,
    )
    replay = Replay([HELLO])
    async with model_on(replay, field="max_tokens") as model:
        await accumulate(model.stream(request))
    (sent,) = replay.bodies
    assert sent["messages"] == [
        {"role": "system", "content": "You are terse.\n\nTools: ..."},
        {"role": "user", "content": "Look this up."},
        {
            "role": "assistant",
            "content": "On it.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"q":"ß"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "found"},
        {"role": "user", "content": "And then?"},
    ]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get",
                "description": "Get a thing.",
                "parameters": {"type": "object"},
            },
        }
    ]
    assert (sent["temperature"], sent["stop"], sent["max_tokens"]) == (0.0, ["END"], 256)
    assert "max_completion_tokens" not in sent
    assert (sent["stream"], sent["stream_options"]) == (True, {"include_usage": True})


async def test_cancelling_a_run_closes_the_http_stream() -> None:
    finished: list[bool] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            first = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            first["choices"] = [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]
            yield f"data: {json.dumps(first)}\n\n".encode()
            await anyio.sleep_forever()
        finally:
            finished.append(True)

    response = httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())
    async with model_on(Replay([response])) as model:
        with anyio.CancelScope() as scope:
            async for event in model.stream(USER):
                assert event == TextDelta(0, "Hi")
                scope.cancel()
    assert scope.cancelled_caught and response.is_closed and finished == [True]
