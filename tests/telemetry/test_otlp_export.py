"""The demo run's trace as a backend receives it: `hango run` exports over OTLP/HTTP to a
receiver on 127.0.0.1 that decodes the protobuf body (opentelemetry-proto), as Jaeger, Tempo
or Langfuse would. What is checked is what left the process, not in-memory spans."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"
TODO = "Read the limits and the incident log"  # a todo of the demo's plan: user data


class Receiver:
    """An OTLP/HTTP trace receiver: keeps every request body and the spans it decodes."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.paths.append(self.path)
                receiver.bodies.append(body)
                receiver.requests.append(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Span]:
        return [
            span
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def resource(self) -> dict[str, Any]:
        return attributes(self.requests[0].resource_spans[0].resource.attributes)


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    """The demo agent, its script without the pauses meant for people watching."""
    folder = tmp_path / "demo"
    shutil.copytree(DEMO, folder)
    script = folder / "script.toml"
    script.write_text(script.read_text().replace("delay_ms = 12", "delay_ms = 0"))
    return folder


def run_demo(demo: Path, endpoint: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-m", "hango", "run", "--agent", str(demo / "agent.toml"), "Risks?"],
        cwd=demo,
        env=base | {
            "HANGO_DATABASE_URL": f"sqlite:///{demo / 'hango.db'}",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            **env,
        },
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def by_name(spans: list[Span]) -> dict[str, list[Span]]:
    out: dict[str, list[Span]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def test_exported_demo_trace_carries_the_genai_attributes(demo: Path, receiver: Receiver) -> None:
    run_demo(demo, receiver.endpoint)
    assert set(receiver.paths) == {"/v1/traces"}
    assert receiver.resource()["service.name"] == "hango"
    spans = by_name(receiver.spans())

    (root,) = spans["invoke_agent demo"]
    agent = attributes(root.attributes)
    assert agent["gen_ai.operation.name"] == "invoke_agent"
    assert agent["gen_ai.provider.name"] == "hango.scripted"
    assert agent["gen_ai.request.model"] == "scripted:script.toml"
    chat_spans = spans["chat scripted:script.toml"]
    assert len(chat_spans) == 9 and {s.kind for s in chat_spans} == {Span.SPAN_KIND_CLIENT}
    chats = [attributes(s.attributes) for s in chat_spans]
    # The run's totals are the sums over its model calls.
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
        assert agent[key] == sum(c[key] for c in chats) > 0

    tools = [s for name, group in spans.items() if name.startswith("execute_tool") for s in group]
    assert {attributes(s.attributes)["gen_ai.tool.type"] for s in tools} == {"function"}
    failed = {s.name for s in tools if s.status.code == Status.STATUS_CODE_ERROR}
    # The repeated search blocked by hango-repeat and the edit refused by hango-allowlist.
    assert failed == {"execute_tool search", "execute_tool edit_file"}
    (blocked,) = [s for s in spans["execute_tool search"] if s.status.code]
    assert blocked.status.message == "tool_error"
    assert all(s.status.code == Status.STATUS_CODE_UNSET for s in spans["execute_tool list_files"])

    # Content capture is off by default: no prompt, completion or plan left the process.
    body = b"".join(receiver.bodies)
    assert TODO.encode() not in body and b"gen_ai.input.messages" not in body
    assert b"gen_ai.tool.call.arguments" not in body


def test_content_capture_exports_prompts_completions_and_tool_calls(
    demo: Path, receiver: Receiver
) -> None:
    run_demo(demo, receiver.endpoint, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    spans = by_name(receiver.spans())

    first, *_, last = (attributes(s.attributes) for s in spans["chat scripted:script.toml"])
    assert json.loads(first["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Risks?"}]}
    ]
    system = json.loads(first["gen_ai.system_instructions"])
    assert system[0]["type"] == "text" and "careful engineering assistant" in system[0]["content"]
    (output,) = json.loads(first["gen_ai.output.messages"])
    assert output["role"] == "assistant" and output["finish_reason"] == "tool_use"
    call = output["parts"][1]
    assert call["type"] == "tool_call" and call["name"] == "write_todos"
    assert TODO in [t["content"] for t in call["arguments"]["todos"]]
    # Later requests carry tool results in the conventions' "tool" role.
    history = json.loads(last["gen_ai.input.messages"])
    assert history[2]["role"] == "tool"
    assert history[2]["parts"][0]["type"] == "tool_call_response"

    (write,) = spans["execute_tool write_todos"][:1]
    tool = attributes(write.attributes)
    assert TODO in tool["gen_ai.tool.call.arguments"]
    assert tool["gen_ai.tool.call.result"].startswith("Plan saved")

    (root,) = spans["invoke_agent demo"]
    agent = attributes(root.attributes)
    assert json.loads(agent["gen_ai.input.messages"])[0]["parts"][0]["content"] == "Risks?"
    (answer,) = json.loads(agent["gen_ai.output.messages"])
    assert "Two open risks" in answer["parts"][0]["content"]
