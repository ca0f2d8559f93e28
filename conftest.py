"""Fixtures shared by every test folder of the workspace (core, plugins, cross-package)."""

import importlib
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

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


PLUGIN_MODULE = """
import hango.middleware

class Mw:
    name = {name!r}
    {methods}

@hango.middleware.hookimpl
def hango_middleware(config):
    return Mw()
"""

#: ``install(dist, plugin, middleware, body=None)``: see the ``install`` fixture.
Install = Callable[..., None]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Install a one-module distribution ``dist`` (version 1.2.3) declaring the ``hango`` entry
    point ``plugin``: a real dist-info on sys.path, found by importlib.metadata. ``body`` is the
    module's source (default: one prompt-contributor middleware named ``middleware``)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def make(dist: str, plugin: str, middleware: str, body: str | None = None) -> None:
        module = f"hangotest_{dist.replace('-', '_')}"
        methods = "def system_blocks(self, state):\n        return []"
        source = (
            body if body is not None else PLUGIN_MODULE.format(name=middleware, methods=methods)
        )
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        info = tmp_path / f"{dist.replace('-', '_')}-1.2.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.2.3\n")
        (info / "entry_points.txt").write_text(f"[hango]\n{plugin} = {module}\n")
        created.append(module)
        importlib.invalidate_caches()

    yield make
    for module in created:
        sys.modules.pop(module, None)
