"""Approval with queue workers, on SQLite and PostgreSQL: a decided run (``Harness.decide``,
or ``hango resume --approve`` for a submitted run) goes back on the queue and exactly one of
two racing workers continues it; approval cycles are not failed attempts; a suspended run
keeps its session busy."""

from __future__ import annotations

import collections
import functools
import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from hango import AgentDefinition, Decision, Harness, Message, RunStatus, open_store
from hango.run import Worker
from hango.store import RunStore, SessionBusy

pytestmark = pytest.mark.anyio

TOOLS = '''
from pathlib import Path

from hango import tool

HERE = Path(__file__).parent


@tool
def deploy(env: str) -> str:
    """Deploy (gated)."""
    with (HERE / "executions.log").open("a") as f:
        f.write(f"deploy {env}\\n")
    return f"deployed to {env}"


TOOLS = [deploy]
'''


def make_agent(root: Path, turns: int) -> AgentDefinition:
    module = f"worker_tools_{uuid.uuid4().hex[:12]}"  # this process imports every test's tools
    (root / f"{module}.py").write_text(TOOLS)
    script = "".join(
        f'[[turns]]\n[[turns.tool_calls]]\nname = "deploy"\ninput = {{ env = "e{i}" }}\n'
        for i in range(turns)
    )
    (root / "script.toml").write_text(script + '[[turns]]\ntext = "done"\n')
    (root / "agent.toml").write_text(
        f'name = "workers"\nmodel = "scripted:script.toml"\ntools = ["{module}:TOOLS"]\n'
        "[options.human_in_the_loop]\ninterrupt_on = { deploy = true }\n"
    )
    sys.path.insert(0, str(root))
    return AgentDefinition.from_file(root / "agent.toml")


async def wait_for(
    store: RunStore, tenant: uuid.UUID, run_id: uuid.UUID, status: RunStatus
) -> None:
    with anyio.fail_after(30):
        while True:
            run = await store.get_run(tenant, run_id)
            # At rest and released: a worker saves the run, then gives up its lease (a lease
            # never given up times this out, so the release is still checked).
            if run.status is status and run.lease_owner is None:
                return
            await anyio.sleep(0.05)


def approve_by_command(
    url: str, tenant: uuid.UUID, run_id: uuid.UUID, call_id: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    env |= {"HANGO_TENANT": str(tenant), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "hango", "resume", str(run_id), "--approve", call_id, "--db", url],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def executions(root: Path) -> collections.Counter[str]:
    log = root / "executions.log"
    return collections.Counter(log.read_text().splitlines() if log.exists() else [])


async def test_two_workers_race_to_continue_a_decided_run_and_exactly_one_does(
    database_url: str, tenant: uuid.UUID, tmp_path: Path
) -> None:
    agent = make_agent(tmp_path, turns=2)
    async with (
        await open_store(database_url) as s1,
        await open_store(database_url) as s2,
        await open_store(database_url) as mine,
    ):
        # max_attempts=1: an approval cycle must not count as a failed attempt.
        workers = [
            Worker(Harness(s, tenant_id=tenant), name=f"w{i}", lease_seconds=10, max_attempts=1)
            for i, s in enumerate((s1, s2))
        ]
        me = Harness(mine, tenant_id=tenant)
        async with anyio.create_task_group() as tg:
            for w in workers:
                await tg.start(w.run)
            run = await me.start(agent, "go", status=RunStatus.QUEUED)
            for turn in range(2):
                await wait_for(mine, tenant, run.id, RunStatus.SUSPENDED)
                suspended = await mine.get_run(tenant, run.id)
                assert suspended.lease_owner is None and suspended.attempts == 0
                # A suspended run keeps its session busy: its history ends with a call that
                # waits for an answer.
                with pytest.raises(SessionBusy):
                    await mine.create_run(
                        tenant, run.agent_id, Message.user("again"), session_id=run.session_id
                    )
                # Both workers are idle when the decision puts the run back on the queue: by
                # Python, then by the command, which queues a submitted run.
                call_id = f"toolu_scripted_{turn}_0"
                if turn == 0:
                    done = await me.decide(run.id, {call_id: Decision.approve()})
                    assert done.run.status is RunStatus.QUEUED
                else:
                    decided = await anyio.to_thread.run_sync(
                        functools.partial(approve_by_command, database_url, tenant, run.id, call_id)
                    )
                    assert decided.returncode == 0, decided.stderr
                    assert f"run {run.id} is queued for a worker" in decided.stdout
            await wait_for(mine, tenant, run.id, RunStatus.COMPLETED)
            for w in workers:
                w.stop()
        final = await mine.get_run(tenant, run.id)
    assert final.error is None and final.attempts == 1
    assert executions(tmp_path) == {"deploy e0": 1, "deploy e1": 1}
