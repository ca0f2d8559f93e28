"""``PromptCacheMiddleware`` (slot ``prompt_cache``): Anthropic cache breakpoints, decided per
call from the model actually called, and a watch on what each call reads back.

A ModelWrapper. For a call whose model is an Anthropic one (``req.model.provider_name ==
"anthropic"``) it hands on the request with the breakpoints of ``place_breakpoints``; any other
call passes through untouched, so no ``cache_control`` reaches a provider that does not take it,
even when ``model_fallback`` (outside this slot) sent the call elsewhere. History is never
changed: the markers live in the request of that one call.

After an Anthropic call it keeps the size of the cached prefix (tokens read back plus tokens
written) in its private state, per run. When a later call of the run reads back less than
``bust_threshold`` of it, something before a breakpoint changed (or the cache expired): the
event ``middleware.cache_bust`` says so, with both counts.
"""

from __future__ import annotations

from typing import Final

import attrs
from attrs import frozen

from hango import ModelResponse, Usage
from hango.middleware import ModelHandler, ModelRequest, State, load_private, record, store_private
from hango_prompt_cache.breakpoints import TTLS, marker, place_breakpoints

CACHE_BUST: Final = "middleware.cache_bust"
#: Attributes of ``middleware.cache_bust``: the established prefix and what the call read back.
EXPECTED_TOKENS: Final = "hango.cache.expected_tokens"
READ_TOKENS: Final = "hango.cache.read_tokens"


@frozen
class CachedPrefix:
    """What the run's last Anthropic call left in the cache: ``tokens`` of prompt up to its
    last breakpoint (read back plus written)."""

    tokens: int = 0


def takes_cache_control(model: object) -> bool:
    """Whether ``model`` is an Anthropic Messages model, the one provider with breakpoints."""
    return getattr(model, "provider_name", None) == "anthropic"


class PromptCacheMiddleware:
    """Places breakpoints with ``ttl`` on the tools and the system prompt and ``messages_ttl``
    (default: ``ttl``) on the conversation; TTLs are ``"5m"`` or ``"1h"``.

    Raises ``ValueError`` for an unknown TTL, for ``messages_ttl`` longer than ``ttl`` (the API
    refuses a longer-lived breakpoint after a shorter one) and for a ``bust_threshold`` outside
    (0, 1].
    """

    name = "prompt_cache"

    def __init__(
        self, ttl: str = "5m", messages_ttl: str | None = None, bust_threshold: float = 0.5
    ) -> None:
        messages_ttl = messages_ttl or ttl
        self._prefix = marker(ttl)
        self._conversation = marker(messages_ttl)
        if TTLS.index(messages_ttl) > TTLS.index(ttl):
            raise ValueError(
                f"messages_ttl {messages_ttl!r} is longer than ttl {ttl!r}: TTLs must not "
                "increase along the prompt (tools and system come before the messages)"
            )
        if not 0 < bust_threshold <= 1:
            raise ValueError(f"bust_threshold must be in (0, 1], got {bust_threshold}")
        self.ttl = ttl
        self.messages_ttl = messages_ttl
        self.bust_threshold = bust_threshold

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        if not takes_cache_control(req.model):
            return await next(req)
        request = req.request
        system_end = req.system_ends.get(self.name, len(request.system) - 1)
        marked = place_breakpoints(request, system_end, self._prefix, self._conversation)
        response = await next(req if marked is request else attrs.evolve(req, request=marked))
        self._watch(req.state, response.usage)
        return response

    def _watch(self, state: State, usage: Usage) -> None:
        read = usage.cache_read_input_tokens
        before, known = load_private(state, self.name, CachedPrefix)
        if known and read < before.tokens * self.bust_threshold:
            record(
                CACHE_BUST,
                middleware=self.name,
                reason="cached prefix read back short",
                attributes={EXPECTED_TOKENS: before.tokens, READ_TOKENS: read},
            )
        store_private(state, self.name, CachedPrefix(read + usage.cache_creation_input_tokens))
