"""hango-mcp as a plugin: the entry point and slot, the ``[options.mcp]`` table and the
errors for a malformed one, results as the model sees them."""

from __future__ import annotations

import re
from typing import Any

import mcp_types as types
import pytest

import hango_mcp
from hango import ConfigError
from hango.agent.stack import STACK_ORDER
from hango.discovery import check_options
from hango.middleware import StackConfig
from hango.plugins import make_plugin_manager
from hango.testing import assert_installed
from hango_mcp import McpMiddleware, servers, to_tool_result


def test_installed_through_entry_point_in_its_slot_after_subagent() -> None:
    options = {"mcp": {"servers": {"files": {"command": "python", "args": ["s.py"]}}}}
    placed = assert_installed(
        "mcp",
        "hango-mcp",
        hango_mcp,
        middleware="mcp",
        config=StackConfig(middleware_options=options),
    )
    assert placed.capabilities == ("tool_wrapper", "run_hook", "tool_provider")
    assert isinstance(placed.middleware, McpMiddleware)
    assert [s.name for s in placed.middleware.servers] == ["files"]
    assert STACK_ORDER.index("mcp") == STACK_ORDER.index("subagent") + 1
    # Outside every middleware that wraps tool calls: they all apply to MCP tools.
    for wrapper in ("repeat_call", "limits", "agent", "human_in_the_loop", "tool_allowlist"):
        assert STACK_ORDER.index("mcp") < STACK_ORDER.index(wrapper)


def test_without_servers_the_slot_is_filled_by_a_middleware_that_does_nothing() -> None:
    placed = assert_installed("mcp", "hango-mcp", hango_mcp, middleware="mcp")
    assert isinstance(placed.middleware, hango_mcp.NoServers) and placed.capabilities == ()


def test_defaults_and_names() -> None:
    (files, web) = servers(
        {
            "servers": {
                "files": {"command": "python", "args": ["s.py"], "cwd": "srv"},
                "web": {"url": "https://x/mcp", "prefix": "", "tools": {"exclude": ["rm"]}},
            }
        },
        base_dir="/agents",
    )
    assert (files.transport, files.prefix, files.timeout, files.connect_timeout) == (
        "stdio",
        "files",
        300.0,
        30.0,
    )
    assert files.cwd == "/agents/srv" and files.required and files.idempotent is None
    assert files.exposed("read") == "files_read" and web.exposed("read") == "read"
    assert web.offers("read") and not web.offers("rm")
    assert files.where == "python s.py" and web.where == "https://x/mcp"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"servers": {"a": {"command": "x", "timeout": 0}}}, "servers.a.timeout"),
        ({"servers": {"a": {"url": "ftp://x"}}}, "servers.a.url"),
        ({"servers": {"a": {"command": "x", "tools": {"only": []}}}}, "servers.a.tools"),
        ({"servers": {"a b": {"command": "x"}}}, "servers"),
        ({"server": {}}, "server"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_field(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_options({"mcp": table}, make_plugin_manager(env={}), source="agent 'a'")
    assert str(caught.value).startswith("agent 'a': ") and message in str(caught.value)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "servers.a: give either command (a stdio server) or url"),
        ({"command": "x", "url": "http://x"}, "servers.a: give either command"),
        ({"url": "http://x", "env": {}}, "servers.a: env does not apply to a HTTP server"),
        ({"command": "x", "headers": {}}, "servers.a: headers does not apply to a stdio server"),
    ],
)
def test_what_a_schema_cannot_say_is_refused_naming_the_server(
    table: dict[str, Any], message: str
) -> None:
    config = StackConfig(middleware_options={"mcp": {"servers": {"a": table}}}, source="agent 'a'")
    with pytest.raises(ConfigError, match="^" + re.escape(f"agent 'a': [options.mcp]: {message}")):
        hango_mcp.hango_middleware(config=config)


def test_results_are_shown_once_and_other_content_as_placeholders() -> None:
    structured = types.CallToolResult(
        content=[types.TextContent(type="text", text='{"a": 1}')], structured_content={"a": 1}
    )
    assert to_tool_result(structured).content == '{"a": 1}'
    only_structured = types.CallToolResult(content=[], structured_content={"a": 1})
    assert to_tool_result(only_structured).content == '{"a":1}'
    mixed = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="see"),
            types.AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///a.txt", text="inside"),
            ),
        ],
        is_error=True,
    )
    result = to_tool_result(mixed)
    assert result.is_error
    assert result.content == (
        "see\n\n[audio audio/wav, about 3 bytes: not shown, tool results are text]\n\ninside"
    )
