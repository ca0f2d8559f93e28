"""hango runs on a real Temporal dev server: the demo agent end to end (the same history as in
a terminal), the approval example suspended and decided through the workflow's update, a
cancellation, and the bad input a person can give (an unknown engine, an unreachable server,
a refused decision) as one line each.

Everything goes through the ``hango`` command and ``hango temporal worker`` processes, as a
person runs them; the workflows are then read back from the server with the Temporal client.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from hango import RunStatus, RunStore
from hango.testing import HangoCli, write_agent
from hango_temporal import workflow_id
from hango_temporal.devserver import free_port

from .conftest import TemporalWorkers, until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("store_backend", ["sqlite"], indirect=True),
]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DEMO = EXAMPLES / "demo" / "agent.toml"
APPROVAL = EXAMPLES / "approval" / "agent.toml"


def cli(tmp_path: Path, env: dict[str, str]) -> HangoCli:
    return HangoCli(tmp_path, database_url=env["HANGO_DATABASE_URL"], env=env)


async def wait_status(
    store: RunStore, tenant: uuid.UUID, run_id: uuid.UUID, status: RunStatus, within: float = 60
) -> None:
    async def reached() -> bool:
        return (await store.get_run(tenant, run_id)).status is status

    await until(reached, within=within)


def submitted(done: Any) -> uuid.UUID:
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["status"], doc["engine"]) == ("running", "temporal")
    return uuid.UUID(doc["run_id"])


async def test_the_demo_agent_runs_end_to_end_on_temporal(
    tmp_path: Path,
    env: dict[str, str],
    workers: TemporalWorkers,
    store: RunStore,
    tenant: uuid.UUID,
    temporal_client: Client,
) -> None:
    hango = cli(tmp_path, env)
    await workers.ready(workers.start("--task-queue", env["HANGO_TEMPORAL_TASK_QUEUE"]))
    question = "What are the open risks in this project?"
    run_id = submitted(
        hango.run("submit", "--engine", "temporal", "--agent", str(DEMO), question, "--json")
    )
    await wait_status(store, tenant, run_id, RunStatus.COMPLETED)

    # The same run in a terminal: the same history, message for message.
    local = hango.run("run", "--agent", str(DEMO), question, "--json")
    assert local.returncode == 0, local.stderr
    on_temporal = await store.get_run(tenant, run_id)
    in_terminal = await store.get_run(tenant, uuid.UUID(json.loads(local.stdout)["run_id"]))
    a = await store.load_messages(tenant, on_temporal.session_id)
    b = await store.load_messages(tenant, in_terminal.session_id)
    assert len(a) == len(b) > 10
    assert a[1:] == b[1:]  # every message and tool result, after the same prompt
    assert on_temporal.config["stack"] == in_terminal.config["stack"]  # recorded the same way

    shown = hango.run("runs", "show", str(run_id), "--json")
    doc = json.loads(shown.stdout)
    assert (doc["status"], doc["engine"]) == ("completed", "temporal")
    assert doc["engine_run"] == {"workflow_id": f"hango-run-{run_id}"}
    assert (
        json.loads(hango.run("runs", "show", str(in_terminal.id), "--json").stdout)["engine"]
        == "hango"
    )
    assert f"workflow_id hango-run-{run_id}" in hango.run("runs", "show", str(run_id)).stdout

    # The workflow only sequenced steps: one activity of the seam per model turn and per tool
    # call; the last model turn's step reports the end.
    client = temporal_client
    handle = client.get_workflow_handle(workflow_id(str(run_id)))
    result = await handle.result()  # the workflow ends just after the run's last save
    assert result["status"] == "completed"
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    steps = sum(1 + len(m.tool_uses) for m in a if m.role == "assistant")
    assert scheduled == ["hango.step"] * steps, (len(scheduled), steps)


async def test_an_approval_waits_in_the_workflow_and_the_update_decides_it(
    tmp_path: Path,
    env: dict[str, str],
    workers: TemporalWorkers,
    store: RunStore,
    tenant: uuid.UUID,
    temporal_client: Client,
) -> None:
    env["APPROVAL_DEMO_WORKSPACE"] = str(tmp_path / "workspace")
    workers.env["APPROVAL_DEMO_WORKSPACE"] = env["APPROVAL_DEMO_WORKSPACE"]
    hango = cli(tmp_path, env)
    await workers.ready(workers.start("--task-queue", env["HANGO_TEMPORAL_TASK_QUEUE"]))
    run_id = submitted(
        hango.run("submit", "--engine", "temporal", "--agent", str(APPROVAL), "Add it.", "--json")
    )
    await wait_status(store, tenant, run_id, RunStatus.SUSPENDED)
    shown = json.loads(hango.run("runs", "show", str(run_id), "--json").stdout)
    (pending,) = shown["pending"]
    call = pending["tool_call_id"]
    assert pending["tool"] == "edit_file"

    # Waiting holds no worker slot: no activity is running or scheduled.
    client = temporal_client
    handle = client.get_workflow_handle(workflow_id(str(run_id)))
    description = await handle.describe()
    assert description.status is WorkflowExecutionStatus.RUNNING
    assert len(description.raw_description.pending_activities) == 0

    # A decision for a call that waits for none is refused, in one line; nothing changes.
    wrong = hango.run("resume", str(run_id), "--approve", "toolu_nope")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == [
        f"error: temporal: decision refused: tool call 'toolu_nope' has no pending action "
        f"(waiting for: {call})"
    ]
    assert (await store.get_run(tenant, run_id)).status is RunStatus.SUSPENDED

    done = hango.run("resume", str(run_id), "--approve", call)
    assert done.returncode == 0, done.stderr
    assert f"{call}: decision recorded" in done.stderr
    await wait_status(store, tenant, run_id, RunStatus.COMPLETED)
    changelog = (tmp_path / "workspace" / "CHANGELOG.md").read_text()
    assert changelog.count("Tool calls can wait for a person's approval") == 1  # edited once

    async def workflow_done() -> bool:  # the workflow ends just after the run's last save
        return (await handle.describe()).status is WorkflowExecutionStatus.COMPLETED

    await until(workflow_done, within=30)

    # The workflow is over: a decision now says the run is done, in one line.
    late = hango.run("resume", str(run_id), "--approve", call)
    assert late.returncode == 2
    assert late.stderr.strip().splitlines() == [
        f"error: run {run_id} is completed on engine temporal, not waiting for a decision"
    ]


SLOW_TOOLS = '''
import time
from pathlib import Path

from hango import ToolContext, tool


@tool
def wait(seconds: float, ctx: ToolContext) -> str:
    """Wait.

    Args:
        seconds: how long.
    """
    (Path(__file__).parent / "started").write_text(str(ctx.state.run_id))
    time.sleep(seconds)
    return "waited"


TOOLS = [wait]
'''


async def test_cancelling_a_run_cancels_its_workflow_and_saves_the_run_cancelled(
    tmp_path: Path,
    env: dict[str, str],
    workers: TemporalWorkers,
    store: RunStore,
    tenant: uuid.UUID,
    temporal_client: Client,
) -> None:
    agent = write_agent(
        tmp_path / "agent",
        agent='name = "slow"\nmodel = "scripted:script.toml"\ntools = ["slowtools:TOOLS"]\n',
        script='[[turns]]\n[[turns.tool_calls]]\nname = "wait"\ninput = { seconds = 60 }\n'
        '[[turns]]\ntext = "done"\n',
        tools={"slowtools": SLOW_TOOLS},
    )
    hango = cli(tmp_path, env)
    await workers.ready(workers.start("--task-queue", env["HANGO_TEMPORAL_TASK_QUEUE"]))
    run_id = submitted(
        hango.run("submit", "--engine", "temporal", "--agent", str(agent), "go", "--json")
    )

    async def started() -> bool:
        return (tmp_path / "agent" / "started").exists()

    await until(started)
    done = hango.run("temporal", "cancel", str(run_id))
    assert done.returncode == 0, done.stderr
    await wait_status(store, tenant, run_id, RunStatus.CANCELLED, within=30)
    client = temporal_client
    handle = client.get_workflow_handle(workflow_id(str(run_id)))

    async def cancelled() -> bool:
        return (await handle.describe()).status is WorkflowExecutionStatus.CANCELED

    await until(cancelled, within=30)


async def test_an_unknown_engine_is_one_line_and_records_nothing(
    tmp_path: Path, env: dict[str, str], store: RunStore, tenant: uuid.UUID
) -> None:
    done = cli(tmp_path, env).run("submit", "--engine", "temporall", "--agent", str(DEMO), "hi")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: unknown engine 'temporall' (--engine): installed: hango, temporal"
    ]
    assert await store.list_runs(tenant) == []


async def test_an_unreachable_server_is_one_line_and_the_run_is_failed_with_the_reason(
    tmp_path: Path, env: dict[str, str], store: RunStore, tenant: uuid.UUID
) -> None:
    env["HANGO_TEMPORAL_ADDRESS"] = f"127.0.0.1:{free_port()}"  # nobody listens there
    done = cli(tmp_path, env).run("submit", "--engine", "temporal", "--agent", str(DEMO), "hi")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        f"error: temporal: cannot reach the server at {env['HANGO_TEMPORAL_ADDRESS']} "
        "(HANGO_TEMPORAL_ADDRESS)"
    )
    (run,) = await store.list_runs(tenant)
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "cannot reach the server" in run.error


async def test_a_bad_setting_is_one_line_naming_the_variable(
    tmp_path: Path, env: dict[str, str], store: RunStore, tenant: uuid.UUID
) -> None:
    env["HANGO_TEMPORAL_HEARTBEAT_SECONDS"] = "soon"
    done = cli(tmp_path, env).run("submit", "--engine", "temporal", "--agent", str(DEMO), "hi")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: HANGO_TEMPORAL_HEARTBEAT_SECONDS must be a number, got 'soon'"
    ]


async def test_a_wait_past_the_decision_timeout_gets_the_configured_decision(
    tmp_path: Path,
    env: dict[str, str],
    workers: TemporalWorkers,
    store: RunStore,
    tenant: uuid.UUID,
) -> None:
    env["APPROVAL_DEMO_WORKSPACE"] = str(tmp_path / "workspace")
    workers.env["APPROVAL_DEMO_WORKSPACE"] = env["APPROVAL_DEMO_WORKSPACE"]
    env["HANGO_TEMPORAL_DECISION_SECONDS"] = "3"  # read by submit, carried by the workflow
    hango = cli(tmp_path, env)
    await workers.ready(workers.start("--task-queue", env["HANGO_TEMPORAL_TASK_QUEUE"]))
    run_id = submitted(
        hango.run("submit", "--engine", "temporal", "--agent", str(APPROVAL), "Add it.", "--json")
    )
    await wait_status(store, tenant, run_id, RunStatus.SUSPENDED)
    await wait_status(store, tenant, run_id, RunStatus.COMPLETED)
    run = await store.get_run(tenant, run_id)
    history = await store.load_messages(tenant, run.session_id)
    (edit,) = [u for m in history for u in m.tool_uses if u.name == "edit_file"]
    (result,) = [r for m in history for r in m.tool_results if r.tool_use_id == edit.id]
    assert result.is_error and "no decision within 3 s" in str(result.content)
    changelog = (tmp_path / "workspace" / "CHANGELOG.md").read_text()
    assert "Tool calls can wait for a person's approval" not in changelog  # rejected: not run
