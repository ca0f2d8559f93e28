"""Content a store cannot hold, and sizes, on both back ends: made storable or rejected where it
enters a run (the model's message, a tool's arguments, its result, a todo), with an error
result or a clear run error; never a stuck run, never a silently lost plan."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from hango import (
    AgentDefinition,
    Harness,
    Message,
    ModelResponse,
    RunStatus,
    ScriptedModel,
    TextBlock,
    ToolRegistry,
    ToolUseBlock,
    tool,
)
from hango.agent.middleware import Middleware
from hango.cli import main
from hango.config import ConfigError
from hango.middleware import ModelHandler, ModelRequest, store_private
from hango.provider.events import (
    MessageStop,
    StreamEvent,
    TextDelta,
    ToolInputDelta,
    ToolUseStart,
    ToolUseStop,
)
from hango.provider.messages import Request, StopReason, ToolResultBlock, Usage
from hango.store import RunSave, RunStore, UnstorableContent, open_store

pytestmark = pytest.mark.anyio

AGENT = AgentDefinition(name="test", model="scripted:inline", max_turns=10)


class RawModel:
    """Streams the given turns as raw events (turn k answers a history holding k assistant
    messages), so a test can send what a provider could: arguments text such as ``1e400``,
    text with a lone surrogate."""

    name = "raw"

    def __init__(self, turns: Sequence[Sequence[StreamEvent]]) -> None:
        self.turns = turns

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        k = sum(1 for m in request.messages if m.role == "assistant")
        for event in self.turns[k]:
            yield event


def call(name: str, arguments: str, call_id: str = "call_1", index: int = 0) -> list[StreamEvent]:
    return [
        ToolUseStart(index, call_id, name),
        ToolInputDelta(index, arguments),
        ToolUseStop(index),
        MessageStop(StopReason.TOOL_USE, Usage()),
    ]


def text(words: str) -> list[StreamEvent]:
    return [TextDelta(0, words), MessageStop(StopReason.END_TURN, Usage())]


received: list[Any] = []


@tool
async def echo(value: Any) -> str:
    """Echo a value.

    Args:
        value: anything.
    """
    received.append(value)
    return f"got {value}"


def harness(
    store: RunStore,
    tenant: uuid.UUID,
    model: Any,
    *,
    stack: Sequence[Middleware] = (),
    settings: dict[str, str] | None = None,
) -> Harness:
    received.clear()
    return Harness(
        store,
        tenant_id=tenant,
        model=model,
        stack=lambda _: list(stack),
        tools=ToolRegistry([echo]),
        settings=settings or {},
    )


async def history(store: RunStore, tenant: uuid.UUID, run_id: uuid.UUID) -> list[Message]:
    run = await store.get_run(tenant, run_id)
    return await store.load_messages(tenant, run.session_id)


async def test_lone_surrogates_from_the_model_are_stored_as_replacement_characters(
    store: RunStore, tenant: uuid.UUID
) -> None:
    model = RawModel(
        [
            [
                TextDelta(0, "half an emoji \ud83d"),
                *call("echo", '{"value": "x\\udc00y"}', index=1),
            ],
            text("a pair \ud83d\ude00 is one character"),
        ]
    )
    h = harness(store, tenant, model)
    finished = await h.run(AGENT, "go")
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert received == ["x\ufffdy"]
    stored = await history(store, tenant, finished.run_id)
    assert stored[1].content[0] == TextBlock("half an emoji \ufffd")
    assert stored[1].tool_uses[0].input == {"value": "x\ufffdy"}
    assert stored[-1].content[0] == TextBlock("a pair 😀 is one character")


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity"])
async def test_non_finite_numbers_in_tool_arguments_get_an_error_result(
    store: RunStore, tenant: uuid.UUID, number: str
) -> None:
    model = RawModel([call("echo", f'{{"value": {number}}}'), text("understood")])
    finished = await harness(store, tenant, model).run(AGENT, "go")
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert received == []  # the tool never ran on a number nobody can store
    stored = await history(store, tenant, finished.run_id)
    (result,) = stored[2].tool_results
    assert result.is_error
    assert result.content.startswith("arguments for tool 'echo' are not a JSON object")


class InfiniteArguments:
    """A model wrapper that rewrites the model's tool call to carry infinity (a bug in a
    middleware, say): the loop must not let it reach the history as a number."""

    name = "infinite"

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        response = await next(req)
        if not response.message.tool_uses:
            return response
        use = response.message.tool_uses[0]
        bad = ToolUseBlock(use.id, use.name, {"value": float("inf")})
        return ModelResponse(Message("assistant", (bad,)), response.stop_reason, response.usage)


async def test_a_middleware_cannot_put_a_non_finite_number_into_history(
    store: RunStore, tenant: uuid.UUID
) -> None:
    model = RawModel([call("echo", '{"value": 1}'), text("understood")])
    h = harness(store, tenant, model, stack=[InfiniteArguments()])
    finished = await h.run(AGENT, "go")
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert received == []
    stored = await history(store, tenant, finished.run_id)
    assert stored[1].tool_uses[0].input == '{"value": Infinity}'
    assert stored[2].tool_results[0].is_error


async def test_nul_in_text_and_tool_results_is_kept_exactly(
    store: RunStore, tenant: uuid.UUID
) -> None:
    model = RawModel(
        [
            [TextDelta(0, "a\x00b"), *call("echo", '{"value": "c\\u0000d"}', index=1)],
            text("done\x00"),
        ]
    )
    finished = await harness(store, tenant, model).run(AGENT, "go")
    assert finished.status is RunStatus.COMPLETED, finished.error
    stored = await history(store, tenant, finished.run_id)
    assert stored[1].content[0] == TextBlock("a\x00b")
    assert stored[2].tool_results[0] == ToolResultBlock("call_1", "got c\x00d")
    assert stored[3].content[0] == TextBlock("done\x00")


async def test_a_todo_holding_nul_is_rejected_and_the_plan_is_kept(
    store: RunStore, tenant: uuid.UUID
) -> None:
    todo = pytest.importorskip("hango_todo")
    plan = '{"todos": [{"content": "Read the limits", "status": "in_progress"}]}'
    bad = '{"todos": [{"content": "Read \\u0000 the log", "status": "in_progress"}]}'
    model = RawModel(
        [call("write_todos", plan, "c1"), call("write_todos", bad, "c2"), text("done")]
    )
    h = harness(store, tenant, model, stack=[todo.TodoMiddleware()])
    finished = await h.run(AGENT, "go")
    assert finished.status is RunStatus.COMPLETED, finished.error
    stored = await history(store, tenant, finished.run_id)
    (rejected,) = stored[4].tool_results
    assert rejected.is_error and "holds a NUL character" in rejected.content
    saved = await store.get_run(tenant, finished.run_id)
    assert isinstance(saved.state, dict)
    assert saved.state["todos"] == [{"content": "Read the limits", "status": "in_progress"}]


class Poisoner:
    """Puts ``value`` into its private state once the tool batch has run (a middleware bug)."""

    name = "poisoner"

    def __init__(self, value: str) -> None:
        self.value = value

    async def wrap_tool_call(self, req: Any, next: Any) -> Any:
        result = await next(req)
        store_private(req.state, self.name, {"note": self.value})
        return result


@pytest.mark.parametrize(
    ("value", "problem"),
    [("\ud800", "lone UTF-16 surrogate"), ("a\x00b", "NUL character")],
    ids=["surrogate", "nul"],
)
async def test_state_the_store_cannot_hold_fails_the_run_clearly_keeping_what_was_saved(
    store: RunStore, backend: str, tenant: uuid.UUID, value: str, problem: str
) -> None:
    model = RawModel([call("echo", '{"value": 1}'), text("done")])
    h = harness(store, tenant, model, stack=[Poisoner(value)])
    finished = await h.run(AGENT, "go")
    saved = await store.get_run(tenant, finished.run_id)
    if backend == "sqlite" and problem == "NUL character":  # SQLite's text holds NUL
        assert finished.status is RunStatus.COMPLETED, finished.error
        return
    assert (finished.status, saved.status) == (RunStatus.FAILED, RunStatus.FAILED)
    assert finished.error == saved.error
    assert saved.error is not None and problem in saved.error
    assert f"run {finished.run_id}: its state holds" in saved.error
    # The last state and history that could be saved are still there: the model's call.
    assert isinstance(saved.state, dict) and "poisoner" not in saved.state["private"]
    assert [m.role for m in await history(store, tenant, finished.run_id)] == [
        "user",
        "assistant",
    ]


async def test_a_user_message_no_store_can_hold_is_refused_before_anything_is_recorded(
    store: RunStore, tenant: uuid.UUID
) -> None:
    h = harness(store, tenant, RawModel([text("never")]))
    with pytest.raises(UnstorableContent, match=r"its message holds a lone UTF-16 surrogate"):
        await h.start(AGENT, "broken \udfff text")
    assert await store.list_runs(tenant) == []


@tool
async def flood(chars: int) -> str:
    """Return a long result.

    Args:
        chars: how long.
    """
    return "".join(f"{i % 10}" for i in range(chars))


async def test_a_tool_result_over_the_limit_is_cut_saying_how_much(
    store: RunStore, tenant: uuid.UUID
) -> None:
    model = ScriptedModel.from_turns(
        [{"tool_calls": [{"name": "flood", "input": {"chars": 5000}}]}, {"text": "ok"}]
    )
    h = Harness(
        store,
        tenant_id=tenant,
        model=model,
        stack=lambda _: [],
        tools=ToolRegistry([flood]),
        settings={"HANGO_TOOL_RESULT_MAX_CHARS": "1000"},
    )
    finished = await h.run(AGENT, "go")
    assert finished.status is RunStatus.COMPLETED, finished.error
    (result,) = (await history(store, tenant, finished.run_id))[2].tool_results
    head, note, tail = result.content.split("\n\n")
    assert note == (
        "[... 4,000 of 5,000 characters cut: a tool result is limited to 1,000 characters "
        "(HANGO_TOOL_RESULT_MAX_CHARS) ...]"
    )
    assert (len(head), len(tail)) == (800, 200)
    assert head == "0123456789" * 80 and tail.endswith("56789")
    with pytest.raises(ConfigError, match="HANGO_TOOL_RESULT_MAX_CHARS must be at least 1"):
        Harness(store, settings={"HANGO_TOOL_RESULT_MAX_CHARS": "0"})


async def big_run(url: str, tenant: uuid.UUID, body: str) -> uuid.UUID:
    async with await open_store(url) as store:
        a = await store.put_agent(tenant, "big", {"name": "big"})
        run = await store.create_run(tenant, a.id, Message.user("write a lot"))
        await store.save_run(
            RunSave(
                tenant,
                run.id,
                version=0,
                status=RunStatus.COMPLETED,
                state={},
                messages=[Message("assistant", (TextBlock(body),))],
                from_index=1,
            )
        )
    return run.id


def test_runs_show_prints_megabytes_of_text_clipped(
    store_url: str, tenant: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = "word " * 600_000  # 3 MB
    run_id = anyio.run(big_run, store_url, tenant, body)
    monkeypatch.setenv("HANGO_TENANT", str(tenant))
    result = CliRunner().invoke(main, ["runs", "show", "--db", store_url, str(run_id)])
    assert result.exit_code == 0, result.output
    assert "[... 2,980,000 more characters: --json shows them]" in result.output
    assert len(result.output) < 25_000
    result = CliRunner().invoke(main, ["runs", "show", "--json", "--db", store_url, str(run_id)])
    assert body.strip() in result.output  # everything, for whoever asks for it
