"""hango-mcp: the tools of MCP servers (slot ``mcp`` of ``STACK_ORDER``).

Installed through the ``hango`` entry point ``mcp``. The servers are the agent file's
``[options.mcp]`` table (``hango_mcp.config``). The
CLI gains ``hango mcp list --agent FILE``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from hango.middleware import StackConfig, hookimpl
from hango_mcp.cli import mcp_group
from hango_mcp.config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    OPTIONS_SCHEMA,
    ServerConfig,
    servers,
)
from hango_mcp.middleware import McpMiddleware, McpTool, McpWarning, SeenTools
from hango_mcp.results import to_tool_result
from hango_mcp.sessions import McpCallFailed, McpUnavailable, close_sessions

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "OPTIONS_SCHEMA",
    "McpCallFailed",
    "McpMiddleware",
    "McpTool",
    "McpUnavailable",
    "McpWarning",
    "NoServers",
    "SeenTools",
    "ServerConfig",
    "close_sessions",
    "hango_cli_commands",
    "hango_middleware",
    "hango_options_schema",
    "servers",
    "to_tool_result",
]


@hookimpl
def hango_options_schema() -> dict[str, Mapping[str, Any]]:
    """The schema of ``[options.mcp]``: ``servers``, one table per server."""
    return {McpMiddleware.name: OPTIONS_SCHEMA}


class NoServers:
    """Slot ``mcp`` for an agent without MCP servers: no capability, so it costs a run nothing
    (no hook, no span, no wrapper). It is still placed, because the set of middlewares a
    process can build is asked without an agent's options (a worker claiming runs, a resume
    rebuilding a recorded stack), and an agent with servers must find ``mcp`` there."""

    name = McpMiddleware.name


@hookimpl
def hango_middleware(config: StackConfig) -> McpMiddleware | NoServers:
    """The MCP middleware for the agent's ``[options.mcp]`` servers (``NoServers`` without
    any). Raises ``ConfigError`` naming the agent and the server for a malformed server
    table."""
    source = f"{config.source}: [options.{McpMiddleware.name}]"
    found = servers(config.options(McpMiddleware.name), base_dir=config.base_dir, source=source)
    return McpMiddleware(found, source=source) if found else NoServers()


@hookimpl
def hango_cli_commands() -> Sequence[click.Command]:
    """``hango mcp``: ``hango mcp list --agent FILE``."""
    return [mcp_group]
