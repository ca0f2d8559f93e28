"""Installing telemetry for the ``hango`` command: ``--trace console`` and the ``OTEL_*`` variables.

``build_providers`` is tested without installing anything (a global provider can be set once per
process, and this session's belongs to conftest); OTLP export goes to a real HTTP receiver on
localhost. The command itself runs as a real process.
"""

from __future__ import annotations

import http.server
import io
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import StatusCode

from hango import telemetry
from hango.telemetry.setup import Providers, build_providers

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


class Receiver:
    """An OTLP/HTTP endpoint: keeps the body of every POST by path."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {}
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.setdefault(self.path, []).append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def built() -> Iterator[list[Providers]]:
    """Providers a test builds, shut down afterwards (their export threads stop)."""
    made: list[Providers] = []
    yield made
    for p in made:
        if p.tracer_provider is not None:
            p.tracer_provider.shutdown()
        if p.meter_provider is not None:
            p.meter_provider.shutdown()


def span_names(bodies: list[bytes]) -> list[str]:
    names = []
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                names.extend(s.name for s in ss.spans)
    return names


LATE_SDK = """
from hango import telemetry
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

with telemetry.tracer.start_as_current_span("before") as span:
    assert span is trace.INVALID_SPAN and not span.is_recording()
    telemetry.record(telemetry.RETRIED, middleware="m")  # nowhere to go, and no error

exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

with telemetry.tracer.start_as_current_span("after") as span:
    assert span.is_recording()
    telemetry.record(telemetry.SHORT_CIRCUITED, middleware="m")
assert [s.name for s in exporter.get_finished_spans()] == ["after"]
names = [m.name for rm in reader.get_metrics_data().resource_metrics
         for sm in rm.scope_metrics for m in sm.metrics]
assert names == ["hango.middleware.tool_short_circuits"], names
print("ok")
"""


def test_an_sdk_installed_after_import_receives_hangos_spans_and_metrics() -> None:
    # hango.telemetry makes its tracer and instruments at import; a program installs its SDK
    # later. A fresh process, because this one's providers are set already (conftest).
    done = subprocess.run(
        [sys.executable, "-c", LATE_SDK], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n"


def test_hangos_tracer_reaches_the_session_provider(otel: Any) -> None:
    with telemetry.tracer.start_as_current_span("probe") as span:
        assert span.is_recording()
    assert otel.one("probe")


def test_an_exception_marks_the_span_without_its_message(otel: Any) -> None:
    with pytest.raises(ValueError), telemetry.tracer.start_as_current_span("turn"):
        raise ValueError("the user's secret plan")
    span = otel.one("turn")
    assert span.attributes["error.type"] == "ValueError"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError"
    assert span.events == ()  # no exception event: its message could quote user data


def test_nothing_asked_for_nothing_built() -> None:
    assert build_providers(None) == Providers(None, None)


def test_trace_console_prints_each_span_compactly(built: list[Providers]) -> None:
    err = io.StringIO()
    providers = build_providers("console", err=err)
    built.append(providers)
    assert providers.meter_provider is None
    assert providers.tracer_provider is not None
    tracer = providers.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("outer", attributes={"gen_ai.agent.name": "demo"}) as outer:
        outer.add_event(telemetry.MIDDLEWARE_STACK, {telemetry.MIDDLEWARE_NAMES: ("a", "b")})
        with tracer.start_as_current_span("inner"):
            pass
    # Nothing prints while the run goes on (it would land inside the streamed answer) ...
    assert err.getvalue() == ""
    providers.tracer_provider.force_flush()
    # ... then every span, in the order they started: the outer one first.
    head, attributes, event, inner = err.getvalue().splitlines()
    ctx = outer.get_span_context()
    assert inner.startswith("inner  INTERNAL  ")
    assert inner.endswith(f"parent {ctx.span_id:016x}")
    assert head.startswith("outer  INTERNAL  ")
    assert head.endswith(f"trace {ctx.trace_id:032x}  span {ctx.span_id:016x}  parent -")
    assert attributes == "    gen_ai.agent.name=demo"
    assert event == "    * agent.middleware_stack  hango.middleware.names=a,b"


def test_default_service_name_is_hango_unless_the_environment_names_one(
    built: list[Providers], monkeypatch: pytest.MonkeyPatch
) -> None:
    providers = build_providers("console", err=io.StringIO())
    built.append(providers)
    assert providers.tracer_provider is not None
    attributes = providers.tracer_provider.resource.attributes
    assert attributes["service.name"] == "hango"
    assert attributes["service.version"]

    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-agents")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    providers = build_providers("console", err=io.StringIO())
    built.append(providers)
    assert providers.tracer_provider is not None
    attributes = providers.tracer_provider.resource.attributes
    assert attributes["service.name"] == "my-agents"
    assert attributes["deployment.environment"] == "test"


def test_an_otlp_endpoint_exports_spans_and_no_metrics(
    receiver: Receiver, built: list[Providers], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    providers = build_providers(None)
    built.append(providers)
    # Jaeger and Langfuse take traces only: metrics wait until asked for.
    assert providers.meter_provider is None
    assert isinstance(providers.tracer_provider, TracerProvider)
    with providers.tracer_provider.get_tracer("test").start_as_current_span("invoke_agent demo"):
        pass
    assert providers.tracer_provider.force_flush()
    assert span_names(receiver.bodies["/v1/traces"]) == ["invoke_agent demo"]


def test_metrics_are_exported_when_asked_for(
    receiver: Receiver, built: list[Providers], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
    providers = build_providers(None)
    built.append(providers)
    assert providers.meter_provider is not None
    counter = providers.meter_provider.get_meter("test").create_counter("hango.test.count")
    counter.add(2)
    assert providers.meter_provider.force_flush()
    names = {
        m.name
        for body in receiver.bodies["/v1/metrics"]
        for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert names == {"hango.test.count"}


@pytest.mark.parametrize(
    ("variables", "trace_to", "console_only"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, None, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, None, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, "console", True),
    ],
    ids=["exporter-none", "sdk-disabled", "sdk-disabled-but-console-asked"],
)
def test_the_environment_can_turn_export_off(
    variables: dict[str, str],
    trace_to: str | None,
    console_only: bool | None,
    built: list[Providers],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    providers = build_providers(trace_to, err=io.StringIO())
    built.append(providers)
    assert providers.meter_provider is None
    assert (providers.tracer_provider is not None) is bool(console_only)


@pytest.mark.parametrize(
    ("variables", "problem"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "hango: telemetry: OTLP protocol 'grpc' is not supported (only http/protobuf); "
            "spans are not exported",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "zipkin"},
            "hango: telemetry: unknown OTEL_TRACES_EXPORTER 'zipkin'; spans are not exported there",
        ),
    ],
    ids=["grpc", "unknown-exporter"],
)
def test_a_bad_setting_is_one_line_and_never_an_error(
    variables: dict[str, str], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    err = io.StringIO()
    assert build_providers(None, err=err) == Providers(None, None)
    assert err.getvalue() == problem + "\n"


def test_hango_run_trace_console_prints_the_demo_spans(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"NO_COLOR": "1"}
    done = subprocess.run(
        [
            sys.executable, "-m", "hango", "run", "--trace", "console",
            "--agent", str(REPO / "examples" / "demo" / "agent.toml"),
            "--db", f"sqlite:///{tmp_path / 'hango.db'}",
            "What are the open risks?",
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Two open risks" in done.stdout
    lines = done.stderr.splitlines()

    def printed(prefix: str) -> bool:
        return any(line.startswith(prefix) for line in lines)

    assert printed("invoke_agent demo  INTERNAL  ")
    assert printed("before_run repair_tool_calls  INTERNAL  ")
    assert printed("chat scripted:script.toml  CLIENT  ")
    assert printed("execute_tool search  INTERNAL  ")
    stack = ",".join(
        (
            "skills",
            "filesystem",
            "mcp",
            "repair_tool_calls",
            "todo",
            "repeat_call",
            "limits",
            "model_fallback",
            "prompt_cache",
            "memory",
            "human_in_the_loop",
            "tool_retry",
            "tool_allowlist",
        )
    )
    assert printed(f"    * agent.middleware_stack  hango.middleware.names={stack}")
    assert printed("    * middleware.repeat_call_blocked  hango.middleware.name=repeat_call")
    assert printed("    * agent.todos_updated  hango.todos.total=")


def test_the_overhead_bench_runs() -> None:
    # A smoke run: the bench checks each configuration's run and the span count itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-m", "bench.telemetry", "--quick", "--tool-calls", "3"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "| no SDK |" in done.stdout
    assert "one run of 3 tool calls (4 model calls, 11 spans with the SDK)" in done.stdout
