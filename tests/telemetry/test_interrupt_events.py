"""Interrupt telemetry: a pause, a decision and the resumed read are span events with ids and
names only; no argument, reason or decision text reaches telemetry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hango import Decision, RunStatus, telemetry, tool
from hango.testing import agent_harness
from hango_approval import HumanInTheLoopMiddleware

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-customer-42"


@tool
def transfer(account: str) -> str:
    """Move money."""
    return f"moved to {account}"


async def test_raised_decided_resumed_carry_ids_and_names_only(tmp_path: Path, otel: Any) -> None:
    turns = [
        {"tool_calls": [{"name": "transfer", "input": {"account": SECRET}}]},
        {"text": "done"},
    ]
    gate = HumanInTheLoopMiddleware({"transfer": True})
    async with agent_harness(tmp_path, turns=turns, stack=[gate], tools=[transfer]) as h:
        finished = await h.run(h.agent, "go")
        (action,) = finished.pending
        done = await h.resume(
            finished.run_id, {action.tool_call_id: Decision.edit({"account": SECRET + "-b"})}
        )
    assert done.status is RunStatus.COMPLETED

    expected = {
        telemetry.MIDDLEWARE_NAME: "human_in_the_loop",
        telemetry.INTERRUPT_ID: action.id,
        telemetry.INTERRUPT_NAME: "approve",
        telemetry.TOOL_NAME: "transfer",
        telemetry.TOOL_CALL_ID: action.tool_call_id,
    }
    (raised,) = otel.events(telemetry.INTERRUPT_RAISED)
    assert raised[0].name == "execute_tool transfer"
    assert dict(raised[1].attributes or {}) == expected
    # A pause is not a failed tool call.
    assert raised[0].status.is_ok and "error.type" not in (raised[0].attributes or {})
    (decided,) = otel.events(telemetry.INTERRUPT_DECIDED)
    assert decided[0].name == "decide_run"
    assert dict(decided[1].attributes or {}) == expected | {telemetry.INTERRUPT_DECISION: "edit"}
    (resumed,) = otel.events(telemetry.INTERRUPT_RESUMED)
    assert resumed[0].name == "execute_tool transfer"
    assert dict(resumed[1].attributes or {}) == expected | {telemetry.INTERRUPT_DECISION: "edit"}

    leaked = [s for s in otel.strings() if SECRET in s or "needs a person" in s]
    assert leaked == []
