"""hango-todo: write_todos validation and replace semantics, the plan block, the plugin entry
point."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

import hango_todo
from hango import (
    Message,
    TextBlock,
    ToolContext,
    ToolResultBlock,
    ToolUseBlock,
)
from hango.agent.state import dump_state, load_state
from hango.discovery import default_stack
from hango.middleware import StackConfig, State, Todo
from hango.plugins import make_plugin_manager
from hango.testing import RecordingModel, agent_harness, assert_installed, new_state
from hango_todo import WRITE_TODOS, TodoMiddleware, render_plan

PLAN = [
    {"content": "Read the limits", "status": "completed"},
    {"content": "Read the incident log", "status": "in_progress"},
    {"content": "Write up the risks", "status": "pending"},
]


def in_batch(state: State, *calls: ToolUseBlock) -> ToolUseBlock:
    """Make ``calls`` the batch being executed (the last assistant message); returns the first."""
    state.messages += [Message.user("go"), Message("assistant", calls)]
    return calls[0]


def todos_call(todos: Any, call_id: str = "c1") -> ToolUseBlock:
    return ToolUseBlock(call_id, "write_todos", {"todos": todos})


async def write(state: State, todos: Any) -> Any:
    call = in_batch(state, todos_call(todos))
    return await WRITE_TODOS.call(call.input, ToolContext(state, call))


def test_installed_through_entry_point() -> None:
    placed = assert_installed("todo", "hango-todo", hango_todo, middleware="todo")
    assert isinstance(placed.middleware, TodoMiddleware)
    assert placed.capabilities == ("tool_provider", "prompt_contributor")


def test_removing_the_plugin_removes_only_its_slot() -> None:
    every = [m.name for m in default_stack(StackConfig(), make_plugin_manager(env={}))]
    pm = make_plugin_manager(env={"HANGO_DISABLE_PLUGINS": "todo"})
    without = [m.name for m in default_stack(StackConfig(), pm)]
    assert "todo" in every
    assert without == [n for n in every if n != "todo"]


def test_no_middleware_when_the_allowlist_leaves_write_todos_out() -> None:
    assert hango_todo.hango_middleware(config=StackConfig(frozenset({"read_file"}))) is None
    allowed = StackConfig(frozenset({"read_file", "write_todos"}))
    assert isinstance(hango_todo.hango_middleware(config=allowed), TodoMiddleware)
    assert isinstance(hango_todo.hango_middleware(config=StackConfig()), TodoMiddleware)


# -- write_todos -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_write_todos_replaces_the_whole_list_with_a_new_list() -> None:
    state = new_state()
    await write(state, [{"content": "old step", "status": "pending"}])
    first = state.todos
    result = await write(state, PLAN)
    assert not result.is_error
    assert state.todos == [Todo(t["content"], t["status"]) for t in PLAN]
    # A NEW list object: the loop emits TodosUpdated when the object changes.
    assert state.todos is not first
    assert first == [Todo("old step", "pending")]


@pytest.mark.anyio
async def test_result_is_a_short_confirmation_with_counts_never_the_list() -> None:
    result = await write(new_state(), PLAN)
    assert result.content == "Plan saved (3 todos: 1 completed, 1 in_progress, 1 pending)."
    assert all(t["content"] not in result.content for t in PLAN)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("todos", "problem"),
    [
        ([{"content": "a", "status": "done"}], "todos[0].status is 'done'; use one of pending"),
        ([{"content": "", "status": "pending"}], "todos[0].content is empty"),
        (
            [{"content": "a", "status": "pending"}, {"content": "  \n", "status": "pending"}],
            "todos[1].content is empty",
        ),
        (
            [
                {"content": "a", "status": "in_progress"},
                {"content": "b", "status": "pending"},
                {"content": "c", "status": "in_progress"},
            ],
            "2 todos are in_progress (todos[0], todos[2]); exactly one step",
        ),
        ([{"content": "a"}], "todos[0] must be an object with exactly content and status"),
        ("a, b", "todos must be a list"),
        (
            [{"content": f"step {i}", "status": "pending"} for i in range(101)],
            "the plan has 101 todos; at most 100",
        ),
        (
            [{"content": "x" * 2001, "status": "pending"}],
            "todos[0].content has 2001 characters; at most 2000",
        ),
        (
            [{"content": "a", "status": "pending"}, {"content": "b\x00c", "status": "pending"}],
            "todos[1].content holds a NUL character (\\u0000), which cannot be stored",
        ),
        (
            [{"content": "half \ud83d an emoji", "status": "pending"}],
            "todos[0].content holds a lone UTF-16 surrogate, which cannot be stored",
        ),
    ],
)
async def test_invalid_todos_are_rejected_and_the_plan_is_unchanged(
    todos: Any, problem: str
) -> None:
    state = new_state()
    await write(state, PLAN)
    before = state.todos
    result = await write(state, todos)
    assert result.is_error
    assert problem in result.content
    assert "the plan is unchanged" in result.content
    assert state.todos is before


@pytest.mark.anyio
async def test_empty_list_is_a_valid_plan() -> None:
    state = new_state()
    await write(state, PLAN)
    result = await write(state, [])
    assert not result.is_error
    assert state.todos == []


@pytest.mark.anyio
async def test_two_write_todos_calls_in_one_batch_all_fail() -> None:
    state = new_state()
    await write(state, PLAN)
    before = state.todos
    a = todos_call([{"content": "x", "status": "pending"}], "a")
    b = todos_call([{"content": "y", "status": "pending"}], "b")
    other = ToolUseBlock("o", "read_file", {"path": "x"})
    in_batch(state, a, other, b)
    for call in (a, b):
        result = await WRITE_TODOS.call(call.input, ToolContext(state, call))
        assert result.is_error
        assert "called 2 times in one turn" in result.content
    assert state.todos is before


@pytest.mark.anyio
async def test_a_batch_counts_calls_even_after_its_first_results(tmp_path: Path) -> None:
    """Through the loop: both calls of the batch fail (the second runs after the first's
    result was already added to history), the list stays empty, the next turn's single call
    works."""
    turns: list[dict[str, Any]] = [
        {
            "tool_calls": [
                {"name": "write_todos", "input": {"todos": PLAN}},
                {"name": "write_todos", "input": {"todos": PLAN[:1]}},
            ]
        },
        {"tool_calls": [{"name": "write_todos", "input": {"todos": PLAN[:1]}}]},
        {"text": "done"},
    ]
    async with agent_harness(tmp_path, turns=turns, stack=[TodoMiddleware()]) as h:
        finished = await h.run(h.agent, "plan it")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
        messages = await h.store.load_messages(h.tenant_id, record.session_id)
    first, second = messages[2].tool_results
    assert first.is_error and second.is_error
    assert "called 2 times in one turn" in first.content
    (third,) = messages[4].tool_results
    assert not third.is_error
    assert load_state(record.state).todos == [Todo("Read the limits", "completed")]


def test_description_carries_the_policy() -> None:
    text = WRITE_TODOS.spec.description
    for phrase in (
        "replaces the whole list",
        "Do not use it for a trivial",
        "in_progress BEFORE you begin it",
        "completed as soon as it is done",
        "exactly one step is in_progress",
        "Mark a step completed only when it is fully done",
        "Completing the list is not an answer",
        "give the answer as text",
    ):
        assert phrase in text
    items = WRITE_TODOS.spec.input_schema["properties"]["todos"]["items"]
    assert items["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]


@pytest.mark.anyio
async def test_the_tool_leaves_agent_todos_updated_to_the_loop(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    """The loop records agent.todos_updated (counts only) whenever State.todos is replaced;
    the tool recording it too would count each update twice."""
    with recording_span():
        await write(new_state(), PLAN)
    (span,) = exporter.get_finished_spans()
    assert [e.name for e in span.events] == []


# -- the plan block --------------------------------------------------------------------------


def test_render_plan() -> None:
    assert render_plan([]) == "Current plan (write_todos): empty."
    assert render_plan([Todo(t["content"], t["status"]) for t in PLAN]) == (
        "Current plan (write_todos), 1 of 3 completed:\n"
        "1. [completed] Read the limits\n"
        "2. [in_progress] Read the incident log\n"
        "3. [pending] Write up the risks"
    )


@pytest.mark.anyio
async def test_plan_is_in_the_system_prompt_of_every_call_and_never_in_messages(
    tmp_path: Path,
) -> None:
    model = RecordingModel(
        [
            {"tool_calls": [{"name": "write_todos", "input": {"todos": PLAN}}]},
            {"text": "thinking"},
        ]
    )
    async with agent_harness(tmp_path, model=model, stack=[TodoMiddleware()]) as h:
        h.agent = attrs.evolve(h.agent, system=("You are terse.",))
        finished = await h.run(h.agent, "plan it")
        record = await h.store.get_run(h.tenant_id, finished.run_id)
        messages = await h.store.load_messages(h.tenant_id, record.session_id)
    before, after = model.requests
    assert before.system == (
        TextBlock("You are terse."),
        TextBlock("Current plan (write_todos): empty."),
    )
    assert after.system[0] == TextBlock("You are terse.")
    assert after.system[1].text.startswith("Current plan (write_todos), 1 of 3 completed:")
    assert "2. [in_progress] Read the incident log" in after.system[1].text
    assert [t.name for t in after.tools] == ["write_todos"]
    # The only place the todo text appears in history is the model's own call arguments.
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock | ToolResultBlock):
                text = block.text if isinstance(block, TextBlock) else block.content
                assert all(t["content"] not in text for t in PLAN)
    assert load_state(record.state).todos == [Todo(t["content"], t["status"]) for t in PLAN]


def test_plan_survives_the_state_document() -> None:
    state = new_state()
    state.todos = [Todo(t["content"], t["status"]) for t in PLAN]
    restored = load_state(dump_state(state))
    assert restored.todos == state.todos
    assert TodoMiddleware().system_blocks(restored) == TodoMiddleware().system_blocks(state)
