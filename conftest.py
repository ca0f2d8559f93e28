"""Fixtures shared by every test folder of the workspace (core, plugins, cross-package)."""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs on asyncio and on trio (folders needing asyncio override it)."""
    return str(request.param)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def recording_span(
    exporter: InMemorySpanExporter,
) -> Iterator[Callable[[], AbstractContextManager[Span]]]:
    """``with recording_span(): ...`` makes a recording span current (without touching the
    global tracer provider), so ``hango.telemetry.record`` events land in ``exporter``."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    yield lambda: tracer.start_as_current_span("test")
    provider.shutdown()
