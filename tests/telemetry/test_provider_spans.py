"""What a ``chat`` span says about the provider that answered: the server it called
(``server.address``, ``server.port``) and the response's id and model, from a real HTTP stream
served on 127.0.0.1 in each provider's wire format."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from hango import RunStatus
from hango.provider.anthropic import AnthropicModel
from hango.provider.model import Model
from hango.provider.openai import OpenAIChatModel
from hango.testing import agent_harness

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the vendors' SDK clients run on asyncio only


def _sse(events: list[tuple[str | None, dict[str, Any] | str]]) -> bytes:
    out = []
    for name, data in events:
        body = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {body}\n\n")
    return "".join(out).encode()


ANTHROPIC_STREAM = _sse(
    [
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_0142", "type": "message", "role": "assistant",
            "model": "claude-test-20260101", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 1},
        }}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "Hello."}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 3}}),
        ("message_stop", {"type": "message_stop"}),
    ]
)  # fmt: skip

_CHUNK = {"id": "chatcmpl-77", "object": "chat.completion.chunk", "created": 1,
          "model": "qwen-test-7b"}  # fmt: skip
OPENAI_STREAM = _sse(
    [
        (None, _CHUNK | {"choices": [{"index": 0, "finish_reason": None,
                                      "delta": {"role": "assistant", "content": "Hello."}}]}),
        (None, _CHUNK | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        (None, _CHUNK | {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3,
                                                  "total_tokens": 15}}),
        (None, "[DONE]"),
    ]
)  # fmt: skip


@pytest.fixture
def server() -> Iterator[tuple[dict[str, bytes], int]]:
    """A server answering every POST with ``bodies["stream"]`` as an event stream."""
    bodies: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(bodies["stream"])))
            self.end_headers()
            self.wfile.write(bodies["stream"])

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield bodies, int(httpd.server_address[1])
    httpd.shutdown()
    httpd.server_close()


async def _chat_span(tmp_path: Path, otel: Any, model: Model) -> dict[str, Any]:
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(h.agent, "hi")
    assert finished.status is RunStatus.COMPLETED, finished.error
    (chat,) = [s for s in otel.spans() if s.name.startswith("chat ")]
    return dict(chat.attributes or {})


async def test_anthropic_chat_span_names_server_and_response(
    tmp_path: Path, otel: Any, server: tuple[dict[str, bytes], int]
) -> None:
    bodies, port = server
    bodies["stream"] = ANTHROPIC_STREAM
    client = anthropic.AsyncAnthropic(api_key="test", base_url=f"http://127.0.0.1:{port}")
    span = await _chat_span(tmp_path, otel, AnthropicModel(client, "claude-test"))
    assert span["gen_ai.provider.name"] == "anthropic"
    assert span["gen_ai.request.model"] == "claude-test"
    assert (span["server.address"], span["server.port"]) == ("127.0.0.1", port)
    assert span["gen_ai.response.id"] == "msg_0142"
    assert span["gen_ai.response.model"] == "claude-test-20260101"


async def test_openai_chat_span_names_server_and_response(
    tmp_path: Path, otel: Any, server: tuple[dict[str, bytes], int]
) -> None:
    bodies, port = server
    bodies["stream"] = OPENAI_STREAM
    client = openai.AsyncOpenAI(api_key="test", base_url=f"http://127.0.0.1:{port}/v1")
    span = await _chat_span(tmp_path, otel, OpenAIChatModel(client, "qwen-test"))
    assert span["gen_ai.provider.name"] == "openai"
    assert (span["server.address"], span["server.port"]) == ("127.0.0.1", port)
    assert span["gen_ai.response.id"] == "chatcmpl-77"
    assert span["gen_ai.response.model"] == "qwen-test-7b"
    # The server's port is left out of the metrics' attributes (cardinality).
    (point,) = otel.points("gen_ai.client.operation.duration")
    assert point.attributes["server.address"] == "127.0.0.1"
    assert "server.port" not in point.attributes


def test_default_ports_follow_the_scheme() -> None:
    from hango.agent import spans

    class Remote:
        base_url = "https://api.anthropic.com"

    assert spans.model_attributes(Remote()) == {
        "gen_ai.provider.name": "hango.Remote",
        "server.address": "api.anthropic.com",
        "server.port": 443,
    }
