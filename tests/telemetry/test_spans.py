"""The spans and metrics of a run: GenAI conventions, before_run, errors, todo counts.

Every run here uses its own test middlewares (no plugins), so each assertion is about what
core records.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from attrs import define, field
from opentelemetry.trace import SpanKind, StatusCode

from hango import (
    ModelError,
    Request,
    RunStatus,
    ScriptedModel,
    ToolContext,
    ToolResult,
    error_result,
    telemetry,
    tool,
)
from hango.middleware import State, Todo, load_private
from hango.provider.events import StreamEvent
from hango.testing import agent_harness
from hango.tool import Tool

pytestmark = pytest.mark.anyio

USAGE = {
    "input_tokens": 100,
    "output_tokens": 20,
    "cache_read_input_tokens": 30,
    "cache_creation_input_tokens": 5,
}


@tool
def echo(text: str) -> str:
    """Return the text."""
    return text


@tool
def broken() -> str:
    """Always fails."""
    raise RuntimeError("broken on purpose")


async def test_a_run_has_the_genai_spans_and_metrics(tmp_path: Path, otel: Any) -> None:
    turns = [
        {
            "usage": USAGE,
            "tool_calls": [
                {"name": "echo", "input": {"text": "hi"}, "id": "call_echo"},
                {"name": "broken", "id": "call_broken"},
            ],
        },
        {"text": "done", "usage": {"input_tokens": 7, "output_tokens": 3}},
    ]
    model = ScriptedModel.from_turns(turns, source="t")  # requests carry the model's name
    async with agent_harness(tmp_path, model=model, tools=[echo, broken]) as h:
        run = await h.start(h.agent, "go")
        finished = await h.execute(run.id)
    assert finished.status is RunStatus.COMPLETED

    root = otel.one("invoke_agent test")
    assert root.kind is SpanKind.INTERNAL
    assert root.parent is None
    assert dict(root.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "test",
        "gen_ai.agent.id": str(run.agent_id),
        "gen_ai.conversation.id": str(run.session_id),
        "hango.run.id": str(run.id),
        "gen_ai.provider.name": "hango.scripted",
        "gen_ai.request.model": "scripted:t",
        # The run's totals over its two model calls, cached tokens counted in input_tokens.
        "gen_ai.usage.input_tokens": 135 + 7,
        "gen_ai.usage.output_tokens": 20 + 3,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.cache_creation.input_tokens": 5,
    }
    [(_, stack)] = otel.events(telemetry.MIDDLEWARE_STACK)
    assert stack.attributes == {telemetry.MIDDLEWARE_NAMES: ()}

    turn_spans = otel.named("turn")
    assert [s.attributes["hango.turn"] for s in turn_spans] == [1, 2]
    assert all(s.parent.span_id == root.context.span_id for s in turn_spans)

    chats = otel.named("chat scripted:t")
    assert [otel.children(t) for t in turn_spans][1] == [chats[1]]
    first, second = chats
    assert first.kind is SpanKind.CLIENT
    assert first.parent.span_id == turn_spans[0].context.span_id
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "hango.scripted",
        "gen_ai.request.model": "scripted:t",
        "gen_ai.request.max_tokens": 4096,
        "gen_ai.response.finish_reasons": ("tool_use",),
        # The GenAI conventions count cached tokens in input_tokens (hango's Usage does not).
        "gen_ai.usage.input_tokens": 135,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.cache_creation.input_tokens": 5,
    }
    assert second.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert second.attributes["gen_ai.usage.input_tokens"] == 7

    ok, failed = otel.named("execute_tool echo") + otel.named("execute_tool broken")
    assert ok.parent.span_id == failed.parent.span_id == turn_spans[0].context.span_id
    assert dict(ok.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.call.id": "call_echo",
        "gen_ai.tool.type": "function",
    }
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.attributes["error.type"] == "tool_error"
    # Backends flag a failed tool by the span's status; the message (user data) stays out.
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "tool_error"
    assert failed.attributes["gen_ai.tool.call.id"] == "call_broken"

    call = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "hango.scripted",
        "gen_ai.request.model": "scripted:t",
    }
    assert otel.total("gen_ai.client.operation.duration", call) == 2
    tokens: dict[str, list[Any]] = {}
    for p in otel.points("gen_ai.client.token.usage"):
        assert {k: v for k, v in p.attributes.items() if k != "gen_ai.token.type"} == call
        tokens.setdefault(p.attributes["gen_ai.token.type"], []).append(p)
    assert sum(p.sum for p in tokens["input"]) == 135 + 7
    assert sum(p.sum for p in tokens["output"]) == 20 + 3


class Failing:
    """A model whose every call fails, with a provider name of its own."""

    provider_name = "test.provider"

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        raise ModelError("the provider said no")
        yield  # pragma: no cover - makes this an async generator


async def test_a_failed_model_call_marks_chat_and_invoke_agent(tmp_path: Path, otel: Any) -> None:
    async with agent_harness(tmp_path, model=Failing()) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.FAILED

    # A model without a ``name`` is asked for by the agent's own model spec.
    chat = otel.one("chat scripted:inline")
    assert chat.attributes["gen_ai.provider.name"] == "test.provider"
    assert chat.attributes["error.type"] == "ModelError"
    assert chat.status.status_code is StatusCode.ERROR
    root = otel.one("invoke_agent test")
    assert root.attributes["error.type"] == "ModelError"
    assert root.status.status_code is StatusCode.ERROR
    assert (
        otel.total(
            "gen_ai.client.operation.duration",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "test.provider",
                "gen_ai.request.model": "scripted:inline",
                "error.type": "ModelError",
            },
        )
        == 1
    )
    assert otel.points("gen_ai.client.token.usage") == []


@define
class Loaded:
    files: list[str] = field(factory=list)


class SlowHook:
    """A load-once hook that takes a while and finds no stored state (a first run)."""

    name = "slow"

    async def before_run(self, state: State) -> None:
        load_private(state, self.name, Loaded)
        await anyio.sleep(0.02)


class QuickHook:
    name = "quick"

    async def before_run(self, state: State) -> None:
        return None


class NotAHook:
    name = "bystander"


async def test_before_run_has_one_span_with_a_child_per_hook(tmp_path: Path, otel: Any) -> None:
    stack = [SlowHook(), NotAHook(), QuickHook()]
    async with agent_harness(tmp_path, turns=[{"text": "hi"}], stack=stack) as h:
        await h.run(h.agent, "go")

    root = otel.one("invoke_agent test")
    before = otel.one("agent.before_run")
    assert before.kind is SpanKind.INTERNAL
    assert before.parent.span_id == root.context.span_id
    hooks = otel.children(before)
    assert [s.name for s in hooks] == ["before_run slow", "before_run quick"]
    assert [s.attributes[telemetry.MIDDLEWARE_NAME] for s in hooks] == ["slow", "quick"]
    # The hook's own events land on its child span.
    [(span, missing)] = otel.events(telemetry.STATE_MISSING)
    assert span is hooks[0]
    assert missing.attributes == {telemetry.MIDDLEWARE_NAME: "slow"}

    durations = {
        p.attributes[telemetry.MIDDLEWARE_NAME]: p
        for p in otel.points("hango.middleware.before_run.duration")
    }
    assert set(durations) == {"slow", "quick"}
    assert durations["slow"].count == durations["quick"].count == 1
    assert durations["slow"].sum >= 0.02 > durations["quick"].sum


async def test_no_run_hook_no_before_run_span(tmp_path: Path, otel: Any) -> None:
    async with agent_harness(tmp_path, turns=[{"text": "hi"}], stack=[NotAHook()]) as h:
        await h.run(h.agent, "go")
    assert otel.named("agent.before_run") == []
    assert otel.one("invoke_agent test")


class Planner:
    """A ToolProvider whose ``plan`` tool replaces ``State.todos`` (as write_todos does)."""

    name = "planner"

    def provide_tools(self, state: State) -> list[Tool]:
        return [plan]


@tool
def plan(todos: list[dict[str, str]], ctx: ToolContext) -> ToolResult:
    """Replace the plan."""
    if not todos:
        return error_result("an empty plan")
    ctx.state.todos = [Todo(t["content"], t["status"]) for t in todos]  # type: ignore[arg-type]
    return ToolResult(f"{len(todos)} todos")


def plan_call(*statuses: str) -> dict[str, Any]:
    todos = [{"content": f"step {i}", "status": s} for i, s in enumerate(statuses)]
    return {"name": "plan", "input": {"todos": todos}}


async def test_todos_updated_counts_by_status_on_the_turn(tmp_path: Path, otel: Any) -> None:
    turns = [
        {"tool_calls": [plan_call("in_progress", "pending", "pending")]},
        {"tool_calls": [{"name": "plan", "input": {"todos": []}}]},  # rejected: no change
        {"tool_calls": [plan_call("completed", "completed", "in_progress", "pending")]},
        {"text": "done"},
    ]
    async with agent_harness(tmp_path, turns=turns, stack=[Planner()]) as h:
        await h.run(h.agent, "go")

    updates = otel.events(telemetry.TODOS_UPDATED)
    assert [dict(e.attributes) for _, e in updates] == [
        {
            "hango.todos.total": 3,
            "hango.todos.pending": 2,
            "hango.todos.in_progress": 1,
            "hango.todos.completed": 0,
        },
        {
            "hango.todos.total": 4,
            "hango.todos.pending": 1,
            "hango.todos.in_progress": 1,
            "hango.todos.completed": 2,
        },
    ]
    turn_spans = otel.named("turn")
    assert [span for span, _ in updates] == [turn_spans[0], turn_spans[2]]
    assert turn_spans[0].attributes[telemetry.LANGFUSE_TODOS_TOTAL] == 3
    assert turn_spans[0].attributes[telemetry.LANGFUSE_TODOS_COMPLETED] == 0
    assert turn_spans[2].attributes[telemetry.LANGFUSE_TODOS_TOTAL] == 4
    assert turn_spans[2].attributes[telemetry.LANGFUSE_TODOS_COMPLETED] == 2
    assert telemetry.LANGFUSE_TODOS_TOTAL not in turn_spans[1].attributes
