"""Where the cache breakpoints of one Anthropic request go.

Anthropic caches the prompt up to each block marked ``cache_control``, in prompt order: tools,
then system, then messages; a request may carry at most four markers, and where TTLs are mixed
a longer-lived marker must come before a shorter one
(https://platform.claude.com/docs/en/build-with-claude/prompt-caching).

``place_breakpoints`` puts three at most:

- on the last tool, so the tool list stays cached when the system prompt changes (a new plan);
- on the system block at ``system_end``, the last one contributed at or before the
  ``prompt_cache`` slot: blocks of later contributors (memory) come after it and can change
  without invalidating the prefix;
- on the last block of the last message that can carry one, so the next call of the run reads
  the conversation so far back from the cache.

Markers already in the request (set by an outer middleware, or kept in history) are removed, so
the request never carries more than these three and their TTLs are the configured ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeVar

import attrs

from hango import Block, Message, Request, TextBlock, ToolResultBlock, ToolSpec

#: The TTLs the API accepts, shortest first.
TTLS: Final = ("5m", "1h")

Marker = Mapping[str, str]
_Marked = TypeVar("_Marked", TextBlock, ToolResultBlock, ToolSpec)


def marker(ttl: str) -> dict[str, str]:
    """The ``cache_control`` value for ``ttl``. The 5-minute TTL is the API's default and is
    sent without a ``ttl`` field, as clients that never name one send it."""
    if ttl not in TTLS:
        raise ValueError(f"a cache TTL is one of {', '.join(TTLS)}, not {ttl!r}")
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def _mark(item: _Marked, wanted: Marker | None) -> _Marked:
    return item if item.cache_control == wanted else attrs.evolve(item, cache_control=wanted)


def _marked_last(items: tuple[_Marked, ...], last: int, wanted: Marker) -> tuple[_Marked, ...]:
    """``items`` with ``wanted`` on index ``last`` (none when -1) and no marker elsewhere."""
    out = tuple(_mark(item, wanted if i == last else None) for i, item in enumerate(items))
    return items if all(a is b for a, b in zip(out, items, strict=True)) else out


def _conversation_end(messages: tuple[Message, ...]) -> tuple[int, int] | None:
    """(message, block) index of the last block of the last message that can carry a marker:
    a non-empty text block or a tool result (the API refuses one on empty text, and thinking
    blocks cannot carry one)."""
    if not messages:
        return None
    i = len(messages) - 1
    for j in range(len(messages[i].content) - 1, -1, -1):
        block = messages[i].content[j]
        if isinstance(block, ToolResultBlock) or (isinstance(block, TextBlock) and block.text):
            return i, j
    return None


def _conversation(messages: tuple[Message, ...], wanted: Marker) -> tuple[Message, ...]:
    end = _conversation_end(messages)
    out: list[Message] | None = None
    for i, message in enumerate(messages):
        blocks: list[Block] | None = None
        for j, block in enumerate(message.content):
            want = wanted if (i, j) == end else None
            if isinstance(block, TextBlock | ToolResultBlock) and block.cache_control != want:
                blocks = blocks if blocks is not None else list(message.content)
                blocks[j] = attrs.evolve(block, cache_control=want)
        if blocks is not None:
            out = out if out is not None else list(messages)
            out[i] = Message(message.role, tuple(blocks))
    return messages if out is None else tuple(out)


def place_breakpoints(
    request: Request, system_end: int, prefix: Marker, conversation: Marker
) -> Request:
    """``request`` with markers on the last tool and on ``system[system_end]`` (``prefix``,
    none when ``system_end`` is -1) and on the conversation's last block (``conversation``),
    and nowhere else. Returns ``request`` itself when it already is so.

    ``prefix`` must not have a shorter TTL than ``conversation`` (the API's ordering rule);
    ``PromptCacheMiddleware`` checks that once, when it is built.
    """
    system_end = min(system_end, len(request.system) - 1)
    tools = _marked_last(request.tools, len(request.tools) - 1, prefix)
    system = _marked_last(request.system, system_end, prefix)
    messages = _conversation(request.messages, conversation)
    if tools is request.tools and system is request.system and messages is request.messages:
        return request
    return attrs.evolve(request, tools=tools, system=system, messages=messages)
