"""The feature plugins installed together: the exact stack, the exact tools the provider
sees, and the plan, repeat-call and state_json behaviour of a real run on SQLite."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hango_allowlist
import hango_approval
import hango_fallback
import hango_filesystem
import hango_limits
import hango_mcp
import hango_memory
import hango_prompt_cache
import hango_repair
import hango_repeat
import hango_retry
import hango_skills
import hango_subagents
import hango_summarization
import hango_todo
from hango import (
    AgentDefinition,
    Harness,
    RunStatus,
    ScriptedModel,
    TextBlock,
    ToolCallStarted,
    ToolResultBlock,
)
from hango.agent.state import load_state
from hango.config import DEFAULT_TENANT
from hango.discovery import default_stack
from hango.middleware import StackConfig, Todo
from hango.plugins import make_plugin_manager
from hango.store.sqlite import SqliteRunStore
from hango.testing import RecordingModel, hango_executable
from hango_repair import INTERRUPTED

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"
HANGO = Path(hango_executable())

STACK = [
    "skills",
    "filesystem",
    "subagent",
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
]
PLUGINS: dict[str, ModuleType] = {
    "filesystem": hango_filesystem,
    "todo": hango_todo,
    "repeat": hango_repeat,
    "allowlist": hango_allowlist,
    "repair": hango_repair,
    "limits": hango_limits,
    "retry": hango_retry,
    "fallback": hango_fallback,
    "prompt_cache": hango_prompt_cache,
    "approval": hango_approval,
    "skills": hango_skills,
    "memory": hango_memory,
    "mcp": hango_mcp,
    "summarization": hango_summarization,
    "subagent": hango_subagents,
}
#: entry-point name -> the slot its middleware fills
SLOTS = {
    "filesystem": "filesystem",
    "todo": "todo",
    "repeat": "repeat_call",
    "allowlist": "tool_allowlist",
    "repair": "repair_tool_calls",
    "limits": "limits",
    "retry": "tool_retry",
    "fallback": "model_fallback",
    "prompt_cache": "prompt_cache",
    "approval": "human_in_the_loop",
    "skills": "skills",
    "memory": "memory",
    "mcp": "mcp",
    "summarization": "summarization",
    "subagent": "subagent",
}


def test_default_stack_is_exactly_the_installed_in_slot_order() -> None:
    stack = default_stack(StackConfig(), make_plugin_manager(env={}))
    assert [m.name for m in stack] == STACK


@settings(max_examples=50)
@given(st.permutations(list(PLUGINS)))
def test_registration_order_never_changes_the_chain(order: list[str]) -> None:
    pm = make_plugin_manager(env={}, load_entrypoints=False)
    for name in order:
        pm.register(PLUGINS[name], name=name)
    config = StackConfig(tool_allowlist=frozenset({"read_file", "write_todos", "task"}))
    assert [m.name for m in default_stack(config, pm)] == STACK


@pytest.mark.parametrize("removed", list(PLUGINS))
def test_removing_a_plugin_empties_its_slot_and_moves_no_other(removed: str) -> None:
    pm = make_plugin_manager(env={"HANGO_DISABLE_PLUGINS": removed})
    remaining = [n for n in STACK if n != SLOTS[removed]]
    assert [m.name for m in default_stack(StackConfig(), pm)] == remaining


def test_hango_plugins_lists_the_installed_in_slot_order() -> None:
    done = subprocess.run(
        [HANGO, "plugins", "--json"], capture_output=True, text=True, check=True, timeout=60
    )
    rows = json.loads(done.stdout)
    assert [(r["name"], r["distribution"], r["slot"]) for r in rows] == [
        ("skills", "hango-skills", "skills"),
        ("filesystem", "hango-filesystem", "filesystem"),
        ("subagent", "hango-subagents", "subagent"),
        ("mcp", "hango-mcp", "mcp"),
        ("summarization", "hango-summarization", "summarization"),
        ("repair_tool_calls", "hango-repair", "repair_tool_calls"),
        ("todo", "hango-todo", "todo"),
        ("repeat_call", "hango-repeat", "repeat_call"),
        ("limits", "hango-limits", "limits"),
        ("model_fallback", "hango-fallback", "model_fallback"),
        ("prompt_cache", "hango-prompt-cache", "prompt_cache"),
        ("memory", "hango-memory", "memory"),
        ("human_in_the_loop", "hango-approval", "human_in_the_loop"),
        ("tool_retry", "hango-retry", "tool_retry"),
        ("tool_allowlist", "hango-allowlist", "tool_allowlist"),
    ]
    capabilities = {r["name"]: r["capabilities"] for r in rows}
    assert capabilities["todo"] == ["tool_provider", "prompt_contributor"]
    assert capabilities["filesystem"] == ["tool_wrapper", "tool_provider", "prompt_contributor"]
    assert capabilities["summarization"] == ["model_wrapper"]


@pytest.mark.parametrize(
    "command",
    [["plugins"], ["run", "--agent", str(DEMO / "agent.toml"), "What are the open risks?"]],
)
def test_an_invalid_plugin_setting_is_a_startup_error_naming_it(
    command: list[str], tmp_path: Path
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}",
        "HANGO_REPEAT_CALL_THRESHOLD": "1",
    }
    done = subprocess.run(
        [HANGO, *command], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: HANGO_REPEAT_CALL_THRESHOLD must be at least 2, got 1"
    assert done.stdout == ""


# -- the tools the provider sees -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("allowlist", "expected"),
    [
        # The demo agent's own allowlist: its registry view, then write_todos from hango-todo.
        ("demo", ["list_files", "read_file", "search", "write_todos"]),
        (None, ["list_files", "read_file", "search", "edit_file", "wait_for_ci", "write_todos"]),
        # An allowlist without write_todos: hango-todo provides nothing for this agent.
        (("search", "list_files"), ["list_files", "search"]),
    ],
)
async def test_tools_the_provider_sees_are_in_exact_order(
    tmp_path: Path, allowlist: Any, expected: list[str]
) -> None:
    agent = AgentDefinition.from_file(DEMO / "agent.toml")
    if allowlist != "demo":
        agent = attrs.evolve(agent, tool_allowlist=allowlist)
    model = RecordingModel([{"text": "hi"}])
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        finished = await Harness(store, model=model, settings={}).run(agent, "hello")
    assert finished.status is RunStatus.COMPLETED
    (request,) = model.requests
    assert [t.name for t in request.tools] == expected
    plan_blocks = [b for b in request.system if b.text.startswith("Current plan")]
    assert len(plan_blocks) == ("write_todos" in expected)


# -- a real run with the plugins ---------------------------------------------------------------


def tools_module(tmp_path: Path) -> str:
    """Write a tools module for the agent under test and return its (unique) name.

    ``lookup`` records every execution in the module's CALLS; ``wait`` waits a minute.
    """
    name = f"stack_tools_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            '''
            import anyio
            from hango import tool

            CALLS = []

            @tool
            def lookup(term: str) -> str:
                """Look a term up."""
                CALLS.append(term)
                return f"{term}: 3 hits"

            @tool
            async def wait() -> str:
                """Wait a minute."""
                await anyio.sleep(60)
                return "waited"

            TOOLS = [lookup, wait]
            '''
        ),
        encoding="utf-8",
    )
    return name


def plan(*steps: tuple[str, str]) -> dict[str, Any]:
    return {
        "name": "write_todos",
        "input": {"todos": [{"content": c, "status": s} for c, s in steps]},
    }


PLAN_A = (("Look up the vent", "in_progress"), ("Answer", "pending"))
PLAN_B = (
    ("Look up the vent", "completed"),
    ("Look up the mister", "in_progress"),
    ("Answer", "pending"),
)
LOOKUP = {"name": "lookup", "input": {"term": "vent"}}


def agent_for(tmp_path: Path, module: str) -> AgentDefinition:
    return AgentDefinition(
        name="stack",
        model="scripted:inline",
        system=("You are terse.",),
        tools=(f"{module}:TOOLS",),
        tool_allowlist=("lookup", "wait", "write_todos"),
        base_dir=str(tmp_path),
    )


@pytest.mark.anyio
async def test_a_run_plans_blocks_the_third_repeat_and_saves_the_plan(tmp_path: Path) -> None:
    module = tools_module(tmp_path)
    agent = agent_for(tmp_path, module)
    model = RecordingModel(
        [
            {"tool_calls": [plan(*PLAN_A), LOOKUP]},
            {"tool_calls": [plan(*PLAN_B), LOOKUP]},
            {"tool_calls": [LOOKUP]},
            {"text": "The vent has 3 hits."},
        ]
    )
    db = tmp_path / "hango.db"
    async with await SqliteRunStore.open(f"sqlite:///{db}") as store:
        finished = await Harness(store, model=model, settings={}).run(agent, "look it up")
        record = await store.get_run(DEFAULT_TENANT, finished.run_id)
        messages = await store.load_messages(record.tenant_id, record.session_id)
    assert finished.status is RunStatus.COMPLETED

    # write_todos replaced the list each time, and the plan block of every model call shows the
    # plan as it stood then.
    blocks = [r.system for r in model.requests]
    assert [b[0] for b in blocks] == [TextBlock("You are terse.")] * 4
    assert blocks[0][1].text == "Current plan (write_todos): empty."
    assert "1. [in_progress] Look up the vent\n2. [pending] Answer" in blocks[1][1].text
    assert (
        blocks[2][1].text
        == blocks[3][1].text
        == (
            "Current plan (write_todos), 1 of 3 completed:\n"
            "1. [completed] Look up the vent\n"
            "2. [in_progress] Look up the mister\n"
            "3. [pending] Answer"
        )
    )
    # ... and never entered the messages (only the model's own call arguments hold it).
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock | ToolResultBlock):
                text = block.text if isinstance(block, TextBlock) else block.content
                assert "Look up the mister" not in text

    # The third identical lookup was blocked and not executed.
    assert sys.modules[module].CALLS == ["vent", "vent"]
    (blocked,) = messages[6].tool_results
    assert blocked.is_error and "already made 2 times" in blocked.content

    # runs.state_json holds the plan, and reloading the run restores it.
    with sqlite3.connect(db) as conn:
        (raw,) = conn.execute(
            "SELECT state_json FROM runs WHERE id = ?", (str(finished.run_id),)
        ).fetchone()
    expected = [Todo(c, s) for c, s in PLAN_B]
    assert json.loads(raw)["todos"] == [
        {"content": t.content, "status": t.status} for t in expected
    ]
    async with await SqliteRunStore.open(f"sqlite:///{db}") as store:
        reloaded = await store.get_run(record.tenant_id, finished.run_id)
    assert load_state(reloaded.state).todos == expected


@pytest.mark.anyio
async def test_an_interrupted_run_resumes_with_its_plan_and_a_repaired_history(
    tmp_path: Path,
) -> None:
    module = tools_module(tmp_path)
    agent = agent_for(tmp_path, module)
    turns = [
        {"tool_calls": [plan(*PLAN_A), {"name": "wait", "input": {}}]},
        {"text": "The wait was interrupted."},
    ]
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        harness = Harness(store, model=ScriptedModel.from_turns(turns), settings={})
        run = await harness.start(agent, "wait for it")
        async with harness.stream(run.id) as events:
            async for event in events:
                if isinstance(event, ToolCallStarted) and event.call.name == "wait":
                    await anyio.sleep(0.05)
                    break
        assert (await store.get_run(run.tenant_id, run.id)).status is RunStatus.CANCELLED

        # Another process (another Harness, fresh plugin manager) resumes it.
        model = RecordingModel(turns)
        finished = await Harness(store, model=model, settings={}).execute(run.id)
    assert finished.status is RunStatus.COMPLETED
    (request,) = model.requests
    assert "1. [in_progress] Look up the vent" in request.system[1].text
    write, wait = request.messages[1].tool_uses
    assert request.messages[2].tool_results == (
        ToolResultBlock(write.id, "Plan saved (2 todos: 0 completed, 1 in_progress, 1 pending)."),
        ToolResultBlock(wait.id, INTERRUPTED, is_error=True),
    )
