"""Installing an OpenTelemetry SDK for the ``hango`` command.

Standard ``OTEL_*`` variables configure it (``OTEL_EXPORTER_OTLP_ENDPOINT`` turns on the OTLP
exporter from the ``hango[otlp]`` extra); ``--trace console`` prints spans to stderr.
"""

from __future__ import annotations

import os
import sys

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)


def configure_telemetry(trace_to: str | None) -> None:
    """Install a tracer provider if ``--trace console`` or an OTLP endpoint asks for one."""
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if trace_to is None and not endpoint:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": "hango"}))
    if trace_to == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
