"""``telemetry.record``: a wrapper that rewrites, retries or short-circuits says so, by name.

The wrappers here are written for the tests (no plugin is needed): each changes behaviour the
way a real middleware would and reports it through the one API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from hango import ModelResponse, ScriptedModel, ToolResult, telemetry, tool
from hango.middleware import ModelHandler, ModelRequest, ToolCallRequest, ToolHandler
from hango.testing import agent_harness

pytestmark = pytest.mark.anyio


class CapTokens:
    """Rewrites every model request to a smaller ``max_tokens``."""

    name = "cap_tokens"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        telemetry.record(
            telemetry.REQUEST_REWRITTEN, middleware=self.name, reason="max_tokens capped"
        )
        return await next(attrs.evolve(req, request=attrs.evolve(req.request, max_tokens=256)))


class RetryOnce:
    """Calls the model a second time, as a retry middleware does after a bad answer."""

    name = "retry_once"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        await next(req)
        telemetry.record(telemetry.RETRIED, middleware=self.name, reason="answer rejected")
        return await next(req)


class AnswerFromCache:
    """Answers ``lookup`` calls itself, never running the tool."""

    name = "answer_from_cache"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if req.call.name != "lookup":
            return await next(req)
        telemetry.record(
            telemetry.SHORT_CIRCUITED,
            middleware=self.name,
            reason="cached",
            attributes={telemetry.TOOL_NAME: req.call.name},
        )
        return ToolResult("cached answer")


ran: list[str] = []


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    ran.append(key)
    return "fresh answer"


TOOL_TURNS = [{"tool_calls": [{"name": "lookup", "input": {"key": "k"}}]}, {"text": "done"}]


async def test_a_rewriting_wrapper_records_request_rewritten(tmp_path: Path, otel: Any) -> None:
    model = ScriptedModel.from_turns([{"text": "hi"}], source="t")
    async with agent_harness(tmp_path, model=model, stack=[CapTokens()]) as h:
        await h.run(h.agent, "go")

    [(span, event)] = otel.events(telemetry.REQUEST_REWRITTEN)
    assert span is otel.one("turn")  # a model wrapper runs inside the turn, outside the call
    assert event.attributes == {
        telemetry.MIDDLEWARE_NAME: "cap_tokens",
        telemetry.REASON: "max_tokens capped",
    }
    # The chat span describes the request that was sent: the rewritten one.
    assert otel.one("chat scripted:t").attributes["gen_ai.request.max_tokens"] == 256


async def test_a_retrying_wrapper_records_retried(tmp_path: Path, otel: Any) -> None:
    model = ScriptedModel.from_turns([{"text": "hi"}], source="t")
    async with agent_harness(tmp_path, model=model, stack=[RetryOnce()]) as h:
        await h.run(h.agent, "go")

    turn = otel.one("turn")
    [(span, event)] = otel.events(telemetry.RETRIED)
    assert span is turn
    assert event.attributes == {
        telemetry.MIDDLEWARE_NAME: "retry_once",
        telemetry.REASON: "answer rejected",
    }
    # Both attempts are visible as model calls of the one turn.
    assert [s.name for s in otel.children(turn)] == ["chat scripted:t"] * 2


async def test_a_short_circuiting_wrapper_records_and_counts(tmp_path: Path, otel: Any) -> None:
    ran.clear()
    stack = [AnswerFromCache()]
    async with agent_harness(tmp_path, turns=TOOL_TURNS, stack=stack, tools=[lookup]) as h:
        await h.run(h.agent, "go")

    assert ran == []
    [(span, event)] = otel.events(telemetry.SHORT_CIRCUITED)
    assert span is otel.one("execute_tool lookup")  # a tool wrapper runs inside the call's span
    assert event.attributes == {
        telemetry.MIDDLEWARE_NAME: "answer_from_cache",
        telemetry.REASON: "cached",
        telemetry.TOOL_NAME: "lookup",
    }
    assert otel.points("hango.middleware.tool_short_circuits")[0].attributes == {
        telemetry.MIDDLEWARE_NAME: "answer_from_cache",
        telemetry.TOOL_NAME: "lookup",
    }
    assert otel.total("hango.middleware.tool_short_circuits") == 1


async def test_events_name_the_middleware_that_acted(tmp_path: Path, otel: Any) -> None:
    ran.clear()
    stack = [RetryOnce(), AnswerFromCache(), CapTokens()]
    async with agent_harness(tmp_path, turns=TOOL_TURNS, stack=stack, tools=[lookup]) as h:
        await h.run(h.agent, "go")

    def who(event: str) -> list[str]:
        return [e.attributes[telemetry.MIDDLEWARE_NAME] for _, e in otel.events(event)]

    # RetryOnce is outermost: each of its two attempts goes through CapTokens.
    assert who(telemetry.REQUEST_REWRITTEN) == ["cap_tokens"] * 4
    assert who(telemetry.RETRIED) == ["retry_once"] * 2
    assert who(telemetry.SHORT_CIRCUITED) == ["answer_from_cache"]
    [(_, stack_event)] = otel.events(telemetry.MIDDLEWARE_STACK)
    assert stack_event.attributes[telemetry.MIDDLEWARE_NAMES] == (
        "retry_once",
        "answer_from_cache",
        "cap_tokens",
    )


def test_repeat_call_blocked_is_an_event_and_a_count_by_tool(otel: Any) -> None:
    with telemetry.tracer.start_as_current_span("execute_tool search"):
        telemetry.record(
            telemetry.REPEAT_CALL_BLOCKED,
            middleware="repeat_call",
            attributes={telemetry.TOOL_NAME: "search"},
        )
    [(_, event)] = otel.events(telemetry.REPEAT_CALL_BLOCKED)
    assert event.attributes == {
        telemetry.MIDDLEWARE_NAME: "repeat_call",
        telemetry.TOOL_NAME: "search",
    }
    assert otel.total("hango.middleware.repeat_blocked", {telemetry.TOOL_NAME: "search"}) == 1
    # A repeat block is counted on its own, not as a short-circuit.
    assert otel.points("hango.middleware.tool_short_circuits") == []


def test_counters_count_even_when_no_span_records(otel: Any) -> None:
    telemetry.record(telemetry.SHORT_CIRCUITED, middleware="gate", reason="not allowed")
    telemetry.record(
        telemetry.REPEAT_CALL_BLOCKED,
        middleware="repeat_call",
        attributes={telemetry.TOOL_NAME: "t"},
    )
    assert otel.spans() == []
    assert (
        otel.total("hango.middleware.tool_short_circuits", {telemetry.MIDDLEWARE_NAME: "gate"}) == 1
    )
    assert otel.total("hango.middleware.repeat_blocked", {telemetry.TOOL_NAME: "t"}) == 1


def test_other_events_are_not_counted(otel: Any) -> None:
    with telemetry.tracer.start_as_current_span("turn"):
        telemetry.record(telemetry.REQUEST_REWRITTEN, middleware="m", reason="r")
        telemetry.record(telemetry.RETRIED, middleware="m")
    assert [e.name for _, e in otel.events(telemetry.RETRIED)] == [telemetry.RETRIED]
    [(_, retried)] = otel.events(telemetry.RETRIED)
    assert retried.attributes == {telemetry.MIDDLEWARE_NAME: "m"}  # no reason: no attribute
    assert otel.points("hango.middleware.tool_short_circuits") == []
    assert otel.points("hango.middleware.repeat_blocked") == []
