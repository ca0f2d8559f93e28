"""The loop suite: the plain loop's behaviour, pinned as the regression gate.

Every test runs on asyncio and trio, and twice: with no middleware at all, and with
``default_stack`` built from a plugin manager that has no plugins (which must be the same).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from hango import (
    Harness,
    Message,
    MessageCompleted,
    Request,
    RunFinished,
    RunStarted,
    RunStatus,
    StopReason,
    TextDelta,
    ThinkingBlock,
    ToolCallFinished,
    ToolCallStarted,
    ToolResultBlock,
    ToolUseBlock,
    TurnFinished,
    tool,
)
from hango.agent.definition import AgentDefinition
from hango.discovery import default_stack
from hango.middleware import Middleware, StackConfig
from hango.plugins import make_plugin_manager
from hango.provider.events import StreamEvent
from hango.store.sqlite import SqliteRunStore
from hango.testing import RecordingModel
from hango.tool import ToolRegistry

pytestmark = pytest.mark.anyio

StackFactory = Callable[[StackConfig], Sequence[Middleware]]


def _plain(_: StackConfig) -> list[Middleware]:
    return []


def _default_without_plugins(config: StackConfig) -> list[Middleware]:
    return default_stack(config, make_plugin_manager(load_entrypoints=False))


@pytest.fixture(params=[_plain, _default_without_plugins], ids=["plain", "default_stack"])
def stack(request: pytest.FixtureRequest) -> StackFactory:
    return request.param  # type: ignore[no-any-return]


calls: list[tuple[str, dict[str, Any]]] = []


@tool
def echo(text: str) -> str:
    """Return the text."""
    calls.append(("echo", {"text": text}))
    return f"echo: {text}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    calls.append(("add", {"a": a, "b": b}))
    return a + b


@tool
def explode(why: str) -> str:
    """Always fails."""
    calls.append(("explode", {"why": why}))
    raise RuntimeError(f"boom: {why}")


gate: dict[str, anyio.Event] = {}


@tool
async def wait(name: str) -> str:
    """Block until the test lets it go (or the run is cancelled)."""
    calls.append(("wait", {"name": name}))
    gate["entered"].set()
    await gate["release"].wait()
    return f"waited {name}"


TOOLS = ToolRegistry([echo, add, explode, wait])


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()
    gate.clear()
    gate["entered"] = anyio.Event()
    gate["release"] = anyio.Event()


class Run:
    def __init__(
        self,
        store: SqliteRunStore,
        model: RecordingModel,
        stack: StackFactory,
        max_turns: int,
        max_tool_concurrency: int = 8,
    ):
        self.store = store
        self.model = model
        self.harness = Harness(store, model=model, stack=stack, tools=TOOLS, settings={})
        self.agent = AgentDefinition(
            name="t",
            model="scripted:inline",
            system=("Be brief.",),
            max_turns=max_turns,
            max_tool_concurrency=max_tool_concurrency,
        )
        self.events: list[Any] = []

    async def emit(self, event: Any) -> None:
        self.events.append(event)

    async def __call__(self, message: str, **kw: Any) -> RunFinished:
        run = await self.harness.start(self.agent, message, **kw)
        self.run_id = run.id
        self.session_id = run.session_id
        return await self.harness.execute(run.id, emit=self.emit)

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


@pytest.fixture
async def make(tmp_path: Path, stack: StackFactory) -> AsyncIterator[Callable[..., Run]]:
    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")

    def factory(
        turns: list[dict[str, Any]], max_turns: int = 10, max_tool_concurrency: int = 8
    ) -> Run:
        return Run(store, RecordingModel(turns), stack, max_turns, max_tool_concurrency)

    yield factory
    await store.aclose()


def call(tool_name: str, /, **input: Any) -> dict[str, Any]:
    return {"name": tool_name, "input": input}


async def test_end_turn(make: Callable[..., Run]) -> None:
    run = make([{"text": "Hello there, how can I help?"}])
    finished = await run("hi")
    assert finished.status is RunStatus.COMPLETED
    assert finished.stop_reason is StopReason.END_TURN
    kinds = [type(e).__name__ for e in run.events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    assert "".join(e.text for e in run.of(TextDelta)) == "Hello there, how can I help?"
    assert len(run.of(TextDelta)) > 1, "text must stream as several deltas"
    messages = await run.store.load_messages(run.harness.tenant_id, run.session_id)
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].text == "Hello there, how can I help?"
    assert (
        await run.store.get_run(run.harness.tenant_id, run.run_id)
    ).status is RunStatus.COMPLETED
    assert run.model.requests[0].system[0].text == "Be brief."


async def test_tool_use_then_end_turn(make: Callable[..., Run]) -> None:
    run = make([{"tool_calls": [call("echo", text="x")]}, {"text": "done"}])
    finished = await run("go")
    assert finished.status is RunStatus.COMPLETED
    assert calls == [("echo", {"text": "x"})]
    second = run.model.requests[1]
    assert second.messages[-1] == Message(
        "user", (ToolResultBlock("toolu_scripted_0_0", "echo: x"),)
    )
    assert [t.name for t in second.tools] == ["echo", "add", "explode", "wait"]
    run_events = [e for e in run.events if type(e).__module__ == "hango.agent.events"]
    assert [type(e).__name__ for e in run_events] == [
        "RunStarted",
        "MessageCompleted",
        "ToolCallStarted",
        "ToolCallFinished",
        "TurnFinished",
        "MessageCompleted",
        "RunFinished",
    ]


async def test_batch_answered_in_one_message_in_call_order(make: Callable[..., Run]) -> None:
    # One at a time, so the order the tools ran in is the call order too (the concurrent
    # variant is in test_concurrent_tools.py).
    run = make(
        [
            {"tool_calls": [call("add", a=1, b=2), call("echo", text="b"), call("add", a=3, b=4)]},
            {"text": "done"},
        ],
        max_tool_concurrency=1,
    )
    await run("go")
    assert [c[0] for c in calls] == ["add", "echo", "add"]
    answer = run.model.requests[1].messages[-1]
    assert answer.role == "user"
    assert [(r.tool_use_id, r.content) for r in answer.tool_results] == [
        ("toolu_scripted_0_0", "3"),
        ("toolu_scripted_0_1", "echo: b"),
        ("toolu_scripted_0_2", "7"),
    ]
    assert len(run.model.requests[1].messages) == 3  # user, assistant, ONE results message


async def test_unknown_tool(make: Callable[..., Run]) -> None:
    run = make([{"tool_calls": [call("nope", x=1)]}, {"text": "sorry"}])
    finished = await run("go")
    assert finished.status is RunStatus.COMPLETED
    result = run.of(ToolCallFinished)[0].result
    assert result.is_error and "unknown tool 'nope'" in result.content


async def test_tool_raising(make: Callable[..., Run]) -> None:
    run = make([{"tool_calls": [call("explode", why="fuse")]}, {"text": "recovered"}])
    finished = await run("go")
    assert finished.status is RunStatus.COMPLETED
    result = run.of(ToolCallFinished)[0].result
    assert result.is_error
    assert "boom: fuse" in result.content and "RuntimeError" in result.content


async def test_schema_invalid_arguments_not_called(make: Callable[..., Run]) -> None:
    run = make(
        [
            {"tool_calls": [call("add", a=1, b="two"), call("add", a=1)]},
            {"text": "fixed"},
        ],
        max_tool_concurrency=1,  # events in call order; the test is about validation
    )
    await run("go")
    assert calls == []
    wrong_type, missing = (e.result for e in run.of(ToolCallFinished))
    assert wrong_type.is_error and "$.b" in wrong_type.content and "integer" in wrong_type.content
    assert missing.is_error and "'b' is a required property" in missing.content


async def test_max_turns(make: Callable[..., Run]) -> None:
    turn = {"tool_calls": [call("echo", text="again")]}
    run = make([turn, turn, turn, {"text": "never"}], max_turns=2)
    finished = await run("loop")
    assert finished.status is RunStatus.FAILED
    assert finished.error == "max_turns (2) reached"
    assert len(run.model.requests) == 2
    record = await run.store.get_run(run.harness.tenant_id, run.run_id)
    assert record.status is RunStatus.FAILED and record.error == "max_turns (2) reached"


async def test_pause_turn_continues(make: Callable[..., Run]) -> None:
    run = make([{"text": "thinking", "stop_reason": "pause_turn"}, {"text": "answer"}])
    finished = await run("go")
    assert finished.status is RunStatus.COMPLETED
    assert len(run.model.requests) == 2
    assert run.model.requests[1].messages[-1].text == "thinking"
    assert [e.stop_reason for e in run.of(MessageCompleted)] == [
        StopReason.PAUSE_TURN,
        StopReason.END_TURN,
    ]


@pytest.mark.parametrize("stop", ["max_tokens", "stop_sequence", "refusal"])
async def test_other_stops_end_the_run(make: Callable[..., Run], stop: str) -> None:
    run = make([{"text": "partial", "stop_reason": stop}, {"text": "never"}])
    finished = await run("go")
    assert finished.status is RunStatus.COMPLETED
    assert finished.stop_reason == StopReason(stop)
    assert len(run.model.requests) == 1


async def test_every_tool_use_has_a_result_before_each_model_call(make: Callable[..., Run]) -> None:
    run = make(
        [
            {"tool_calls": [call("echo", text="1"), call("nope")]},
            {"tool_calls": [call("explode", why="x"), call("add", a=1, b=1)]},
            {"text": "done"},
        ]
    )
    await run("go")
    for request in run.model.requests:
        uses = {b.id for m in request.messages for b in m.tool_uses}
        results = {r.tool_use_id for m in request.messages for r in m.tool_results}
        assert uses == results


async def test_cancel_mid_tool_then_resume_without_rerunning(
    make: Callable[..., Run], stack: StackFactory
) -> None:
    turns = [
        {"tool_calls": [call("echo", text="first"), call("wait", name="w"), call("add", a=2, b=2)]},
        {"text": "all done"},
    ]
    # One at a time: "add" waits behind "wait" (test_concurrent_tools.py cancels a batch
    # whose calls run at once).
    run = make(turns, max_tool_concurrency=1)
    record = await run.harness.start(run.agent, "go")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.harness.execute, record.id)
            await gate["entered"].wait()
            scope.cancel()
    assert [c[0] for c in calls] == ["echo", "wait"]
    saved = await run.store.get_run(run.harness.tenant_id, record.id)
    assert saved.status is RunStatus.CANCELLED
    history = await run.store.load_messages(run.harness.tenant_id, record.session_id)
    assert history[-1].tool_results == (ToolResultBlock("toolu_scripted_0_0", "echo: first"),)

    # Resume in a fresh harness (as a new process would): the finished call is not re-run.
    calls.clear()
    gate["release"].set()
    resumed = make(turns, max_tool_concurrency=1)
    finished = await resumed.harness.execute(record.id, emit=resumed.emit)
    assert finished.status is RunStatus.COMPLETED
    assert [c[0] for c in calls] == ["wait", "add"]
    assert resumed.of(RunStarted)[0].resumed is True
    history = await run.store.load_messages(run.harness.tenant_id, record.session_id)
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert [r.content for r in history[2].tool_results] == ["echo: first", "waited w", "4"]


async def test_session_continued_sees_first_exchange(make: Callable[..., Run]) -> None:
    run = make([{"text": "First answer."}, {"text": "Second answer."}])
    await run("first question")
    first_session = run.session_id
    finished = await run("second question", session_id=first_session)
    assert finished.status is RunStatus.COMPLETED
    assert run.session_id == first_session
    texts = [m.text for m in run.model.requests[1].messages]
    assert texts == ["first question", "First answer.", "second question"]


async def test_thinking_preserved_verbatim_in_next_request(make: Callable[..., Run]) -> None:
    run = make(
        [
            {
                "thinking": {"thinking": "I should add the numbers.", "signature": "sig==abc"},
                "redacted_thinking": "opaque-data",
                "tool_calls": [call("add", a=1, b=2)],
            },
            {"text": "3"},
        ]
    )
    await run("add 1 and 2")
    assistant = run.model.requests[1].messages[1]
    assert assistant.content[0] == ThinkingBlock("I should add the numbers.", "sig==abc")
    assert assistant.content[1].type == "redacted_thinking"
    assert assistant.content[1].data == "opaque-data"  # type: ignore[union-attr]
    assert isinstance(assistant.content[2], ToolUseBlock)


async def test_script_exhausted_fails_the_run(make: Callable[..., Run]) -> None:
    run = make([{"tool_calls": [call("echo", text="x")]}])
    finished = await run("go")
    assert finished.status is RunStatus.FAILED
    assert finished.error == "script exhausted after 1 turns"


async def test_malformed_arguments_from_model_become_error_result(
    make: Callable[..., Run],
) -> None:
    from hango.provider.events import MessageStop, ToolInputDelta, ToolUseStart, ToolUseStop
    from hango.provider.messages import Usage

    class BrokenJson:
        async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
            if len(request.messages) == 1:
                yield ToolUseStart(0, "t1", "add")
                yield ToolInputDelta(0, '{"a": 1, "b":')
                yield ToolUseStop(0)
                yield MessageStop(StopReason.TOOL_USE, Usage())
            else:
                yield TextDelta(0, "ok")
                yield MessageStop(StopReason.END_TURN, Usage())

    run = make([])
    run.harness.model = BrokenJson()
    finished = await run("go")
    assert finished.status is RunStatus.COMPLETED
    result = run.of(ToolCallFinished)[0].result
    assert result.is_error and "not a JSON object" in result.content
    assert calls == []


async def test_stream_iterator_yields_events_in_order(make: Callable[..., Run]) -> None:
    run = make([{"tool_calls": [call("echo", text="x")]}, {"text": "streamed answer"}])
    record = await run.harness.start(run.agent, "go")
    seen: list[Any] = []
    async with run.harness.stream(record.id) as events:
        async for event in events:
            seen.append(event)
    assert isinstance(seen[0], RunStarted) and isinstance(seen[-1], RunFinished)
    assert seen[-1].status is RunStatus.COMPLETED
    assert any(isinstance(e, ToolCallStarted) for e in seen)
    assert any(isinstance(e, TurnFinished) for e in seen)


async def test_new_prompt_after_a_cancelled_batch_does_not_run_its_calls(
    make: Callable[..., Run],
) -> None:
    turns = [
        {"tool_calls": [call("echo", text="first"), call("wait", name="w")]},
        {"text": "next answer"},
    ]
    run = make(turns)
    record = await run.harness.start(run.agent, "go")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.harness.execute, record.id)
            await gate["entered"].wait()
            scope.cancel()
    calls.clear()
    finished = await run("a new question", session_id=record.session_id)
    assert finished.status is RunStatus.COMPLETED
    assert calls == [], "the cancelled run's unfinished call belongs to that run"
    assert run.model.requests[-1].messages[-1].text == "a new question"


kept: list[list[str]] = []


@tool
def keep(tags: list[str]) -> str:
    """Keep the list it was given and change it later, as stateful APIs do."""
    kept.append(tags)
    tags.append("mutated")
    return "kept"


async def test_a_tool_mutating_its_arguments_does_not_change_history(
    make: Callable[..., Run],
) -> None:
    kept.clear()
    run = make([{"tool_calls": [call("keep", tags=["a"])]}, {"text": "done"}])
    run.harness.tools = ToolRegistry([keep])
    await run("go")
    assert kept == [["a", "mutated"]]
    assert run.model.requests[1].messages[1].tool_uses[0].input == {"tags": ["a"]}
