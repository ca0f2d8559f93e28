"""hango-repeat: repeat-call detection (slot ``repeat_call`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``repeat``. ``HANGO_REPEAT_CALL_THRESHOLD``
(default 3, at least 2) is the occurrence of an identical call that is blocked.
"""

from __future__ import annotations

import hango
from hango.config import int_setting
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
]


@hango.hookimpl
def hango_middleware(config: hango.StackConfig) -> RepeatCallMiddleware:
    """The repeat-call middleware with the threshold from ``HANGO_REPEAT_CALL_THRESHOLD``.

    Raises ``hango.ConfigError`` naming the variable when it is not an integer >= 2, so
    building the stack (and so the run, or ``hango plugins``) fails at startup.
    """
    threshold = int_setting(config.settings, THRESHOLD_VARIABLE, DEFAULT_THRESHOLD, minimum=2)
    return RepeatCallMiddleware(threshold)
