"""The records behind server tools and request options: server blocks and citations round-trip
through the JSON hango stores, unknown usage adds up sanely, tool_choice and server_tools are
read from agent files (bad ones rejected in one line), and the CLI's lines for retries and usage.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hango import AgentDefinition, AgentFileError
from hango.agent.events import RunFinished, RunStatus
from hango.cli.render import Renderer, retry_line, usage_text
from hango.convert import message_from_json, message_to_json
from hango.provider import Message, ProviderRetry, ServerBlock, TextBlock, ToolChoice, Usage

CITATION = {
    "type": "web_search_result_location",
    "cited_text": "Sunrise in San Francisco today is at 05:50",
    "url": "https://sunrise.example/sf",
    "title": "Sunrise",
    "encrypted_index": "Eo8BCioI",
}
SEARCH = {
    "type": "server_tool_use",
    "id": "srvtoolu_1",
    "name": "web_search",
    "input": {"query": "sunrise"},
    "caller": {"type": "direct"},
}
RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_1",
    "content": [
        {"type": "web_search_result", "url": "https://sunrise.example/sf", "page_age": None}
    ],
}


def test_server_blocks_and_citations_round_trip_exactly() -> None:
    message = Message(
        "assistant",
        (ServerBlock(SEARCH), ServerBlock(RESULT), TextBlock("At 05:50.", citations=(CITATION,))),
    )
    doc = message_to_json(message)
    assert doc["content"] == [
        SEARCH,
        RESULT,
        {"type": "text", "text": "At 05:50.", "citations": [CITATION]},
    ]
    assert message_from_json(doc) == message
    assert message.tool_uses == ()  # a server tool call is never one the loop would execute


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"id": "x"}, "a content block needs a string 'type', got None"),
        ({"type": 3}, "a content block needs a string 'type', got 3"),
        ({"type": "text", "text": "a", "citations": "b"}, "citations must be a list of objects"),
        ({"type": "tool_use", "id": "t"}, "tool_use block lacks field 'name'"),
    ],
)
def test_malformed_stored_blocks_are_named(block: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        message_from_json({"role": "assistant", "content": [block]})


def test_a_server_block_needs_a_type() -> None:
    with pytest.raises(ValueError, match="a server block needs a string 'type'"):
        ServerBlock({"id": "srvtoolu_1"})


def test_unknown_usage_adds_up_without_pretending_to_be_zero() -> None:
    total = Usage() + Usage(10, 5) + Usage.unknown() + Usage.unknown()
    assert total == Usage(10, 5, unknown_calls=2)
    assert not total.known and Usage(10, 5).known and (Usage() + Usage()).known
    assert usage_text(Usage(10, 5)) == "10 in / 5 out tokens"
    assert usage_text(Usage.unknown() + Usage.unknown()) == "usage not reported by the server"
    assert usage_text(total) == "at least 10 in / 5 out tokens; 2 calls' usage not reported"


def test_tool_choice_names_a_tool_exactly_when_its_mode_is_tool() -> None:
    assert ToolChoice.tool("search") == ToolChoice("tool", "search")
    for bad in (lambda: ToolChoice("tool"), lambda: ToolChoice("any", "search")):
        with pytest.raises(ValueError, match="tool_choice names a tool exactly when"):
            bad()


AGENT = 'name = "a"\nmodel = "scripted:s.toml"\n'


def agent_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(AGENT + extra)
    return path


@pytest.mark.parametrize(
    ("toml", "choice"),
    [
        ('tool_choice = "auto"', ToolChoice("auto")),
        ('tool_choice = "any"', ToolChoice("any")),
        ('tool_choice = "none"', ToolChoice("none")),
        ('tool_choice = {name = "search"}', ToolChoice.tool("search")),
        ("", None),
    ],
)
def test_agent_file_tool_choice(tmp_path: Path, toml: str, choice: ToolChoice | None) -> None:
    agent = AgentDefinition.from_file(agent_file(tmp_path, toml))
    assert agent.tool_choice == choice
    # stored with the run as JSON and read back the same
    assert AgentDefinition.from_json(agent.to_json()) == agent


def test_agent_file_server_tools_and_parallel_calls(tmp_path: Path) -> None:
    agent = AgentDefinition.from_file(
        agent_file(
            tmp_path,
            "parallel_tool_calls = false\n"
            'server_tools = [{type = "web_search_20250305", name = "web_search", max_uses = 2,'
            ' allowed_domains = ["example.org"]}, {name = "read_file", defer_loading = true}]\n',
        )
    )
    assert agent.parallel_tool_calls is False
    assert agent.server_tools == (
        {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": 2,
            "allowed_domains": ["example.org"],
        },
        {"name": "read_file", "defer_loading": True},
    )
    assert AgentDefinition.from_json(agent.to_json()) == agent


@pytest.mark.parametrize(
    ("toml", "culprit"),
    [
        ('tool_choice = "required"', "$.tool_choice"),
        ('tool_choice = {tool = "x"}', "$.tool_choice"),
        ('server_tools = [{type = "web_search_20250305"}]', "$.server_tools[0]"),
        ('server_tools = ["web_search"]', "$.server_tools[0]"),
        ('parallel_tool_calls = "no"', "$.parallel_tool_calls"),
    ],
)
def test_bad_agent_file_options_name_the_field(tmp_path: Path, toml: str, culprit: str) -> None:
    with pytest.raises(AgentFileError) as caught:
        AgentDefinition.from_file(agent_file(tmp_path, toml))
    assert culprit in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.anyio
async def test_the_cli_prints_a_retry_as_one_dim_line() -> None:
    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=200, force_terminal=True, color_system="standard"))
    retry = ProviderRetry(
        "anthropic", 529, 2, 4, 2.0, "anthropic overloaded_error (HTTP 529): Overloaded"
    )
    await renderer.event(retry)
    assert retry_line(retry) == (
        "anthropic: HTTP 529, retry 2 of 4 in 2 s: overloaded_error (HTTP 529): Overloaded"
    )
    assert out.getvalue() == f"\x1b[2m{retry_line(retry)}\x1b[0m\n"  # dim, one line

    out.seek(0), out.truncate()
    finished = RunFinished(uuid.uuid4(), RunStatus.COMPLETED, None, None, Usage.unknown())
    await renderer.event(finished)
    assert "completed (usage not reported by the server)" in out.getvalue()
