"""Fake Anthropic and OpenAI servers behind the real SDK clients, with no network.

The vendors' SDKs send through ``httpx2``; a ``FakeServer`` is the handler of an
``httpx2.MockTransport`` (the pattern httpx ships): it answers each request with the next of
its ``answers`` (or with ``answer(request)`` for a callable) and keeps every request. A
``FakeAnthropic`` also holds every Messages API request to Anthropic's strict rules
(``wire_problems``) and answers one that breaks them as the API does, with a 400
``invalid_request_error``, so a middleware that sends an invalid history fails its test.

The answers are built in each API's documented streaming format:
``anthropic_answer`` / ``anthropic_stream`` (https://platform.claude.com/docs/en/build-with-
claude/streaming) and ``openai_answer`` / ``openai_stream``
(https://platform.openai.com/docs/api-reference/chat-streaming).

::

    server = FakeAnthropic([anthropic_answer("Hello.")])
    model = server.model()                    # an AnthropicModel on the fake server
    ...                                       # a run with model=model
    assert server.bodies[0]["messages"][0]["role"] == "user"

Needs the ``anthropic`` / ``openai`` extras (their SDKs bring ``httpx2``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import httpx2

from hango.testing.history import wire_problems

if TYPE_CHECKING:
    from hango.provider.anthropic import AnthropicModel
    from hango.provider.openai import OpenAIChatModel

JSONDict = dict[str, Any]


@attrs.frozen
class Served:
    """One HTTP answer to serve: status, content type, body bytes and extra headers. A fresh
    ``httpx2.Response`` is made each time it is served."""

    status: int
    content_type: str
    body: bytes
    headers: Mapping[str, str] = attrs.field(factory=dict)

    def response(self) -> httpx2.Response:
        return httpx2.Response(
            self.status,
            headers={"content-type": self.content_type, **self.headers},
            content=self.body,
        )


Answer = Served | httpx2.Response


def sse(events: Sequence[tuple[str | None, object]]) -> bytes:
    """A server-sent event stream: ``(event name or None, data)`` each; data that is not a
    string is JSON-encoded."""
    lines = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        lines.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(lines).encode()


def streamed(body: bytes, headers: Mapping[str, str] | None = None) -> Served:
    """A 200 ``text/event-stream`` answer of ``body``."""
    return Served(200, "text/event-stream", body, dict(headers or {}))


# -- Anthropic ------------------------------------------------------------------------------


def anthropic_message(
    *content: JSONDict,
    stop_reason: str = "end_turn",
    usage: Mapping[str, int] | None = None,
    model: str = "claude-test",
) -> JSONDict:
    """A Messages API response body holding ``content`` blocks (to stream: ``anthropic_stream``)."""
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage or {"input_tokens": 10, "output_tokens": 5}),
    }


def anthropic_stream(message: JSONDict) -> bytes:
    """The SSE stream the Messages API sends for ``message`` (a non-streaming response body):
    message_start, then start / delta / stop per content block, message_delta, message_stop.
    A (server) tool call's input comes as one ``input_json_delta``, a text's citations as
    ``citations_delta``\\s, and any other block whole in its start event, as the API's own
    streams do."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    events: list[tuple[str | None, object]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for i, block in enumerate(message["content"]):
        kind = block["type"]
        deltas: list[JSONDict] = []
        if kind == "text" and block.get("citations"):
            # a cited text opens with an empty citation list; each citation is a delta
            opening: JSONDict = {"type": "text", "text": "", "citations": []}
            deltas = [{"type": "citations_delta", "citation": c} for c in block["citations"]]
            deltas.append({"type": "text_delta", "text": block["text"]})
        elif kind == "text":
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif kind in ("tool_use", "server_tool_use"):
            opening = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        else:
            opening = block  # redacted thinking and server tool results arrive whole
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": opening},
            )
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    if "stop_details" in message:
        delta["stop_details"] = message["stop_details"]
    events.append(
        ("message_delta", {"type": "message_delta", "delta": delta, "usage": message["usage"]})
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return sse(events)


def anthropic_answer(
    text: str = "",
    *,
    calls: Sequence[tuple[str, str, JSONDict]] = (),
    read: int = 0,
    written: int = 0,
    uncached: int = 10,
) -> Served:
    """A streamed Messages answer: ``text``, then ``calls`` as ``(id, name, input)``, with
    ``read`` / ``written`` cache tokens and ``uncached`` input tokens in its usage; it stops
    for ``tool_use`` when there are calls, else at ``end_turn``."""
    usage = {
        "input_tokens": uncached,
        "output_tokens": 1,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": written,
    }
    content: list[JSONDict] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
    stop = "tool_use" if calls else "end_turn"
    message = anthropic_message(*content, stop_reason=stop, usage=usage)
    message["id"] = "msg_1"
    return streamed(anthropic_stream(message))


def anthropic_error(
    status: int, kind: str, text: str, headers: Mapping[str, str] | None = None
) -> Served:
    """An Anthropic error answer: ``{"type": "error", "error": {"type": kind, "message": text}}``
    (``overloaded_error`` with 529, ``rate_limit_error`` with 429, ...)."""
    body = json.dumps({"type": "error", "error": {"type": kind, "message": text}})
    return Served(status, "application/json", body.encode(), dict(headers or {}))


# -- OpenAI ---------------------------------------------------------------------------------


def openai_completion(
    text: str | None = None,
    *,
    calls: Sequence[tuple[str, str, JSONDict]] = (),
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = None,
) -> JSONDict:
    """A Chat Completions response body (to stream: ``openai_stream``): ``text`` and ``calls``
    as ``(id, name, arguments)``."""
    message: JSONDict = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    finish = finish_reason or ("tool_calls" if calls else "stop")
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": dict(usage or {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}),
    }


def openai_stream(completion: JSONDict) -> bytes:
    """The chunks Chat Completions streams for ``completion`` with ``include_usage``: content,
    each tool call opened with id and name then its arguments, the finish reason, a usage chunk
    with no choices, ``[DONE]``."""
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: JSONDict, finish: str | None = None) -> JSONDict:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks: list[JSONDict] = [chunk({"role": "assistant", "content": message.get("content")})]
    for j, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        opening = {"index": j, "id": call["id"], "type": "function"}
        opening["function"] = {"name": function["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [opening]}))
        arguments = {"index": j, "function": {"arguments": function["arguments"]}}
        chunks.append(chunk({"tool_calls": [arguments]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return sse([*((None, c) for c in chunks), (None, "[DONE]")])


def openai_answer(text: str) -> Served:
    """A streamed Chat Completions answer of ``text``, with the usage chunk and ``[DONE]``."""
    return streamed(openai_stream(openai_completion(text)))


# -- the servers ----------------------------------------------------------------------------


class FakeServer:
    """The handler of an ``httpx2.MockTransport``: answers the requests in order with
    ``answers`` (each a ``Served`` or an ``httpx2.Response``), or every request with
    ``answers(request)`` when it is a callable (which may also raise, e.g.
    ``httpx2.ConnectError``). Keeps ``requests``; ``bodies`` are their JSON bodies.
    ``anthropic_model()`` and ``openai_model()`` are hango models whose SDK client it serves.

    Raises ``AssertionError`` (seen by the SDK as a transport failure, and by the test in
    ``unexpected``) for a request beyond the last answer."""

    def __init__(self, answers: Sequence[Answer] | Callable[[httpx2.Request], Answer] = ()):
        self.handler = answers if callable(answers) else None
        self.answers: list[Answer] = [] if callable(answers) else list(answers)
        self.requests: list[httpx2.Request] = []
        self.unexpected: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        answer = self.refuse(request)
        if answer is None and self.handler is not None:
            answer = self.handler(request)
        elif answer is None:
            if len(self.requests) > len(self.answers):
                self.unexpected.append(request)
                raise AssertionError(f"request {len(self.requests)} has no answer: {request.url}")
            answer = self.answers[len(self.requests) - 1]
        return answer.response() if isinstance(answer, Served) else answer

    def refuse(self, request: httpx2.Request) -> Answer | None:
        """An answer refusing ``request`` before it is served, or None (a subclass's rules)."""
        return None

    @property
    def bodies(self) -> list[JSONDict]:
        return [json.loads(r.content) for r in self.requests]

    def client(self) -> httpx2.AsyncClient:
        """An ``httpx2.AsyncClient`` whose requests this server answers."""
        return httpx2.AsyncClient(transport=httpx2.MockTransport(self))

    def anthropic_model(
        self, name: str = "claude-test", *, base_delay: float = 0.001, **options: Any
    ) -> AnthropicModel:
        """An ``AnthropicModel`` on this server (an ``anthropic.AsyncAnthropic`` client with
        this server's transport); retries wait ``base_delay`` seconds; ``options`` go to
        ``AnthropicModel`` (``max_retries``, ``thinking``)."""
        import anthropic

        from hango.provider.anthropic import AnthropicModel

        client = anthropic.AsyncAnthropic(api_key="test-key", http_client=self.client())
        return AnthropicModel(client, name, base_delay=base_delay, **options)

    def openai_model(
        self, name: str = "gpt-test", *, base_delay: float = 0.001, **options: Any
    ) -> OpenAIChatModel:
        """An ``OpenAIChatModel`` on this server (an ``openai.AsyncOpenAI`` client with this
        server's transport); ``options`` go to ``OpenAIChatModel``."""
        import openai

        from hango.provider.openai import OpenAIChatModel

        client = openai.AsyncOpenAI(api_key="test-key", http_client=self.client())
        return OpenAIChatModel(client, name, base_delay=base_delay, **options)


class FakeAnthropic(FakeServer):
    """A fake Messages API. ``strict`` (default): a request whose history breaks Anthropic's
    rules (``wire_problems``) is answered 400 ``invalid_request_error`` naming the problems,
    which are also kept in ``problems``. ``model()`` is ``anthropic_model()``."""

    def __init__(
        self,
        answers: Sequence[Answer] | Callable[[httpx2.Request], Answer] = (),
        *,
        strict: bool = True,
    ) -> None:
        super().__init__(answers)
        self.strict = strict
        self.problems: list[str] = []

    def refuse(self, request: httpx2.Request) -> Answer | None:
        if not self.strict or not request.url.path.endswith("/messages"):
            return None
        problems = wire_problems(json.loads(request.content))
        if not problems:
            return None
        self.problems.extend(problems)
        return anthropic_error(400, "invalid_request_error", "; ".join(problems))

    model = FakeServer.anthropic_model


class FakeOpenAI(FakeServer):
    """A fake Chat Completions API. ``model()`` is ``openai_model()``."""

    model = FakeServer.openai_model
