"""One OpenTelemetry SDK for the whole test session, read through ``otel``.

A global tracer or meter provider can be set once per process, so the session installs a
TracerProvider with an in-memory span exporter and a MeterProvider with an in-memory reader
(delta temporality: every collection holds only what happened since the previous one), and
``otel`` empties both before each test. hango looked its tracer and meter up at import, before
this ran: the API handed out proxies that now delegate to these providers, which is what lets a
program import hango first and configure telemetry later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_DELTA = {
    kind: AggregationTemporality.DELTA
    for kind in (
        Counter,
        UpDownCounter,
        Histogram,
        ObservableCounter,
        ObservableUpDownCounter,
        ObservableGauge,
    )
}


class Telemetry:
    """What the code under test exported since the last ``clear``."""

    def __init__(self, exporter: InMemorySpanExporter, reader: InMemoryMetricReader) -> None:
        self.exporter = exporter
        self.reader = reader
        self._points: list[tuple[str, Any]] = []

    def clear(self) -> None:
        self.exporter.clear()
        self.reader.get_metrics_data()  # drop the deltas recorded so far
        self._points = []

    # -- spans -----------------------------------------------------------------------

    def spans(self) -> list[ReadableSpan]:
        """Finished spans in the order they started."""
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"expected one span {name!r}, got {[s.name for s in self.spans()]}"
        return found[0]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        assert parent.context is not None
        return [
            s
            for s in self.spans()
            if s.parent is not None and s.parent.span_id == parent.context.span_id
        ]

    def events(self, name: str) -> list[tuple[ReadableSpan, Event]]:
        """Every event called ``name``, with the span it was recorded on."""
        return [(s, e) for s in self.spans() for e in s.events if e.name == name]

    def strings(self) -> list[str]:
        """Every string exported: span names, attribute keys and values, event names and their
        attributes, statuses, resources, links, and the attributes of every metric point."""

        def attrs(mapping: Any) -> Iterator[str]:
            for key, value in (mapping or {}).items():
                yield key
                yield from (str(v) for v in (value if isinstance(value, tuple) else (value,)))

        out: list[str] = []
        for span in self.exporter.get_finished_spans():
            out.append(span.name)
            out.extend(attrs(span.attributes))
            out.extend(attrs(span.resource.attributes))
            if span.status.description:
                out.append(span.status.description)
            for event in span.events:
                out.append(event.name)
                out.extend(attrs(event.attributes))
            for link in span.links:
                out.extend(attrs(link.attributes))
        self.points("")  # collect what is pending
        for _, point in self._points:
            out.extend(attrs(point.attributes))
        return out

    # -- metrics ---------------------------------------------------------------------

    def points(self, metric: str) -> list[Any]:
        """Data points of ``metric`` since the last ``clear`` (one per attribute set and
        collection: sum counters with ``total``)."""
        data = self.reader.get_metrics_data()
        if data is not None:
            for rm in data.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        self._points.extend((m.name, p) for p in m.data.data_points)
        return [p for name, p in self._points if name == metric]

    def total(self, metric: str, attributes: Mapping[str, Any] | None = None) -> float:
        """Sum of a counter's values (or a histogram's counts) whose attributes equal
        ``attributes`` (any attributes when None)."""
        out = 0.0
        for p in self.points(metric):
            if attributes is not None and dict(p.attributes) != dict(attributes):
                continue
            out += p.count if hasattr(p, "count") else p.value
        return out


@pytest.fixture(scope="session")
def otel_session() -> Telemetry:
    exporter = InMemorySpanExporter()
    tracer_provider = trace.get_tracer_provider()
    if not isinstance(tracer_provider, TracerProvider):
        tracer_provider = TracerProvider()
        trace.set_tracer_provider(tracer_provider)
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader(preferred_temporality=_DELTA)
    meter_provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)
    assert metrics.get_meter_provider() is meter_provider, (
        "another MeterProvider was installed before the telemetry tests; run them in their own "
        "process: uv run pytest tests/telemetry"
    )
    return Telemetry(exporter, reader)


@pytest.fixture
def otel(otel_session: Telemetry, monkeypatch: pytest.MonkeyPatch) -> Telemetry:
    # Content capture is the user's opt-in; a developer's shell must not turn it on here.
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    otel_session.clear()
    return otel_session
