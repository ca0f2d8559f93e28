"""Stream events a ``Model`` yields for one call, in wire order.

``index`` is the content-block position in the assistant message being built. A provider emits
``TextDelta`` / ``ThinkingDelta`` / ``SignatureDelta`` pieces for text and thinking blocks
(``CitationDelta`` adds a source to a text block), ``RedactedThinking`` whole,
``ToolUseStart`` + ``ToolInputDelta``\\* + ``ToolUseStop`` for a tool call, ``ServerBlockStart``
(+ ``ToolInputDelta``\\* for a server tool call's input) for a block hango keeps opaque, and
exactly one ``MessageStop`` last, carrying the stop reason and the final usage.

``ProviderRetry`` is not content: a provider yields it when an attempt failed and it is about
to wait and try again, so the caller can show it as it happens. The accumulator ignores it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from attrs import frozen

from hango.provider.messages import JSON, StopReason, Usage


@frozen
class TextDelta:
    index: int
    text: str


@frozen
class ThinkingDelta:
    index: int
    thinking: str


@frozen
class SignatureDelta:
    index: int
    signature: str


@frozen
class RedactedThinking:
    index: int
    data: str


@frozen
class ToolUseStart:
    index: int
    id: str
    name: str


@frozen
class ToolInputDelta:
    """A piece of the JSON arguments of the tool call (or server tool call) at ``index``
    (Anthropic ``input_json_delta``)."""

    index: int
    partial_json: str


@frozen
class CitationDelta:
    """A source cited by the text block at ``index`` (Anthropic ``citations_delta``), as sent."""

    index: int
    citation: Mapping[str, JSON]


@frozen
class ServerBlockStart:
    """A block hango keeps opaque (``hango.provider.messages.ServerBlock``), as the API opened
    it. A ``server_tool_use`` block opens with empty ``input``; its input follows as
    ``ToolInputDelta`` pieces and replaces it."""

    index: int
    block: Mapping[str, JSON]


@frozen
class ToolUseStop:
    index: int


@frozen
class MessageStop:
    """The end of the message. ``stop_details`` is the API's structured detail of the stop when
    it sends one (Anthropic's ``stop_details`` of a refusal: ``{"type": "refusal", "category":
    ..., "explanation": ...}``), else ``None``. ``response_id`` and ``response_model`` are the
    provider's id of the response and the model that answered, when it says
    (``gen_ai.response.*`` on spans)."""

    stop_reason: StopReason
    usage: Usage
    stop_details: Mapping[str, JSON] | None = None
    response_id: str | None = None
    response_model: str | None = None


@frozen
class ProviderRetry:
    """An attempt failed with a transient error; the provider waits ``wait_seconds`` seconds,
    then makes retry number ``attempt`` (from 1) of at most ``max_retries``.

    ``provider`` is the provider's name (``"anthropic"``, ``"openai"``), ``status`` the HTTP
    status (``None`` when no response arrived) and ``error`` the failure in one line.
    """

    provider: str
    status: int | None
    attempt: int
    max_retries: int
    wait_seconds: float
    error: str


StreamEvent: TypeAlias = (
    TextDelta
    | ThinkingDelta
    | SignatureDelta
    | CitationDelta
    | RedactedThinking
    | ToolUseStart
    | ToolInputDelta
    | ToolUseStop
    | ServerBlockStart
    | MessageStop
    | ProviderRetry
)
