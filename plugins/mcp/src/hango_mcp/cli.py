"""``hango mcp list --agent FILE``: each server of an agent, its transport, state and tools.

Connecting is what a run does at its start (the same sessions code, the same timeouts), so a
server this lists as connected is one a run can use. A server that cannot be reached is listed
with the reason and the command exits 1; a malformed agent file is one line and exit 2.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import anyio
import click
import jsonschema

from hango import AgentDefinition, AgentFileError
from hango.middleware import ConfigError
from hango_mcp.config import OPTIONS_SCHEMA, ServerConfig, servers
from hango_mcp.sessions import McpUnavailable, close_sessions, in_sessions, session


@click.group("mcp")
def mcp_group() -> None:
    """Inspect the MCP servers of an agent (hango-mcp)."""


@mcp_group.command("list")
@click.option("--agent", "agent_file", required=True, type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of text.")
def list_servers(agent_file: str, as_json: bool) -> None:
    """Connect to each server of the agent file and list its tools."""
    try:
        agent = AgentDefinition.from_file(agent_file)
        options = agent.options.get("mcp", {})
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(OPTIONS_SCHEMA).iter_errors(options)
        )
        if error is not None:
            raise ConfigError(f"{agent.label}: [options.mcp]{error.json_path[1:]}: {error.message}")
        found = servers(options, base_dir=agent.base_dir, source=f"{agent.label}: [options.mcp]")
    except (AgentFileError, ConfigError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        report = anyio.run(_report, found)
    finally:
        close_sessions()
    if as_json:
        click.echo(json.dumps({"servers": report}, indent=2))
    else:
        if not report:
            click.echo(f"{agent_file}: no MCP servers ([options.mcp] has no servers)")
        for entry in report:
            click.echo(f"{entry['name']}  {entry['transport']}  {entry['where']}  {entry['state']}")
            for tool in entry["tools"]:
                click.echo(f"  {tool['name']}  ({tool['server_tool']})  {tool['description']}")
    if any(entry["state"] != "connected" for entry in report):
        raise SystemExit(1)


async def _report(found: tuple[ServerConfig, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for config in found:
        s = session(config)
        with contextlib.suppress(McpUnavailable):  # listed below with its reason
            await in_sessions(s.connect)
        tools = [
            {
                "name": config.exposed(t.name),
                "server_tool": t.name,
                "description": " ".join((t.description or "").split())[:80],
            }
            for t in s.tools
            if config.offers(t.name)
        ]
        out.append(
            {
                "name": config.name,
                "transport": config.transport,
                "where": config.where,
                "state": s.status,
                "tools": tools if s.status == "connected" else [],
            }
        )
    return out
