"""The kill matrix of a nested approval: a lead delegates to a researcher whose write is gated;
the process holding them is killed with SIGKILL at each boundary, on SQLite and PostgreSQL, and
another process (this one) carries both runs to their end. Every tool body of the lead and of
the child runs at most once, unless a person decides again; every history is provider-valid;
no decision is lost; the lead has one child run, never a second delegation.

The lead's batch is ``look before``, ``task`` (the researcher), ``look after``, one call at a
time; the researcher's is ``look c0`` then the gated ``write notes``. Boundaries (``KILL_AT``
in the killed process):

- ``child-started``: the child runs, before it suspends (its ``look c0`` is about to start);
  resumed, its cut batch is answered as interrupted (hango-repair) and it reports;
- ``child-suspended``: the child is saved suspended, the lead not yet;
- ``after-save``: both are saved suspended, the child's question listed on the lead;
- ``after-decide``: the person's approval of the child's call is saved, nothing resumed;
- ``in-tool``: the approved write has run, its process dies before the result is saved;
- ``child-completed``: in the lead's resume, the child is saved completed with its report,
  the lead's ``task`` result is not.

The killed process waits at its boundary (writing ``reached``) until it is killed, through a
store that wraps the real one (the boundaries between two saves); at ``child-started`` and
``in-tool`` the tool kills its own process.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from hango import Decision, Harness, RunFinished, RunStatus, open_store
from hango.store import RunStore
from hango.testing import assert_valid_history, kill_when

pytestmark = pytest.mark.anyio

TOOLS = '''
"""Tools of the nested kill matrix: each execution is one line of executions.log."""

import os
import signal
import time
from pathlib import Path

from hango import tool

HERE = Path(__file__).parent


def note(line: str) -> None:
    with (HERE / "executions.log").open("a") as f:
        f.write(line + "\\n")


def wait_to_be_killed(point: str) -> None:
    (HERE / "reached").write_text(point)
    while True:
        time.sleep(0.05)


@tool
def look(label: str) -> str:
    """Look something up."""
    if label == "c0" and os.environ.get("KILL_AT") == "child-started":
        os.kill(os.getpid(), signal.SIGKILL)  # before its body: it has not run
    note(f"look {label}")
    return f"looked up {label}"


@tool(idempotent=False)
def write(label: str) -> str:
    """Write something (must happen once)."""
    note(f"write {label}")
    if os.environ.get("KILL_AT") == "in-tool":
        os.kill(os.getpid(), signal.SIGKILL)  # after its body: it has run
    return f"wrote {label}"


TOOLS = [look, write]
'''

DRIVER = '''
"""One step of a nested kill-matrix run, in its own process: start | resume LEAD CALL."""

import importlib
import os
import sys
import uuid
from pathlib import Path

import anyio

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from hango import AgentDefinition, Decision, Harness, RunStatus, open_store

tools = importlib.import_module(os.environ["KILL_TOOLS"])
POINT = os.environ.get("KILL_AT")


class KillingStore:
    """The real store, except that a save of the child with the status of the boundary is
    the last thing this process does."""

    def __init__(self, inner, lead):
        self.inner, self.lead = inner, lead

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def save_run(self, save):
        written = await self.inner.save_run(save)
        if save.run_id != self.lead:
            if (POINT, save.status) in (
                ("child-suspended", RunStatus.SUSPENDED),
                ("child-completed", RunStatus.COMPLETED),
            ):
                tools.wait_to_be_killed(POINT)
        return written


async def main() -> None:
    mode, url, tenant = sys.argv[1:4]
    async with await open_store(url) as real:
        store = KillingStore(real, None)
        h = Harness(store, tenant_id=uuid.UUID(tenant))
        if mode == "start":
            run = await h.start(AgentDefinition.from_file(HERE / "lead.toml"), "Go.")
            (HERE / "run_id").write_text(str(run.id))
            store.lead = run.id
            await h.execute(run.id)
            if POINT == "after-save":
                tools.wait_to_be_killed(POINT)
        else:
            store.lead = uuid.UUID(sys.argv[4])
            await h.decide(store.lead, {sys.argv[5]: Decision.approve()}, queue=False)
            if POINT == "after-decide":
                tools.wait_to_be_killed(POINT)
            await h.execute(store.lead)


anyio.run(main)
'''

LEAD = """
name = "lead"
model = "scripted:lead.json"
tools = ["{tools}:TOOLS"]
max_turns = 4
max_tool_concurrency = 1
[options.subagent]
[[options.subagent.agents]]
name = "researcher"
description = "Finds facts and writes them down."
agent = "researcher.toml"
"""

RESEARCHER = """
name = "researcher"
model = "scripted:researcher.json"
tools = ["{tools}:TOOLS"]
max_turns = 4
max_tool_concurrency = 1
[options.human_in_the_loop]
interrupt_on = {{ write = true }}
"""


def _call(call_id: str, name: str, label: str) -> dict[str, Any]:
    return {"id": call_id, "name": name, "input": {"label": label}}


LEAD_TURNS = [
    {
        "tool_calls": [
            _call("p1", "look", "before"),
            {
                "id": "t1",
                "name": "task",
                "input": {"description": "Write the notes.", "subagent_type": "researcher"},
            },
            _call("p2", "look", "after"),
        ]
    },
    {"text": "All done."},
]
REPORT = "REPORT: the notes are written."
RESEARCHER_TURNS = [
    {"tool_calls": [_call("c0", "look", "c0"), _call("r1", "write", "notes")]},
    {"text": REPORT},
]
#: Every body once: what each finished scenario must show.
ONCE = {"look before": 1, "look c0": 1, "write notes": 1, "look after": 1}

#: Seconds after which a killed process's claim (HANGO_RUN_LEASE_SECONDS=1) has lapsed.
CLAIM_LAPSES = 1.1


class Team:
    """The files of one test's lead and researcher, and its processes."""

    def __init__(self, root: Path, url: str, tenant: uuid.UUID) -> None:
        self.root, self.url, self.tenant = root, url, tenant
        # A module name of its own: this process imports the tools of every test.
        self.module = f"nested_kill_tools_{uuid.uuid4().hex[:12]}"
        (root / f"{self.module}.py").write_text(TOOLS)
        (root / "driver.py").write_text(DRIVER)
        (root / "lead.toml").write_text(LEAD.format(tools=self.module))
        (root / "researcher.toml").write_text(RESEARCHER.format(tools=self.module))
        (root / "lead.json").write_text(json.dumps({"turns": LEAD_TURNS}))
        (root / "researcher.json").write_text(json.dumps({"turns": RESEARCHER_TURNS}))

    def process(self, kill_at: str | None, *args: str) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
        env |= {"KILL_TOOLS": self.module, "PYTHONUNBUFFERED": "1", "HANGO_RUN_LEASE_SECONDS": "1"}
        if kill_at:
            env["KILL_AT"] = kill_at
        return subprocess.Popen(
            [sys.executable, str(self.root / "driver.py"), args[0], self.url, str(self.tenant),
             *args[1:]],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    async def killed_at(self, proc: subprocess.Popen[str], point: str) -> None:
        """Wait for ``proc`` to reach ``point`` (or to kill itself there), then SIGKILL it."""
        if point in ("child-started", "in-tool"):
            out = proc.communicate(timeout=60)[0]
            assert proc.returncode == -signal.SIGKILL, out
        else:
            await kill_when(proc, self.root / "reached", point, within=60)
        await anyio.sleep(CLAIM_LAPSES)

    async def start(self, kill_at: str | None = None) -> uuid.UUID:
        proc = self.process(kill_at, "start")
        if kill_at is None:
            out = proc.communicate(timeout=60)[0]
            assert proc.returncode == 0, out
        else:
            await self.killed_at(proc, kill_at)
        return uuid.UUID((self.root / "run_id").read_text())

    async def approve(self, lead: uuid.UUID, call_id: str, kill_at: str) -> None:
        await self.killed_at(self.process(kill_at, "resume", str(lead), call_id), kill_at)

    def executions(self) -> collections.Counter[str]:
        log = self.root / "executions.log"
        return collections.Counter(log.read_text().splitlines() if log.exists() else [])


class Carry:
    """This process: continues the lead (and through it the child) as any other would."""

    def __init__(self, store: RunStore, team: Team) -> None:
        self.store, self.team = store, team
        self.harness = Harness(store, tenant_id=team.tenant)

    async def child(self, lead: uuid.UUID) -> Any:
        (child,) = await self.store.child_runs(self.team.tenant, lead)  # never a second one
        return child

    async def check(self, lead: uuid.UUID) -> None:
        for run_id in (lead, (await self.child(lead)).id):
            run = await self.store.get_run(self.team.tenant, run_id)
            messages = await self.store.load_messages(self.team.tenant, run.session_id)
            assert_valid_history(messages, open_tail=run.status is not RunStatus.COMPLETED)

    async def execute(self, lead: uuid.UUID) -> RunFinished:
        finished = await self.harness.execute(lead)
        await self.check(lead)
        return finished

    async def resume(self, lead: uuid.UUID, decisions: dict[str, Decision]) -> RunFinished:
        finished = await self.harness.resume(lead, decisions)
        await self.check(lead)
        return finished

    async def done(
        self, lead: uuid.UUID, finished: RunFinished, bodies: dict[str, int] = ONCE
    ) -> None:
        """Both runs completed, the child's report the lead's task result, each of ``bodies``
        run once."""
        assert finished.status is RunStatus.COMPLETED, finished.error
        child = await self.child(lead)
        assert child.status is RunStatus.COMPLETED
        record = await self.store.get_run(self.team.tenant, lead)
        history = await self.store.load_messages(self.team.tenant, record.session_id)
        answers = {b.tool_use_id: b.content for m in history for b in m.tool_results}
        assert answers["t1"] == REPORT
        assert sum(1 for m in history for u in m.tool_uses if u.name == "task") == 1
        assert self.team.executions() == bodies


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg's pool


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[RunStore]:
    async with await open_store(database_url) as s:
        yield s


@pytest.fixture
def team(tmp_path: Path, database_url: str) -> Team:
    # A tenant of its own: the PostgreSQL database is shared by the session's tests.
    return Team(tmp_path, database_url, uuid.uuid4())


@pytest.fixture
def carry(store: RunStore, team: Team) -> Carry:
    return Carry(store, team)


async def test_killed_in_the_child_before_it_suspended(team: Team, carry: Carry) -> None:
    lead = await team.start("child-started")
    assert (await carry.store.get_run(team.tenant, lead)).status is RunStatus.RUNNING
    assert team.executions() == {"look before": 1}  # the lead's sibling before the task
    # Resumed elsewhere: the same child goes on from its checkpoint, where its batch was
    # cut short; its calls are answered as interrupted (hango-repair), as in any run, and it
    # reports. Nothing gated ran unasked; the lead's task call is answered by that child, its
    # unstarted ``look after`` as interrupted.
    finished = await carry.execute(lead)
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert team.executions() == {"look before": 1}
    child = await carry.child(lead)
    messages = await carry.store.load_messages(team.tenant, child.session_id)
    answers = {b.tool_use_id: b for m in messages for b in m.tool_results}
    assert answers["c0"].is_error and answers["r1"].is_error
    record = await carry.store.get_run(team.tenant, lead)
    history = await carry.store.load_messages(team.tenant, record.session_id)
    assert {b.tool_use_id: b.content for m in history for b in m.tool_results}["t1"] == REPORT


async def test_killed_after_the_child_suspended_before_the_lead_did(
    team: Team, carry: Carry
) -> None:
    lead = await team.start("child-suspended")
    assert (await carry.store.get_run(team.tenant, lead)).status is RunStatus.RUNNING
    assert (await carry.child(lead)).status is RunStatus.SUSPENDED
    assert team.executions() == {"look before": 1, "look c0": 1}
    # Resumed elsewhere: the lead finds its child waiting and asks on its behalf.
    asked = await carry.execute(lead)
    assert asked.status is RunStatus.SUSPENDED, asked.error
    (question,) = asked.pending
    assert question.tool_call_id == "t1"
    assert [p["tool_call_id"] for p in question.request["pending"]] == ["r1"]
    assert team.executions() == {"look before": 1, "look c0": 1}
    # The lead's batch was cut short too: its unstarted ``look after`` is answered as
    # interrupted (hango-repair), its task call is the child's.
    finished = await carry.resume(lead, {"r1": Decision.approve()})
    await carry.done(lead, finished, {"look before": 1, "look c0": 1, "write notes": 1})


async def test_killed_after_both_were_saved_suspended(team: Team, carry: Carry) -> None:
    lead = await team.start("after-save")
    assert (await carry.child(lead)).status is RunStatus.SUSPENDED
    assert (await carry.store.get_run(team.tenant, lead)).status is RunStatus.SUSPENDED
    await carry.check(lead)
    await carry.done(lead, await carry.resume(lead, {"r1": Decision.approve()}))


async def test_killed_after_the_approval_was_saved(team: Team, carry: Carry) -> None:
    lead = await team.start()
    await team.approve(lead, "r1", "after-decide")
    assert "write notes" not in team.executions()
    # The approval is kept: the lead and its child go on without asking anyone.
    await carry.done(lead, await carry.execute(lead))


async def test_killed_after_the_approved_write_ran_before_its_result_was_saved(
    team: Team, carry: Carry
) -> None:
    lead = await team.start()
    await team.approve(lead, "r1", "in-tool")
    assert team.executions()["write notes"] == 1
    # The approval was used by the attempt that died: the child asks again, saying the
    # outcome is unknown, and the lead waits with it; the write is not run again.
    asked = await carry.execute(lead)
    assert asked.status is RunStatus.SUSPENDED, asked.error
    (question,) = asked.pending
    (again,) = question.request["pending"]
    assert again["tool_call_id"] == "r1" and again["id"] != "r1"
    assert team.executions()["write notes"] == 1
    finished = await carry.resume(lead, {again["id"]: Decision.respond("It was written.")})
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert team.executions() == ONCE
    child = await carry.child(lead)
    messages = await carry.store.load_messages(team.tenant, child.session_id)
    answers = {b.tool_use_id: b.content for m in messages for b in m.tool_results}
    assert answers["r1"] == "It was written."


async def test_killed_after_the_child_completed_before_the_lead_saved_its_report(
    team: Team, carry: Carry
) -> None:
    lead = await team.start()
    await team.approve(lead, "r1", "child-completed")
    child = await carry.child(lead)
    assert child.status is RunStatus.COMPLETED
    # The lead goes on from the child's stored report: the child is not run again.
    await carry.done(lead, await carry.execute(lead))
    assert (await carry.child(lead)).version == child.version
