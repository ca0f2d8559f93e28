"""hango-prompt-cache: Anthropic prompt caching (slot ``prompt_cache`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``prompt_cache``. Settings: the agent file's
``[options.prompt_cache]`` table, key by key over the ``HANGO_PROMPT_CACHE_*`` defaults::

    [options.prompt_cache]
    ttl = "1h"              # tools and system prompt; HANGO_PROMPT_CACHE_TTL (default "5m")
    messages_ttl = "5m"     # the conversation; HANGO_PROMPT_CACHE_MESSAGES_TTL (default: ttl)
    bust_threshold = 0.5    # HANGO_PROMPT_CACHE_BUST_THRESHOLD (default 0.5)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hango.middleware import ConfigError, StackConfig, hookimpl
from hango_prompt_cache.breakpoints import TTLS, marker, place_breakpoints
from hango_prompt_cache.middleware import (
    CACHE_BUST,
    EXPECTED_TOKENS,
    READ_TOKENS,
    CachedPrefix,
    PromptCacheMiddleware,
    takes_cache_control,
)

__all__ = [
    "CACHE_BUST",
    "EXPECTED_TOKENS",
    "OPTIONS_SCHEMA",
    "READ_TOKENS",
    "TTLS",
    "CachedPrefix",
    "PromptCacheMiddleware",
    "hango_middleware",
    "hango_options_schema",
    "marker",
    "place_breakpoints",
    "takes_cache_control",
]

_TTL = {"type": "string", "enum": list(TTLS)}

#: JSON Schema of ``[options.prompt_cache]``.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "ttl": {**_TTL, "description": "TTL of the breakpoints on the tools and system prompt"},
        "messages_ttl": {
            **_TTL,
            "description": "TTL of the breakpoint on the conversation; not longer than ttl",
        },
        "bust_threshold": {
            "description": "a call reading back less than this share of the cached prefix is "
            "reported as middleware.cache_bust",
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 1,
        },
    },
    "additionalProperties": False,
}

#: The ``HANGO_*`` default of each key.
VARIABLES: Final = {
    "ttl": "HANGO_PROMPT_CACHE_TTL",
    "messages_ttl": "HANGO_PROMPT_CACHE_MESSAGES_TTL",
    "bust_threshold": "HANGO_PROMPT_CACHE_BUST_THRESHOLD",
}


@hookimpl
def hango_options_schema() -> dict[str, Any]:
    return {PromptCacheMiddleware.name: OPTIONS_SCHEMA}


def _settings(config: StackConfig) -> tuple[dict[str, Any], dict[str, str]]:
    """Each key's value and where it came from: the agent file's table, else the variable."""
    table: Mapping[str, Any] = config.options(PromptCacheMiddleware.name)
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for key, variable in VARIABLES.items():
        if key in table:
            values[key] = table[key]
            origin[key] = f"[options.{PromptCacheMiddleware.name}].{key}"
            continue
        raw = config.settings.get(variable, "")
        if not raw:
            continue
        origin[key] = variable
        if key == "bust_threshold":
            try:
                values[key] = float(raw)
            except ValueError:
                raise ConfigError(f"{variable} must be a number, got {raw!r}") from None
        elif raw not in TTLS:
            raise ConfigError(f"{variable} must be one of {', '.join(TTLS)}, got {raw!r}")
        else:
            values[key] = raw
    return values, origin


@hookimpl
def hango_middleware(config: StackConfig) -> PromptCacheMiddleware:
    """The prompt-cache middleware for the agent's table over the ``HANGO_PROMPT_CACHE_*``
    defaults. Raises ``ConfigError`` naming the variable or field at fault."""
    values, origin = _settings(config)
    try:
        return PromptCacheMiddleware(**values)
    except ValueError as exc:
        fields = ", ".join(f"{key} from {where}" for key, where in origin.items())
        # A table belongs to the agent, the variables to the deployment.
        agent = any(where.startswith("[") for where in origin.values())
        prefix = f"{config.source}: " if agent else ""
        raise ConfigError(f"{prefix}prompt_cache: {exc} ({fields})") from None
