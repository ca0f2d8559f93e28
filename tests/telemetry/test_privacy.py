"""No todo content reaches telemetry, whatever the content is.

A todo's content can be user data. In these runs it travels everywhere a run carries data: the
user message, the model's text, the tool call's arguments, the tool result, ``State.todos``
and the system prompt. Telemetry may say how many todos there are, never what they say.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hango import RunStatus, TextBlock, ToolContext, ToolResult, telemetry, tool
from hango.agent.middleware import Middleware
from hango.agent.state import load_state
from hango.discovery import default_stack
from hango.middleware import StackConfig, State, Todo, ToolCallRequest, ToolHandler
from hango.testing import agent_harness
from hango.tool import Tool

STATUSES = ("pending", "in_progress", "completed")

# Eight characters or more, so a match means the content leaked rather than that a short
# string happens to occur inside an attribute name; any code point but lone surrogates and NUL
# (write_todos refuses both: no store can keep them).
contents = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=8, max_size=60
).filter(lambda s: s.strip() != "")
todo_lists = st.lists(
    st.tuples(contents, st.sampled_from(STATUSES)), min_size=1, max_size=5, unique_by=lambda t: t[0]
)


@tool
def plan(todos: list[dict[str, str]], ctx: ToolContext) -> ToolResult:
    """Replace the plan."""
    ctx.state.todos = [Todo(t["content"], t["status"]) for t in todos]  # type: ignore[arg-type]
    return ToolResult("planned: " + "; ".join(t["content"] for t in todos))


class Planner:
    """write_todos' shape without the plugin: a tool that replaces the plan and a system block
    that shows it to the model on every call."""

    name = "todo"

    def provide_tools(self, state: State) -> list[Tool]:
        return [plan]

    def system_blocks(self, state: State) -> list[TextBlock]:
        lines = [f"- [{t.status}] {t.content}" for t in state.todos]
        return [TextBlock("Current plan:\n" + "\n".join(lines))] if lines else []


def with_one_in_progress(todos: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """write_todos allows one in_progress step at most: later ones become pending."""
    out, seen = [], False
    for content, status in todos:
        if status == "in_progress":
            status = "pending" if seen else status
            seen = True
        out.append((content, status))
    return out


def run_and_check(
    otel: Any, todos: Sequence[tuple[str, str]], tool_name: str, stack: Sequence[Middleware]
) -> None:
    strings = _run(otel, todos, tool_name, stack)
    for content, _ in todos:
        leaks = [s for s in strings if content in s]
        assert leaks == [], f"todo content {content!r} leaked into telemetry: {leaks!r}"


_vocabularies: dict[str, frozenset[str]] = {}


def assume_not_vocabulary(
    otel: Any, todos: Sequence[tuple[str, str]], tool_name: str, stack: Sequence[Middleware]
) -> None:
    """Leave out a draw whose content is part of telemetry's own vocabulary: it would match
    without leaking ("agent.todos_updated" holds "agent.to")."""
    vocabulary = _vocabulary(otel, tool_name, stack)
    assume(not any(content in word for content, _ in todos for word in vocabulary))


def _vocabulary(otel: Any, tool_name: str, stack: Sequence[Middleware]) -> frozenset[str]:
    """What a run with a placeholder plan exports: the names and fixed values telemetry uses."""
    if tool_name not in _vocabularies:
        _vocabularies[tool_name] = frozenset(
            _run(otel, [("placeholder step", "in_progress")], tool_name, stack)
        )
    return _vocabularies[tool_name]


def _run(
    otel: Any, todos: Sequence[tuple[str, str]], tool_name: str, stack: Sequence[Middleware]
) -> list[str]:
    """Run a plan of ``todos`` through a whole run; the strings it exported."""
    otel.clear()
    joined = " | ".join(c for c, _ in todos)
    turns = [
        {
            "text": f"Planning: {joined}",
            "tool_calls": [
                {
                    "name": tool_name,
                    "input": {"todos": [{"content": c, "status": s} for c, s in todos]},
                }
            ],
        },
        {"text": f"Done with: {joined}"},
    ]

    async def go(tmp: Path) -> Any:
        async with agent_harness(tmp, turns=turns, stack=stack) as h:
            run = await h.start(h.agent, f"Please plan: {joined}")
            finished = await h.execute(run.id)
            return finished, await h.store.get_run(h.tenant_id, run.id)

    with tempfile.TemporaryDirectory() as tmp:
        finished, record = anyio.run(go, Path(tmp))

    # The content really went through the run ...
    assert finished.status is RunStatus.COMPLETED
    assert [(t.content, t.status) for t in load_state(record.state).todos] == list(todos)
    totals = [
        e.attributes.get(telemetry.TODOS_TOTAL) for _, e in otel.events(telemetry.TODOS_UPDATED)
    ]
    assert len(todos) in totals
    strings = otel.strings()
    assert strings
    return strings


@settings(max_examples=30, deadline=None)
@given(todo_lists)
def test_no_todo_content_in_any_span_event_or_metric(otel_session: Any, todos: Any) -> None:
    assume_not_vocabulary(otel_session, todos, "plan", [Planner()])
    run_and_check(otel_session, todos, "plan", [Planner()])


@settings(max_examples=20, deadline=None)
@given(todo_lists)
def test_no_todo_content_with_the_installed_plugins(otel_session: Any, todos: Any) -> None:
    stack = default_stack(StackConfig())
    assert "todo" in [m.name for m in stack]
    todos = with_one_in_progress(todos)
    assume_not_vocabulary(otel_session, todos, "write_todos", stack)
    run_and_check(otel_session, todos, "write_todos", stack)


def test_the_check_sees_a_leak(otel_session: Any) -> None:
    """The property above can fail: a middleware that puts content in a reason is caught."""

    @tool
    def leaky_plan(todos: list[dict[str, str]], ctx: ToolContext) -> ToolResult:
        """Replace the plan, and leak it."""
        telemetry.record(telemetry.RETRIED, middleware="todo", reason=todos[0]["content"])
        return plan(todos, ctx)  # type: ignore[no-any-return]

    class LeakyPlanner(Planner):
        def provide_tools(self, state: State) -> list[Tool]:
            return [leaky_plan]

    with pytest.raises(AssertionError, match="'a secret step' leaked"):
        run_and_check(otel_session, [("a secret step", "pending")], "leaky_plan", [LeakyPlanner()])


class FailsOnPlan:
    """A buggy tool wrapper whose exception message quotes the plan."""

    name = "fails_on_plan"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        await next(req)
        raise ValueError(f"cannot handle {req.state.todos[0].content!r}")


@pytest.mark.anyio
async def test_an_exception_quoting_content_fails_the_run_not_privacy(
    tmp_path: Path, otel: Any
) -> None:
    todos = [{"content": "a secret step", "status": "pending"}]
    turns = [{"tool_calls": [{"name": "plan", "input": {"todos": todos}}]}]
    async with agent_harness(tmp_path, turns=turns, stack=[Planner(), FailsOnPlan()]) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None and "a secret step" in finished.error  # the run says why
    # The run ends with the chain's verdict naming the wrapper (issue "Run integrity", item 2).
    assert otel.one("execute_tool plan").attributes["error.type"] == "MiddlewareError"
    assert otel.one("invoke_agent test").attributes["error.type"] == "MiddlewareError"
    assert [s for s in otel.strings() if "a secret step" in s] == []


@pytest.mark.parametrize(
    ("value", "on"),
    [
        ("", False),
        ("false", False),
        ("no_content", False),
        ("event_only", False),  # hango records no content events; spans stay clean
        ("true", True),
        ("True", True),
        (" SPAN_ONLY ", True),
        ("span_and_event", True),
    ],
)
def test_content_capture_is_on_only_when_asked(value: str, on: bool) -> None:
    from hango.agent.span_content import CAPTURE_VARIABLE, capture_enabled

    assert capture_enabled({CAPTURE_VARIABLE: value}) is on
    assert capture_enabled({}) is False
