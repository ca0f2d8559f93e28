"""The kill matrix: a process holding an approval-gated run is killed with SIGKILL at each
boundary, on SQLite and PostgreSQL, in a single-call and a parallel batch; the run is then
carried to its end by another process (this one). Every tool body runs at most once unless a
person decides again, the history is provider-valid after every resume, and no decision is
lost.

Boundaries (``KILL_AT`` in the killed process):

- ``before-save``: a call has paused, the pause is on its way to the loop, nothing is saved;
- ``after-save``: the run is saved as suspended with its pending actions;
- ``after-decide``: a person's decisions are saved, the resumed pass has not started;
- ``in-tool``: an approved call's tool has done its work and the process dies before the
  result is saved.

The tools append one line per execution to a file beside them, so the counts are the tools'
own. The killed process waits at its boundary (writing ``reached``) until it is killed; at
``in-tool`` the tool kills its own process.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from hango import (
    AgentDefinition,
    Decision,
    DecisionRefused,
    Harness,
    RunFinished,
    RunStatus,
    open_store,
)
from hango.agent.state import load_state
from hango.store import RunStore

pytestmark = pytest.mark.anyio

TOOLS = '''
"""Tools and the kill-point middleware of the kill matrix."""

import os
import signal
import time
from pathlib import Path

from hango import tool
from hango.middleware import Interrupt

HERE = Path(__file__).parent


def note(line: str) -> None:
    with (HERE / "executions.log").open("a") as f:
        f.write(line + "\\n")


def wait_to_be_killed(point: str) -> None:
    (HERE / "reached").write_text(point)
    while True:
        time.sleep(0.05)


@tool
def free(label: str) -> str:
    """Not gated."""
    note(f"free {label}")
    return f"free {label} done"


@tool
def gated(label: str) -> str:
    """Gated by approval."""
    note(f"gated {label}")
    if os.environ.get("KILL_AT") == "in-tool":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"gated {label} done"


class KillPoint:
    """Outside approval: holds a pause on its way to the loop when KILL_AT=before-save."""

    name = "kill_point"

    async def wrap_tool_call(self, req, next):
        try:
            return await next(req)
        except Interrupt:
            if os.environ.get("KILL_AT") == "before-save" and not req.progress.probe:
                wait_to_be_killed("before-save")
            raise


TOOLS = [free, gated]
'''

DRIVER = '''
"""One step of a kill-matrix run, in its own process: start | resume RUN_ID DECISIONS."""

import importlib
import json
import os
import sys
import time
import uuid
from pathlib import Path

import anyio

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from hango import AgentDefinition, Decision, Harness, open_store

tools = importlib.import_module(os.environ["KILL_TOOLS"])


def pause_here(point: str) -> None:
    if os.environ.get("KILL_AT") == point:
        tools.wait_to_be_killed(point)


async def main() -> None:
    mode, url, tenant = sys.argv[1:4]
    async with await open_store(url) as store:
        h = Harness(store, tenant_id=uuid.UUID(tenant), middleware=[tools.KillPoint()])
        if mode == "start":
            run = await h.start(AgentDefinition.from_file(HERE / "agent.toml"), "go")
            (HERE / "run_id").write_text(str(run.id))
            await h.execute(run.id)
            pause_here("after-save")
        else:
            run_id = uuid.UUID(sys.argv[4])
            chosen = {k: Decision(**v) for k, v in json.loads(sys.argv[5]).items()}
            await h.decide(run_id, chosen, queue=False)
            pause_here("after-decide")
            await h.execute(run_id)


anyio.run(main)
'''

SINGLE = [{"name": "gated", "input": {"label": "A"}}]
PARALLEL = [
    {"name": "free", "input": {"label": "1"}},
    {"name": "gated", "input": {"label": "A"}},
    {"name": "free", "input": {"label": "2"}},
    {"name": "gated", "input": {"label": "B"}},
]
GATED_A = "toolu_scripted_0_0"  # in SINGLE
PAR_A, PAR_B = "toolu_scripted_0_1", "toolu_scripted_0_3"


#: Seconds after which the claim of a killed process (HANGO_RUN_LEASE_SECONDS=1) has lapsed.
CLAIM_LAPSES = 1.1


class Scenario:
    """The files of one test's agent, and its processes."""

    def __init__(self, root: Path, url: str, tenant: uuid.UUID, batch: list[dict[str, Any]]):
        self.root, self.url, self.tenant = root, url, tenant
        self.parallel = batch is PARALLEL
        # A module name of its own: this process imports the tools of every test.
        self.module = f"kill_tools_{uuid.uuid4().hex[:12]}"
        (root / f"{self.module}.py").write_text(TOOLS)
        (root / "driver.py").write_text(DRIVER)
        script = {"turns": [{"tool_calls": batch}, {"text": "done"}]}
        (root / "script.json").write_text(json.dumps(script))
        (root / "agent.toml").write_text(
            f'name = "kill-matrix"\nmodel = "scripted:script.json"\n'
            f'tools = ["{self.module}:TOOLS"]\nmax_turns = 4\n'
            # One at a time: the kill points sit between calls of the batch (a kill in a
            # concurrent batch is core/tests/test_concurrent_tools.py's).
            "max_tool_concurrency = 1\n"
            "[options.human_in_the_loop]\ninterrupt_on = { gated = true }\n"
        )

    def process(self, kill_at: str | None, *args: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
        # A short claim: the next executor may take a killed process's run over once it lapses.
        env |= {"KILL_TOOLS": self.module, "PYTHONUNBUFFERED": "1", "HANGO_RUN_LEASE_SECONDS": "1"}
        if kill_at:
            env["KILL_AT"] = kill_at
        return subprocess.Popen(
            [sys.executable, str(self.root / "driver.py"), *args[:1], self.url, str(self.tenant),
             *args[1:]],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def kill_when_reached(self, proc: subprocess.Popen[bytes], point: str) -> None:
        reached = self.root / "reached"
        deadline = time.monotonic() + 60
        # Until its text is there too: the file exists a moment before it is written.
        while not reached.exists() or not reached.read_text():
            if proc.poll() is not None:
                out = proc.communicate()[0].decode()
                pytest.fail(f"the process ended before {point}: {proc.returncode}\n{out}")
            assert time.monotonic() < deadline, f"{point} not reached in time"
            time.sleep(0.02)
        assert reached.read_text() == point
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        reached.unlink()
        time.sleep(CLAIM_LAPSES)

    def finish(self, proc: subprocess.Popen[bytes]) -> None:
        out = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode in (0, -signal.SIGKILL), out

    def start(self, kill_at: str | None = None) -> uuid.UUID:
        proc = self.process(kill_at, "start")
        if kill_at in ("before-save", "after-save"):
            self.kill_when_reached(proc, kill_at)
        else:
            self.finish(proc)
        return uuid.UUID((self.root / "run_id").read_text())

    def resume(self, run_id: uuid.UUID, decisions: dict[str, Decision], kill_at: str) -> None:
        chosen = {k: {"type": d.type, "message": d.message} for k, d in decisions.items()}
        proc = self.process(kill_at, "resume", str(run_id), json.dumps(chosen))
        if kill_at == "after-decide":
            self.kill_when_reached(proc, kill_at)
        else:
            self.finish(proc)
            assert proc.returncode == -signal.SIGKILL  # in-tool: the tool killed it
            time.sleep(CLAIM_LAPSES)

    def executions(self) -> collections.Counter[str]:
        log = self.root / "executions.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return collections.Counter(lines)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[RunStore]:
    async with await open_store(database_url) as s:
        yield s


@pytest.fixture(params=["single", "parallel"])
def scenario(
    request: pytest.FixtureRequest, tmp_path: Path, database_url: str, tenant: uuid.UUID
) -> Scenario:
    return Scenario(
        tmp_path, database_url, tenant, SINGLE if request.param == "single" else PARALLEL
    )


class Carry:
    """This process: continues the run as any other process would."""

    def __init__(self, store: RunStore, s: Scenario, assert_valid: Callable[..., None]) -> None:
        sys.path.insert(0, str(s.root))
        tools = __import__(s.module)
        self.store, self.s, self.valid = store, s, assert_valid
        self.harness = Harness(store, tenant_id=s.tenant, middleware=[tools.KillPoint()])
        self.agent = AgentDefinition.from_file(s.root / "agent.toml")

    async def check(self, run_id: uuid.UUID) -> None:
        run = await self.store.get_run(self.s.tenant, run_id)
        messages = await self.store.load_messages(self.s.tenant, run.session_id)
        self.valid(messages, open_tail=run.status is not RunStatus.COMPLETED)

    async def execute(self, run_id: uuid.UUID) -> RunFinished:
        finished = await self.harness.execute(run_id)
        await self.check(run_id)
        return finished

    async def resume(self, run_id: uuid.UUID, decisions: dict[str, Decision]) -> RunFinished:
        finished = await self.harness.resume(run_id, decisions)
        await self.check(run_id)
        return finished

    async def pending(self, run_id: uuid.UUID) -> list[tuple[str, bool, str | None]]:
        run = await self.store.get_run(self.s.tenant, run_id)
        book = load_state(run.state).interrupts
        return [
            (p.tool_call_id, p.outcome_unknown, p.decision.type if p.decision else None)
            for p in book.pending
        ]


@pytest.fixture
def carry(store: RunStore, scenario: Scenario, assert_valid: Callable[..., None]) -> Carry:
    return Carry(store, scenario, assert_valid)


async def test_killed_before_the_pending_action_is_saved(scenario: Scenario, carry: Carry) -> None:
    run_id = scenario.start("before-save")
    run = await carry.store.get_run(scenario.tenant, run_id)
    assert run.status is RunStatus.RUNNING and load_state(run.state).interrupts.pending == []
    await carry.check(run_id)
    # Nothing was asked or decided. Resumed, the unanswered calls are answered as interrupted
    # (hango-repair) and the model goes on; no gated call ever ran.
    done = await carry.execute(run_id)
    assert done.status is RunStatus.COMPLETED
    ran = scenario.executions()
    assert not any(k.startswith("gated") for k in ran)
    assert all(n == 1 for n in ran.values())


async def test_killed_after_the_pending_action_is_saved(scenario: Scenario, carry: Carry) -> None:
    run_id = scenario.start("after-save")
    run = await carry.store.get_run(scenario.tenant, run_id)
    assert run.status is RunStatus.SUSPENDED
    await carry.check(run_id)
    parallel = scenario.parallel
    if parallel:
        assert await carry.pending(run_id) == [(PAR_A, False, None), (PAR_B, False, None)]
        decisions = {PAR_A: Decision.approve(), PAR_B: Decision.reject("no")}
    else:
        decisions = {GATED_A: Decision.approve()}
    done = await carry.resume(run_id, decisions)
    assert done.status is RunStatus.COMPLETED
    expected = {"gated A": 1} | ({"free 1": 1, "free 2": 1} if parallel else {})
    assert scenario.executions() == expected


async def test_killed_after_the_decisions_are_saved(scenario: Scenario, carry: Carry) -> None:
    run_id = scenario.start()
    parallel = scenario.parallel
    decisions = (
        {PAR_A: Decision.approve(), PAR_B: Decision.approve()}
        if parallel
        else {GATED_A: Decision.approve()}
    )
    scenario.resume(run_id, decisions, "after-decide")
    # The decisions are saved: the run goes on without being asked anything.
    assert [d for _, _, d in await carry.pending(run_id)] == ["approve"] * len(decisions)
    done = await carry.execute(run_id)
    assert done.status is RunStatus.COMPLETED
    expected = {"gated A": 1} | ({"free 1": 1, "free 2": 1, "gated B": 1} if parallel else {})
    assert scenario.executions() == expected


async def test_killed_after_an_approved_tool_ran_before_its_result_was_saved(
    scenario: Scenario, carry: Carry
) -> None:
    run_id = scenario.start()
    parallel = scenario.parallel
    first = PAR_A if parallel else GATED_A
    decisions = {first: Decision.approve()}
    if parallel:
        decisions[PAR_B] = Decision.approve()
    scenario.resume(run_id, decisions, "in-tool")
    assert scenario.executions()["gated A"] == 1
    await carry.check(run_id)

    # The approval was used by the attempt that died: the run asks again, saying the outcome
    # is unknown; the other decision is kept.
    asked = await carry.execute(run_id)
    assert asked.status is RunStatus.SUSPENDED
    assert [(p.tool_call_id, p.outcome_unknown) for p in asked.pending] == [(first, True)]
    if parallel:
        assert (PAR_B, False, "approve") in await carry.pending(run_id)
    assert scenario.executions()["gated A"] == 1

    # The question is asked anew: the earlier approval sent again by call id (a retried
    # request) is refused, not taken as an answer; the new one is decided by its id.
    (again,) = asked.pending
    with pytest.raises(DecisionRefused, match=f"name the question: --approve {again.id}"):
        await carry.resume(run_id, {first: Decision.approve()})
    assert scenario.executions()["gated A"] == 1
    done = await carry.resume(run_id, {again.id: Decision.reject("it may have run already")})
    assert done.status is RunStatus.COMPLETED
    expected = {"gated A": 1} | ({"free 1": 1, "free 2": 1, "gated B": 1} if parallel else {})
    assert scenario.executions() == expected
