"""OpenTelemetry for hango: the tracer, the meter's instruments and ``record``, the one call a
middleware makes to say what it did.

The package: ``names`` (every attribute, event, span and metric name: the contract), this
module (tracer, instruments, ``record``), ``setup`` (the SDK the ``hango`` command installs).
The spans of runs, model calls and tool calls are opened beside their users
(``hango.agent.spans``). It imports nothing else from hango, so every layer may use it.

Span names and ``gen_ai.*`` attributes follow the OpenTelemetry GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/); ``hango.*`` names and the
``agent.*`` / ``middleware.*`` events come from the middleware-chain spec. Every event and
metric is described in ``docs/reference/telemetry.md``.

``tracer`` and ``meter`` exist from import, and an SDK may be installed later
(``trace.set_tracer_provider`` / ``metrics.set_meter_provider``): ``tracer`` looks the provider
up until one is installed, and the meter and its instruments are the API's proxies, which
delegate once a MeterProvider is set. Without an SDK a span costs a provider check and a shared
``nullcontext``, and an instrument call reaches a proxy that does nothing (measured in
``bench/telemetry.py``).

By default nothing here records user data: middlewares pass their name and a fixed reason, the
loop passes todo *statuses* only (never the content, which can be user data), and no message
text, tool argument or tool result reaches an attribute. Only when the user turns on
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` do the ``chat``, ``execute_tool`` and
``invoke_agent`` spans carry prompts, completions and tool calls (``hango.agent.span_content``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Final

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from hango.telemetry.names import (
    AGENT_ID,
    AGENT_NAME,
    BEFORE_RUN_DURATION_METRIC,
    BEFORE_RUN_SPAN,
    CACHE_CREATION_TOKENS,
    CACHE_READ_TOKENS,
    CONVERSATION_ID,
    DECIDE_RUN_SPAN,
    DIAGNOSE_SPAN,
    ERROR_TYPE,
    FINISH_REASONS,
    HTTP_STATUS_CODE,
    INPUT_MESSAGES,
    INPUT_TOKENS,
    INTERRUPT_DECIDED,
    INTERRUPT_DECISION,
    INTERRUPT_ID,
    INTERRUPT_NAME,
    INTERRUPT_RAISED,
    INTERRUPT_RESUMED,
    LANGFUSE_TODOS_COMPLETED,
    LANGFUSE_TODOS_TOTAL,
    MIDDLEWARE_NAME,
    MIDDLEWARE_NAMES,
    MIDDLEWARE_STACK,
    OPERATION_DURATION_METRIC,
    OPERATION_NAME,
    OUTPUT_MESSAGES,
    OUTPUT_TOKENS,
    PROVIDER_NAME,
    PROVIDER_RETRY,
    REASON,
    REPEAT_BLOCKED_METRIC,
    REPEAT_CALL_BLOCKED,
    REQUEST_MAX_TOKENS,
    REQUEST_MODEL,
    REQUEST_REWRITTEN,
    RESPONSE_ID,
    RESPONSE_MODEL,
    RETRIED,
    RETRY_ATTEMPT,
    RETRY_DELAY_S,
    RUN_ID,
    SERVER_ADDRESS,
    SERVER_PORT,
    SHORT_CIRCUITED,
    STATE_MISSING,
    SYSTEM_INSTRUCTIONS,
    TODOS_COMPLETED,
    TODOS_IN_PROGRESS,
    TODOS_PENDING,
    TODOS_TOTAL,
    TODOS_UPDATED,
    TOKEN_TYPE,
    TOKEN_USAGE_METRIC,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_CALL_RESULT,
    TOOL_NAME,
    TOOL_SHORT_CIRCUITS_METRIC,
    TOOL_TYPE,
    TURN,
)

_NO_SPAN: Final = contextlib.nullcontext(trace.INVALID_SPAN)

if hasattr(trace, "_TRACER_PROVIDER"):

    def _provider_installed() -> bool:
        # The global the API's own ProxyTracer reads. ``trace.get_tracer_provider()`` asks the
        # same question but looks an environment variable up on every call, which measured as
        # most of a no-SDK span's cost (bench/telemetry.py).
        return trace._TRACER_PROVIDER is not None

else:  # pragma: no cover - an API without that global: the public, slower question

    def _provider_installed() -> bool:
        return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


class HangoTracer:
    """hango's tracer: the global provider's tracer "hango" once a provider is installed.

    Until then ``start_as_current_span`` returns one shared ``nullcontext`` holding the API's
    invalid (non-recording) span: with no provider nothing can record, and the API's no-op path
    (three nested generator context managers and a context attach per span) made a no-SDK run
    measurably slower (``bench/telemetry.py``).

    An exception leaving a span marks it failed with ``error.type`` (see ``mark_error``) instead
    of the SDK's exception event: that event carries the message, which can quote user data.
    """

    __slots__ = ("_real",)

    def __init__(self) -> None:
        self._real: trace.Tracer | None = None
        # Loads a provider named by OTEL_PYTHON_TRACER_PROVIDER, as the API does on first use.
        trace.get_tracer_provider()

    def start_as_current_span(
        self,
        name: str,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> AbstractContextManager[Span]:
        """The span ``name`` as the current span for the ``with`` block (see
        ``opentelemetry.trace.Tracer.start_as_current_span``)."""
        real = self._real
        if real is None:
            if not _provider_installed():
                return _NO_SPAN
            real = self._real = trace.get_tracer("hango")
        return _SpanScope(
            real.start_as_current_span(
                name,
                kind=kind,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            )
        )


class _SpanScope:
    """The SDK's ``start_as_current_span`` context, marking the span failed on an exception."""

    __slots__ = ("_scope", "_span")

    def __init__(self, scope: AbstractContextManager[Span]) -> None:
        self._scope = scope
        self._span: Span = trace.INVALID_SPAN

    def __enter__(self) -> Span:
        self._span = self._scope.__enter__()
        return self._span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if exc is not None:
            mark_error(self._span, exc)
        return self._scope.__exit__(exc_type, exc, tb)


tracer: Final = HangoTracer()
meter: Final = metrics.get_meter("hango")

# -- metrics -----------------------------------------------------------------------------

# GenAI semconv advice for gen_ai.client.operation.duration and gen_ai.client.token.usage.
_OPERATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_TOKEN_BUCKETS: Final = tuple(4.0**i for i in range(14))  # 1, 4, 16, ... 67108864
# A before_run hook is usually a millisecond; the SDK's default buckets (0, 5, 10, ... 10000)
# assume milliseconds and would put every hook in the first one.
_HOOK_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)

before_run_duration: Final = meter.create_histogram(
    BEFORE_RUN_DURATION_METRIC,
    unit="s",
    description="Time one middleware's before_run hook took, by hango.middleware.name",
    explicit_bucket_boundaries_advisory=_HOOK_BUCKETS,
)
tool_short_circuits: Final = meter.create_counter(
    TOOL_SHORT_CIRCUITS_METRIC,
    unit="{call}",
    description="Calls a middleware answered without calling the next handler",
)
repeat_blocked: Final = meter.create_counter(
    REPEAT_BLOCKED_METRIC,
    unit="{call}",
    description="Identical tool calls blocked by repeat-call detection, by gen_ai.tool.name",
)
operation_duration: Final = meter.create_histogram(
    OPERATION_DURATION_METRIC,
    unit="s",
    description="GenAI operation duration",
    explicit_bucket_boundaries_advisory=_OPERATION_BUCKETS,
)
token_usage: Final = meter.create_histogram(
    TOKEN_USAGE_METRIC,
    unit="{token}",
    description="Number of input and output tokens used",
    explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
)


def record(
    event: str,
    *,
    middleware: str,
    reason: str | None = None,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> None:
    """Add ``event`` to the current span with ``hango.middleware.name`` and an optional reason.

    This is the one call a middleware makes to report that it rewrote a request
    (``REQUEST_REWRITTEN``), short-circuited (``SHORT_CIRCUITED``), retried (``RETRIED``) or
    blocked a repeated call (``REPEAT_CALL_BLOCKED``). The current span is the ``turn`` span
    inside a model wrapper and the ``execute_tool`` span inside a tool wrapper.

    ``SHORT_CIRCUITED`` also adds 1 to ``hango.middleware.tool_short_circuits`` (attributes
    ``hango.middleware.name`` and, when given in ``attributes``, ``gen_ai.tool.name``);
    ``REPEAT_CALL_BLOCKED`` adds 1 to ``hango.middleware.repeat_blocked`` (attribute
    ``gen_ai.tool.name``). Counters count even when the span is not sampled.

    ``reason`` is a short fixed phrase ("max_tokens capped", "tool not allowed"), and
    ``attributes`` low-cardinality names: never user data (todo content, message text, tool
    arguments). Example::

        telemetry.record(telemetry.SHORT_CIRCUITED, middleware=self.name,
                         reason="tool not allowed", attributes={telemetry.TOOL_NAME: name})
    """
    if event == SHORT_CIRCUITED:
        counted: dict[str, AttributeValue] = {MIDDLEWARE_NAME: middleware}
        if attributes and TOOL_NAME in attributes:
            counted[TOOL_NAME] = attributes[TOOL_NAME]
        tool_short_circuits.add(1, counted)
    elif event == REPEAT_CALL_BLOCKED:
        tool = attributes.get(TOOL_NAME) if attributes else None
        repeat_blocked.add(1, {TOOL_NAME: tool} if tool is not None else None)
    span = trace.get_current_span()
    if not span.is_recording():
        return
    attrs: dict[str, AttributeValue] = {MIDDLEWARE_NAME: middleware}
    if reason is not None:
        attrs[REASON] = reason
    if attributes:
        attrs.update(attributes)
    span.add_event(event, attrs)


def record_todos(statuses: Iterable[str]) -> None:
    """Record ``agent.todos_updated`` on the current span from the todos' statuses.

    The event carries ``hango.todos.total`` / ``.pending`` / ``.in_progress`` / ``.completed``;
    the span also gets ``langfuse.observation.metadata.todos_total`` / ``todos_completed``.
    Only statuses are taken, so a todo's content cannot reach telemetry; a status outside the
    three known ones counts in the total only.
    """
    span = trace.get_current_span()
    if not span.is_recording():
        return
    counts = {"pending": 0, "in_progress": 0, "completed": 0}
    total = 0
    for status in statuses:
        total += 1
        if status in counts:
            counts[status] += 1
    span.add_event(
        TODOS_UPDATED,
        {
            TODOS_TOTAL: total,
            TODOS_PENDING: counts["pending"],
            TODOS_IN_PROGRESS: counts["in_progress"],
            TODOS_COMPLETED: counts["completed"],
        },
    )
    span.set_attributes(
        {LANGFUSE_TODOS_TOTAL: total, LANGFUSE_TODOS_COMPLETED: counts["completed"]}
    )


def mark_error(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed: status ERROR and ``error.type``, both the exception's class name.

    The message is left out on purpose: it can quote user data (the run record keeps it).
    """
    if span.is_recording():
        error = type(exc).__qualname__
        span.set_attribute(ERROR_TYPE, error)
        span.set_status(Status(StatusCode.ERROR, error))


def provider_name(model: object) -> str:
    """``gen_ai.provider.name`` for ``model``: its ``provider_name`` attribute ("anthropic",
    "openai", ``"hango.scripted"`` for a ScriptedModel), else ``"hango." + class name``."""
    declared = getattr(model, "provider_name", None)
    if isinstance(declared, str):
        return declared
    return f"hango.{type(model).__name__}"


__all__ = [
    "AGENT_ID",
    "AGENT_NAME",
    "BEFORE_RUN_DURATION_METRIC",
    "BEFORE_RUN_SPAN",
    "CACHE_CREATION_TOKENS",
    "CACHE_READ_TOKENS",
    "CONVERSATION_ID",
    "DECIDE_RUN_SPAN",
    "DIAGNOSE_SPAN",
    "ERROR_TYPE",
    "FINISH_REASONS",
    "HTTP_STATUS_CODE",
    "INPUT_MESSAGES",
    "INPUT_TOKENS",
    "INTERRUPT_DECIDED",
    "INTERRUPT_DECISION",
    "INTERRUPT_ID",
    "INTERRUPT_NAME",
    "INTERRUPT_RAISED",
    "INTERRUPT_RESUMED",
    "LANGFUSE_TODOS_COMPLETED",
    "LANGFUSE_TODOS_TOTAL",
    "MIDDLEWARE_NAME",
    "MIDDLEWARE_NAMES",
    "MIDDLEWARE_STACK",
    "OPERATION_DURATION_METRIC",
    "OPERATION_NAME",
    "OUTPUT_MESSAGES",
    "OUTPUT_TOKENS",
    "PROVIDER_NAME",
    "PROVIDER_RETRY",
    "REASON",
    "REPEAT_BLOCKED_METRIC",
    "REPEAT_CALL_BLOCKED",
    "REQUEST_MAX_TOKENS",
    "REQUEST_MODEL",
    "REQUEST_REWRITTEN",
    "RESPONSE_ID",
    "RESPONSE_MODEL",
    "RETRIED",
    "RETRY_ATTEMPT",
    "RETRY_DELAY_S",
    "RUN_ID",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "SHORT_CIRCUITED",
    "STATE_MISSING",
    "SYSTEM_INSTRUCTIONS",
    "TODOS_COMPLETED",
    "TODOS_IN_PROGRESS",
    "TODOS_PENDING",
    "TODOS_TOTAL",
    "TODOS_UPDATED",
    "TOKEN_TYPE",
    "TOKEN_USAGE_METRIC",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_ID",
    "TOOL_CALL_RESULT",
    "TOOL_NAME",
    "TOOL_SHORT_CIRCUITS_METRIC",
    "TOOL_TYPE",
    "TURN",
    "HangoTracer",
    "before_run_duration",
    "mark_error",
    "meter",
    "operation_duration",
    "provider_name",
    "record",
    "record_todos",
    "repeat_blocked",
    "token_usage",
    "tool_short_circuits",
    "tracer",
]
