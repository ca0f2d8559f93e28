"""A sub-agent's run nests in its parent's trace: the child's ``invoke_agent`` span is a child
of the parent's ``execute_tool task`` span (hango-subagents runs the child inside the call)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hango import AgentDefinition, Harness, RunStatus, open_store

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_the_childs_invoke_agent_span_nests_under_the_task_call(
    tmp_path: Path, otel: Any
) -> None:
    (tmp_path / "agent.toml").write_text(
        textwrap.dedent("""
        name = "lead"
        model = "scripted:lead.json"
        [[options.subagent.agents]]
        name = "researcher"
        description = "Reports."
        agent = "researcher.toml"
        """)
    )
    (tmp_path / "researcher.toml").write_text(
        'name = "researcher"\nmodel = "scripted:researcher.json"\n'
    )
    task = {"id": "t1", "name": "task",
            "input": {"description": "Report.", "subagent_type": "researcher"}}  # fmt: skip
    (tmp_path / "lead.json").write_text(
        json.dumps({"turns": [{"tool_calls": [task]}, {"text": "Done."}]})
    )
    (tmp_path / "researcher.json").write_text(json.dumps({"turns": [{"text": "REPORT"}]}))
    async with await open_store(f"sqlite:///{tmp_path}/hango.db") as store:
        finished = await Harness(store).run(
            AgentDefinition.from_file(tmp_path / "agent.toml"), "Go."
        )
    assert finished.status is RunStatus.COMPLETED, finished.error
    lead = otel.one("invoke_agent lead")
    call = otel.one("execute_tool task")
    child = otel.one("invoke_agent researcher")
    assert call.context.trace_id == lead.context.trace_id == child.context.trace_id
    assert child.parent is not None and child.parent.span_id == call.context.span_id
