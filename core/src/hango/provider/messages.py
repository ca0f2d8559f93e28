"""Conversation records: content blocks, messages, requests, usage.

Every record is a frozen attrs class and every sequence a tuple, so a middleware cannot
mutate history by accident; it builds a changed copy with ``attrs.evolve``. The shapes follow
the Anthropic Messages API (content blocks, stop reasons, usage fields); the OpenAI provider
maps onto them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

from attrs import field, frozen

#: A JSON document as Python values (what ``json.loads`` returns).
JSON: TypeAlias = Any


@frozen
class TextBlock:
    """Plain text. ``cache_control`` is the Anthropic cache breakpoint marker
    (``{"type": "ephemeral"}``) sent exactly on this block; ``None`` means no breakpoint."""

    text: str
    cache_control: Mapping[str, str] | None = None
    type: Literal["text"] = field(default="text", init=False)


@frozen
class ToolUseBlock:
    """A tool call the model asked for.

    ``input`` is the decoded JSON arguments, normally an object. When a provider streamed
    arguments that are not valid JSON, ``input`` holds the raw text (a ``str``) so the loop can
    answer that one call with an error result instead of crashing the run.
    """

    id: str
    name: str
    input: JSON
    type: Literal["tool_use"] = field(default="tool_use", init=False)


@frozen
class ToolResultBlock:
    """The result of the tool call whose id is ``tool_use_id``; sent in a user message.
    ``cache_control`` is a cache breakpoint on this block, like ``TextBlock``'s."""

    tool_use_id: str
    content: str
    is_error: bool = False
    cache_control: Mapping[str, str] | None = None
    type: Literal["tool_result"] = field(default="tool_result", init=False)


@frozen
class ThinkingBlock:
    """Extended-thinking output. Kept verbatim, signature included: Anthropic rejects a
    tool-use continuation whose thinking blocks were dropped or altered."""

    thinking: str
    signature: str
    type: Literal["thinking"] = field(default="thinking", init=False)


@frozen
class RedactedThinkingBlock:
    """Encrypted thinking (``data`` is opaque); sent back unchanged like ``ThinkingBlock``."""

    data: str
    type: Literal["redacted_thinking"] = field(default="redacted_thinking", init=False)


Block: TypeAlias = (
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock
)

Role: TypeAlias = Literal["user", "assistant"]


@frozen
class Message:
    """One turn of the conversation: ``role`` and a tuple of blocks."""

    role: Role
    content: tuple[Block, ...]

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", (TextBlock(text),))

    @property
    def text(self) -> str:
        """The concatenated text of the message's text blocks."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolResultBlock))


class StopReason(enum.StrEnum):
    """Why the model stopped (Anthropic ``stop_reason`` values)."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    PAUSE_TURN = "pause_turn"
    REFUSAL = "refusal"


@frozen
class Usage:
    """Token counts of one model call (Anthropic usage field names)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
        )


@frozen
class ToolSpec:
    """What the model is told about a tool: name, description and a JSON Schema object.
    ``cache_control`` is a cache breakpoint after this tool's definition (Anthropic), e.g.
    ``{"type": "ephemeral"}``; ``None`` means none."""

    name: str
    description: str
    input_schema: Mapping[str, JSON]
    cache_control: Mapping[str, str] | None = None


@frozen
class Request:
    """One model call. ``system`` is a tuple of text blocks (never a string) so cache
    breakpoints can be placed by block index; the chain assembles it on every call."""

    model: str
    messages: tuple[Message, ...]
    system: tuple[TextBlock, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    stop_sequences: tuple[str, ...] = ()
