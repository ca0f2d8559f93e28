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

By default nothing here records user data: middlewares pass their name and a fixed reason, the
loop passes todo *statuses* only (never the content, which can be user data), and no message
text, tool argument or tool result reaches an attribute. Only when the user turns on
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` do the ``chat``, ``execute_tool`` and
``invoke_agent`` spans carry prompts, completions and tool calls (``hango.telemetry_content``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from hango import telemetry_content as content

if TYPE_CHECKING:
    from hango.provider.messages import Message, Request, ToolUseBlock, Usage
    from hango.provider.model import ModelResponse
    from hango.tool.base import ToolResult

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
TOOL_TYPE: Final = "gen_ai.tool.type"
INTERRUPT_ID: Final = "hango.interrupt.id"
INTERRUPT_NAME: Final = "hango.interrupt.name"
INTERRUPT_DECISION: Final = "hango.interrupt.decision"
ERROR_TYPE: Final = "error.type"
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
RESPONSE_ID: Final = "gen_ai.response.id"
RESPONSE_MODEL: Final = "gen_ai.response.model"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
TOKEN_TYPE: Final = "gen_ai.token.type"
# Content, recorded only when OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is on.
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
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


def model_attributes(model: object) -> dict[str, AttributeValue]:
    """What a span says about the model's provider: ``gen_ai.provider.name``, and
    ``server.address`` / ``server.port`` from the model's ``base_url`` when it has one (the
    providers' port defaults to the scheme's). Compute it once per run."""
    out: dict[str, AttributeValue] = {PROVIDER_NAME: provider_name(model)}
    base_url = getattr(model, "base_url", None)
    if isinstance(base_url, str):
        url = urlsplit(base_url)
        if url.hostname:
            out[SERVER_ADDRESS] = url.hostname
            try:
                port = url.port
            except ValueError:
                port = None
            if port is None:
                port = {"https": 443, "http": 80}.get(url.scheme)
            if port is not None:
                out[SERVER_PORT] = port
    return out


def _input_tokens(usage: Usage) -> int:
    # gen_ai.usage.input_tokens includes cached tokens, as the GenAI conventions require;
    # hango's Usage.input_tokens (like Anthropic's) counts only uncached ones.
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def _usage_attributes(usage: Usage) -> dict[str, AttributeValue]:
    return {
        INPUT_TOKENS: _input_tokens(usage),
        OUTPUT_TOKENS: usage.output_tokens,
        CACHE_READ_TOKENS: usage.cache_read_input_tokens,
        CACHE_CREATION_TOKENS: usage.cache_creation_input_tokens,
    }


def agent_model(span: Span, model: Mapping[str, AttributeValue], request_model: str) -> None:
    """Put the run's model on its ``invoke_agent`` span: ``model_attributes`` and
    ``gen_ai.request.model`` (the provider's model name, as sent in requests)."""
    if span.is_recording():
        span.set_attributes({**model, REQUEST_MODEL: request_model})


def agent_finished(span: Span, usage: Usage, messages: Sequence[Message]) -> None:
    """Close the ``invoke_agent`` span's account: this execution's token usage summed over its
    model calls (``gen_ai.usage.*``, as on ``chat``; none when a call's server reported no
    usage, as the sum would be too low). ``messages`` are the run's own, from its prompt on;
    with content capture on, the prompt becomes ``gen_ai.input.messages`` and a final
    assistant message ``gen_ai.output.messages``."""
    if not span.is_recording():
        return
    if usage.known:
        span.set_attributes(_usage_attributes(usage))
    if messages and content.capture_enabled():
        span.set_attribute(INPUT_MESSAGES, content.input_messages(messages[:1]))
        last = messages[-1]
        if len(messages) > 1 and last.role == "assistant":
            span.set_attribute(OUTPUT_MESSAGES, content.output_messages(last, "end_turn"))


class ChatCall:
    """The CLIENT span ``chat {model}`` of one model call and its metrics; a context manager.

    On exit ``gen_ai.client.operation.duration`` is recorded, with ``error.type`` (the
    exception's class name, as on the span) when the call raised. ``finished`` records the
    response.
    """

    __slots__ = ("_attributes", "_request", "_span_cm", "_start", "span")

    def __init__(self, request: Request, model: Mapping[str, AttributeValue]) -> None:
        self._attributes: dict[str, AttributeValue] = {
            OPERATION_NAME: "chat",
            **model,
            REQUEST_MODEL: request.model,
        }
        self._span_cm = tracer.start_as_current_span(
            f"chat {request.model}", kind=SpanKind.CLIENT, attributes=self._attributes
        )
        self._request = request
        self._start = 0.0
        self.span: Span = trace.INVALID_SPAN

    def __enter__(self) -> ChatCall:
        self.span = span = self._span_cm.__enter__()
        if span.is_recording():
            request = self._request
            span.set_attribute(REQUEST_MAX_TOKENS, request.max_tokens)
            if content.capture_enabled():
                span.set_attribute(INPUT_MESSAGES, content.input_messages(request.messages))
                if request.system:
                    span.set_attribute(
                        SYSTEM_INSTRUCTIONS, content.system_instructions(request.system)
                    )
        self._start = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        elapsed = time.perf_counter() - self._start
        # Metric attributes stay low-cardinality: no server.port, as the conventions advise.
        metric_attributes = {k: v for k, v in self._attributes.items() if k != SERVER_PORT}
        if exc is None:
            operation_duration.record(elapsed, metric_attributes)
        else:
            operation_duration.record(
                elapsed, {**metric_attributes, ERROR_TYPE: type(exc).__qualname__}
            )
        return self._span_cm.__exit__(exc_type, exc, tb)

    def finished(self, response: ModelResponse) -> None:
        """Set finish reason, response id and model, and token usage on the span (with content
        capture on, the completion too) and record ``gen_ai.client.token.usage``; no token
        counts at all when the server reported no usage (rather than zeros)."""
        span = self.span
        known = response.usage.known
        if span.is_recording():
            span.set_attribute(FINISH_REASONS, (response.stop_reason.value,))
            if known:
                span.set_attributes(_usage_attributes(response.usage))
            if response.id:
                span.set_attribute(RESPONSE_ID, response.id)
            if response.model:
                span.set_attribute(RESPONSE_MODEL, response.model)
            if content.capture_enabled():
                span.set_attribute(
                    OUTPUT_MESSAGES,
                    content.output_messages(response.message, response.stop_reason.value),
                )
        if not known:
            return
        metric_attributes = {k: v for k, v in self._attributes.items() if k != SERVER_PORT}
        token_usage.record(
            _input_tokens(response.usage), {**metric_attributes, TOKEN_TYPE: "input"}
        )
        token_usage.record(
            response.usage.output_tokens, {**metric_attributes, TOKEN_TYPE: "output"}
        )


def chat_span(request: Request, model: Mapping[str, AttributeValue]) -> ChatCall:
    """The ``chat`` span and metrics of one model call, ``model`` being the run's
    ``model_attributes``: ``with chat_span(req, model) as call: ... call.finished(response)``."""
    return ChatCall(request, model)


class ToolCall:
    """The span ``execute_tool {tool}`` of one tool call; a context manager whose ``finished``
    records the result: an error result sets the span's status to ERROR with
    ``error.type=tool_error`` (the message stays out: it can quote user data)."""

    __slots__ = ("_call", "_span_cm", "span")

    def __init__(self, call: ToolUseBlock) -> None:
        self._call = call
        self._span_cm = tracer.start_as_current_span(
            f"execute_tool {call.name}",
            attributes={
                OPERATION_NAME: "execute_tool",
                TOOL_NAME: call.name,
                TOOL_CALL_ID: call.id,
                # Every hango tool runs in the client, which the conventions call a function.
                TOOL_TYPE: "function",
            },
        )
        self.span: Span = trace.INVALID_SPAN

    def __enter__(self) -> ToolCall:
        self.span = span = self._span_cm.__enter__()
        if span.is_recording() and content.capture_enabled():
            span.set_attribute(TOOL_CALL_ARGUMENTS, content.tool_arguments(self._call.input))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return self._span_cm.__exit__(exc_type, exc, tb)

    def finished(self, result: ToolResult) -> None:
        span = self.span
        if not span.is_recording():
            return
        if result.is_error:
            span.set_attribute(ERROR_TYPE, "tool_error")
            span.set_status(Status(StatusCode.ERROR, "tool_error"))
        if content.capture_enabled():
            span.set_attribute(TOOL_CALL_RESULT, result.content)


def tool_span(call: ToolUseBlock) -> ToolCall:
    """The ``execute_tool`` span of ``call``: ``with tool_span(call) as t: ... t.finished(r)``."""
    return ToolCall(call)
