"""Stream events a ``Model`` yields for one call, in wire order.

``index`` is the content-block position in the assistant message being built. A provider emits
``TextDelta`` / ``ThinkingDelta`` / ``SignatureDelta`` pieces for text and thinking blocks,
``RedactedThinking`` whole, ``ToolUseStart`` + ``ToolInputDelta``\\* + ``ToolUseStop`` for a tool
call, and exactly one ``MessageStop`` last, carrying the stop reason and the final usage.
"""

from __future__ import annotations

from typing import TypeAlias

from attrs import frozen

from hango.provider.messages import StopReason, Usage


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
    """A piece of the tool call's JSON arguments (Anthropic ``input_json_delta``)."""

    index: int
    partial_json: str


@frozen
class ToolUseStop:
    index: int


@frozen
class MessageStop:
    """The end of the message. ``response_id`` and ``response_model`` are the provider's id of
    the response and the model that answered, when it says (``gen_ai.response.*`` on spans)."""

    stop_reason: StopReason
    usage: Usage
    response_id: str | None = None
    response_model: str | None = None


StreamEvent: TypeAlias = (
    TextDelta
    | ThinkingDelta
    | SignatureDelta
    | RedactedThinking
    | ToolUseStart
    | ToolInputDelta
    | ToolUseStop
    | MessageStop
)
