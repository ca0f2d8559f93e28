"""hango-retry: tool retry (slot ``tool_retry`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``retry``. The policy is the agent file's
``[options.tool_retry]`` table (schema ``OPTIONS_SCHEMA``) over the ``HANGO_TOOL_RETRY_*``
defaults; without either, calls failing with ``TimeoutError`` or ``ConnectionError`` are
retried up to 3 attempts within 30 seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hango.middleware import StackConfig, hookimpl
from hango_retry.middleware import ATTEMPT_ATTRIBUTE, ToolRetryMiddleware
from hango_retry.policy import DEFAULT_RETRY_ON, OPTIONS_SCHEMA, RetryPolicy, exception_class

__all__ = [
    "ATTEMPT_ATTRIBUTE",
    "DEFAULT_RETRY_ON",
    "OPTIONS_SCHEMA",
    "RetryPolicy",
    "ToolRetryMiddleware",
    "exception_class",
    "hango_middleware",
    "hango_options_schema",
]


@hookimpl
def hango_options_schema() -> Mapping[str, Mapping[str, Any]]:
    """The schema of ``[options.tool_retry]``."""
    return {ToolRetryMiddleware.name: OPTIONS_SCHEMA}


@hookimpl
def hango_middleware(config: StackConfig) -> ToolRetryMiddleware:
    """The retry middleware for the agent's ``[options.tool_retry]`` over the
    ``HANGO_TOOL_RETRY_*`` defaults; raises ``ConfigError`` naming the field or the
    variable when one is invalid."""
    options = config.options(ToolRetryMiddleware.name)
    return ToolRetryMiddleware(
        RetryPolicy.from_options(options, config.settings, source=config.source)
    )
