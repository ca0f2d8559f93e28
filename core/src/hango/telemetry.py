"""OpenTelemetry names, instruments and the small API middlewares use to say what they did.

Span names and ``gen_ai.*`` attributes follow the OpenTelemetry GenAI semantic conventions
(https://opentelemetry.io/docs/specs/semconv/gen-ai/); ``hango.*`` names and the
``agent.*`` / ``middleware.*`` events come from the middleware-chain spec. Every event and
metric is described in ``docs/telemetry.md``.

``tracer`` and ``meter`` exist from import, and an SDK may be installed later
(``trace.set_tracer_provider`` / ``metrics.set_meter_provider``): ``tracer`` looks the provider
up until one is installed, and the meter and its instruments are the API's proxies, which
delegate once a MeterProvider is set. Without an SDK a span costs a provider check and a shared
``nullcontext``, and an instrument call reaches a proxy that does nothing (measured in
``bench/telemetry.py``).

Nothing here ever receives user data: middlewares pass their name and a fixed reason, the
loop passes todo *statuses* only (never the content, which can be user data), and no message
text, tool argument or tool result reaches an attribute.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Final

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from hango.provider.messages import Request
    from hango.provider.model import ModelResponse

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

# -- attribute names ---------------------------------------------------------------------

MIDDLEWARE_NAME: Final = "hango.middleware.name"
MIDDLEWARE_NAMES: Final = "hango.middleware.names"
REASON: Final = "hango.reason"
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
INTERRUPT_ID: Final = "hango.interrupt.id"
INTERRUPT_NAME: Final = "hango.interrupt.name"
INTERRUPT_DECISION: Final = "hango.interrupt.decision"
ERROR_TYPE: Final = "error.type"
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
TODOS_TOTAL: Final = "hango.todos.total"
TODOS_PENDING: Final = "hango.todos.pending"
TODOS_IN_PROGRESS: Final = "hango.todos.in_progress"
TODOS_COMPLETED: Final = "hango.todos.completed"
# Langfuse shows ``langfuse.observation.metadata.*`` attributes as the observation's metadata.
LANGFUSE_TODOS_TOTAL: Final = "langfuse.observation.metadata.todos_total"
LANGFUSE_TODOS_COMPLETED: Final = "langfuse.observation.metadata.todos_completed"

# -- events (from the middleware-chain spec) ---------------------------------------------

MIDDLEWARE_STACK: Final = "agent.middleware_stack"
REQUEST_REWRITTEN: Final = "middleware.request_rewritten"
SHORT_CIRCUITED: Final = "middleware.short_circuited"
RETRIED: Final = "middleware.retried"
REPEAT_CALL_BLOCKED: Final = "middleware.repeat_call_blocked"
STATE_MISSING: Final = "middleware.state_missing"
TODOS_UPDATED: Final = "agent.todos_updated"
# A middleware paused a run for a decision / a person decided / the resumed run read it.
INTERRUPT_RAISED: Final = "agent.interrupt_raised"
INTERRUPT_DECIDED: Final = "agent.interrupt_decided"
INTERRUPT_RESUMED: Final = "agent.interrupt_resumed"

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
    "hango.middleware.before_run.duration",
    unit="s",
    description="Time one middleware's before_run hook took, by hango.middleware.name",
    explicit_bucket_boundaries_advisory=_HOOK_BUCKETS,
)
tool_short_circuits: Final = meter.create_counter(
    "hango.middleware.tool_short_circuits",
    unit="{call}",
    description="Calls a middleware answered without calling the next handler",
)
repeat_blocked: Final = meter.create_counter(
    "hango.middleware.repeat_blocked",
    unit="{call}",
    description="Identical tool calls blocked by repeat-call detection, by gen_ai.tool.name",
)
operation_duration: Final = meter.create_histogram(
    "gen_ai.client.operation.duration",
    unit="s",
    description="GenAI operation duration",
    explicit_bucket_boundaries_advisory=_OPERATION_BUCKETS,
)
token_usage: Final = meter.create_histogram(
    "gen_ai.client.token.usage",
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
    "openai"), ``"hango.scripted"`` for a ScriptedModel, else ``"hango." + class name``."""
    declared = getattr(model, "provider_name", None)
    if isinstance(declared, str):
        return declared
    from hango.provider.scripted import ScriptedModel

    return "hango.scripted" if isinstance(model, ScriptedModel) else f"hango.{type(model).__name__}"


class ChatCall:
    """The CLIENT span ``chat {model}`` of one model call and its metrics; a context manager.

    On exit ``gen_ai.client.operation.duration`` is recorded, with ``error.type`` (the
    exception's class name, as on the span) when the call raised. ``finished`` records the
    response.
    """

    __slots__ = ("_attributes", "_max_tokens", "_span_cm", "_start", "span")

    def __init__(self, request: Request, provider: str) -> None:
        self._attributes: dict[str, AttributeValue] = {
            OPERATION_NAME: "chat",
            PROVIDER_NAME: provider,
            REQUEST_MODEL: request.model,
        }
        self._span_cm = tracer.start_as_current_span(
            f"chat {request.model}", kind=SpanKind.CLIENT, attributes=self._attributes
        )
        self._max_tokens = request.max_tokens
        self._start = 0.0
        self.span: Span = trace.INVALID_SPAN

    def __enter__(self) -> ChatCall:
        self.span = span = self._span_cm.__enter__()
        if span.is_recording():
            span.set_attribute(REQUEST_MAX_TOKENS, self._max_tokens)
        self._start = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        elapsed = time.perf_counter() - self._start
        if exc is None:
            operation_duration.record(elapsed, self._attributes)
        else:
            operation_duration.record(
                elapsed, {**self._attributes, ERROR_TYPE: type(exc).__qualname__}
            )
        return self._span_cm.__exit__(exc_type, exc, tb)

    def finished(self, response: ModelResponse) -> None:
        """Set finish reason and token usage on the span and record ``gen_ai.client.token.usage``
        (no token counts at all when the server reported no usage).

        ``gen_ai.usage.input_tokens`` includes cached tokens, as the GenAI conventions require;
        hango's ``Usage.input_tokens`` (like Anthropic's) counts only uncached ones.
        """
        usage = response.usage
        if not usage.known:  # the server reported none: record no counts rather than zeros
            if self.span.is_recording():
                self.span.set_attribute(FINISH_REASONS, (response.stop_reason.value,))
            return
        input_tokens = (
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        )
        if self.span.is_recording():
            self.span.set_attributes(
                {
                    FINISH_REASONS: (response.stop_reason.value,),
                    INPUT_TOKENS: input_tokens,
                    OUTPUT_TOKENS: usage.output_tokens,
                    CACHE_READ_TOKENS: usage.cache_read_input_tokens,
                    CACHE_CREATION_TOKENS: usage.cache_creation_input_tokens,
                }
            )
        token_usage.record(input_tokens, {**self._attributes, TOKEN_TYPE: "input"})
        token_usage.record(usage.output_tokens, {**self._attributes, TOKEN_TYPE: "output"})


def chat_span(request: Request, provider: str) -> ChatCall:
    """The ``chat`` span and metrics of one model call: ``with chat_span(req, name) as call:``."""
    return ChatCall(request, provider)
