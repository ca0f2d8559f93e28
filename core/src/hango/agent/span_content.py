"""Opt-in capture of prompts, completions and tool calls, as the GenAI conventions shape them.

Off unless ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true`` (the switch
OpenTelemetry's GenAI instrumentations share; ``span_only`` and ``span_and_event`` also turn it
on, since hango records content on spans). Content is user data: the plan's text in the system
prompt and in ``write_todos`` arguments, file contents in tool results. Nothing here is called
unless the switch is on and the span records.

The JSON documents follow the conventions' message schemas
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/): a message is
``{"role", "parts"}``, a part ``{"type": "text", "content"}``,
``{"type": "tool_call", "id", "name", "arguments"}`` or
``{"type": "tool_call_response", "id", "response"}``; thinking is a ``reasoning`` part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

from hango.provider.messages import (
    Block,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

CAPTURE_VARIABLE: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ON: Final = frozenset({"true", "span_only", "span_and_event"})


def capture_enabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``CAPTURE_VARIABLE`` asks for content on spans (case-insensitive)."""
    return env.get(CAPTURE_VARIABLE, "").strip().lower() in _ON


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _part(block: Block) -> dict[str, Any]:
    match block:
        case TextBlock(text=text):
            return {"type": "text", "content": text}
        case ToolUseBlock(id=id_, name=name, input=arguments):
            return {"type": "tool_call", "id": id_, "name": name, "arguments": arguments}
        case ToolResultBlock(tool_use_id=id_, content=content, is_error=is_error):
            part: dict[str, Any] = {"type": "tool_call_response", "id": id_, "response": content}
            if is_error:
                part["is_error"] = True
            return part
        case ThinkingBlock(thinking=thinking):
            return {"type": "reasoning", "content": thinking}
        case RedactedThinkingBlock():
            return {"type": "reasoning", "redacted": True}  # the data is opaque ciphertext
    raise TypeError(f"not a content block: {block!r}")


def _message(message: Message) -> dict[str, Any]:
    # A user message that only answers tool calls is the conventions' "tool" role.
    only_results = message.role == "user" and all(
        isinstance(b, ToolResultBlock) for b in message.content
    )
    role = "tool" if only_results and message.content else message.role
    return {"role": role, "parts": [_part(b) for b in message.content]}


def input_messages(messages: Sequence[Message]) -> str:
    """``gen_ai.input.messages``: the history sent, as a JSON array of messages."""
    return _dumps([_message(m) for m in messages])


def output_messages(message: Message, finish_reason: str) -> str:
    """``gen_ai.output.messages``: the assistant message with its finish reason (hango's stop
    reason, e.g. ``end_turn``), as a JSON array of one message."""
    return _dumps([{**_message(message), "finish_reason": finish_reason}])


def system_instructions(blocks: Sequence[TextBlock]) -> str:
    """``gen_ai.system_instructions``: the system blocks as a JSON array of text parts."""
    return _dumps([_part(b) for b in blocks])


def tool_arguments(arguments: object) -> str:
    """``gen_ai.tool.call.arguments``: the call's arguments as JSON."""
    return _dumps(arguments)
