"""AnthropicModel against real recorded Messages API exchanges (server tools included), and
synthetic cases for what no recording has (malformed tool arguments, 529 then success,
max_tokens, cancellation, request options)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anthropic
import anyio
import attrs
import httpx2
import pytest

from hango.provider import (
    Message,
    ModelError,
    ProviderRetry,
    RedactedThinkingBlock,
    Request,
    ServerBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
    accumulate,
)
from hango.provider.anthropic import AnthropicModel
from hango.provider.events import (
    MessageStop,
    ServerBlockStart,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.testing.providers import FakeServer as Replay
from hango.testing.providers import Served
from hango.testing.providers import anthropic_error as error
from hango.testing.providers import anthropic_message as message
from hango.testing.providers import anthropic_stream as anthropic_sse
from hango.testing.providers import streamed as sse

from .provider_cassettes import (
    Turn,
    anthropic_first_request,
    anthropic_messages,
    anthropic_request,
    as_recorded,
    load,
    recorded_span,
    served,
    with_messages,
)

pytestmark = [
    pytest.mark.anyio,
    # The SDK warns about model ids deprecated since these exchanges were recorded.
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]


@asynccontextmanager
async def model_on(
    replay: Replay, name: str = "claude-test", **options: Any
) -> AsyncIterator[AnthropicModel]:
    async with replay.client() as http:
        client = anthropic.AsyncAnthropic(api_key="test-key", http_client=http)
        yield AnthropicModel(client, name, base_delay=0.001, **options)


CONVERSATIONS = {
    "test_multiple_parallel_tool_calls.yaml": [
        Turn(StopReason.TOOL_USE, Usage(423, 202)),
        Turn(StopReason.END_TURN, Usage(771, 77)),
    ],
    "test_tool_choice_matrix[auto-anthropic].yaml": [
        Turn(StopReason.TOOL_USE, Usage(572, 53)),
        Turn(StopReason.END_TURN, Usage(646, 31)),
    ],
    "test_anthropic_local_shell_toolset_stream.yaml": [
        Turn(StopReason.TOOL_USE, Usage(774, 65)),
        Turn(StopReason.END_TURN, Usage(953, 22), (TextBlock("The result of **2 + 2 = 4**! 🎉"),)),
    ],
    "test_a_real_anthropic_run_streams_thinking_and_a_tool_call.yaml": [
        Turn(StopReason.TOOL_USE, Usage(597, 101)),
        Turn(
            StopReason.END_TURN,
            Usage(713, 26),
            (
                TextBlock(
                    "It is currently 18°C (64°F) in Utrecht. That's a pleasant, mild temperature!"
                ),
            ),
        ),
    ],
    "test_anthropic_tool_with_thinking.yaml": [
        Turn(StopReason.TOOL_USE, Usage(398, 155)),
        Turn(StopReason.END_TURN, Usage(566, 126)),
    ],
    "test_fixed_version_tool_chain_regression.yaml": [
        Turn(StopReason.TOOL_USE, Usage(563, 37)),
        Turn(
            StopReason.END_TURN,
            Usage(617, 41),
            (
                TextBlock(
                    "The version is **0.32a0**.\n\nHere's a joke: I guess you could say this"
                    ' version is still in the "alpha" stages of being useful! 😄'
                ),
            ),
        ),
    ],
    "test_refusal_raises.yaml": [Turn(StopReason.REFUSAL, Usage(97, 0), ())],
    "test_anthropic_native_tool_search.yaml": [Turn(StopReason.TOOL_USE, Usage(1867, 242))],
    "test_anthropic_cache_real_api.yaml": [
        Turn(StopReason.END_TURN, Usage(3, 406, cache_read_input_tokens=1111)),
        Turn(
            StopReason.END_TURN,
            Usage(3, 33, cache_read_input_tokens=1111, cache_creation_input_tokens=418),
        ),
    ],
}


@pytest.mark.parametrize("cassette", sorted(CONVERSATIONS))
async def test_recorded_conversation(cassette: str) -> None:
    """Each turn: the accumulated message, stop reason and usage equal the recording, and the
    request hango sends (the follow-up built from hango's own accumulated message) carries the
    recorded client's content."""
    interactions = load(f"anthropic/{cassette}")
    replay = Replay([served(i, "anthropic") for i in interactions])
    first = interactions[0].request
    async with model_on(replay, first["model"], thinking=first.get("thinking")) as model:
        request = anthropic_first_request(first)
        response = None
        for k, (interaction, turn) in enumerate(
            zip(interactions, CONVERSATIONS[cassette], strict=True)
        ):
            if response is not None:
                sent_before = len(interactions[k - 1].request["messages"]) + 1
                new = anthropic_messages(interaction.request["messages"][sent_before:])
                request = with_messages(request, response.message, *new)
            response = await accumulate(model.stream(request))

            assert anthropic_request(replay.bodies[k]) == anthropic_request(interaction.request)
            assert response.stop_reason == turn.stop_reason
            assert response.usage == turn.usage
            if not interaction.streamed:
                expected = anthropic_messages([interaction.json()])[0].content
            elif turn.final is None:  # the next recorded request repeats this assistant turn
                history = anthropic_messages(interactions[k + 1].request["messages"])
                expected = history[len(interaction.request["messages"])].content
            else:
                expected = turn.final
            assert response.message == Message("assistant", expected)


@pytest.mark.parametrize(
    ("cassette", "status", "api_message"),
    [
        (
            "test_anthropic_explicit_effort_xhigh_unsupported_model_errors.yaml",
            400,
            "This model does not support effort level 'xhigh'. Supported levels: high, low, max,"
            " medium.",
        ),
        ("test_model_name_suggestion[anthropic].yaml", 404, "model: claude-sonet-4-5"),
    ],
)
async def test_recorded_client_error_fails_with_the_api_message(
    cassette: str, status: int, api_message: str
) -> None:
    (interaction,) = load(f"anthropic/{cassette}")
    replay = Replay([served(interaction, "anthropic")] * 3)
    async with model_on(replay) as model:
        with pytest.raises(ModelError) as caught:
            await accumulate(model.stream(anthropic_first_request(interaction.request)))
    assert api_message in str(caught.value)
    assert f"HTTP {status}" in str(caught.value)
    assert len(replay.requests) == 1  # a client error is never retried


async def test_stream_events_of_a_recorded_tool_call() -> None:
    first = load("anthropic/test_anthropic_local_shell_toolset_stream.yaml")[0]
    async with model_on(Replay([served(first, "anthropic")])) as model:
        events = [e async for e in model.stream(anthropic_first_request(first.request))]
    assert events == [
        ToolUseStart(0, "toolu_015Rk6ndKaiXYx9AiJcpUR2H", "bash"),
        ToolInputDelta(0, ""),
        ToolInputDelta(0, '{"command": "python3 -c \\"print(2 + 2)\\""}'),
        ToolUseStop(0),
        MessageStop(
            StopReason.TOOL_USE,
            Usage(774, 65),
            response_id="msg_016qmMxFjrLSYY2paN55KqFC",
            response_model="claude-sonnet-4-6",
        ),
    ]


async def test_a_recorded_refusal_keeps_its_stop_details() -> None:
    (interaction,) = load("anthropic/test_refusal_raises.yaml")
    async with model_on(Replay([served(interaction, "anthropic")])) as model:
        response = await accumulate(model.stream(anthropic_first_request(interaction.request)))
    assert response.stop_reason is StopReason.REFUSAL
    assert response.stop_details is not None
    assert (response.stop_details["type"], response.stop_details["category"]) == (
        "refusal",
        "reasoning_extraction",
    )
    assert "Terms of Service" in response.stop_details["explanation"]


WEB_SEARCH = "anthropic/test_pause_turn_web_search_streaming_vcr.yaml"


async def test_recorded_web_search_pauses_and_continues_with_its_server_blocks_verbatim() -> None:
    """A streamed web search: 11 server tool calls and 10 results, then ``pause_turn`` in the
    middle of the 11th. No block is a client tool call, and the continuation request sends the
    whole turn back, byte for byte what the recorded client sent (up to its cassette writer's
    string normalization). The reply starts with the 11th result and cites its sources."""
    first, second = load(WEB_SEARCH)
    replay = Replay([served(first, "anthropic"), served(second, "anthropic")])
    request = anthropic_first_request(first.request)
    async with model_on(replay, request.model, thinking=first.request["thinking"]) as model:
        paused = await accumulate(model.stream(request))
        assert paused.stop_reason is StopReason.PAUSE_TURN
        assert paused.message.tool_uses == ()
        server = [b for b in paused.message.content if isinstance(b, ServerBlock)]
        assert [b.type for b in server] == ["server_tool_use", "web_search_tool_result"] * 10 + [
            "server_tool_use"
        ]
        assert server[0].block["input"] == {"query": "San Francisco weather today"}
        assert paused.usage == Usage(404500, 943)

        done = await accumulate(model.stream(with_messages(request, paused.message)))

    assert anthropic_request(replay.bodies[0]) == anthropic_request(first.request)
    assert anthropic_request(as_recorded(replay.bodies[1])) == anthropic_request(second.request)
    assert done.stop_reason is StopReason.END_TURN
    opening = done.message.content[0]
    assert isinstance(opening, ServerBlock) and opening.type == "web_search_tool_result"
    assert opening.block["tool_use_id"] == server[-1].block["id"]
    cited = [c for b in done.message.content if isinstance(b, TextBlock) for c in b.citations]
    assert len(cited) == second.body.count(b'"type":"citations_delta"') == 19
    assert cited[0]["type"] == "web_search_result_location" and cited[0]["url"].startswith("https")
    assert done.message.text.startswith("Let me continue with the remaining searches")


async def test_stream_events_of_a_server_tool_call() -> None:
    """A server tool call opens as a ServerBlockStart (never a ToolUseStart) and gets its input
    from the input pieces; only the client tool call is a tool call."""
    (interaction,) = load("anthropic/test_anthropic_native_tool_search.yaml")
    async with model_on(Replay([served(interaction, "anthropic")])) as model:
        events = [e async for e in model.stream(anthropic_first_request(interaction.request))]
    opened = [e for e in events if isinstance(e, ServerBlockStart | ToolUseStart)]
    assert [type(e).__name__ for e in opened] == [
        "ServerBlockStart",
        "ServerBlockStart",
        "ToolUseStart",
    ]
    assert opened[0] == ServerBlockStart(
        1,
        {
            "caller": {"type": "direct"},
            "id": "srvtoolu_01AFqvRopGELemw8jFcntaRt",
            "input": {},
            "name": "tool_search_tool_bm25",
            "type": "server_tool_use",
        },
    )
    assert ToolInputDelta(1, '{"query": "exchange rate currency conversion USD EUR"}') in events
    assert [e for e in events if isinstance(e, ToolUseStop)] == [ToolUseStop(4)]


# --- synthetic cases ------------------------------------------------------------------------

USER = Request(model="claude-test", messages=(Message.user("hi"),))


HELLO = sse(anthropic_sse(message({"type": "text", "text": "Hello."})))


async def test_malformed_tool_arguments_stay_raw_and_go_back_as_empty_input() -> None:
    start = message(
        {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {}},
        stop_reason="tool_use",
    )
    body = anthropic_sse(start).replace(
        b'"partial_json": "{}"', b'"partial_json": "{\\"city\\": \\"Utr"'
    )
    replay = Replay([sse(body), HELLO])
    async with model_on(replay) as model:
        response = await accumulate(model.stream(USER))
        (call,) = response.message.tool_uses
        assert call.input == '{"city": "Utr'
        result = Message("user", (ToolResultBlock("toolu_1", "arguments are not JSON", True),))
        await accumulate(model.stream(with_messages(USER, response.message, result)))
    sent = replay.bodies[1]["messages"]
    assert sent[1]["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}]
    assert sent[2]["content"][0]["is_error"] is True


@pytest.mark.parametrize(
    ("wire", "stop_reason"),
    [
        ("end_turn", StopReason.END_TURN),
        ("tool_use", StopReason.TOOL_USE),
        ("max_tokens", StopReason.MAX_TOKENS),
        ("stop_sequence", StopReason.STOP_SEQUENCE),
        ("pause_turn", StopReason.PAUSE_TURN),
        ("refusal", StopReason.REFUSAL),
        ("model_context_window_exceeded", StopReason.MAX_TOKENS),
    ],
)
async def test_stop_reasons(wire: str, stop_reason: StopReason) -> None:
    body = message({"type": "text", "text": "The answer is"}, stop_reason=wire)
    async with model_on(Replay([sse(anthropic_sse(body))])) as model:
        response = await accumulate(model.stream(USER))
    assert response.stop_reason is stop_reason
    assert response.message.text == "The answer is"


async def test_overloaded_then_success_is_retried_visibly() -> None:
    replay = Replay([error(529, "overloaded_error", "Overloaded"), HELLO])
    async with model_on(replay) as model:
        with recorded_span() as spans:
            events = [e async for e in model.stream(USER)]
    assert events[0] == ProviderRetry(
        "anthropic", 529, 1, 4, 0.001, "anthropic overloaded_error (HTTP 529): Overloaded"
    )
    assert TextDelta(0, "Hello.") in events
    assert len(replay.requests) == 2
    (event,) = spans[0].events
    assert event.name == "provider.retry"
    assert dict(event.attributes or {}) == {
        "http.response.status_code": 529,
        "hango.retry.attempt": 1,
        "hango.retry.delay_s": 0.001,
    }


async def test_rate_limit_waits_as_long_as_retry_after_says() -> None:
    limited = error(429, "rate_limit_error", "slow down", {"retry-after": "0.02"})
    replay = Replay([limited, error(500, "api_error", "oops"), HELLO])
    async with model_on(replay) as model:
        with recorded_span() as spans:
            await accumulate(model.stream(USER))
    attempts = [dict(e.attributes or {}) for e in spans[0].events]
    assert [(a["http.response.status_code"], a["hango.retry.delay_s"]) for a in attempts] == [
        (429, 0.02),
        (500, 0.002),  # base delay doubled on the second retry
    ]


async def test_retries_are_bounded() -> None:
    replay = Replay([error(503, "api_error", "unavailable")] * 3)
    async with model_on(replay, max_retries=2) as model:
        with pytest.raises(ModelError, match="unavailable"):
            await accumulate(model.stream(USER))
    assert len(replay.requests) == 3


async def test_a_server_error_that_rejects_the_request_is_not_retried() -> None:
    replay = Replay([error(500, "api_error", "1 validation error for Request: messages")] * 2)
    async with model_on(replay) as model:
        with pytest.raises(ModelError, match="validation error"):
            await accumulate(model.stream(USER))
    assert len(replay.requests) == 1


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_connection_error_names_the_url_and_each_retry_is_visible() -> None:
    port = closed_port()
    client = anthropic.AsyncAnthropic(api_key="k", base_url=f"http://127.0.0.1:{port}")
    model = AnthropicModel(client, "claude-test", max_retries=1, base_delay=0.001)
    events: list[object] = []
    with pytest.raises(ModelError) as caught:
        async for event in model.stream(USER):
            events.append(event)
    url = f"http://127.0.0.1:{port}/v1/messages"
    assert str(caught.value) == f"anthropic: cannot connect to {url} (Connection refused)"
    (retry,) = events
    assert isinstance(retry, ProviderRetry) and retry.status is None and url in retry.error


async def test_a_stream_cut_before_message_stop_names_the_url() -> None:
    cut = anthropic_sse(message({"type": "text", "text": "Hel"})).split(b"event: message_stop")[0]
    async with model_on(Replay([sse(cut)])) as model:
        with pytest.raises(ModelError) as caught:
            await accumulate(model.stream(USER))
    assert str(caught.value) == (
        "anthropic: the stream from https://api.anthropic.com/v1/messages ended before message_stop"
    )


async def test_a_connection_broken_mid_stream_names_the_url_and_is_not_retried() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield until_first_text(anthropic_sse(message({"type": "text", "text": "Hel"})))
        raise httpx2.RemoteProtocolError("peer closed connection")

    broken = httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body())
    replay = Replay([broken, HELLO])
    async with model_on(replay) as model:
        with pytest.raises(ModelError) as caught:
            await accumulate(model.stream(USER))
    assert str(caught.value) == (
        "anthropic: the connection to https://api.anthropic.com/v1/messages broke "
        "(peer closed connection)"
    )
    assert len(replay.requests) == 1  # content had streamed: a retry would repeat it


async def test_spend_limit_is_not_retried() -> None:
    body = {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "spend limit reached",
            "details": {"error_code": "enforced_spend_limit_reached"},
        },
    }
    replay = Replay([Served(429, "application/json", json.dumps(body).encode())] * 2)
    async with model_on(replay) as model:
        with pytest.raises(ModelError, match="spend limit reached"):
            await accumulate(model.stream(USER))
    assert len(replay.requests) == 1


def stream_error(kind: str) -> bytes:
    data = {"type": "error", "error": {"type": kind, "message": f"{kind} mid-stream"}}
    return f"event: error\ndata: {json.dumps(data)}\n\n".encode()


async def test_an_overloaded_event_before_any_content_is_retried() -> None:
    opening = anthropic_sse(message()).split(b"\n\n")[0] + b"\n\n"  # message_start only
    replay = Replay([sse(opening + stream_error("overloaded_error")), HELLO])
    async with model_on(replay) as model:
        response = await accumulate(model.stream(USER))
    assert response.message.text == "Hello."


async def test_an_error_after_content_is_not_retried() -> None:
    partial = anthropic_sse(message({"type": "text", "text": "Hel"})).split(
        b"event: content_block_stop"
    )[0]
    replay = Replay([sse(partial + stream_error("overloaded_error")), HELLO])
    async with model_on(replay) as model:
        with pytest.raises(ModelError, match=r"overloaded_error \(in stream\)"):
            await accumulate(model.stream(USER))
    assert len(replay.requests) == 1


async def test_system_and_cache_control_are_sent_block_by_block() -> None:
    ephemeral = {"type": "ephemeral"}
    request = attrs.evolve(
        USER,
        system=(
            TextBlock("You are terse."),
            TextBlock("Tools: ...", ephemeral),
            TextBlock("Memory"),
        ),
        messages=(Message("user", (TextBlock("doc", ephemeral), TextBlock("question"))),),
        tools=(ToolSpec("get", "Get a thing.", {"type": "object", "properties": {}}),),
        temperature=0.2,
        stop_sequences=("END",),
    )
    replay = Replay([HELLO])
    async with model_on(replay) as model:
        await accumulate(model.stream(request))
    (sent,) = replay.bodies
    assert sent["system"] == [
        {"type": "text", "text": "You are terse."},
        {"type": "text", "text": "Tools: ...", "cache_control": ephemeral},
        {"type": "text", "text": "Memory"},
    ]
    assert sent["messages"][0]["content"][0] == {
        "type": "text",
        "text": "doc",
        "cache_control": ephemeral,
    }
    assert "cache_control" not in sent["messages"][0]["content"][1]
    assert sent["tools"] == [
        {
            "name": "get",
            "description": "Get a thing.",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]
    assert (sent["temperature"], sent["stop_sequences"], sent["model"]) == (
        0.2,
        ["END"],
        "claude-test",
    )


async def test_thinking_and_redacted_thinking_go_back_verbatim() -> None:
    body = message(
        {"type": "thinking", "thinking": "Let me think.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque=="},
        {"type": "tool_use", "id": "toolu_9", "name": "get", "input": {"q": 1}},
        stop_reason="tool_use",
    )
    replay = Replay([sse(anthropic_sse(body)), HELLO])
    async with model_on(replay) as model:
        response = await accumulate(model.stream(USER))
        assert response.message.content == (
            ThinkingBlock("Let me think.", "sig=="),
            RedactedThinkingBlock("opaque=="),
            ToolUseBlock("toolu_9", "get", {"q": 1}),
        )
        result = Message("user", (ToolResultBlock("toolu_9", "42"),))
        await accumulate(model.stream(with_messages(USER, response.message, result)))
    assert replay.bodies[1]["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Let me think.", "signature": "sig=="},
        {"type": "redacted_thinking", "data": "opaque=="},
        {"type": "tool_use", "id": "toolu_9", "name": "get", "input": {"q": 1}},
    ]


async def test_tool_options_and_server_tools_are_sent_as_declared() -> None:
    schema = {"type": "object", "properties": {}}
    request = attrs.evolve(
        USER,
        tools=(
            ToolSpec("get", "Get a thing.", schema, strict=True),
            ToolSpec("bash", "Run a command.", schema),
        ),
        server_tools=(
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"name": "get", "defer_loading": True},  # amends hango's definition of "get"
            {"type": "bash_20250124", "name": "bash"},  # replaces hango's definition of "bash"
        ),
        tool_choice=ToolChoice.tool("get"),
        parallel_tool_calls=False,
    )
    replay = Replay([HELLO, HELLO, HELLO])
    async with model_on(replay) as model:
        await accumulate(model.stream(request))
        await accumulate(model.stream(attrs.evolve(request, tool_choice=ToolChoice("none"))))
        await accumulate(model.stream(attrs.evolve(request, tools=(), server_tools=())))
    first, second, third = replay.bodies
    assert first["tools"] == [
        {
            "name": "get",
            "description": "Get a thing.",
            "input_schema": schema,
            "strict": True,
            "defer_loading": True,
        },
        {"type": "bash_20250124", "name": "bash"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
    ]
    assert first["tool_choice"] == {
        "type": "tool",
        "name": "get",
        "disable_parallel_tool_use": True,
    }
    assert second["tool_choice"] == {"type": "none"}
    assert "tool_choice" not in third and "tools" not in third  # nothing to choose from


async def test_an_unknown_block_type_is_kept_whole_and_sent_back() -> None:
    # The SDK parses a type it does not know as a TextBlock; hango must still keep it opaque.
    mcp_call = {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "q", "server_name": "s"}
    mcp_result = {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": False}
    mcp_result["content"] = [{"type": "text", "text": "42"}]
    start = message({**mcp_call, "input": {}}, mcp_result, {"type": "text", "text": "It is 42."})
    body = anthropic_sse(start).replace(
        b'"content_block": {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "q", '
        b'"server_name": "s", "input": {}}',
        b'"content_block": {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "q", '
        b'"server_name": "s", "input": {"x": 1}}',
    )
    replay = Replay([sse(body), HELLO])
    async with model_on(replay) as model:
        response = await accumulate(model.stream(USER))
        await accumulate(model.stream(with_messages(USER, response.message, Message.user("ok"))))
    assert response.message.content == (
        ServerBlock({**mcp_call, "input": {"x": 1}}),
        ServerBlock(mcp_result),
        TextBlock("It is 42."),
    )
    assert replay.bodies[1]["messages"][1]["content"][:2] == [
        {**mcp_call, "input": {"x": 1}},
        mcp_result,
    ]


def hanging_stream(first: bytes) -> tuple[httpx2.Response, list[bool]]:
    """A streamed response that sends ``first`` and then never finishes."""
    finished: list[bool] = []

    async def body() -> AsyncIterator[bytes]:
        try:
            yield first
            await anyio.sleep_forever()
        finally:
            finished.append(True)

    return httpx2.Response(
        200, headers={"content-type": "text/event-stream"}, content=body()
    ), finished


def until_first_text(stream: bytes) -> bytes:
    return stream.split(b"event: content_block_stop")[0]


async def test_cancelling_a_run_closes_the_http_stream() -> None:
    response, finished = hanging_stream(
        until_first_text(anthropic_sse(message({"type": "text", "text": "Hi"})))
    )
    async with model_on(Replay([response])) as model:
        events = []
        with anyio.CancelScope() as scope:
            async for event in model.stream(USER):
                events.append(event)
                scope.cancel()
    assert events and scope.cancelled_caught
    assert response.is_closed and finished == [True]


async def test_closing_the_stream_early_closes_the_http_stream() -> None:
    response, _ = hanging_stream(
        until_first_text(anthropic_sse(message({"type": "text", "text": "Hi"})))
    )
    async with model_on(Replay([response])) as model, aclosing(model.stream(USER)) as events:
        async for _ in events:
            break
    assert response.is_closed


async def test_the_model_sends_its_own_name() -> None:
    # Request.model holds the agent file's model spec, which --model may have overridden.
    replay = Replay([HELLO])
    async with model_on(replay) as model:
        await accumulate(model.stream(attrs.evolve(USER, model="scripted:script.toml")))
    assert replay.bodies[0]["model"] == "claude-test"
    assert model.name == "claude-test" and model.provider_name == "anthropic"
