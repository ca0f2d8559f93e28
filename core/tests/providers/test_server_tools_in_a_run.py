"""A recorded Anthropic web search run through the agent loop, saved in a real SQLite file.

The recording (pydantic-ai's, see cassettes/README.md) is a streamed web search that pauses
(``pause_turn``) after 11 server tool calls and is continued by sending the whole turn back.
Through ``Harness``: the loop must keep every server block, call no tool (the old mapping made a
phantom client call of each ``server_tool_use``), continue the paused turn, save the blocks, and
send them back unchanged from the store in the session's next run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest

from hango import AgentDefinition, Event, Harness, RunStatus, ToolCallStarted, ToolRegistry
from hango.provider import ServerBlock, StopReason
from hango.provider.anthropic import AnthropicModel
from hango.store.sqlite import SqliteRunStore
from hango.testing.providers import FakeServer as Replay

from .provider_cassettes import anthropic_request, as_recorded, load, served
from .test_anthropic_provider import HELLO

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

WEB_SEARCH = "anthropic/test_pause_turn_web_search_streaming_vcr.yaml"

# The recorded tool definition, as a user writes it in an agent file (TOML has no null: the
# recording's null options are simply left out).
AGENT_TOML = """\
name = "searcher"
model = "anthropic:claude-sonnet-4-5"
max_tokens = 15000
server_tools = [{type = "web_search_20250305", name = "web_search"}]
"""


def first_block(sse: bytes) -> dict[str, Any]:
    """The content block of the first ``content_block_start`` event of a recorded stream."""
    for line in sse.decode().splitlines():
        if line.startswith("data: ") and '"content_block_start"' in line:
            block: dict[str, Any] = json.loads(line[len("data: ") :])["content_block"]
            return block
    raise AssertionError("no content block in the stream")


def without_nulls(body: dict[str, Any]) -> dict[str, Any]:
    """A request with its tools' null options dropped (null and absent mean the same)."""
    tools = [{k: v for k, v in t.items() if v is not None} for t in body.get("tools", ())]
    return {**body, "tools": tools}


async def test_a_recorded_web_search_runs_with_its_server_blocks_kept(tmp_path: Path) -> None:
    first, second = load(WEB_SEARCH)
    (tmp_path / "agent.toml").write_text(AGENT_TOML)
    agent = AgentDefinition.from_file(tmp_path / "agent.toml")
    prompt = first.request["messages"][0]["content"][0]["text"]
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    replay = Replay([served(first, "anthropic"), served(second, "anthropic"), HELLO])
    events: list[Event] = []

    async def collect(event: Event) -> None:
        events.append(event)

    async with replay.client() as http:
        client = anthropic.AsyncAnthropic(api_key="test-key", http_client=http)
        model = AnthropicModel(client, "claude-sonnet-4-5", thinking=first.request["thinking"])
        store = await SqliteRunStore.open(db)
        try:
            harness = Harness(store, model=model, tools=ToolRegistry(), stack=lambda _: [])
            finished = await harness.run(agent, prompt, emit=collect)
        finally:
            await store.aclose()

        assert (finished.status, finished.stop_reason) == (
            RunStatus.COMPLETED,
            StopReason.END_TURN,
        ), finished.error
        assert not [e for e in events if isinstance(e, ToolCallStarted)]  # no phantom call
        assert len(replay.requests) == 2  # the paused turn was continued, then the turn ended
        for sent, recorded in zip(replay.bodies, (first, second), strict=False):
            expected = without_nulls(anthropic_request(recorded.request))
            assert anthropic_request(as_recorded(sent)) == expected

        # From the file, in a new store: the session's next run sends the blocks back as saved.
        store = await SqliteRunStore.open(db)
        try:
            session = (await store.get_run(harness.tenant_id, finished.run_id)).session_id
            history = await store.load_messages(harness.tenant_id, session)
            harness = Harness(store, model=model, tools=ToolRegistry(), stack=lambda _: [])
            again = await harness.run(agent, "Thanks.", session_id=session)
        finally:
            await store.aclose()

    assert again.status is RunStatus.COMPLETED
    assert [m.role for m in history] == ["user", "assistant", "assistant"]
    blocks = [b for m in history for b in m.content if isinstance(b, ServerBlock)]
    # 11 calls and 10 results before the pause; after it the 11th result, 4 calls and their results
    assert len(blocks) == 21 + 9
    assert all(not m.tool_uses for m in history)
    resent = replay.bodies[2]["messages"]
    assert resent[:2] == replay.bodies[1]["messages"]  # the paused turn, as it was sent live
    recorded_paused_turn = second.request["messages"][1]
    assert (
        as_recorded(anthropic_request({"messages": [resent[1]]})["messages"][0])
        == (anthropic_request({"messages": [recorded_paused_turn]})["messages"][0])
    )
    # the continuation's first block is the 11th search result, exactly as the API streamed it
    assert resent[2]["content"][0] == first_block(second.body)
    assert resent[3] == {"role": "user", "content": [{"type": "text", "text": "Thanks."}]}
