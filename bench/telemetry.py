"""Telemetry overhead: what hango's OpenTelemetry instrumentation costs a run.

::

    uv run python -m bench.telemetry                  # K = 10 tool calls per run
    uv run python -m bench.telemetry --tool-calls 50 --quick

One run of K tool calls (K + 1 model calls: ``run_loop`` over hango's ``ScriptedModel``, an
in-memory state, a no-op checkpoint, a chain of three pass-through middlewares) in four
configurations:

bare
    A hand-written loop doing the same work with the same model and tool: stream, accumulate,
    call the tool, append the result. No chain, no events, no argument validation, no telemetry.
    The floor.
off
    hango with its instrumentation stubbed out: ``hango.telemetry``'s tracer, ``chat_span`` and
    instruments replaced by objects that do nothing. Python cannot compile instrumentation out;
    this is as close as it gets (a span site still costs an attribute lookup and a
    ``nullcontext``).
no SDK
    hango as shipped, with no OpenTelemetry SDK installed: every call reaches the API's no-op
    tracer and the proxies of unconfigured instruments.
SDK
    hango with an SDK installed: a TracerProvider with a SimpleSpanProcessor into an
    InMemorySpanExporter (cleared after every run) and a MeterProvider with an
    InMemoryMetricReader. Spans and metric points are really built; nothing leaves the process.

A global provider can be installed once per process, so the run has two phases in one process:
bare / off / no SDK, then (after installing the SDK) bare / off / SDK. Within a phase the cases
are measured side by side (``bench.chain.measure``: rounds in random order, minimum of many
samples); ``off`` and ``bare`` appear in both phases, so the SDK-vs-no-SDK ratio is taken
through them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN

from bench.chain import PassBoth, echo, header, loop_runner, measure, new_state
from hango import telemetry
from hango.agent import spans
from hango.agent.chain import Chain
from hango.provider.messages import Message, Request, ToolResultBlock
from hango.provider.model import Accumulator
from hango.provider.scripted import ScriptedModel
from hango.tool.base import ToolContext

STACK_DEPTH = 3
Case = Callable[[], Awaitable[object]]


# -- the floor -------------------------------------------------------------------------------


def bare_runner(k: int) -> Case:
    """K model turns of one ``echo`` call each and a closing text turn, by hand."""
    model = ScriptedModel.from_turns(
        [{"tool_calls": [{"name": "echo", "input": {"text": "hi"}}]} for _ in range(k)]
        + [{"text": "done"}]
    )

    async def run() -> list[Message]:
        state = new_state()
        state.messages.append(Message.user("go"))
        while True:
            acc = Accumulator()
            async for event in model.stream(Request(model="bench", messages=tuple(state.messages))):
                acc.add(event)
            message = acc.response().message
            state.messages.append(message)
            if not message.tool_uses:
                return state.messages
            results = []
            for call in message.tool_uses:
                result = await echo.call(dict(call.input), ToolContext(state, call))
                results.append(ToolResultBlock(call.id, result.content, result.is_error))
            state.messages.append(Message("user", tuple(results)))

    return run


# -- instrumentation stubbed out -------------------------------------------------------------


class _Nothing:
    """Stands in for the tracer, the instruments and a ChatCall: every method does nothing."""

    _span = contextlib.nullcontext(INVALID_SPAN)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._span

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    add = finished = record


_NOTHING = _Nothing()
_NO_CHAT = contextlib.nullcontext(_NOTHING)
_STUBBED: dict[Any, dict[str, Any]] = {
    telemetry: {
        "tracer": _NOTHING,
        "before_run_duration": _NOTHING,
        "tool_short_circuits": _NOTHING,
        "repeat_blocked": _NOTHING,
        "operation_duration": _NOTHING,
        "token_usage": _NOTHING,
    },
    spans: {
        "chat_span": lambda *args, **kwargs: _NO_CHAT,
        "tool_span": lambda *args, **kwargs: _NO_CHAT,
    },
}


@contextlib.contextmanager
def instrumentation_off() -> Iterator[None]:
    saved = {
        (module, name): getattr(module, name)
        for module, stubs in _STUBBED.items()
        for name in stubs
    }
    for module, stubs in _STUBBED.items():
        for name, stub in stubs.items():
            setattr(module, name, stub)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def off(run: Case) -> Case:
    async def case() -> object:
        with instrumentation_off():
            return await run()

    return case


# -- the SDK ---------------------------------------------------------------------------------


def install_sdk() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(tracer_provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return exporter, reader


def with_sdk(run: Case, exporter: InMemorySpanExporter) -> Case:
    async def case() -> object:
        result = await run()
        exporter.clear()
        return result

    return case


# -- main ------------------------------------------------------------------------------------


def check(k: int, messages: Any) -> None:
    results = [r for m in messages for r in m.tool_results]
    if len(results) != k or any(r.is_error for r in results) or messages[-1].text != "done":
        raise RuntimeError(f"the run did not make {k} good tool calls: {messages!r}")


def table(phase1: Mapping[str, float], phase2: Mapping[str, float], k: int) -> list[str]:
    """µs per run and per tool call, and the ratios, each taken within one phase."""
    rows = [
        ("bare", phase1["bare"], phase1["bare"], phase1["off"]),
        ("off", phase1["off"], phase1["bare"], phase1["off"]),
        ("no SDK", phase1["noop"], phase1["bare"], phase1["off"]),
        ("SDK, in-memory exporter", phase2["sdk"], phase2["bare"], phase2["off"]),
    ]
    lines = [
        "| configuration | µs/run | µs per tool call | vs bare | vs off |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, ns, bare, stubbed in rows:
        lines.append(
            f"| {name} | {ns / 1000:.0f} | {ns / k / 1000:.1f} | {ns / bare:.2f}x "
            f"| {ns / stubbed:.3f}x |"
        )
    sdk_vs_noop = (phase2["sdk"] / phase2["off"]) / (phase1["noop"] / phase1["off"])
    calls = 2 * k + 1
    per_call_noop = (phase1["noop"] - phase1["off"]) / calls
    per_call_sdk = (phase2["sdk"] - phase2["off"]) / calls
    lines += [
        "",
        f"SDK vs no SDK (through `off`): {sdk_vs_noop:.2f}x. Per instrumented call ({calls} per "
        f"run: {k + 1} model calls, {k} tool calls), over `off`: no SDK "
        f"{per_call_noop / 1000:+.1f} µs, SDK {per_call_sdk / 1000:+.1f} µs.",
        f"`off` measured in both phases: {phase1['off'] / 1000:.0f} and "
        f"{phase2['off'] / 1000:.0f} µs/run; bare: {phase1['bare'] / 1000:.0f} and "
        f"{phase2['bare'] / 1000:.0f} µs/run.",
    ]
    return lines


async def main(args: argparse.Namespace) -> None:
    k = args.tool_calls
    stack = [PassBoth(f"mw{i}") for i in range(STACK_DEPTH)]
    hango_run = loop_runner(k, Chain.build(stack))
    bare_run = bare_runner(k)
    check(k, await bare_run())
    check(k, await hango_run())
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        raise RuntimeError("an SDK is already installed: the no-SDK phase cannot be measured")

    phase1 = await measure(
        {"bare": bare_run, "off": off(hango_run), "noop": hango_run},
        sample_ms=args.sample_ms,
        repeats=args.repeats,
        seed=1,
    )
    exporter, _ = install_sdk()
    check(k, await hango_run())
    spans = len(exporter.get_finished_spans())
    if spans != 2 * (k + 1) + k:
        raise RuntimeError(f"expected {2 * (k + 1) + k} spans per run, got {spans}")
    exporter.clear()
    phase2 = await measure(
        {"bare": bare_run, "off": off(hango_run), "sdk": with_sdk(hango_run, exporter)},
        sample_ms=args.sample_ms,
        repeats=args.repeats,
        seed=2,
    )
    print(f"# Telemetry overhead ({header(('hango', 'opentelemetry-sdk'))})")
    print(
        f"\none run of {k} tool calls ({k + 1} model calls, {spans} spans with the SDK), "
        f"{STACK_DEPTH} pass-through middlewares; {args.repeats} rounds of {args.sample_ms:g} "
        "ms samples (min per case)\n"
    )
    print("\n".join(table(phase1, phase2, k)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.telemetry", description=__doc__)
    parser.add_argument("--tool-calls", type=int, default=10, help="K tool calls per run")
    # Many short samples: on a shared machine the minimum of short samples is the one least
    # disturbed by other processes (about 3 runs of K = 10 fit in 5 ms).
    parser.add_argument("--repeats", type=int, default=300, help="rounds (min taken)")
    parser.add_argument("--sample-ms", type=float, default=5, help="ms per sample")
    parser.add_argument("--quick", action="store_true", help="a smoke run with small counts")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 5
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
