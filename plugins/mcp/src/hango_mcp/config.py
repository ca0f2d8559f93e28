"""The agent file's ``[options.mcp]`` table: which MCP servers an agent uses.

::

    [options.mcp.servers.files]          # a stdio server: hango starts the process
    command = "python"
    args = ["files_server.py"]
    env = { ROOT = "/srv/data" }
    cwd = "servers"                      # relative to the agent file's folder
    tools = { exclude = ["delete"] }

    [options.mcp.servers.search]         # a streamable HTTP server
    url = "http://127.0.0.1:8000/mcp"
    headers = { Authorization = "Bearer ..." }
    prefix = "web"                       # tools shown as web_<tool> (default: the server name)
    timeout = 600                        # seconds one call may take (default 300)
    connect_timeout = 10                 # seconds to connect and list tools (default 30)
    required = false                     # unreachable at run start: a warning, no tools
    idempotent = true                    # every tool may be re-run after a crash

Each server is either stdio (``command``) or HTTP (``url``), never both. The JSON Schema below
is checked by hango before a run is recorded; ``servers`` checks what a schema cannot say.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from attrs import frozen

from hango.middleware import ConfigError

#: Seconds one tool call may take by default: long enough for real tools (builds, searches,
#: browsers), where a few seconds would kill them (openai-agents-python#1024).
DEFAULT_TIMEOUT: Final = 300.0
#: Seconds to start or reach a server and list its tools, by default.
DEFAULT_CONNECT_TIMEOUT: Final = 30.0

_NAME: Final = r"^[A-Za-z0-9_-]{1,64}$"
_PREFIX: Final = r"^[A-Za-z0-9_-]{0,64}$"
_NAMES: Final = {"type": "array", "items": {"type": "string", "minLength": 1}, "uniqueItems": True}
_STRINGS: Final = {"type": "object", "additionalProperties": {"type": "string"}}
_SECONDS: Final = {"type": "number", "exclusiveMinimum": 0}

#: JSON Schema of the ``[options.mcp]`` table.
OPTIONS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "servers": {
            "type": "object",
            "propertyNames": {"pattern": _NAME},
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": _STRINGS,
                    "cwd": {"type": "string", "minLength": 1},
                    "url": {"type": "string", "pattern": r"^https?://"},
                    "headers": _STRINGS,
                    "tools": {
                        "type": "object",
                        "properties": {"include": _NAMES, "exclude": _NAMES},
                        "additionalProperties": False,
                    },
                    "prefix": {"type": "string", "pattern": _PREFIX},
                    "timeout": _SECONDS,
                    "connect_timeout": _SECONDS,
                    "required": {"type": "boolean"},
                    "idempotent": {"type": "boolean"},
                },
                "additionalProperties": False,
            },
        }
    },
    "additionalProperties": False,
}


@frozen
class ServerConfig:
    """One MCP server of an agent, as its ``[options.mcp.servers.<name>]`` table says.

    ``transport`` is ``"stdio"`` (``command``, ``args``, ``env``, ``cwd``) or ``"http"``
    (``url``, ``headers``). ``include`` / ``exclude`` filter the server's tool names (``None``:
    every tool). Tools are shown to the model as ``<prefix>_<tool>`` (``prefix`` is the server
    name unless set; an empty prefix shows the server's own names). ``timeout`` and
    ``connect_timeout`` are seconds. ``idempotent``: None follows each tool's annotations
    (``readOnlyHint`` or ``idempotentHint``); True or False holds for every tool of the server.
    Hashable: one session per distinct configuration per process.
    """

    name: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    include: frozenset[str] | None = None
    exclude: frozenset[str] = frozenset()
    prefix: str = ""
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    required: bool = True
    idempotent: bool | None = None

    def exposed(self, tool: str) -> str:
        """The name the model sees for the server's tool ``tool``."""
        return f"{self.prefix}_{tool}" if self.prefix else tool

    def offers(self, tool: str) -> bool:
        """Whether the ``tools`` filter lets the server's tool ``tool`` through."""
        if self.include is not None and tool not in self.include:
            return False
        return tool not in self.exclude

    @property
    def where(self) -> str:
        """The command line or URL, for listings and errors (never the headers: secrets)."""
        if self.transport == "http":
            return str(self.url)
        return " ".join((str(self.command), *self.args))


def servers(
    options: Mapping[str, Any], *, base_dir: str | None = None, source: str = "[options.mcp]"
) -> tuple[ServerConfig, ...]:
    """The servers of an ``[options.mcp]`` table (already valid against ``OPTIONS_SCHEMA``), in
    the table's order. A relative ``cwd`` resolves against ``base_dir`` (the agent file's
    folder). Raises ``ConfigError`` naming ``source`` and the server for a table with neither
    or both of ``command`` and ``url``, stdio keys on an HTTP server or the reverse, and for
    two servers with the same prefix (their tools would collide), naming both."""
    out: list[ServerConfig] = []
    for name, table in (options.get("servers") or {}).items():
        where = f"{source}: servers.{name}"
        if not re.match(_NAME, name):
            raise ConfigError(f"{where}: a server name is 1-64 letters, digits, '_' or '-'")
        has_command, has_url = "command" in table, "url" in table
        if has_command == has_url:
            raise ConfigError(
                f"{where}: give either command (a stdio server) or url (a streamable HTTP "
                "server)" + (", not both" if has_command else "")
            )
        wrong = sorted(set(table) & ({"headers"} if has_command else {"args", "env", "cwd"}))
        if wrong:
            kind = "stdio" if has_command else "HTTP"
            raise ConfigError(f"{where}: {', '.join(wrong)} does not apply to a {kind} server")
        filters = table.get("tools") or {}
        cwd = table.get("cwd")
        if cwd is not None and base_dir is not None:
            cwd = str(Path(base_dir, cwd))
        out.append(
            ServerConfig(
                name=name,
                transport="stdio" if has_command else "http",
                command=table.get("command"),
                args=tuple(table.get("args", ())),
                env=tuple(sorted(table.get("env", {}).items())),
                cwd=cwd,
                url=table.get("url"),
                headers=tuple(sorted(table.get("headers", {}).items())),
                include=frozenset(filters["include"]) if "include" in filters else None,
                exclude=frozenset(filters.get("exclude", ())),
                prefix=table.get("prefix", name),
                timeout=float(table.get("timeout", DEFAULT_TIMEOUT)),
                connect_timeout=float(table.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)),
                required=table.get("required", True),
                idempotent=table.get("idempotent"),
            )
        )
    by_prefix: dict[str, str] = {}
    for server in out:
        other = by_prefix.setdefault(server.prefix, server.name)
        if other != server.name:
            raise ConfigError(
                f"{source}: servers {other!r} and {server.name!r} both show their tools with "
                f"prefix {server.prefix!r}, so their tool names can collide; give one of them "
                "another prefix"
            )
    return tuple(out)
