"""hango-subagents: delegation to sub-agents as child runs (slot ``subagent`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``subagent``. The sub-agents are the agent file's
``[options.subagent]`` table (``hango_subagents.catalog``); without one, or at ``max_depth =
0``, there is nothing to delegate to and the middleware offers no tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hango.middleware import StackConfig, hookimpl
from hango_subagents.catalog import GENERAL_PURPOSE, OPTIONS_SCHEMA, Catalog, Subagent, catalog
from hango_subagents.middleware import TOOL_NAME, SubagentMiddleware, TaskTool, report

__all__ = [
    "GENERAL_PURPOSE",
    "OPTIONS_SCHEMA",
    "TOOL_NAME",
    "Catalog",
    "Subagent",
    "SubagentMiddleware",
    "TaskTool",
    "hango_middleware",
    "hango_options_schema",
    "report",
]


@hookimpl
def hango_options_schema() -> dict[str, Mapping[str, Any]]:
    """The schema of ``[options.subagent]``: ``agents``, ``general_purpose``, ``max_depth``,
    ``max_report_chars``."""
    return {SubagentMiddleware.name: OPTIONS_SCHEMA}


@hookimpl
def hango_middleware(config: StackConfig) -> SubagentMiddleware | None:
    """The sub-agent middleware for the agent's ``[options.subagent]`` table (without one, or
    at ``max_depth = 0``, it offers no ``task`` tool); None when the agent's allowlist leaves
    ``task`` out. Raises ``ConfigError`` naming the agent and the entry for a bad entry."""
    allowlist = config.tool_allowlist
    if allowlist is not None and TOOL_NAME not in allowlist:
        return None
    return SubagentMiddleware(catalog(config, config.options(SubagentMiddleware.name)))
