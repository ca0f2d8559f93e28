"""``McpMiddleware`` (slot ``mcp``): the tools of MCP servers as agent tools.

A RunHook (connect every server, list its tools: a server that cannot be reached is one clear
line, or a warning with ``required = false``), a ToolProvider (each server's tools as
``<prefix>_<tool>``, from the session's cached list, refreshed when the server says it
changed) and a ToolWrapper (a call to a tool this run saw that its server no longer offers
gets an error result saying so, instead of "unknown tool").

The tools are ordinary agent tools: they go through the whole chain, so repeat detection,
budgets, approval and the allowlist treat them like any other tool. The names a run saw are
kept in its private state (``private["mcp"]``); the sessions are per process and never
persisted (``hango_mcp.sessions``).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types as types
from attrs import define, field, frozen

from hango import Tool, ToolContext, ToolResult, ToolSpec, error_result
from hango.middleware import (
    ConfigError,
    State,
    ToolCallRequest,
    ToolHandler,
    load_private,
    store_private,
)
from hango_mcp.config import ServerConfig
from hango_mcp.results import to_tool_result
from hango_mcp.sessions import (
    McpCallFailed,
    McpUnavailable,
    Session,
    first_listing,
    in_sessions,
    session,
)

NAME = "mcp"


class McpWarning(UserWarning):
    """A server with ``required = false`` could not be reached: the run goes on without it."""


@define
class SeenTools:
    """``private["mcp"]``: every tool name this run was shown -> the server that offered it."""

    tools: dict[str, str] = field(factory=dict)


@frozen
class McpTool:
    """One tool of one MCP server, as an agent tool named ``config.exposed(tool)``.

    ``idempotent`` is the server's ``idempotent`` setting, else the tool's annotations
    (``readOnlyHint`` or ``idempotentHint``): a tool that does not say it can be re-run is
    not re-run after a crash (its outcome is reported unknown instead).

    ``timeout`` covers what the server's settings allow a call (a reconnect within
    ``connect_timeout``, then ``timeout``) and a second more: the agent's ``tool_timeout``
    does not cut a call short, and the error the model sees names the server's setting.
    """

    spec: ToolSpec
    tool: str
    server: Session
    idempotent: bool

    @property
    def timeout(self) -> float:
        config = self.server.config
        return config.connect_timeout + config.timeout + 1.0

    async def call(self, input: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """The server's answer as a ``ToolResult``; an error result naming the server when it
        cannot be reached, fails, times out or closes the connection."""
        try:
            result = await in_sessions(self.server.call, self.tool, input)
        except (McpCallFailed, McpUnavailable) as exc:
            return error_result("%s", exc)
        return to_tool_result(result)


def _idempotent(config: ServerConfig, tool: types.Tool) -> bool:
    if config.idempotent is not None:
        return config.idempotent
    hints = tool.annotations
    return bool(hints and (hints.read_only_hint or hints.idempotent_hint))


class McpMiddleware:
    """The tools of ``servers`` (see ``hango_mcp.config.servers``); ``source`` names the agent
    file's table in errors."""

    name = NAME

    def __init__(self, servers: Sequence[ServerConfig], *, source: str = "[options.mcp]") -> None:
        self.servers = tuple(servers)
        self.source = source
        self._sessions = tuple(session(s) for s in self.servers)
        #: Servers left out of this run (``required = false`` and unreachable at run start).
        self._skipped: set[str] = set()

    async def before_run(self, state: State) -> None:
        """Connect every server (bounded by its ``connect_timeout``) and check the tool names.

        Raises ``ConfigError`` naming the server for a required server that cannot be reached,
        and naming both servers (and both tools) when two of them offer one name."""
        failed: dict[str, McpUnavailable] = {}

        async def connect(s: Session) -> None:
            try:
                await in_sessions(s.connect)
            except McpUnavailable as exc:
                failed[s.config.name] = exc

        async with anyio.create_task_group() as tg:  # at once: the waits do not add up
            for s in self._sessions:
                tg.start_soon(connect, s)
        self._skipped = set()
        for s in self._sessions:  # reported in the table's order
            exc = failed.get(s.config.name)
            if exc is None:
                continue
            if s.config.required:
                raise ConfigError(f"{self.source}: {exc}")
            warnings.warn(f"{self.source}: {exc}; running without its tools", McpWarning, 2)
            self._skipped.add(s.config.name)
        owners: dict[str, tuple[str, str]] = {}
        for s in self._sessions:
            if s.config.name in self._skipped:
                continue
            for tool in s.tools:
                if not s.config.offers(tool.name):
                    continue
                exposed = s.config.exposed(tool.name)
                other = owners.setdefault(exposed, (s.config.name, tool.name))
                if other[0] != s.config.name:
                    raise ConfigError(
                        f"{self.source}: tool name {exposed!r} is offered by server "
                        f"{other[0]!r} (tool {other[1]!r}) and by server {s.config.name!r} "
                        f"(tool {tool.name!r}); give one of them a prefix"
                    )
        self.provide_tools(state)

    def provide_tools(self, state: State) -> Sequence[Tool]:
        """Every reachable server's tools, from its cached list; each call builds new specs (a
        caller that changes one changes nothing here). Records the names in private state.

        Asked first before the run is recorded (its tool names are checked then), when a server
        this process never reached is connected at once (``sessions.first_listing``)."""
        out: list[Tool] = []
        names: dict[str, str] = {}
        for s in self._sessions:
            config = s.config
            if config.name in self._skipped:
                continue
            first_listing(s)
            for tool in s.tools:  # one snapshot: replaced whole on a change, never edited
                if not config.offers(tool.name):
                    continue
                exposed = config.exposed(tool.name)
                if exposed in names:
                    continue  # a collision that appeared mid-run: the first server keeps it
                names[exposed] = config.name
                spec = ToolSpec(
                    exposed,
                    tool.description or tool.title or tool.name,
                    copy.deepcopy(tool.input_schema),
                )
                out.append(McpTool(spec, tool.name, s, _idempotent(config, tool)))
        seen, _ = load_private(state, NAME, SeenTools)
        if not names.items() <= seen.tools.items():
            seen.tools.update(names)
            store_private(state, NAME, seen)
        return out

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if req.tool is None and NAME in req.state.private:
            seen, _ = load_private(req.state, NAME, SeenTools)
            server = seen.tools.get(req.call.name)
            if server is not None:
                return error_result(
                    "tool %r is no longer offered by MCP server %r (it was earlier in this "
                    "run); the call did not run",
                    req.call.name,
                    server,
                )
        return await next(req)
