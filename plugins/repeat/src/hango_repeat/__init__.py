"""hango-repeat: repeat-call detection (slot ``repeat_call`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``repeat``. The threshold (default 3, at least 2)
is the occurrence of an identical call that is blocked: the agent file's
``[options.repeat_call] threshold``, else ``HANGO_REPEAT_CALL_THRESHOLD``.
"""

from __future__ import annotations

from typing import Any

from hango.middleware import StackConfig, hookimpl, int_setting
from hango_repeat.keys import call_key, canonical_json, fnv1a_64
from hango_repeat.middleware import (
    DEFAULT_THRESHOLD,
    THRESHOLD_VARIABLE,
    RepeatCallMiddleware,
    RepeatCounts,
)

__all__ = [
    "DEFAULT_THRESHOLD",
    "THRESHOLD_VARIABLE",
    "RepeatCallMiddleware",
    "RepeatCounts",
    "call_key",
    "canonical_json",
    "fnv1a_64",
    "hango_middleware",
    "hango_options_schema",
]

#: The agent file's ``[options.repeat_call]`` table.
OPTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"threshold": {"type": "integer", "minimum": 2}},
    "additionalProperties": False,
}


@hookimpl
def hango_options_schema() -> dict[str, Any]:
    return {"repeat_call": OPTIONS_SCHEMA}


@hookimpl
def hango_middleware(config: StackConfig) -> RepeatCallMiddleware:
    """The repeat-call middleware with the agent's ``threshold`` option, else the one from
    ``HANGO_REPEAT_CALL_THRESHOLD``.

    Raises ``ConfigError`` naming the variable when it is not an integer >= 2, so
    building the stack (and so the run, or ``hango plugins``) fails at startup.
    """
    threshold = config.options("repeat_call").get("threshold")
    if threshold is None:
        threshold = int_setting(config.settings, THRESHOLD_VARIABLE, DEFAULT_THRESHOLD, minimum=2)
    return RepeatCallMiddleware(threshold)
