"""State that cannot lie, through real runs on SQLite: the scope of todos and private state
across the runs of a session and across resume, a state row naming another run refused, and a
checkpoint that cannot be written never leaving a run ``running`` (issue "Run integrity",
items 9, 10 and 11)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from hango import RunStatus, ToolCallFinished, tool
from hango.agent.state import dump_state, load_state
from hango.middleware import State, load_private, store_private
from hango.store import RunSave
from hango.testing import RecordingModel, agent_harness
from hango_repeat import RepeatCallMiddleware
from hango_todo import TodoMiddleware

pytestmark = pytest.mark.anyio


class RunsInSession:
    """Counts its session's before_run calls (a run's start and each resume): private state
    declared session-scoped."""

    name = "runs_in_session"
    state_scope = "session"

    async def before_run(self, state: State) -> None:
        seen, _ = load_private(state, self.name, int, int)
        store_private(state, self.name, seen + 1)


gate: dict[str, anyio.Event] = {}


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


@tool
async def wait() -> str:
    """Block until released."""
    gate["entered"].set()
    await gate["release"].wait()
    return "waited"


def use(name: str, **input: Any) -> dict[str, Any]:
    return {"name": name, "input": input}


PLAN = [{"content": "Read the docs", "status": "in_progress"}]
TURNS = [
    # run 1
    {"tool_calls": [use("write_todos", todos=PLAN), use("echo", text="x")]},
    {"text": "Planned."},
    # run 2: the same call again, then a batch cancelled in the middle
    {"tool_calls": [use("echo", text="x"), use("wait")]},
    {"tool_calls": [use("echo", text="x")]},
    {"text": "Done."},
]


async def test_plan_and_session_state_carry_over_run_state_starts_fresh_both_survive_resume(
    tmp_path: Path,
) -> None:
    gate.update(entered=anyio.Event(), release=anyio.Event())
    model = RecordingModel(TURNS)
    stack = [TodoMiddleware(), RepeatCallMiddleware(threshold=2), RunsInSession()]
    events: list[object] = []

    async def emit(event: object) -> None:
        events.append(event)

    # One at a time: results in call order, and wait's cancel leaves the batch half done.
    async with agent_harness(
        tmp_path, model=model, stack=stack, tools=[echo, wait], max_tool_concurrency=1
    ) as h:
        first = await h.run(h.agent, "plan it")
        assert first.status is RunStatus.COMPLETED
        session = (await h.store.get_run(h.tenant_id, first.run_id)).session_id

        second = await h.start(h.agent, "go on", session_id=session)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: h.execute(second.id, emit=emit))
            await gate["entered"].wait()
            tg.cancel_scope.cancel()
        saved = load_state((await h.store.get_run(h.tenant_id, second.id)).state)
        gate["release"].set()
        finished = await h.execute(second.id, emit=emit)
        assert finished.status is RunStatus.COMPLETED
        final = load_state((await h.store.get_run(h.tenant_id, second.id)).state)

    # The plan is the conversation's: run 2's first request shows run 1's plan.
    plan_block = model.requests[2].system[-1].text
    assert "1. [in_progress] Read the docs" in plan_block
    # Repeat counts are per run: run 2's first echo(x) ran (threshold 2 would block a second).
    results = [e.result for e in events if isinstance(e, ToolCallFinished)]
    assert results[0].content == "x" and not results[0].is_error
    # Both kinds survived the cancel and the resume: the repeat count went on (the next
    # echo(x) is the run's second, blocked), and so did the session counter (run 1, run 2,
    # run 2 resumed).
    assert saved.private["runs_in_session"] == 2
    assert saved.private["repeat_call"]["counts"]
    assert results[-1].is_error and "already made once" in results[-1].content
    assert final.private["runs_in_session"] == 3
    assert [t.content for t in final.todos] == ["Read the docs"]


async def test_a_state_row_naming_another_run_is_refused(tmp_path: Path) -> None:
    async with agent_harness(tmp_path, turns=[{"text": "one"}, {"text": "two"}]) as h:
        first = await h.run(h.agent, "hi")
        other = await h.start(h.agent, "again")
        record = await h.store.get_run(h.tenant_id, other.id)
        # Copy the first run's saved state into the second run's row.
        await h.store.save_run(
            RunSave(
                h.tenant_id,
                other.id,
                version=record.version,
                status=RunStatus.RUNNING,
                state=(await h.store.get_run(h.tenant_id, first.run_id)).state,
            )
        )
        finished = await h.execute(other.id)
        row = await h.store.get_run(h.tenant_id, other.id)
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None
    assert finished.error.startswith("run state (state_json) is malformed at $.run_id: ")
    assert row.status is RunStatus.FAILED
    assert row.state["run_id"] == str(first.run_id)  # kept as found, for whoever looks


class Sloppy:
    """Writes a set into ``State.private`` directly, around ``store_private``."""

    name = "sloppy"

    async def before_run(self, state: State) -> None:
        state.private[self.name] = {"seen": {"a", "b"}}


async def test_a_checkpoint_that_cannot_be_written_never_leaves_the_run_running(
    tmp_path: Path,
) -> None:
    async with agent_harness(tmp_path, turns=[{"text": "hi"}], stack=[Sloppy()]) as h:
        finished = await h.run(h.agent, "go")
        row = await h.store.get_run(h.tenant_id, finished.run_id)
    assert finished.status is RunStatus.FAILED
    assert (finished.error or "").startswith(
        "state of middleware 'sloppy' cannot be stored at $.seen: set "
    )
    assert row.status is RunStatus.FAILED and row.error == finished.error
    # The last state that could be saved is kept: a valid document, loadable.
    assert load_state(row.state).run_id == finished.run_id
    assert dump_state(load_state(row.state))
