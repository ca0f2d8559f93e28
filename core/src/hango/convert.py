"""The one cattrs converter: messages and run state to and from JSON values.

Made by ``make_converter`` and configured by ``configure_*`` functions; everything hango
persists goes through ``CONVERTER`` so a value that round-trips once round-trips everywhere.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.cols import (
    is_any_set,
    is_mapping,
    is_mutable_sequence,
    list_structure_factory,
    mapping_structure_factory,
)
from cattrs.gen import make_dict_structure_fn

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


def _sorted(items: list[Any]) -> list[Any]:
    # A set has no order; its JSON list gets one, so equal sets are stored alike.
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))


def _shape(kind: type, name: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not isinstance(value, kind):
            raise ValueError(f"expected {name}, got {type(value).__name__} {_short(value)}")

    return check


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _strict_scalar(kind: type, name: str) -> Callable[[Any, Any], Any]:
    """A structure hook taking only JSON's own ``kind`` of value: cattrs would coerce ``"5"``
    and ``5.9`` to the int 5 and ``"garbage"`` to a str, which makes a malformed value lie."""

    def structure(value: Any, cls: Any) -> Any:
        if cls is not kind and isinstance(cls, type) and issubclass(cls, enum.Enum):
            return cls(value)  # IntEnum, StrEnum and (str, Enum) reach here by their base
        if cls is bool or kind is bool:
            if type(value) is not bool:
                raise ValueError(f"expected a boolean, got {_short(value)}")
            return value
        if kind is float and type(value) is int:
            return float(value)
        if type(value) is not kind:
            raise ValueError(f"expected {name}, got {type(value).__name__} {_short(value)}")
        return value

    return structure


def configure_json_values(conv: cattrs.Converter) -> None:
    """Values become JSON and come back only from the JSON they became.

    Unstructure: sets and frozensets become sorted lists; enum dict keys become their values
    (other keys are left as they are, for ``json_value`` to refuse by path). Structure: an
    attrs class from an object, a list, tuple or set from an array, a mapping from an object,
    and str, int, float and bool from exactly that JSON kind (float also from an integer);
    anything else raises ``ValueError`` (reported by path through ``transform_error``).
    """
    conv.register_unstructure_hook_factory(
        is_any_set, lambda _: lambda items: _sorted([conv.unstructure(i) for i in items])
    )
    conv.register_unstructure_hook_factory(
        is_mapping,
        lambda _: (
            lambda mapping: {
                (k.value if isinstance(k, enum.Enum) else k): conv.unstructure(v)
                for k, v in mapping.items()
            }
        ),
    )

    def checked(check: Callable[[Any], None], inner: Callable[[Any, Any], Any]) -> Any:
        def structure(value: Any, cls: Any) -> Any:
            check(value)
            return inner(value, cls)

        return structure

    an_object = _shape(dict, "an object")
    an_array = _shape(list, "an array")
    conv.register_structure_hook_factory(
        attrs.has, lambda cls: checked(an_object, make_dict_structure_fn(cls, conv))
    )
    conv.register_structure_hook_factory(
        is_mapping, lambda cls: checked(an_object, mapping_structure_factory(cls, conv))
    )
    conv.register_structure_hook_factory(
        is_mutable_sequence, lambda cls: checked(an_array, list_structure_factory(cls, conv))
    )

    def set_factory(cls: Any) -> Any:
        args = getattr(cls, "__args__", None) or (Any,)
        as_list = list_structure_factory(list[args[0]], conv)  # type: ignore[valid-type]
        made = frozenset if getattr(cls, "__origin__", cls) is frozenset else set
        return checked(an_array, lambda value, _: made(as_list(value, None)))

    conv.register_structure_hook_factory(is_any_set, set_factory)
    for kind, name in ((str, "a string"), (int, "an integer"), (float, "a number")):
        conv.register_structure_hook(kind, _strict_scalar(kind, name))
    conv.register_structure_hook(bool, _strict_scalar(bool, "a boolean"))


def json_value(value: Any, path: str = "$") -> Any:
    """A deep copy of ``value`` made of JSON values only (dict with str keys, list, str, int,
    finite float, bool, None; a tuple becomes a list, an enum its value), so nothing of it is
    shared with ``value``.

    Raises ``ValueError("PATH: what")`` at the first part that is not JSON, e.g.
    ``$.grid: dict key (1, 2) (tuple) is not a string``.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{path}: {value} is not a JSON number")
        return value
    if kind is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError(
                    f"{path}: dict key {key!r} ({type(key).__name__}) is not a string "
                    "(JSON object keys are strings)"
                )
            # Strings and ints inline: a path is formatted only for what may hold an error,
            # which keeps large flat values (counts by key) cheap.
            t = type(item)
            out[key] = item if t is str or t is int else json_value(item, f"{path}.{key}")
        return out
    if kind is list or kind is tuple:
        return [
            item if type(item) is str or type(item) is int else json_value(item, f"{path}[{i}]")
            for i, item in enumerate(value)
        ]
    if isinstance(value, enum.Enum):  # a (str, Enum) mixin unstructures as itself
        return json_value(value.value, path)
    raise ValueError(f"{path}: {type(value).__name__} {_short(value)} is not a JSON value")


def make_converter() -> cattrs.Converter:
    """A fresh converter configured for everything hango persists."""
    conv = cattrs.Converter()
    configure_basics(conv)
    configure_json_values(conv)
    configure_messages(conv)
    return conv


CONVERTER = make_converter()


def message_from_json(doc: Any) -> Message:
    """Raises ``ValueError`` naming what is wrong with ``doc``."""
    return _structure_message(doc, Message)
