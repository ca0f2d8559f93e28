"""hango-limits: budgets (slot ``limits`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``limits``. The limits are the agent file's
``[options.limits]`` table (schema ``OPTIONS_SCHEMA``) over the ``HANGO_LIMITS_*`` defaults;
with none, the middleware only counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hango.middleware import StackConfig, hookimpl
from hango_limits.middleware import (
    LIMIT_ATTRIBUTE,
    Counts,
    LimitReached,
    LimitsMiddleware,
    LimitsState,
)
from hango_limits.policy import OPTIONS_SCHEMA, Limit, LimitPolicy, setting_name

__all__ = [
    "LIMIT_ATTRIBUTE",
    "OPTIONS_SCHEMA",
    "Counts",
    "Limit",
    "LimitPolicy",
    "LimitReached",
    "LimitsMiddleware",
    "LimitsState",
    "hango_middleware",
    "hango_options_schema",
    "setting_name",
]


@hookimpl
def hango_options_schema() -> Mapping[str, Mapping[str, Any]]:
    """The schema of ``[options.limits]``."""
    return {LimitsMiddleware.name: OPTIONS_SCHEMA}


@hookimpl
def hango_middleware(config: StackConfig) -> LimitsMiddleware:
    """The limits middleware for the agent's ``[options.limits]`` over the ``HANGO_LIMITS_*``
    defaults; raises ``ConfigError`` naming the variable when one is invalid."""
    return LimitsMiddleware(
        LimitPolicy.from_options(config.options(LimitsMiddleware.name), config.settings),
        source=f"{config.source}: [options.{LimitsMiddleware.name}]",
    )
