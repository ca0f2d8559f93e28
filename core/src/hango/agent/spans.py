"""The spans of a run, a model call and a tool call, with their GenAI attributes and metrics.

The loop opens ``chat`` and ``execute_tool`` spans through ``chat_span`` / ``tool_span``; the
runner puts the run's model and token account on its ``invoke_agent`` span through
``agent_model`` / ``agent_finished``. Names come from ``hango.telemetry.names``; the tracer and
the instruments are looked up on ``hango.telemetry`` at each use (bench/telemetry.py swaps
them). With content capture on (``hango.agent.span_content``) the spans also carry prompts,
completions and tool calls; by default no user data at all.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from hango import telemetry
from hango.agent import span_content as content
from hango.telemetry.names import (
    CACHE_CREATION_TOKENS,
    CACHE_READ_TOKENS,
    ERROR_TYPE,
    FINISH_REASONS,
    INPUT_MESSAGES,
    INPUT_TOKENS,
    OPERATION_NAME,
    OUTPUT_MESSAGES,
    OUTPUT_TOKENS,
    PROVIDER_NAME,
    REQUEST_MAX_TOKENS,
    REQUEST_MODEL,
    RESPONSE_ID,
    RESPONSE_MODEL,
    SERVER_ADDRESS,
    SERVER_PORT,
    SYSTEM_INSTRUCTIONS,
    TOKEN_TYPE,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_CALL_RESULT,
    TOOL_NAME,
    TOOL_TYPE,
)

if TYPE_CHECKING:
    from hango.provider.messages import Message, Request, ToolUseBlock, Usage
    from hango.provider.model import ModelResponse
    from hango.tool.base import ToolResult


def model_attributes(model: object) -> dict[str, AttributeValue]:
    """What a span says about the model's provider: ``gen_ai.provider.name``, and
    ``server.address`` / ``server.port`` from the model's ``base_url`` when it has one (the
    providers' port defaults to the scheme's). Compute it once per run."""
    out: dict[str, AttributeValue] = {PROVIDER_NAME: telemetry.provider_name(model)}
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
        self._span_cm = telemetry.tracer.start_as_current_span(
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
            telemetry.operation_duration.record(elapsed, metric_attributes)
        else:
            telemetry.operation_duration.record(
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
        telemetry.token_usage.record(
            _input_tokens(response.usage), {**metric_attributes, TOKEN_TYPE: "input"}
        )
        telemetry.token_usage.record(
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
        self._span_cm = telemetry.tracer.start_as_current_span(
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
