"""Concurrent tool batches: the calls of one response run at once (up to
``max_tool_concurrency``), a sequential tool is a barrier, results go into history in call
order and are each saved when they complete, a failure does not cancel its siblings, a cancel
keeps what finished, and a pause in a concurrent batch suspends once and resumes right."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest

from hango import (
    AgentDefinition,
    Decision,
    Harness,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    ToolResult,
    tool,
)
from hango.middleware import ToolCallRequest, ToolHandler
from hango.provider.scripted import ScriptedModel
from hango.store.base import RunStore
from hango.testing import (
    Killed,
    ToolBox,
    agent_harness,
    assert_valid_history,
    kill_and_resume,
    saved_history,
)
from hango.tool import ToolRegistry

pytestmark = pytest.mark.anyio

log: list[tuple[str, str, float]] = []  # (event, name, time)
running = {"now": 0, "most": 0}
hurry = {"on": False}  # a resumed run's calls need not wait


def _reset() -> None:
    log.clear()
    running.update(now=0, most=0)
    hurry["on"] = False


async def _work(name: str, seconds: float) -> str:
    if hurry["on"]:
        seconds = 0.01
    running["now"] += 1
    running["most"] = max(running["most"], running["now"])
    log.append(("start", name, time.monotonic()))
    try:
        await anyio.sleep(seconds)
    finally:
        running["now"] -= 1
        log.append(("end", name, time.monotonic()))
    return f"{name} done"


@tool
async def lookup(name: str, seconds: float = 0.1) -> str:
    """Look something up (takes a while)."""
    return await _work(name, seconds)


@tool(sequential=True)
async def deploy(name: str) -> str:
    """Deploy: must not overlap anything."""
    return await _work(name, 0.05)


@tool
async def broken(name: str) -> str:
    """Fails after a while."""
    await _work(name, 0.05)
    raise RuntimeError(f"{name} broke")


def calls(*items: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": i} for n, i in items]}


def looks(n: int, seconds: float = 0.1) -> dict[str, Any]:
    return calls(*(("lookup", {"name": f"l{i}", "seconds": seconds}) for i in range(n)))


def _spans(names: Sequence[str]) -> dict[str, tuple[float, float]]:
    start = {n: t for e, n, t in log if e == "start"}
    end = {n: t for e, n, t in log if e == "end"}
    return {n: (start[n], end[n]) for n in names}


async def test_a_batch_of_eight_slow_calls_runs_at_once_and_answers_in_call_order(
    tmp_path: Path,
) -> None:
    _reset()
    events: list[Any] = []

    async def keep(event: Any) -> None:
        events.append(event)

    async with agent_harness(tmp_path, turns=[looks(8), {"text": "ok"}], tools=[lookup]) as h:
        finished = await h.run(h.agent, "go", emit=keep)
        history = await saved_history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    assert running["most"] == 8
    took = max(t for e, _, t in log if e == "end") - min(t for e, _, t in log if e == "start")
    assert took < 0.4, f"8 x 100 ms took {took:.2f} s (one by one: 0.8 s)"
    assert [r.content for r in history[2].tool_results] == [f"l{i} done" for i in range(8)]
    assert_valid_history(history)
    kinds = [type(e) for e in events if type(e) in (ToolCallStarted, ToolCallFinished)]
    # Every call started before the first one finished: they overlapped.
    assert kinds[:8] == [ToolCallStarted] * 8 and kinds[8:] == [ToolCallFinished] * 8
    started = [e.call.id for e in events if type(e) is ToolCallStarted]
    assert started == [f"toolu_scripted_0_{i}" for i in range(8)]  # begun in call order


async def test_max_tool_concurrency_caps_the_calls_running_at_once(tmp_path: Path) -> None:
    _reset()
    async with agent_harness(
        tmp_path, turns=[looks(6, 0.05), {"text": "ok"}], tools=[lookup], max_tool_concurrency=2
    ) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.COMPLETED
    assert running["most"] == 2
    assert len([e for e in log if e[0] == "start"]) == 6


@pytest.mark.parametrize("how", ["decorator", "agent_file"])
async def test_a_sequential_tool_runs_alone_between_the_calls_before_and_after_it(
    tmp_path: Path, how: str
) -> None:
    _reset()
    batch = calls(
        ("lookup", {"name": "a"}),
        ("lookup", {"name": "b"}),
        ("deploy" if how == "decorator" else "lookup", {"name": "gate"}),
        ("lookup", {"name": "c"}),
        ("lookup", {"name": "d"}),
    )
    async with agent_harness(tmp_path, turns=[batch, {"text": "ok"}], tools=[lookup, deploy]) as h:
        agent = h.agent
        if how == "agent_file":
            # Every lookup is sequential here: each call runs alone.
            agent = AgentDefinition.from_json(
                {**agent.to_json(), "sequential_tools": ["lookup"]}, source="test"
            )
        finished = await h.run(agent, "go")
        history = await saved_history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    spans = _spans(["a", "b", "gate", "c", "d"])
    gate_start, gate_end = spans["gate"]
    assert max(spans["a"][1], spans["b"][1]) <= gate_start
    assert gate_end <= min(spans["c"][0], spans["d"][0])
    if how == "decorator":
        assert running["most"] == 2  # a with b, c with d
        assert spans["a"][0] < spans["b"][1] and spans["c"][0] < spans["d"][1]
    else:
        assert running["most"] == 1
    assert [r.content for r in history[2].tool_results] == [
        "a done",
        "b done",
        "gate done",
        "c done",
        "d done",
    ]


async def test_a_failing_tool_gets_an_error_result_and_its_siblings_finish(
    tmp_path: Path,
) -> None:
    _reset()
    batch = calls(
        ("lookup", {"name": "a", "seconds": 0.2}),
        ("broken", {"name": "x"}),
        ("lookup", {"name": "b", "seconds": 0.2}),
    )
    async with agent_harness(tmp_path, turns=[batch, {"text": "ok"}], tools=[lookup, broken]) as h:
        finished = await h.run(h.agent, "go")
        history = await saved_history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED
    a, x, b = history[2].tool_results
    assert (a.content, b.content) == ("a done", "b done")
    assert x.is_error and "x broke" in x.content
    assert [e for e, n, _ in log if n in "ab"] == ["start", "start", "end", "end"]


async def test_cancelling_the_run_cancels_running_calls_and_keeps_finished_ones(
    tmp_path: Path,
) -> None:
    _reset()
    batch = calls(
        ("lookup", {"name": "quick", "seconds": 0.01}),
        ("lookup", {"name": "long", "seconds": 60}),
        ("lookup", {"name": "quick2", "seconds": 0.01}),
    )
    turns = [batch, {"text": "ok"}]
    async with agent_harness(tmp_path, turns=turns, tools=[lookup]) as h:
        run = await h.start(h.agent, "go")
        async with h.stream(run.id) as events:
            done = 0
            async for event in events:
                if isinstance(event, ToolCallFinished):
                    done += 1
                    if done == 2:
                        break  # leaving the block cancels the run
        cancelled = await h.store.get_run(h.tenant_id, run.id)
        assert cancelled.status is RunStatus.CANCELLED
        saved = await saved_history(h, run.id)
        assert [r.content for r in saved[2].tool_results] == ["quick done", "quick2 done"]
        # The long call saw the cancellation (its finally ran) and never finished.
        assert ("end", "long") in {(e, n) for e, n, _ in log}
        assert running["now"] == 0

        _reset()
        hurry["on"] = True
        resumed = await h.execute(run.id)
        history = await saved_history(h, run.id)
    assert resumed.status is RunStatus.COMPLETED
    # Only the unfinished call ran again.
    assert [n for e, n, _ in log if e == "start"] == ["long"]
    contents = [r.content for r in history[2].tool_results]
    assert contents == ["quick done", "long done", "quick2 done"]


class Gate:
    """Pauses every call of tool ``gated`` for a person's approval."""

    name = "gate"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if req.call.name == "deploy_gated":
            req.interrupt(self.name, "ask", reason="gated")
        return await next(req)


@tool
async def deploy_gated(name: str) -> str:
    """A gated action."""
    return await _work(name, 0.01)


async def test_a_pause_in_a_concurrent_batch_lets_running_calls_finish_and_suspends_once(
    tmp_path: Path,
) -> None:
    _reset()
    batch = calls(
        ("lookup", {"name": "a", "seconds": 0.2}),
        ("deploy_gated", {"name": "g1"}),
        ("lookup", {"name": "b", "seconds": 0.01}),
        ("deploy_gated", {"name": "g2"}),
    )
    events: list[Any] = []

    async def keep(event: Any) -> None:
        events.append(event)

    async with agent_harness(
        tmp_path, turns=[batch, {"text": "ok"}], stack=[Gate()], tools=[lookup, deploy_gated]
    ) as h:
        first = await h.run(h.agent, "go", emit=keep)
        assert first.status is RunStatus.SUSPENDED
        # Both gated calls asked in one round; a (already running) finished; b never ran.
        assert [p.tool_call_id for p in first.pending] == [
            "toolu_scripted_0_1",
            "toolu_scripted_0_3",
        ]
        assert [n for e, n, _ in log if e == "start"] == ["a"]
        saved = await saved_history(h, first.run_id)
        assert [r.tool_use_id for r in saved[-1].tool_results] == ["toolu_scripted_0_0"]
        assert sum(1 for e in events if type(e).__name__ == "RunFinished") == 1

        _reset()
        done = await h.resume(
            first.run_id, {p.tool_call_id: Decision.approve() for p in first.pending}
        )
        history = await saved_history(h, first.run_id)
    assert done.status is RunStatus.COMPLETED
    assert sorted(n for e, n, _ in log if e == "start") == ["b", "g1", "g2"]  # each once
    contents = [r.content for r in history[2].tool_results]
    assert contents == ["a done", "g1 done", "b done", "g2 done"]
    assert_valid_history(history)


# -- a kill -9 mid-batch, on SQLite and PostgreSQL ----------------------------------------------


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # psycopg's pool runs on asyncio
async def test_a_kill_mid_batch_keeps_finished_results_and_reruns_only_the_unfinished(
    store: RunStore, tool_box: ToolBox
) -> None:
    """quick a and quick b finish (each result saved as it completes) while charge (not
    idempotent, saved as started) and boom run; boom kills the process. The resumed run keeps
    both results without running them again, gives charge an outcome-unknown result instead of
    charging twice, and runs boom, the one unfinished idempotent call, once more."""
    killing = {"on": True}

    @tool_box.tool
    def quick(n: int) -> str:
        """Answers at once."""
        return f"quick {n}"

    @tool_box.tool(idempotent=False)
    async def charge(n: int) -> str:
        """Charges a card; slow."""
        await anyio.sleep(30)
        return f"charged {n}"

    @tool_box.tool
    async def boom() -> str:
        """Takes a moment, then (the first time) the process dies."""
        await anyio.sleep(0.3)
        if killing["on"]:
            killing["on"] = False
            raise Killed("kill -9")
        return "boom done"

    batch = calls(("quick", {"n": 1}), ("charge", {"n": 5}), ("boom", {}), ("quick", {"n": 2}))
    turns = [batch, {"text": "done"}]

    def harness(s: RunStore) -> Harness:
        return Harness(
            s,
            model=ScriptedModel.from_turns(turns),
            stack=lambda _config: [],
            tools=ToolRegistry([quick, charge, boom]),
            settings={},
        )

    agent = AgentDefinition(name="batch", model="scripted:inline")
    seen = await kill_and_resume(store, harness, agent, "go", killed_by=Killed)
    tenant = seen.run.tenant_id
    assert seen.killed.status is RunStatus.RUNNING  # as a kill -9 leaves it
    assert seen.killed.state["interrupts"]["started"].keys() == {"toolu_scripted_0_1"}
    assert seen.finished.status is RunStatus.COMPLETED
    history = await store.load_messages(tenant, seen.run.session_id)
    results = history[2].tool_results
    assert [r.content for r in (results[0], results[2], results[3])] == [
        "quick 1",
        "boom done",
        "quick 2",
    ]
    assert results[1].is_error and "Outcome unknown" in results[1].content
    # (started, completed): nothing finished ran twice, the charge never ran again.
    assert tool_box.count("quick") == (2, 2)
    assert tool_box.count("charge") == (1, 0)
    assert tool_box.count("boom") == (2, 1)
    assert_valid_history(history)
