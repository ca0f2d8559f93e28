"""``OpenAIChatModel``: OpenAI Chat Completions, streamed, on the official ``openai`` SDK.

Works with api.openai.com and any OpenAI-compatible server (vLLM, llama.cpp ``llama-server``,
Ollama, ...) through ``base_url``. Needs the ``hango[openai]`` extra; importing this module
without it raises ``ModelSpecError`` saying what to install.

Request mapping (https://platform.openai.com/docs/api-reference/chat/create):

- ``Request.system`` becomes one leading ``role: system`` message. Chat Completions has no cache
  breakpoints (OpenAI caches prompt prefixes by itself,
  https://platform.openai.com/docs/guides/prompt-caching), so ``cache_control`` is not sent.
- A message's text blocks are sent as one ``content`` string, joined by a blank line: every
  compatible server takes a string, while lists of text parts are rejected or mangled by some.
- A user message's ``tool_result`` blocks become ``role: tool`` messages (``tool_call_id``,
  ``content``), in order, followed by its text (if any) as a ``role: user`` message: the API
  wants each tool reply right after the assistant message that asked for it
  (https://platform.openai.com/docs/guides/function-calling). ``is_error`` has no field there;
  an error result's content says what went wrong.
- An assistant message's text is ``content`` (``""`` when it has only tool calls: the spec
  allows ``null`` there, but llama-cpp-python's server answers ``null`` with HTTP 500 and an
  absent key breaks its chat template, while OpenAI, vLLM and llama.cpp all take ``""``) and its
  ``tool_use`` blocks are ``tool_calls`` entries ``{id, type: function, function: {name,
  arguments}}`` where ``arguments`` is the input as compact JSON, or the raw string the model
  produced when that was not valid JSON. Thinking blocks, server blocks and citations have no
  Chat Completions field and are not sent.
- Tools are ``{type: function, function: {name, description, parameters}}`` (plus ``strict:
  true`` for a strict ``ToolSpec``); ``tool_choice`` is ``"auto"``, ``"required"`` (hango's
  ``any``), ``"none"`` or ``{type: function, function: {name}}``, and ``parallel_tool_calls``
  is sent when the request sets it; both only with tools. ``Request.server_tools`` entries that
  name one of the tools are Anthropic's ways of declaring that tool, so the tool is sent as a
  function as usual; any other entry is a server tool Chat Completions cannot run, and the call
  fails with ``ModelError`` naming it rather than silently running without it. The output limit
  goes in ``max_completion_tokens`` (what OpenAI's reasoning models require) or ``max_tokens``
  (what every compatible server reads), chosen by ``max_tokens_field``.

Stream mapping (https://platform.openai.com/docs/api-reference/chat-streaming): ``delta.content``
-> ``TextDelta``; ``delta.tool_calls`` are accumulated per ``index``: the first piece of an index
gives its ``id`` and ``function.name`` (``ToolUseStart``), every ``function.arguments`` piece is a
``ToolInputDelta``, and the stream's end closes each call (``ToolUseStop``). Parallel calls get
consecutive block indices in order of appearance. ``delta.refusal`` is streamed as text and makes
the turn a refusal. ``stream_options.include_usage`` asks for the final usage chunk.
Finish reasons: ``stop`` -> ``end_turn``, ``length`` -> ``max_tokens``, ``tool_calls`` (and the
deprecated ``function_call``) -> ``tool_use``, ``content_filter`` -> ``refusal``; a turn that
streamed tool calls is ``tool_use`` even when a server reports ``stop``. Usage:
``prompt_tokens_details.cached_tokens`` is ``cache_read_input_tokens`` and is taken out of
``input_tokens``, which (as with Anthropic) counts only uncached prompt tokens. A server that
sends no usage chunk (llama-cpp-python's) gives ``Usage.unknown()``, not zeros. A stream that
ends without a finish reason fails with ``ModelError`` naming the URL that sent it.

Errors (https://platform.openai.com/docs/guides/error-codes): 429 (except
``insufficient_quota``), 5xx (except one whose body says the request is invalid) and connection
errors are retried (see ``hango.provider.retry``); anything else raises ``ModelError`` with the
server's own message, and a connection error names the URL it tried. The SDK's own retries are
switched off so these are the only ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Final, Literal

from hango.provider.errors import ModelSpecError

try:
    import openai
    from openai.types import CompletionUsage
    from openai.types.chat import (
        ChatCompletionAssistantMessageParam,
        ChatCompletionChunk,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionMessageParam,
        ChatCompletionToolChoiceOptionParam,
    )
    from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall
    from openai.types.shared_params import ResponseFormatJSONSchema
except ImportError as exc:  # the SDK is the optional extra
    raise ModelSpecError(
        "openai models need the openai extra: pip install 'hango[openai]'"
    ) from exc

from hango.provider.errors import ModelError
from hango.provider.events import (
    MessageStop,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.provider.messages import (
    Message,
    Request,
    StopReason,
    TextBlock,
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

MaxTokensField = Literal["max_completion_tokens", "max_tokens"]

_FINISH_REASONS: Final[Mapping[str, StopReason]] = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "content_filter": StopReason.REFUSAL,
}


class OpenAIChatModel:
    """A ``Model`` on the Chat Completions API of OpenAI or an OpenAI-compatible server.

    ``client`` is an ``openai.AsyncOpenAI`` (a copy with the SDK's retries off is used).
    ``name`` is the model id sent with every call; ``Request.model`` is not sent, as it holds
    the agent file's model spec, which ``--model`` may have overridden. ``max_retries`` further
    attempts follow a transient failure, the first after ``base_delay`` seconds, doubling.
    ``max_tokens_field`` names the request field that carries ``Request.max_tokens``.
    """

    provider_name: Final = "openai"

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        name: str,
        *,
        max_retries: int = 4,
        base_delay: float = 1.0,
        max_tokens_field: MaxTokensField = "max_completion_tokens",
    ) -> None:
        self._client = client.with_options(max_retries=0)
        self.name = name
        self.max_tokens_field = max_tokens_field
        self.retry = ProviderRetryPolicy(max_retries=max_retries, base_delay=base_delay)

    @classmethod
    def from_env(
        cls, name: str, base_url: str | None = None, *, max_retries: int = 4
    ) -> OpenAIChatModel:
        """Build from ``OPENAI_API_KEY``; ``base_url`` (else ``OPENAI_BASE_URL``) selects a
        compatible server, which gets ``max_tokens`` and needs no key unless it checks one.

        Raises ``ModelSpecError`` when api.openai.com is meant and no key is set.
        """
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if base_url is None:
                raise ModelSpecError(
                    f"openai:{name} needs an API key: set OPENAI_API_KEY"
                    " (or pass --base-url for a local OpenAI-compatible server)"
                )
            api_key = "unused"  # local servers usually check no key, but the SDK wants one
        client = openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=0)
        field: MaxTokensField = "max_completion_tokens" if base_url is None else "max_tokens"
        return cls(client, name, max_retries=max_retries, max_tokens_field=field)

    @property
    def base_url(self) -> str:
        """Where calls go (``server.address`` and ``server.port`` of ``chat`` spans)."""
        return str(self._client.base_url)

    @property
    def native_output(self) -> bool:
        """Whether ``response_format`` json_schema is used for structured output: on OpenAI's
        own API; a compatible server (another ``base_url``) may ignore it, so it gets the
        final-answer tool unless the agent says ``output_strategy = "native"``."""
        return self._client.base_url.host == "api.openai.com"

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Stream one Chat Completions call as hango events; raises ``ModelError``."""
        return stream_with_retries(
            lambda: self._attempt(request), self.retry, _explain, self.provider_name
        )

    async def _attempt(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        _refuse_server_tools(request)
        limit = request.max_tokens
        tools = request.tools
        parallel = request.parallel_tool_calls
        chat_stream = await self._client.chat.completions.create(
            model=self.name,
            messages=_messages(request),
            tools=[_tool(t) for t in tools] if tools else openai.omit,
            tool_choice=_tool_choice(request) if tools else openai.omit,
            parallel_tool_calls=parallel if tools and parallel is not None else openai.omit,
            temperature=openai.omit if request.temperature is None else request.temperature,
            stop=list(request.stop_sequences) or openai.omit,
            max_completion_tokens=limit
            if self.max_tokens_field == "max_completion_tokens"
            else openai.omit,
            max_tokens=limit if self.max_tokens_field == "max_tokens" else openai.omit,
            response_format=_response_format(request),
            stream=True,
            stream_options={"include_usage": True},
        )
        # ``async with``: leaving early (cancellation, a closed generator) closes the HTTP stream.
        async with chat_stream:
            mapper = _ChunkMapper()
            async for chunk in chat_stream:
                for event in mapper.map(chunk):
                    yield event
            if mapper.finish_reason is None:
                url = chat_stream.response.url
                raise ModelError(f"openai: the stream from {url} ended without a finish reason")
            for event in mapper.end(mapper.finish_reason):
                yield event


def _content(blocks: Sequence[TextBlock]) -> str:
    # A string, not a list of text parts: several compatible servers reject or mangle parts
    # (in system messages especially), and every one takes a string.
    return "\n\n".join(b.text for b in blocks)


def _arguments(call: ToolUseBlock) -> str:
    if isinstance(call.input, str):
        return call.input  # the model's own malformed arguments, sent back as they came
    return json.dumps(call.input, ensure_ascii=False, separators=(",", ":"))


def _assistant(message: Message) -> ChatCompletionAssistantMessageParam:
    texts = [b for b in message.content if isinstance(b, TextBlock)]
    calls: list[ChatCompletionMessageFunctionToolCallParam] = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c)}}
        for c in message.tool_uses
    ]
    # "" rather than null beside tool calls: see the module docstring.
    param: ChatCompletionAssistantMessageParam = {"role": "assistant", "content": _content(texts)}
    if calls:
        param["tool_calls"] = calls
    return param


def _user(message: Message) -> list[ChatCompletionMessageParam]:
    replies: list[ChatCompletionMessageParam] = [
        {"role": "tool", "tool_call_id": b.tool_use_id, "content": b.content}
        for b in message.content
        if isinstance(b, ToolResultBlock)
    ]
    texts = [b for b in message.content if isinstance(b, TextBlock)]
    if texts:
        replies.append({"role": "user", "content": _content(texts)})
    return replies


def _messages(request: Request) -> list[ChatCompletionMessageParam]:
    messages: list[ChatCompletionMessageParam] = []
    if request.system:
        messages.append({"role": "system", "content": _content(request.system)})
    for message in request.messages:
        if message.role == "user":
            messages += _user(message)
        else:
            messages.append(_assistant(message))
    return messages


def _tool(spec: ToolSpec) -> ChatCompletionFunctionToolParam:
    param: ChatCompletionFunctionToolParam = {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": dict(spec.input_schema),
        },
    }
    if spec.strict:
        param["function"]["strict"] = True
    return param


def _tool_choice(request: Request) -> ChatCompletionToolChoiceOptionParam | openai.Omit:
    choice = request.tool_choice
    if choice is None:
        return openai.omit
    if choice.mode == "tool":
        return {"type": "function", "function": {"name": str(choice.name)}}
    return "required" if choice.mode == "any" else choice.mode


def _response_format(request: Request) -> ResponseFormatJSONSchema | openai.Omit:
    """``response_format`` json_schema for a native structured output, strict when the
    schema meets the strict rules (``OutputSpec.strict``), else omitted."""
    spec = request.output
    if spec is None:
        return openai.omit
    return {
        "type": "json_schema",
        "json_schema": {"name": spec.name, "schema": dict(spec.schema), "strict": spec.strict},
    }


def _refuse_server_tools(request: Request) -> None:
    names = {spec.name for spec in request.tools}
    server = [e for e in request.server_tools if e.get("name") not in names]
    if server:
        listed = ", ".join(str(e.get("type") or e.get("name")) for e in server)
        raise ModelError(
            f"openai: Chat Completions has no server tools; remove {listed} from server_tools "
            "or use an anthropic: model"
        )


def _usage(usage: CompletionUsage) -> Usage:
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(
        input_tokens=usage.prompt_tokens - cached,
        output_tokens=usage.completion_tokens,
        cache_read_input_tokens=cached,
    )


class _ChunkMapper:
    """Turns streamed chunks into hango events; ``end`` gives the closing events."""

    def __init__(self) -> None:
        self.text_block: int | None = None
        self.tool_blocks: dict[int, int] = {}  # tool-call index -> block index
        self.finish_reason: str | None = None
        self.refused = False
        self.usage: Usage | None = None  # None until a usage chunk arrives; some servers send none
        self.response_id: str | None = None
        self.response_model: str | None = None

    def _next_block(self) -> int:
        return len(self.tool_blocks) + (self.text_block is not None)

    def _text(self, text: str) -> TextDelta:
        if self.text_block is None:
            self.text_block = self._next_block()
        return TextDelta(self.text_block, text)

    def _tool_call(self, call: ChoiceDeltaToolCall) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        block = self.tool_blocks.get(call.index)
        if block is None:
            block = self.tool_blocks[call.index] = self._next_block()
            name = call.function.name if call.function is not None else None
            # Some compatible servers send no id; it only has to pair the call with its
            # result inside this conversation.
            events.append(ToolUseStart(block, call.id or f"call_{call.index}", name or ""))
        if call.function is not None and call.function.arguments:
            events.append(ToolInputDelta(block, call.function.arguments))
        return events

    def map(self, chunk: ChatCompletionChunk) -> list[StreamEvent]:
        # Every chunk repeats them; some compatible servers leave them empty.
        self.response_id = chunk.id or self.response_id
        self.response_model = chunk.model or self.response_model
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        events: list[StreamEvent] = []
        for choice in chunk.choices:
            if choice.index != 0:  # hango asks for one choice; others are not its turn
                continue
            if choice.delta.content:
                events.append(self._text(choice.delta.content))
            if choice.delta.refusal:
                self.refused = True
                events.append(self._text(choice.delta.refusal))
            for call in choice.delta.tool_calls or ():
                events += self._tool_call(call)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
        return events

    def end(self, finish_reason: str) -> list[StreamEvent]:
        """The closing events of a stream that ended with ``finish_reason``."""
        stop = _FINISH_REASONS.get(finish_reason, StopReason.END_TURN)
        if stop is StopReason.END_TURN and self.refused:
            stop = StopReason.REFUSAL
        elif stop is StopReason.END_TURN and self.tool_blocks:
            stop = StopReason.TOOL_USE
        closing: list[StreamEvent] = [ToolUseStop(b) for b in self.tool_blocks.values()]
        return [
            *closing,
            MessageStop(
                stop,
                self.usage or Usage.unknown(),
                response_id=self.response_id,
                response_model=self.response_model,
            ),
        ]


def _api_message(exc: openai.APIError) -> str:
    # The SDK puts the body's ``error`` object in ``body``; its ``message`` is the server's text.
    if isinstance(exc.body, Mapping) and isinstance(exc.body.get("message"), str):
        return str(exc.body["message"])
    return exc.message


def _explain(exc: Exception) -> Failure | None:
    if isinstance(exc, openai.APIStatusError):
        # insufficient_quota is a 429 that waiting does not fix
        quota = exc.code == "insufficient_quota"
        status, text = exc.status_code, _api_message(exc)
        return Failure(
            f"openai {exc.type or 'error'} (HTTP {status}): {text}",
            transient=is_transient_status(status)
            and not quota
            and not request_rejected(status, text),
            status=status,
            retry_after=retry_after_seconds(exc.response.headers),
        )
    if isinstance(exc, openai.APIConnectionError):
        # also raised by the SDK when the connection breaks while the stream is read
        return connection_failure("openai", exc.request.url, exc)
    if isinstance(exc, openai.APIError):  # an error object inside the stream
        return Failure(f"openai {exc.type or 'error'} (in stream): {_api_message(exc)}", False)
    if isinstance(exc, openai.OpenAIError):
        return Failure(f"openai: {exc}", transient=False)
    return None
