"""Structured output on the wire, through the real SDK clients (hango.testing's fake servers):
Anthropic's JSON output format and OpenAI's response_format json_schema where the model has
them, the final-answer tool where it has not, and never a forced tool choice with Anthropic
thinking on (the strict fake refuses one, as the API does)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import openai
import pytest

from hango import AgentDefinition, RunStatus
from hango.middleware import FINAL_ANSWER
from hango.provider.anthropic import AnthropicModel
from hango.provider.openai import OpenAIChatModel
from hango.testing import (
    FakeAnthropic,
    FakeOpenAI,
    agent_harness,
    anthropic_answer,
    openai_answer,
    openai_completion,
    openai_stream,
    streamed,
)

pytestmark = pytest.mark.anyio

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
    "required": ["city", "temp"],
    "additionalProperties": False,
}
ANSWER = {"city": "Paris", "temp": 21}


def with_output(agent: AgentDefinition, **changes: Any) -> AgentDefinition:
    return attrs.evolve(agent, output_schema=WEATHER, **changes)


async def test_anthropic_native_output_sends_the_json_output_format(tmp_path: Path) -> None:
    fake = FakeAnthropic([anthropic_answer(json.dumps(ANSWER))])
    model = fake.model("claude-test")
    assert model.native_output
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent), "weather?")
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert finished.output == ANSWER
    (body,) = fake.bodies
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": WEATHER}}
    assert "tools" not in body and "tool_choice" not in body


async def test_an_older_claude_gets_the_final_answer_tool_with_a_forced_choice(
    tmp_path: Path,
) -> None:
    fake = FakeAnthropic([anthropic_answer(calls=[("toolu_1", FINAL_ANSWER, ANSWER)])])
    model = fake.model("claude-3-5-haiku-20241022")
    assert not model.native_output
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent), "weather?")
    assert finished.output == ANSWER
    (body,) = fake.bodies
    assert [t["name"] for t in body["tools"]] == [FINAL_ANSWER]
    assert body["tools"][0]["input_schema"] == WEATHER and body["tools"][0]["strict"] is True
    assert body["tool_choice"] == {"type": "any"}
    assert "output_config" not in body


async def test_with_thinking_on_the_tool_choice_is_never_forced(tmp_path: Path) -> None:
    """The strict fake answers a forced tool choice with thinking on as the API does (400);
    hango leaves the choice to the model, which first answers in prose, is told to call the
    final-answer tool, and does."""
    fake = FakeAnthropic(
        [
            anthropic_answer("Paris is at 21 degrees."),
            anthropic_answer(calls=[("toolu_1", FINAL_ANSWER, ANSWER)]),
        ]
    )
    model: AnthropicModel = fake.model(
        "claude-3-7-sonnet-20250219", thinking={"type": "enabled", "budget_tokens": 1024}
    )
    async with agent_harness(tmp_path, model=model) as h:
        agent = with_output(h.agent, output_strategy="tool")
        finished = await h.run(agent, "weather?")
    assert fake.problems == []
    assert finished.status is RunStatus.COMPLETED and finished.output == ANSWER
    for body in fake.bodies:
        assert body["thinking"]["type"] == "enabled"
        assert body.get("tool_choice", {"type": "auto"})["type"] == "auto"
    retry = fake.bodies[1]["messages"][-1]["content"]
    assert "calling the final_answer tool" in json.dumps(retry)


async def test_the_strict_fake_refuses_a_forced_choice_with_thinking() -> None:
    # The rule the previous test relies on is the fake's, checked here on its own.
    from hango.testing import wire_problems

    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tool_choice": {"type": "any"},
    }
    assert wire_problems(body) == ["thinking may not be used when tool_choice forces tool use"]
    assert wire_problems({**body, "tool_choice": {"type": "auto"}}) == []


async def test_openai_native_output_sends_response_format_json_schema_strict(
    tmp_path: Path,
) -> None:
    fake = FakeOpenAI([openai_answer(json.dumps(ANSWER))])
    model = fake.model("gpt-4.1")
    assert model.native_output  # OpenAI's own API
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent), "weather?")
    assert finished.output == ANSWER
    (body,) = fake.bodies
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": WEATHER, "strict": True},
    }


async def test_a_schema_outside_the_strict_rules_is_sent_non_strict(tmp_path: Path) -> None:
    loose = {**WEATHER, "additionalProperties": True}
    fake = FakeOpenAI([openai_answer(json.dumps(ANSWER))])
    async with agent_harness(tmp_path, model=fake.model("gpt-4.1")) as h:
        finished = await h.run(attrs.evolve(h.agent, output_schema=loose), "weather?")
    assert finished.output == ANSWER
    assert fake.bodies[0]["response_format"]["json_schema"]["strict"] is False


async def test_an_openai_compatible_server_gets_the_final_answer_tool(tmp_path: Path) -> None:
    completion = openai_completion(calls=[("call_1", FINAL_ANSWER, ANSWER)])
    fake = FakeOpenAI([streamed(openai_stream(completion))])
    client = openai.AsyncOpenAI(
        api_key="unused", base_url="http://127.0.0.1:8080/v1", http_client=fake.client()
    )
    model = OpenAIChatModel(client, "local", max_tokens_field="max_tokens")
    assert not model.native_output
    async with agent_harness(tmp_path, model=model) as h:
        finished = await h.run(with_output(h.agent), "weather?")
    assert finished.output == ANSWER
    (body,) = fake.bodies
    assert "response_format" not in body
    assert [t["function"]["name"] for t in body["tools"]] == [FINAL_ANSWER]
    assert body["tool_choice"] == "required"
