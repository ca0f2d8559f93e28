"""Content every store can hold, made so where it enters a run (the loop calls these).

Both stores keep messages as JSON text in UTF-8. Two things a model or a tool can produce do
not survive that: a lone UTF-16 surrogate (``"\\ud800"``: Python strings may hold one, UTF-8
cannot encode it) and a non-finite number (``1e400`` parses to infinity; NaN and Infinity are
not JSON, and PostgreSQL refuses them). Surrogates are replaced by U+FFFD, as a UTF-8 decoder
would; a tool call whose arguments hold a non-finite number keeps them as JSON text, so the
call is answered with an error result instead of running on numbers nobody can store.

Tool results are also bounded here: a result longer than the limit is cut in the middle with a
note saying how much was cut (the filesystem slot, a wrapper, can offload a large result before
it reaches this point).
"""

from __future__ import annotations

import json
import math
from typing import Final

from hango.provider.messages import (
    JSON,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

#: Characters of a tool result kept in history by default (``HANGO_TOOL_RESULT_MAX_CHARS``).
DEFAULT_MAX_RESULT_CHARS: Final = 100_000


def replace_lone_surrogates(text: str) -> str:
    """``text`` with each lone UTF-16 surrogate replaced by U+FFFD; a high and low surrogate
    that stand next to each other are joined into the one character they encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _clean_json(value: JSON) -> JSON:
    """``value`` with lone surrogates replaced in every string and key (the same object when
    there were none). Loops, not comprehensions: one stack frame per level of nesting."""
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, list):
        items: list[JSON] = []
        changed = False
        for item in value:
            clean = _clean_json(item)
            changed = changed or clean is not item
            items.append(clean)
        return items if changed else value
    if isinstance(value, dict):
        pairs: dict[str, JSON] = {}
        changed = False
        for key, item in value.items():
            clean_key, clean = replace_lone_surrogates(key), _clean_json(item)
            changed = changed or clean_key is not key or clean is not item
            pairs[clean_key] = clean
        return pairs if changed else value
    return value


def _non_finite(value: JSON) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, list):
        for item in value:
            if _non_finite(item):
                return True
    elif isinstance(value, dict):
        for item in value.values():
            if _non_finite(item):
                return True
    return False


def _storable_block(block: Block) -> Block:
    match block:
        case TextBlock(text=text):
            clean = replace_lone_surrogates(text)
            return block if clean is text else TextBlock(clean, block.cache_control)
        case ThinkingBlock(thinking=thinking, signature=signature):
            clean = replace_lone_surrogates(thinking)
            return block if clean is thinking else ThinkingBlock(clean, signature)
        case ToolUseBlock(id=id_, name=name, input=input_):
            try:
                args = _clean_json(input_)
                if _non_finite(args):
                    # Kept as the text the model meant (Infinity, NaN): the loop answers a
                    # call whose arguments are not a JSON object with an error result.
                    args = json.dumps(args, ensure_ascii=False)
            except RecursionError:
                args = input_  # nested too deeply to walk: the loop refuses to run the call
            clean_id, clean_name = replace_lone_surrogates(id_), replace_lone_surrogates(name)
            if args is input_ and clean_id is id_ and clean_name is name:
                return block
            return ToolUseBlock(clean_id, clean_name, args)
        case ToolResultBlock(content=content):
            clean = replace_lone_surrogates(content)
            if clean is content:
                return block
            return ToolResultBlock(block.tool_use_id, clean, block.is_error)
    return block


def storable_message(message: Message) -> Message:
    """``message`` made storable (see the module docstring); the same object when it already
    was, so history that did not change is not written again."""
    blocks = tuple(_storable_block(b) for b in message.content)
    if all(a is b for a, b in zip(blocks, message.content, strict=True)):
        return message
    return Message(message.role, blocks)


def storable_result(content: str, limit: int = DEFAULT_MAX_RESULT_CHARS) -> str:
    """A tool result's text as history keeps it: lone surrogates replaced and, above ``limit``
    characters, the middle cut out (the head and the last fifth of the limit kept) and replaced
    by a note saying how many characters were cut."""
    content = replace_lone_surrogates(content)
    if len(content) <= limit:
        return content
    tail = limit // 5
    cut = len(content) - limit
    note = (
        f"\n\n[... {cut:,} of {len(content):,} characters cut: a tool result is limited to "
        f"{limit:,} characters (HANGO_TOOL_RESULT_MAX_CHARS) ...]\n\n"
    )
    return content[: limit - tail] + note + content[len(content) - tail :]
