"""hango-approval: human approval of tool calls (slot ``human_in_the_loop`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``approval``. The policy is the agent file's
``[options.human_in_the_loop]`` table (``hango_approval.policy``); without one the middleware
asks about nothing and passes every call through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hango.middleware import StackConfig, hookimpl
from hango_approval.middleware import MAX_EDITS, HumanInTheLoopMiddleware
from hango_approval.policy import OPTIONS_SCHEMA, ToolPolicy, policies

__all__ = [
    "MAX_EDITS",
    "OPTIONS_SCHEMA",
    "HumanInTheLoopMiddleware",
    "ToolPolicy",
    "hango_middleware",
    "hango_options_schema",
    "policies",
]


@hookimpl
def hango_options_schema() -> dict[str, Mapping[str, Any]]:
    """The schema of ``[options.human_in_the_loop]``: ``interrupt_on`` and ``when``."""
    return {HumanInTheLoopMiddleware.name: OPTIONS_SCHEMA}


@hookimpl
def hango_middleware(config: StackConfig) -> HumanInTheLoopMiddleware:
    """The approval middleware for the agent's ``[options.human_in_the_loop]`` table; raises
    ``ConfigError`` naming the agent and the entry for a ``when`` on an ungated tool."""
    name = HumanInTheLoopMiddleware.name
    options = config.options(name)
    return HumanInTheLoopMiddleware(
        options.get("interrupt_on", {}),
        when=options.get("when", {}),
        source=f"{config.source}: [options.{name}]",
    )
