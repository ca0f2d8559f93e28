"""``AnthropicModel``: the Anthropic Messages API, streamed, on the official ``anthropic`` SDK.

Needs the ``hango[anthropic]`` extra; importing this module without it raises
``ModelSpecError`` saying what to install (``model_from_spec`` imports it only for
``anthropic:NAME``).

Request mapping (https://platform.claude.com/docs/en/api/messages):

- ``Request.system`` is sent as a list of text blocks, never a string, and each block's
  ``cache_control`` is sent on exactly that block, so a cache breakpoint lands on the index where
  a middleware put it (https://platform.claude.com/docs/en/build-with-claude/prompt-caching).
  ``cache_control`` on a message's text or ``tool_result`` block and on a ``ToolSpec`` is sent
  the same way, on exactly that block or tool; a text block's ``citations`` are sent with it.
- Blocks map one to one and in order: text, ``tool_use`` (id, name, input), ``tool_result``
  (tool_use_id, content, is_error), and ``thinking`` (with its signature),
  ``redacted_thinking`` and every ``ServerBlock`` (``server_tool_use``,
  ``web_search_tool_result``, ...) sent back verbatim, as a continuation must
  (https://platform.claude.com/docs/en/build-with-claude/extended-thinking,
  https://platform.claude.com/docs/en/agents-and-tools/tool-use/web-search-tool). A tool call
  whose arguments were not valid JSON (``ToolUseBlock.input`` is the raw ``str``) is sent with
  ``input: {}``: the API takes only an object there, and the paired error result explains it.
- Tools are ``{name, description, input_schema}`` (plus ``strict: true`` for a strict
  ``ToolSpec``). Each entry of ``Request.server_tools`` is a tool definition sent as it is
  written: one whose ``name`` is also a ``ToolSpec``'s either REPLACES that tool's definition
  when it has a ``type`` other than ``custom`` (an Anthropic-defined client tool such as
  ``bash_20250124`` or ``text_editor_20250728``, still executed by hango's tool of that name) or
  is MERGED into it otherwise (``defer_loading = true`` for tool search, ``cache_control``);
  any other entry is a server tool the API runs itself (``web_search_20250305``,
  ``code_execution_20250825``, ``tool_search_tool_bm25_20251119``, ...) and follows the tools
  (https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview).
- ``tool_choice`` is ``{type: auto | any | none | tool, name}``, with
  ``disable_parallel_tool_use: true`` when ``Request.parallel_tool_calls`` is ``False``; it is
  sent only with tools (there is nothing to choose from without). ``temperature`` and
  ``stop_sequences`` are sent when set; ``thinking`` is the constructor's extended-thinking
  config.

Stream mapping (https://platform.claude.com/docs/en/build-with-claude/streaming):
``message_start`` gives the first usage; ``content_block_start`` opens a block (``tool_use`` ->
``ToolUseStart``, ``redacted_thinking`` -> ``RedactedThinking``, and any type hango does not
interpret -> ``ServerBlockStart`` with the block's JSON as sent); ``content_block_delta``
carries ``text_delta`` -> ``TextDelta``, ``citations_delta`` -> ``CitationDelta``,
``input_json_delta`` -> ``ToolInputDelta`` (raw pieces of a tool call's or server tool call's
input, parsed by the accumulator), ``thinking_delta`` -> ``ThinkingDelta``, ``signature_delta``
-> ``SignatureDelta``; ``content_block_stop`` of a tool block -> ``ToolUseStop``;
``message_delta`` carries the stop reason, ``stop_details`` and CUMULATIVE usage (its fields
replace the earlier ones); ``message_stop`` -> ``MessageStop``. Stop reasons keep their names;
``model_context_window_exceeded`` is reported as ``max_tokens``
(https://platform.claude.com/docs/en/build-with-claude/handling-stop-reasons). A stream that
ends without ``message_stop`` fails naming the URL that sent it.

Errors (https://platform.claude.com/docs/en/api/errors): 429, 529 and other 5xx (but not a 5xx
whose body says the request is invalid), connection errors, and an ``overloaded_error`` /
``rate_limit_error`` / ``api_error`` event arriving in the stream before any content are
retried (see ``hango.provider.retry``); anything else raises ``ModelError`` with the API's own
message, and a connection error names the URL it tried. The SDK's own retries are switched off
so these are the only ones.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final, cast

from hango.provider.errors import ModelSpecError

try:
    import anthropic
    import httpx2
    from anthropic import types as sdk
except ImportError as exc:  # the SDK is the optional extra
    raise ModelSpecError(
        "anthropic models need the anthropic extra: pip install 'hango[anthropic]'"
    ) from exc

from hango.provider.errors import ModelError
from hango.provider.events import (
    CitationDelta,
    MessageStop,
    RedactedThinking,
    ServerBlockStart,
    SignatureDelta,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.provider.messages import (
    Block,
    Message,
    RedactedThinkingBlock,
    Request,
    ServerBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolSpec,
    ToolUseBlock,
    Usage,
)
from hango.provider.retry import (
    Failure,
    ProviderRetryPolicy,
    connection_failure,
    is_transient_status,
    request_rejected,
    retry_after_seconds,
    stream_with_retries,
)

#: Model ids without the JSON output format (before the Claude 4.5 generation).
_NO_NATIVE_OUTPUT: Final = (
    "claude-3",
    "claude-sonnet-4-0",
    "claude-sonnet-4-2025",
    "claude-opus-4-0",
    "claude-opus-4-2025",
)

_STOP_REASONS: Final[Mapping[str, StopReason]] = {
    **{reason.value: reason for reason in StopReason},
    "model_context_window_exceeded": StopReason.MAX_TOKENS,
}

# An error event inside a 200 stream has no status of its own; these are the statuses the same
# error types have as HTTP responses, so the retry policy treats both alike.
_STREAM_ERROR_STATUS: Final[Mapping[str, int]] = {
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class AnthropicModel:
    """A ``Model`` on the Anthropic Messages API.

    ``client`` is an ``anthropic.AsyncAnthropic`` (a copy with the SDK's retries off is used).
    ``name`` is the model id sent with every call; ``Request.model`` is not sent, as it holds
    the agent file's model spec, which ``--model`` may have overridden. ``max_retries`` further
    attempts follow a transient failure, the first after ``base_delay`` seconds, doubling.
    ``thinking`` is sent as the API's ``thinking`` parameter, e.g.
    ``{"type": "enabled", "budget_tokens": 1024}``.
    """

    provider_name: Final = "anthropic"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        name: str,
        *,
        max_retries: int = 4,
        base_delay: float = 1.0,
        thinking: sdk.ThinkingConfigParam | None = None,
    ) -> None:
        self._client = client.with_options(max_retries=0)
        self.name = name
        self.thinking = thinking
        self.retry = ProviderRetryPolicy(max_retries=max_retries, base_delay=base_delay)

    @classmethod
    def from_env(
        cls, name: str, base_url: str | None = None, *, max_retries: int = 4
    ) -> AnthropicModel:
        """Build from ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``, or an SDK profile).

        ``base_url`` (else ``ANTHROPIC_BASE_URL``) points at another Messages endpoint.
        Raises ``ModelSpecError`` when no credential is found or the SDK rejects its setup.
        """
        try:
            # hango records the GenAI `chat` span itself; the SDK's own spans would duplicate it.
            client = anthropic.AsyncAnthropic(
                base_url=base_url, max_retries=0, open_telemetry=False
            )
        except anthropic.AnthropicError as exc:  # e.g. a broken ANTHROPIC_PROFILE
            raise ModelSpecError(f"anthropic:{name}: {exc}") from None
        if client.api_key is None and client.auth_token is None and client.credentials is None:
            raise ModelSpecError(f"anthropic:{name} needs an API key: set ANTHROPIC_API_KEY")
        return cls(client, name, max_retries=max_retries)

    @property
    def base_url(self) -> str:
        """Where calls go (``server.address`` and ``server.port`` of ``chat`` spans)."""
        return str(self._client.base_url)

    @property
    def native_output(self) -> bool:
        """Whether this model takes the JSON output format (``output_config.format``): the
        Claude 4.5 generation and later; older models get the final-answer tool instead."""
        return not self.name.startswith(_NO_NATIVE_OUTPUT)

    @property
    def _thinks(self) -> bool:
        return self.thinking is not None and self.thinking.get("type") != "disabled"

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Stream one Messages call as hango events; raises ``ModelError`` (see module doc)."""
        return stream_with_retries(
            lambda: self._attempt(request), self.retry, _explain, self.provider_name
        )

    async def _attempt(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        tools = _tools(request)
        anthropic_stream = await self._client.messages.create(
            model=self.name,
            max_tokens=request.max_tokens,
            messages=[_message(m) for m in request.messages],
            system=[_text(b) for b in request.system] if request.system else anthropic.omit,
            tools=tools or anthropic.omit,
            tool_choice=_tool_choice(request, thinking=self._thinks) if tools else anthropic.omit,
            output_config=_output_config(request),
            stop_sequences=list(request.stop_sequences) or anthropic.omit,
            thinking=anthropic.omit if self.thinking is None else self.thinking,
            # This SDK version takes no ``temperature`` argument, but the wire field remains
            # (the recorded requests carry it), so it goes in the body as the API names it.
            extra_body=None
            if request.temperature is None
            else {"temperature": request.temperature},
            stream=True,
        )
        # ``async with``: leaving early (cancellation, a closed generator) closes the HTTP stream.
        async with anthropic_stream:
            mapper = _StreamMapper()
            async for raw in anthropic_stream:
                for event in mapper.map(raw):
                    yield event
            if not mapper.stopped:
                url = anthropic_stream.response.url
                raise ModelError(f"anthropic: the stream from {url} ended before message_stop")


def _cache_control(marker: Mapping[str, str]) -> sdk.CacheControlEphemeralParam:
    return cast(sdk.CacheControlEphemeralParam, dict(marker))


def _text(block: TextBlock) -> sdk.TextBlockParam:
    param: sdk.TextBlockParam = {"type": "text", "text": block.text}
    if block.cache_control is not None:
        param["cache_control"] = _cache_control(block.cache_control)
    if block.citations:
        param["citations"] = [cast(sdk.TextCitationParam, dict(c)) for c in block.citations]
    return param


def _block(block: Block) -> sdk.ContentBlockParam:
    match block:
        case TextBlock():
            return _text(block)
        case ToolUseBlock(id=id_, name=name, input=arguments):
            params = dict(arguments) if isinstance(arguments, Mapping) else {}
            return {"type": "tool_use", "id": id_, "name": name, "input": params}
        case ToolResultBlock(tool_use_id=tool_use_id, content=content, is_error=is_error):
            result: sdk.ToolResultBlockParam = {
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": content,
                "is_error": is_error,
            }
            if block.cache_control is not None:
                result["cache_control"] = _cache_control(block.cache_control)
            return result
        case ThinkingBlock(thinking=thinking, signature=signature):
            return {"type": "thinking", "thinking": thinking, "signature": signature}
        case RedactedThinkingBlock(data=data):
            return {"type": "redacted_thinking", "data": data}
        case ServerBlock(block=raw):
            return cast(sdk.ContentBlockParam, dict(raw))


def _message(message: Message) -> sdk.MessageParam:
    content = [_block(b) for b in message.content]
    if message.role == "user":
        return {"role": "user", "content": content}
    return {"role": "assistant", "content": content}


def _tool(spec: ToolSpec, written: Mapping[str, Any] | None) -> sdk.ToolUnionParam:
    """``spec`` as a tool definition, replaced or amended by the ``server_tools`` entry of the
    same name (see module docstring)."""
    if written is not None and written.get("type", "custom") != "custom":
        return cast(sdk.ToolUnionParam, dict(written))
    param: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "input_schema": dict(spec.input_schema),
    }
    if spec.cache_control is not None:
        param["cache_control"] = _cache_control(spec.cache_control)
    if spec.strict:
        param["strict"] = True
    return cast(sdk.ToolUnionParam, param | dict(written or {}))


def _tools(request: Request) -> list[sdk.ToolUnionParam]:
    names = {spec.name for spec in request.tools}
    written = {e["name"]: e for e in request.server_tools if e.get("name") in names}
    server = [
        cast(sdk.ToolUnionParam, dict(e))
        for e in request.server_tools
        if e.get("name") not in names
    ]
    return [_tool(spec, written.get(spec.name)) for spec in request.tools] + server


def _tool_choice(request: Request, *, thinking: bool) -> sdk.ToolChoiceParam | anthropic.Omit:
    choice, parallel = request.tool_choice, request.parallel_tool_calls
    if thinking and choice is not None and choice.mode in ("any", "tool"):
        # Extended thinking refuses a forced tool choice (a 400): the model chooses instead.
        choice = None
    if choice is None and parallel is not False:
        return anthropic.omit  # the API's default: auto, parallel calls allowed
    param: dict[str, Any] = {"type": choice.mode if choice is not None else "auto"}
    if choice is not None and choice.name is not None:
        param["name"] = choice.name
    if parallel is False and param["type"] != "none":
        param["disable_parallel_tool_use"] = True
    return cast(sdk.ToolChoiceParam, param)


def _output_config(request: Request) -> sdk.OutputConfigParam | anthropic.Omit:
    """The JSON output format of a native structured output (``OutputSpec``), else omitted."""
    spec = request.output
    if spec is None:
        return anthropic.omit
    return {"format": {"type": "json_schema", "schema": dict(spec.schema)}}


def _usage(usage: sdk.Usage | sdk.MessageDeltaUsage, base: Usage) -> Usage:
    """``base`` with every count ``usage`` reports; a delta's counts are cumulative totals, and
    a count it leaves out (older API versions send only ``output_tokens``) keeps its value."""

    def count(reported: int | None, known: int) -> int:
        return known if reported is None else reported

    return Usage(
        input_tokens=count(usage.input_tokens, base.input_tokens),
        output_tokens=usage.output_tokens,
        cache_read_input_tokens=count(usage.cache_read_input_tokens, base.cache_read_input_tokens),
        cache_creation_input_tokens=count(
            usage.cache_creation_input_tokens, base.cache_creation_input_tokens
        ),
    )


class _StreamMapper:
    """Turns the SDK's raw stream events into hango events, one SSE event at a time."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.stop_reason = StopReason.END_TURN
        self.stop_details: dict[str, Any] | None = None
        self.tool_blocks: set[int] = set()
        self.stopped = False
        self.response_id: str | None = None
        self.response_model: str | None = None

    def map(self, raw: sdk.RawMessageStreamEvent) -> list[StreamEvent]:
        match raw:
            case sdk.RawMessageStartEvent(message=message):
                self.usage = _usage(message.usage, self.usage)
                self.response_id, self.response_model = message.id, message.model
            case sdk.RawContentBlockStartEvent(index=i, content_block=block):
                return self._start(i, block)
            case sdk.RawContentBlockDeltaEvent(index=i, delta=delta):
                return _delta(i, delta)
            case sdk.RawContentBlockStopEvent(index=i) if i in self.tool_blocks:
                return [ToolUseStop(i)]
            case sdk.RawMessageDeltaEvent(delta=delta, usage=usage):
                if delta.stop_reason is not None:
                    self.stop_reason = _STOP_REASONS.get(delta.stop_reason, StopReason.END_TURN)
                if delta.stop_details is not None:
                    self.stop_details = delta.stop_details.to_dict()
                self.usage = _usage(usage, self.usage)
            case sdk.RawMessageStopEvent():
                self.stopped = True
                return [
                    MessageStop(
                        self.stop_reason,
                        self.usage,
                        self.stop_details,
                        response_id=self.response_id,
                        response_model=self.response_model,
                    )
                ]
        return []

    def _start(self, i: int, block: sdk.ContentBlock) -> list[StreamEvent]:
        # A start carries the block's initial content: empty for text and thinking (their
        # deltas follow), complete for redacted thinking, id and name for a tool call. The
        # ``type`` decides, not the class: the SDK parses a block type it does not know as a
        # TextBlock, keeping its fields.
        match block.type:
            case "tool_use":
                self.tool_blocks.add(i)
                return [ToolUseStart(i, block.id, block.name)]
            case "redacted_thinking":
                return [RedactedThinking(i, block.data)]
            case "text":
                events: list[StreamEvent] = [TextDelta(i, block.text)] if block.text else []
                return events + [CitationDelta(i, c.to_dict()) for c in block.citations or ()]
            case "thinking":
                events = []
                if block.thinking:
                    events.append(ThinkingDelta(i, block.thinking))
                if block.signature:
                    events.append(SignatureDelta(i, block.signature))
                return events
        return [ServerBlockStart(i, block.to_dict())]


def _delta(i: int, delta: sdk.RawContentBlockDelta) -> list[StreamEvent]:
    match delta:
        case sdk.TextDelta(text=text):
            return [TextDelta(i, text)]
        case sdk.InputJSONDelta(partial_json=piece):
            return [ToolInputDelta(i, piece)]
        case sdk.ThinkingDelta(thinking=thinking):
            return [ThinkingDelta(i, thinking)]
        case sdk.SignatureDelta(signature=signature):
            return [SignatureDelta(i, signature)]
        case sdk.CitationsDelta(citation=citation):
            return [CitationDelta(i, citation.to_dict())]
    return []


def _explain(exc: Exception) -> Failure | None:
    if isinstance(exc, anthropic.APIStatusError):
        in_stream = exc.status_code == 200
        status = _STREAM_ERROR_STATUS.get(exc.type or "", 0) if in_stream else exc.status_code
        where = "in stream" if in_stream else f"HTTP {exc.status_code}"
        # A 429 for a reached spend limit stays a 429 until the limit changes: do not wait.
        spent = exc.error_code == "enforced_spend_limit_reached"
        text = exc.api_message or exc.message
        return Failure(
            f"anthropic {exc.type or 'error'} ({where}): {text}",
            transient=is_transient_status(status)
            and not spent
            and not request_rejected(status, text),
            status=status or None,
            retry_after=retry_after_seconds(exc.response.headers),
        )
    if isinstance(exc, anthropic.APIConnectionError):
        return connection_failure("anthropic", exc.request.url, exc)
    if isinstance(exc, httpx2.TransportError):  # the SDK does not wrap it while a stream is read
        return connection_failure("anthropic", exc.request.url, exc)
    if isinstance(exc, anthropic.AnthropicError):
        return Failure(f"anthropic: {exc}", transient=False)
    return None
