"""The demo run's trace with the installed plugins: what a person debugging it sees.

The demo agent (examples/demo) runs its script through the default stack built from the
plugins' entry points: it plans with write_todos, repeats a search until repeat-call detection
blocks it, and calls a tool its allowlist refuses.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from hango import AgentDefinition, Harness, RunStatus, ScriptedModel, telemetry
from hango.discovery import default_stack
from hango.middleware import RunHook, StackConfig
from hango.store.sqlite import SqliteRunStore

pytestmark = pytest.mark.anyio

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo"
#: The installed plugins' stack, in STACK_ORDER.
PHASE_STACK = (
    "skills",
    "filesystem",
    "mcp",
    "summarization",
    "repair_tool_calls",
    "todo",
    "repeat_call",
    "limits",
    "model_fallback",
    "prompt_cache",
    "memory",
    "human_in_the_loop",
    "tool_retry",
    "tool_allowlist",
)


@pytest.fixture
async def demo_trace(tmp_path: Path, otel: Any) -> Any:
    """The demo run, executed once with the installed plugins; ``otel`` holds its telemetry."""
    agent = AgentDefinition.from_file(DEMO / "agent.toml")
    model = ScriptedModel.from_file(DEMO / "script.toml")
    model.delay = 0  # the pauses are for people watching; the trace is the same without
    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    try:
        finished = await Harness(store, model=model, settings={}).run(agent, "Open risks?")
    finally:
        await store.aclose()
    assert finished.status is RunStatus.COMPLETED
    return otel


async def test_invoke_agent_carries_the_exact_ordered_stack(demo_trace: Any) -> None:
    root = demo_trace.one("invoke_agent demo")
    [(span, event)] = demo_trace.events(telemetry.MIDDLEWARE_STACK)
    assert span is root
    assert event.attributes[telemetry.MIDDLEWARE_NAMES] == PHASE_STACK
    agent = AgentDefinition.from_file(DEMO / "agent.toml")
    stack = default_stack(StackConfig(tool_allowlist=frozenset(agent.tool_allowlist or ())))
    assert tuple(m.name for m in stack) == PHASE_STACK


async def test_before_run_has_a_child_span_per_hook(demo_trace: Any) -> None:
    # The demo's stack: its allowlist leaves out tools (task) and so the plugins offering them.
    allowlist = AgentDefinition.from_file(DEMO / "agent.toml").tool_allowlist or ()
    config = StackConfig(tool_allowlist=frozenset(allowlist))
    hooks = [m.name for m in default_stack(config) if isinstance(m, RunHook)]
    assert "repair_tool_calls" in hooks
    before = demo_trace.one("agent.before_run")
    assert before.parent.span_id == demo_trace.one("invoke_agent demo").context.span_id
    children = demo_trace.children(before)
    assert [s.attributes[telemetry.MIDDLEWARE_NAME] for s in children] == hooks
    assert [s.name for s in children] == [f"before_run {name}" for name in hooks]
    measured = {
        p.attributes[telemetry.MIDDLEWARE_NAME]
        for p in demo_trace.points("hango.middleware.before_run.duration")
    }
    assert measured == set(hooks)


async def test_a_blocked_repeat_call_is_an_event_and_a_count(demo_trace: Any) -> None:
    [(span, event)] = demo_trace.events(telemetry.REPEAT_CALL_BLOCKED)
    assert span.name == "execute_tool search"
    assert span.attributes["error.type"] == "tool_error"
    assert event.attributes == {
        telemetry.MIDDLEWARE_NAME: "repeat_call",
        telemetry.TOOL_NAME: "search",
    }
    assert demo_trace.total("hango.middleware.repeat_blocked", {telemetry.TOOL_NAME: "search"}) == 1


async def test_a_refused_call_is_a_short_circuit_of_the_allowlist(demo_trace: Any) -> None:
    [(span, event)] = demo_trace.events(telemetry.SHORT_CIRCUITED)
    assert span.name == "execute_tool edit_file"
    assert event.attributes[telemetry.MIDDLEWARE_NAME] == "tool_allowlist"
    assert telemetry.REASON in event.attributes
    assert (
        demo_trace.total(
            "hango.middleware.tool_short_circuits",
            {telemetry.MIDDLEWARE_NAME: "tool_allowlist", telemetry.TOOL_NAME: "edit_file"},
        )
        == 1
    )


async def test_plan_progress_is_counted_and_its_text_never_exported(demo_trace: Any) -> None:
    loop_updates = [
        e.attributes
        for _, e in demo_trace.events(telemetry.TODOS_UPDATED)
        if telemetry.TODOS_TOTAL in e.attributes
    ]
    assert loop_updates
    last = loop_updates[-1]
    assert last[telemetry.TODOS_COMPLETED] == last[telemetry.TODOS_TOTAL] > 0

    script = tomllib.loads((DEMO / "script.toml").read_text(encoding="utf-8"))
    contents = {
        todo["content"]
        for turn in script["turns"]
        for call in turn.get("tool_calls", ())
        if call["name"] == "write_todos"
        for todo in call["input"]["todos"]
    }
    assert contents
    strings = demo_trace.strings()
    assert [c for c in contents if any(c in s for s in strings)] == []


async def test_state_missing_is_reported_once_on_a_middlewares_first_call(
    demo_trace: Any,
) -> None:
    """repeat_call finds no private state on the run's first tool call, and says so once;
    later calls find the counts it stored. hango-limits, a run hook, finds none before the
    run's first call (the session's first run), once; hango-summarization on the first model
    call, once. (hango-skills, with no skill sources for this agent, keeps no state at all.)"""
    missing = {
        e.attributes[telemetry.MIDDLEWARE_NAME]: span
        for span, e in demo_trace.events(telemetry.STATE_MISSING)
    }
    assert len(demo_trace.events(telemetry.STATE_MISSING)) == len(missing) == 3
    first_tool = next(s for s in demo_trace.spans() if s.name.startswith("execute_tool"))
    assert missing["repeat_call"] is first_tool
    assert missing["limits"] is demo_trace.one("before_run limits")
    first_turn = next(s for s in demo_trace.spans() if s.name == "turn")
    assert missing["summarization"] is first_turn
