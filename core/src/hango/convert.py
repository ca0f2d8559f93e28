"""The one cattrs converter: messages and run state to and from JSON values.

Made by ``make_converter`` and configured by ``configure_*`` functions; everything hango
persists goes through ``CONVERTER`` so a value that round-trips once round-trips everywhere.
"""

from __future__ import annotations

import uuid
from typing import Any

import cattrs

from hango.provider.messages import (
    Block,
    Message,
    RedactedThinkingBlock,
    ServerBlock,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)


def _unstructure_block(block: Block) -> dict[str, Any]:
    # Anthropic's wire shape (a "type" tag and the block's fields) keeps stored history readable.
    match block:
        case TextBlock(text=text, cache_control=cc, citations=citations):
            out: dict[str, Any] = {"type": "text", "text": text}
            if cc is not None:
                out["cache_control"] = dict(cc)
            if citations:
                out["citations"] = [dict(c) for c in citations]
            return out
        case ToolUseBlock(id=id_, name=name, input=input_):
            return {"type": "tool_use", "id": id_, "name": name, "input": input_}
        case ToolResultBlock(tool_use_id=tid, content=content, is_error=is_error):
            out = {"type": "tool_result", "tool_use_id": tid, "content": content}
            if is_error:
                out["is_error"] = True
            return out
        case ThinkingBlock(thinking=thinking, signature=signature):
            return {"type": "thinking", "thinking": thinking, "signature": signature}
        case RedactedThinkingBlock(data=data):
            return {"type": "redacted_thinking", "data": data}
        case ServerBlock(block=raw):
            # Verbatim: the API must get back exactly what it sent.
            return dict(raw)
    raise TypeError(f"not a content block: {block!r}")


def _structure_block(doc: Any, _: Any) -> Block:
    if not isinstance(doc, dict):
        raise ValueError(f"a content block must be an object, got {type(doc).__name__}")
    kind = doc.get("type")
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"a content block needs a string 'type', got {kind!r}")
    try:
        match kind:
            case "text":
                return TextBlock(
                    str(doc["text"]), doc.get("cache_control"), _citations(doc.get("citations"))
                )
            case "tool_use":
                return ToolUseBlock(str(doc["id"]), str(doc["name"]), doc["input"])
            case "tool_result":
                return ToolResultBlock(
                    str(doc["tool_use_id"]), str(doc["content"]), bool(doc.get("is_error", False))
                )
            case "thinking":
                return ThinkingBlock(str(doc["thinking"]), str(doc["signature"]))
            case "redacted_thinking":
                return RedactedThinkingBlock(str(doc["data"]))
            case _:  # a type hango does not interpret: kept whole, as it came from the API
                return ServerBlock(doc)
    except KeyError as exc:
        raise ValueError(f"{kind} block lacks field {exc}") from None


def _citations(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise ValueError("a text block's citations must be a list of objects")
    return tuple(value)


def message_to_json(message: Message) -> dict[str, Any]:
    return {"role": message.role, "content": [_unstructure_block(b) for b in message.content]}


def configure_messages(conv: cattrs.Converter) -> None:
    """Blocks as tagged objects; messages as ``{"role", "content": [...]}``."""
    conv.register_unstructure_hook(Block, _unstructure_block)
    for cls in (
        TextBlock,
        ToolUseBlock,
        ToolResultBlock,
        ThinkingBlock,
        RedactedThinkingBlock,
        ServerBlock,
    ):
        conv.register_unstructure_hook(cls, _unstructure_block)
    conv.register_structure_hook(Block, _structure_block)
    conv.register_unstructure_hook(Message, message_to_json)
    conv.register_structure_hook(Message, _structure_message)
    conv.register_unstructure_hook(StopReason, lambda r: r.value)


def _structure_message(doc: Any, _: Any) -> Message:
    if not isinstance(doc, dict) or doc.get("role") not in ("user", "assistant"):
        raise ValueError("a message must be an object with role user or assistant")
    content = doc.get("content")
    if not isinstance(content, list):
        raise ValueError("a message's content must be a list of blocks")
    return Message(doc["role"], tuple(_structure_block(b, Block) for b in content))


def configure_basics(conv: cattrs.Converter) -> None:
    """UUIDs as strings."""
    conv.register_unstructure_hook(uuid.UUID, str)
    conv.register_structure_hook(uuid.UUID, lambda v, _: uuid.UUID(str(v)))


def make_converter() -> cattrs.Converter:
    """A fresh converter configured for everything hango persists."""
    conv = cattrs.Converter()
    configure_basics(conv)
    configure_messages(conv)
    return conv


CONVERTER = make_converter()


def message_from_json(doc: Any) -> Message:
    """Raises ``ValueError`` naming what is wrong with ``doc``."""
    return _structure_message(doc, Message)
