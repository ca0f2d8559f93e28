"""The ``Model`` protocol and the accumulator that turns a stream into one response."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Protocol, runtime_checkable

from attrs import frozen

from hango.provider.errors import ModelError
from hango.provider.events import (
    CitationDelta,
    MessageStop,
    ProviderRetry,
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
    JSON,
    Block,
    Message,
    RedactedThinkingBlock,
    Request,
    ServerBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)


@frozen
class ModelResponse:
    """The assistant message of one model call, its stop reason and its usage.

    ``stop_details`` is the provider's structured detail of the stop, when it sends one: for an
    Anthropic refusal ``{"type": "refusal", "category": ..., "explanation": ...}``. ``id`` and
    ``model`` are the provider's response id and answering model, when it gave them.
    ``output_error`` is set by an output validator (a model wrapper, ``reject_output``): why
    the structured output this response proposes is refused; providers never set it.
    """

    message: Message
    stop_reason: StopReason
    usage: Usage
    stop_details: Mapping[str, JSON] | None = None
    id: str | None = None
    model: str | None = None
    output_error: str | None = None


@runtime_checkable
class Model(Protocol):
    """A model provider. ``stream`` yields the events of one call (see ``hango.provider.events``)
    and ends with one ``MessageStop``. It raises ``ModelError`` for a failed call."""

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]: ...


class _Part:
    """One content block being built: its kind, text pieces, and the kind's extras (signature
    pieces, citations, a tool call's id and name, a server block's opening JSON)."""

    __slots__ = ("citations", "id", "kind", "name", "opening", "pieces", "signature")

    def __init__(self, kind: str, id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.pieces: list[str] = []
        self.signature: list[str] = []
        self.citations: list[Mapping[str, JSON]] = []
        self.opening: Mapping[str, JSON] = {}

    def block(self) -> Block:
        text = "".join(self.pieces)
        if self.kind == "text":
            return TextBlock(text, citations=tuple(self.citations))
        if self.kind == "thinking":
            return ThinkingBlock(text, "".join(self.signature))
        if self.kind == "redacted":
            return RedactedThinkingBlock(text)
        if self.kind == "server":
            # A server tool call's input arrives in pieces after an empty opening ``input``.
            return ServerBlock(
                {**self.opening, "input": _decode_arguments(text)} if self.pieces else self.opening
            )
        return ToolUseBlock(self.id, self.name, _decode_arguments(text))


class Accumulator:
    """Builds a ``ModelResponse`` from stream events fed one at a time with ``add``.

    Tool arguments are concatenated JSON pieces parsed when the response is built; text that is
    not valid JSON is kept as the raw string on ``ToolUseBlock.input`` (see its docstring).
    """

    __slots__ = ("_parts", "_stop")

    def __init__(self) -> None:
        self._parts: dict[int, _Part] = {}
        self._stop: MessageStop | None = None

    def _part(self, index: int, kind: str) -> _Part:
        part = self._parts.get(index)
        if part is None:
            part = self._parts[index] = _Part(kind)
        return part

    def add(self, event: StreamEvent) -> None:
        match event:
            case TextDelta(index=i, text=text):
                self._part(i, "text").pieces.append(text)
            case ThinkingDelta(index=i, thinking=text):
                self._part(i, "thinking").pieces.append(text)
            case SignatureDelta(index=i, signature=sig):
                self._part(i, "thinking").signature.append(sig)
            case CitationDelta(index=i, citation=citation):
                self._part(i, "text").citations.append(citation)
            case ServerBlockStart(index=i, block=block):
                part = self._parts[i] = _Part("server")
                part.opening = block
            case RedactedThinking(index=i, data=data):
                self._part(i, "redacted").pieces.append(data)
            case ToolUseStart(index=i, id=id_, name=name):
                self._parts[i] = _Part("tool", id_, name)
            case ToolInputDelta(index=i, partial_json=piece):
                self._part(i, "tool").pieces.append(piece)
            case MessageStop():
                self._stop = event
            case ToolUseStop() | ProviderRetry():
                pass

    def response(self) -> ModelResponse:
        """The accumulated response; raises ``ModelError`` if the stream had no ``MessageStop``."""
        if self._stop is None:
            raise ModelError("model stream ended without a message stop")
        blocks = tuple(part.block() for _, part in sorted(self._parts.items()))
        stop = self._stop
        return ModelResponse(
            Message("assistant", blocks),
            stop.stop_reason,
            stop.usage,
            stop.stop_details,
            stop.response_id,
            stop.response_model,
        )


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _decode_arguments(raw: str) -> object:
    if not raw.strip():
        return {}
    try:
        # NaN and Infinity are not JSON (RFC 8259); Python would accept them and PostgreSQL
        # would then refuse to store the message.
        return json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError):  # nested too deeply to decode: malformed as well
        return raw


async def accumulate(stream: AsyncIterable[StreamEvent]) -> ModelResponse:
    """Drain ``stream`` into one ``ModelResponse``."""
    acc = Accumulator()
    async for event in stream:
        acc.add(event)
    return acc.response()
