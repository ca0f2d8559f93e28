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
    (``{"type": "ephemeral"}``) sent exactly on this block; ``None`` means no breakpoint.

    ``citations`` are the sources the model cited for this text (Anthropic citation objects such
    as ``web_search_result_location``, kept as the API sent them and sent back unchanged); empty
    for text that cites nothing.
    """

    text: str
    cache_control: Mapping[str, str] | None = None
    citations: tuple[Mapping[str, JSON], ...] = ()
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


def _has_type(_: object, __: object, block: Mapping[str, JSON]) -> None:
    if not isinstance(block.get("type"), str) or not block["type"]:
        raise ValueError(f"a server block needs a string 'type', got {block!r:.200}")


@frozen
class ServerBlock:
    """A content block the API produced that hango does not interpret, kept whole.

    These are the blocks of tools the API runs itself (``server_tool_use`` and its result,
    ``web_search_tool_result``, ``tool_search_tool_result``, ``code_execution_tool_result``,
    ...) and any block type newer than hango. ``block`` is the API's JSON object exactly as
    received, ``type`` included; it is stored with the history and sent back unchanged, which
    is what the API requires to continue the turn. A server tool call is never a
    ``ToolUseBlock``: the loop does not execute it. Treat ``block`` as read-only.

    Raises ``ValueError`` when ``block`` has no string ``type``.
    """

    block: Mapping[str, JSON] = field(validator=_has_type)

    @property
    def type(self) -> str:
        """The API's block type, e.g. ``"server_tool_use"``."""
        return str(self.block["type"])


Block: TypeAlias = (
    TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock | ServerBlock
)

Role: TypeAlias = Literal["user", "assistant"]


def _check_role(role: object) -> None:
    if role not in ("user", "assistant"):
        raise ValueError(
            f"a message's role is 'user' or 'assistant', not {role!r} "
            "(system text goes in Request.system)"
        )


@frozen
class Message:
    """One turn of the conversation: ``role`` and a tuple of blocks.

    Raises ``ValueError`` for a role other than ``"user"`` or ``"assistant"``: a provider would
    otherwise send, say, a ``"system"`` message as an assistant turn.
    """

    role: Role = field(validator=lambda _, __, role: _check_role(role))
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
    """Token counts of one model call, or summed over several (Anthropic usage field names).

    ``input_tokens`` counts uncached prompt tokens only. ``unknown_calls`` is how many of the
    calls summed here had no usage reported by their server (llama.cpp's OpenAI server sends
    none): their tokens are missing from the counts, which are then a lower bound. ``Usage()``
    is zero for zero calls, the identity of ``+``; ``Usage.unknown()`` is one unreported call.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    unknown_calls: int = 0

    @classmethod
    def unknown(cls) -> Usage:
        """The usage of one call whose server reported none."""
        return cls(unknown_calls=1)

    @property
    def known(self) -> bool:
        """True when every call summed here reported its usage."""
        return self.unknown_calls == 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.unknown_calls + other.unknown_calls,
        )


@frozen
class ToolSpec:
    """What the model is told about a tool: name, description and a JSON Schema object.
    ``cache_control`` is a cache breakpoint after this tool's definition (Anthropic), e.g.
    ``{"type": "ephemeral"}``; ``None`` means none.

    ``strict`` asks the provider to guarantee that the model's arguments validate against
    ``input_schema`` (Anthropic strict tool use, OpenAI structured outputs); the schema must
    then meet the provider's strict-mode rules (e.g. ``additionalProperties: false``).
    """

    name: str
    description: str
    input_schema: Mapping[str, JSON]
    cache_control: Mapping[str, str] | None = None
    strict: bool = False


@frozen
class ToolChoice:
    """How the model may use the tools it is shown on one call.

    ``mode``: ``"auto"`` (it decides), ``"any"`` (it must call some tool; OpenAI's
    ``"required"``), ``"none"`` (it must not call one) or ``"tool"`` (it must call the tool
    named ``name``). Build one with ``ToolChoice("any")`` or ``ToolChoice.tool("search")``.
    Raises ``ValueError`` when ``name`` is given without mode ``"tool"`` or missing with it.
    """

    mode: Literal["auto", "any", "none", "tool"]
    name: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.mode == "tool") != bool(self.name):
            raise ValueError(
                "tool_choice names a tool exactly when its mode is 'tool', "
                f"got mode {self.mode!r} and name {self.name!r}"
            )

    @classmethod
    def tool(cls, name: str) -> ToolChoice:
        """The model must call the tool ``name``."""
        return cls("tool", name)


OutputStrategy: TypeAlias = Literal["native", "tool", "prompted"]


@frozen
class OutputSpec:
    """The structured output a call must end with: a JSON Schema object ``schema`` and how it
    is asked for (``strategy``).

    ``native``: the provider's own structured output (OpenAI ``response_format`` json_schema,
    Anthropic's ``output_config`` JSON format); the model's text is the JSON document. ``tool``:
    a final-answer tool whose arguments are the output. ``prompted``: an instruction in the
    system prompt; the text is the JSON document. A provider only ever sees ``native``: the loop
    turns the others into a tool or a system block just before the call. ``name`` names the
    output to the provider; ``strict`` asks for the provider's guarantee (the schema then meets
    its strict rules: every object closed, every property required).
    """

    schema: Mapping[str, JSON]
    strategy: OutputStrategy = "native"
    name: str = "output"
    strict: bool = False


@frozen
class Request:
    """One model call. ``system`` is a tuple of text blocks (never a string) so cache
    breakpoints can be placed by block index; the chain assembles it on every call.

    ``tool_choice`` ``None`` leaves the choice to the provider's default (auto).
    ``parallel_tool_calls`` ``False`` asks for at most one tool call per turn, ``None`` leaves
    the provider's default (parallel allowed). ``server_tools`` are Anthropic tool definitions
    sent verbatim after the ``tools`` (see ``hango.provider.anthropic``): server tools the API
    runs itself (``web_search_20250305``, ``tool_search_tool_bm25_20251119``, ...) and, under
    the name of one of ``tools``, Anthropic-defined or amended definitions of that tool.
    ``output`` is the structured output the agent must return (``OutputSpec``), None for prose;
    a model wrapper may rewrite it for one call.
    """

    model: str
    messages: tuple[Message, ...]
    system: tuple[TextBlock, ...] = ()
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    stop_sequences: tuple[str, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    server_tools: tuple[Mapping[str, JSON], ...] = ()
    output: OutputSpec | None = None
