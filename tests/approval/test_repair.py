"""hango-repair and suspended runs: a resumed run's history repair leaves alone the calls the
loop finishes itself (the suspended batch, a call whose outcome is unknown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hango import Decision, RunStatus, ToolContext
from hango.testing import ToolBox, agent_harness
from hango_approval import HumanInTheLoopMiddleware
from hango_repair import INTERRUPTED, RepairToolCallsMiddleware

pytestmark = pytest.mark.anyio

box = ToolBox()
executed = box.executed


@box.tool
def free(label: str) -> str:
    """Not gated."""
    return f"free {label}"


@box.tool
def gated(label: str) -> str:
    """Gated."""
    return f"gated {label}"


class Crash(BaseException):
    """The process dies here (nothing after it is saved)."""


@box.tool(idempotent=False)
def charge(amount: int, ctx: ToolContext) -> str:
    """Charge a card once."""
    raise Crash


async def test_the_suspended_batch_is_finished_by_the_loop_not_repaired(tmp_path: Path) -> None:
    batch = {
        "tool_calls": [
            {"name": "free", "input": {"label": "1"}},
            {"name": "gated", "input": {"label": "A"}},
            {"name": "free", "input": {"label": "2"}},
        ]
    }
    stack = [RepairToolCallsMiddleware(), HumanInTheLoopMiddleware({"gated": True})]
    turns = [batch, {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=stack, tools=[free, gated]) as h:
        finished = await h.run(h.agent, "go")
        done = await h.resume(finished.run_id, {"toolu_scripted_0_1": Decision.approve()})
        assert done.status is RunStatus.COMPLETED
        run = await h.store.get_run(h.tenant_id, finished.run_id)
        messages = await h.store.load_messages(h.tenant_id, run.session_id)
    assert executed == ["free 1", "gated A", "free 2"]
    contents = [r.content for r in messages[2].tool_results]
    assert contents == ["free 1", "gated A", "free 2"]
    assert INTERRUPTED not in contents


async def test_a_call_whose_outcome_is_unknown_is_answered_so_not_as_interrupted(
    tmp_path: Path,
) -> None:
    batch = {
        "tool_calls": [
            {"name": "charge", "input": {"amount": 5}},
            {"name": "free", "input": {"label": "after"}},
        ]
    }
    turns = [batch, {"text": "done"}]
    stack = [RepairToolCallsMiddleware()]
    # One at a time: the call after the crash never starts (the test is about the repair).
    async with agent_harness(
        tmp_path, turns=turns, stack=stack, tools=[charge, free], max_tool_concurrency=1
    ) as h:
        run = await h.start(h.agent, "go")
        with pytest.raises(Crash):
            await h.execute(run.id)
        assert (await h.execute(run.id)).status is RunStatus.COMPLETED
        messages = await h.store.load_messages(h.tenant_id, run.session_id)
    results = {r.tool_use_id: r.content for r in messages[2].tool_results}
    # The started call was not run again and is said to have an unknown outcome; the call
    # after it never started, and repair answers it as interrupted, as for any crash.
    assert executed == ["charge 5"]
    assert results["toolu_scripted_0_0"].startswith("Outcome unknown: tool 'charge' started")
    assert results["toolu_scripted_0_1"] == INTERRUPTED
