"""Installing an OpenTelemetry SDK for the ``hango`` command.

Configuration is the standard ``OTEL_*`` environment (read by the SDK and the exporters
themselves: endpoint, headers, sampler, batch and export intervals, resource):

- ``OTEL_SDK_DISABLED=true`` installs nothing (``--trace console`` still prints).
- Traces go to OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, or when ``OTEL_TRACES_EXPORTER`` names
  ``otlp``; ``OTEL_TRACES_EXPORTER`` may also name ``console`` (the SDK's JSON) or ``none``.
- Metrics are exported only when asked for, by ``OTEL_METRICS_EXPORTER`` (``otlp``,
  ``console``) or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``: trace backends such as Jaeger and
  Langfuse accept no metrics, so pointing ``OTEL_EXPORTER_OTLP_ENDPOINT`` at one must not
  produce failing metric exports.
- ``--trace console`` prints every span, one compact block per span, on stderr once the run is
  over (when the command flushes the provider, or at exit): never inside the streamed answer.

OTLP needs the ``hango[otlp]`` extra (``opentelemetry-exporter-otlp-proto-http``), which speaks
``http/protobuf`` only. Telemetry never stops a run: a problem (missing extra, unsupported
protocol, unknown exporter name) is reported in one line on stderr and that exporter is skipped.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import TextIO

from attrs import frozen
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

_OTLP_MISSING = "the OTLP exporter is not installed (pip install 'hango[otlp]')"


@frozen
class Providers:
    """What ``build_providers`` made; ``None`` where no exporter asked for a provider."""

    tracer_provider: TracerProvider | None
    meter_provider: MeterProvider | None


def configure_telemetry(trace_to: str | None, *, err: TextIO | None = None) -> Providers:
    """Build providers from ``--trace`` and the environment and install them globally.

    Installs nothing when nothing asks for telemetry, so hango keeps the API's no-op. A global
    provider can be set once per process: call this once, at start-up. Problems are printed on
    ``err`` (default stderr).
    """
    providers = build_providers(trace_to, err=err)
    if providers.tracer_provider is not None:
        trace.set_tracer_provider(providers.tracer_provider)
    if providers.meter_provider is not None:
        metrics.set_meter_provider(providers.meter_provider)
    return providers


def build_providers(trace_to: str | None, *, err: TextIO | None = None) -> Providers:
    """The tracer and meter providers ``trace_to`` (``"console"`` or None) and the ``OTEL_*``
    environment ask for, not installed. Problems are printed on ``err`` (default stderr)."""
    env = os.environ
    out = sys.stderr if err is None else err

    def warn(problem: str) -> None:
        print(f"hango: telemetry: {problem}", file=out)

    disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    span_processors: list[SpanProcessor] = []
    if trace_to == "console":
        span_processors.append(PrintAfterRun(out))
    metric_readers: list[MetricReader] = []
    if not disabled:
        for name in _exporter_names(env, "TRACES"):
            span_exporter = _span_exporter(name, env, out, warn)
            if span_exporter is not None:
                span_processors.append(
                    SimpleSpanProcessor(span_exporter)
                    if name == "console"
                    else BatchSpanProcessor(span_exporter)
                )
        for name in _exporter_names(env, "METRICS"):
            metric_exporter = _metric_exporter(name, env, out, warn)
            if metric_exporter is not None:
                metric_readers.append(PeriodicExportingMetricReader(metric_exporter))
    if not span_processors and not metric_readers:
        return Providers(None, None)
    resource = _resource()
    tracer_provider = None
    if span_processors:
        tracer_provider = TracerProvider(resource=resource)
        for processor in span_processors:
            tracer_provider.add_span_processor(processor)
    meter_provider = (
        MeterProvider(resource=resource, metric_readers=metric_readers) if metric_readers else None
    )
    return Providers(tracer_provider, meter_provider)


class PrintAfterRun(SpanProcessor):
    """Keeps the spans that end and prints them (``format_span``), in the order they started,
    when flushed or shut down: the command flushes after the run, so span lines never land
    inside the streamed answer, and a trace reads from ``invoke_agent`` down."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._spans: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self._spans.append(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            spans, self._spans = self._spans, []
        for span in sorted(spans, key=lambda s: s.start_time or 0):
            self._out.write(format_span(span))
        self._out.flush()
        return True

    def shutdown(self) -> None:
        self.force_flush()


def _exporter_names(env: Mapping[str, str], signal: str) -> list[str]:
    """Exporter names for ``signal`` ("TRACES" or "METRICS"): ``OTEL_<signal>_EXPORTER`` when
    set, else ``otlp`` when an endpoint that applies to the signal is set."""
    named = env.get(f"OTEL_{signal}_EXPORTER")
    if named is not None:
        names = [n.strip().lower() for n in named.split(",") if n.strip()]
        return [] if "none" in names else names
    endpoints = [f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"]
    if signal == "TRACES":
        endpoints.append("OTEL_EXPORTER_OTLP_ENDPOINT")
    return ["otlp"] if any(env.get(e) for e in endpoints) else []


def _protocol_problem(env: Mapping[str, str], signal: str) -> str | None:
    protocol = env.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol.strip() == "http/protobuf":
        return None
    return f"OTLP protocol {protocol!r} is not supported (only http/protobuf)"


def _span_exporter(
    name: str, env: Mapping[str, str], out: TextIO, warn: Callable[[str], None]
) -> SpanExporter | None:
    if name == "console":
        return ConsoleSpanExporter(out=out)
    if name != "otlp":
        warn(f"unknown OTEL_TRACES_EXPORTER {name!r}; spans are not exported there")
        return None
    problem = _protocol_problem(env, "TRACES")
    if problem is not None:
        warn(f"{problem}; spans are not exported")
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        warn(f"{_OTLP_MISSING}; spans are not exported")
        return None
    return OTLPSpanExporter()


def _metric_exporter(
    name: str, env: Mapping[str, str], out: TextIO, warn: Callable[[str], None]
) -> MetricExporter | None:
    if name == "console":
        return ConsoleMetricExporter(out=out)
    if name != "otlp":
        warn(f"unknown OTEL_METRICS_EXPORTER {name!r}; metrics are not exported there")
        return None
    problem = _protocol_problem(env, "METRICS")
    if problem is not None:
        warn(f"{problem}; metrics are not exported")
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    except ImportError:
        warn(f"{_OTLP_MISSING}; metrics are not exported")
        return None
    return OTLPMetricExporter()


def _resource() -> Resource:
    """The SDK's resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, SDK facts) with
    ``service.name`` "hango" and hango's ``service.version`` where those say nothing."""
    detected = Resource.create()
    own: dict[str, str] = {}
    service = detected.attributes.get(SERVICE_NAME)
    if not isinstance(service, str) or service.startswith("unknown_service"):
        own[SERVICE_NAME] = "hango"
    if SERVICE_VERSION not in detected.attributes:
        with contextlib.suppress(PackageNotFoundError):
            own[SERVICE_VERSION] = version("hango")
    return detected.merge(Resource(own))


def format_span(span: ReadableSpan) -> str:
    """One compact block per span for ``--trace console``: name, kind, duration, status (when
    set) and ids, then the attributes, then one ``*`` line per event::

        invoke_agent demo  INTERNAL  812.4 ms  trace 5c1d...  span 9a0b...  parent -
            gen_ai.operation.name=invoke_agent  gen_ai.agent.name=demo  ...
            * agent.middleware_stack  hango.middleware.names=repair_tool_calls,todo,...
    """
    ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
    status = "" if span.status.is_unset else f"  {span.status.status_code.name}"
    head = f"{span.name}  {span.kind.name}  {ms:.1f} ms{status}"
    ctx = span.context
    if ctx is not None:
        parent = f"{span.parent.span_id:016x}" if span.parent is not None else "-"
        head += f"  trace {ctx.trace_id:032x}  span {ctx.span_id:016x}  parent {parent}"
    lines = [head]
    if span.attributes:
        lines.append("    " + "  ".join(f"{k}={_value(v)}" for k, v in span.attributes.items()))
    for event in span.events:
        attrs = "  ".join(f"{k}={_value(v)}" for k, v in (event.attributes or {}).items())
        lines.append(f"    * {event.name}  {attrs}".rstrip())
    return "\n".join(lines) + "\n"


def _value(value: object) -> str:
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)
