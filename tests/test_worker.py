"""``hango worker`` processes against SQLite and PostgreSQL: a worker killed with SIGKILL mid-run
is replaced and no completed call runs twice; SIGTERM hands the run back at a turn boundary;
two workers drain 200 queued demo runs, each exactly once.

The tools of the test agent append one line per execution to a file, so the counts are the
tools' own, not the harness's.
"""

from __future__ import annotations

import collections
import functools
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from hango import AgentDefinition, Harness, Message, RunStatus
from hango.store import RunStore, open_store
from hango.store.base import RunRecord

pytestmark = pytest.mark.anyio

HANGO = str(Path(sys.executable).with_name("hango"))
DEMO = Path(__file__).parents[1] / "examples" / "demo" / "agent.toml"
FINISHED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}

TOOLS = '''
"""Tools that log every execution (run id and label) to executions.log beside this file."""

import time
from pathlib import Path

from hango import ToolContext, tool

HERE = Path(__file__).parent


def note(ctx: ToolContext, line: str) -> None:
    with (HERE / "executions.log").open("a") as f:
        f.write(f"{ctx.state.run_id} {line}\\n")


@tool
def record(label: str, ctx: ToolContext) -> str:
    """Record one execution.

    Args:
        label: what to record.
    """
    note(ctx, label)
    return f"recorded {label}"


@tool
def block_once(label: str, ctx: ToolContext) -> str:
    """The first execution blocks until its process is killed; later ones return.

    Args:
        label: what to record.
    """
    note(ctx, label + ":start")
    mark = HERE / "blocked.mark"
    if not mark.exists():
        mark.touch()
        while True:
            time.sleep(0.05)
    return f"{label} done"


@tool
def slow(label: str, ctx: ToolContext) -> str:
    """Take a while.

    Args:
        label: what to record.
    """
    note(ctx, label + ":start")
    time.sleep(1.5)
    note(ctx, label + ":done")
    return f"{label} done"


TOOLS = [record, block_once, slow]
'''


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hango.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def tenant() -> uuid.UUID:
    return uuid.uuid4()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[RunStore]:
    async with await open_store(database_url) as s:
        yield s


class Workers:
    """``hango worker`` processes of one test, logging to files; all stopped at the end."""

    def __init__(self, tmp_path: Path, database_url: str, tenant: uuid.UUID) -> None:
        self.tmp_path = tmp_path
        self.env = {
            **os.environ,
            "HANGO_DATABASE_URL": database_url,
            "HANGO_TENANT": str(tenant),
        }
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.tmp_path / f"worker{len(self.procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [HANGO, "worker", *args], env=self.env, stderr=out, stdout=out, cwd=self.tmp_path
            )
        self.procs.append((proc, log))
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return next(log for p, log in self.procs if p is proc).read_text()

    async def ready(self, proc: subprocess.Popen[bytes]) -> None:
        with anyio.fail_after(30):
            while " ready: " not in self.log(proc):
                assert proc.poll() is None, self.log(proc)
                await anyio.sleep(0.05)

    async def exit_code(self, proc: subprocess.Popen[bytes]) -> int:
        return await anyio.to_thread.run_sync(functools.partial(proc.wait, timeout=30))

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(tmp_path: Path, database_url: str, tenant: uuid.UUID) -> Iterator[Workers]:
    w = Workers(tmp_path, database_url, tenant)
    try:
        yield w
    finally:
        w.stop_all()


def agent_dir(tmp_path: Path, turns: str) -> Path:
    folder = tmp_path / "agent"
    folder.mkdir()
    (folder / "worktools.py").write_text(TOOLS)
    (folder / "script.toml").write_text(turns)
    (folder / "agent.toml").write_text(
        'name = "worker-test"\nmodel = "scripted:script.toml"\ntools = ["worktools:TOOLS"]\n'
    )
    return folder


def executions(folder: Path) -> collections.Counter[str]:
    log = folder / "executions.log"
    return collections.Counter(log.read_text().splitlines() if log.exists() else [])


async def submit(store: RunStore, tenant: uuid.UUID, agent: Path, n: int = 1) -> list[RunRecord]:
    harness = Harness(store, tenant_id=tenant, settings={})
    definition = AgentDefinition.from_file(agent)
    return [await harness.start(definition, f"job {i}", status=RunStatus.QUEUED) for i in range(n)]


async def wait_until(
    store: RunStore, tenant: uuid.UUID, ids: Sequence[uuid.UUID], deadline: float = 60
) -> list[RunRecord]:
    with anyio.fail_after(deadline):
        while True:
            # One query per look (the tenant holds only this test's runs).
            by_id = {r.id: r for r in await store.list_runs(tenant, limit=len(ids) + 1)}
            runs = [by_id[i] for i in ids]
            if all(r.status in FINISHED for r in runs):
                return runs
            await anyio.sleep(0.2)


async def wait_for_line(folder: Path, line: str) -> None:
    with anyio.fail_after(30):
        while True:
            if line in executions(folder):
                return
            await anyio.sleep(0.05)


KILL_SCRIPT = """
[[turns]]
[[turns.tool_calls]]
name = "record"
input = { label = "a" }
[[turns.tool_calls]]
name = "record"
input = { label = "b" }
[[turns.tool_calls]]
name = "block_once"
input = { label = "c" }

[[turns]]
[[turns.tool_calls]]
name = "record"
input = { label = "d" }

[[turns]]
text = "done"
"""


async def test_a_killed_workers_run_is_reclaimed_and_no_completed_call_runs_twice(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    folder = agent_dir(tmp_path, KILL_SCRIPT)
    (run,) = await submit(store, tenant, folder / "agent.toml")
    first = workers.start("--lease", "2", "--name", "first")
    await wait_for_line(folder, f"{run.id} c:start")
    first.send_signal(signal.SIGKILL)
    assert await workers.exit_code(first) == -signal.SIGKILL

    held = await store.get_run(tenant, run.id)
    assert (held.status, held.lease_owner, held.attempts) == (RunStatus.RUNNING, "first", 1)
    second = workers.start("--lease", "2", "--name", "second")
    (done,) = await wait_until(store, tenant, [run.id])
    assert done.status is RunStatus.COMPLETED, done.error
    assert (done.attempts, done.lease_owner) == (2, None)  # reclaimed once, then released

    counts = executions(folder)
    # a and b finished before the kill and their results were saved: never run again. c never
    # finished: on resume it is run again or, with hango-repair installed, answered with an
    # error result by its before_run. d ran once, on the second worker.
    assert counts[f"{run.id} a"] == counts[f"{run.id} b"] == counts[f"{run.id} d"] == 1
    assert counts[f"{run.id} c:start"] in (1, 2)
    history = await store.load_messages(tenant, run.session_id)
    calls = [u.id for m in history for u in m.tool_uses]
    answered = [r.tool_use_id for m in history for r in m.tool_results]
    assert sorted(calls) == sorted(answered) and len(calls) == 4
    assert f"run {run.id} claimed (attempt 2)" in workers.log(second)

    second.send_signal(signal.SIGTERM)
    assert await workers.exit_code(second) == 0


TERM_SCRIPT = """
[[turns]]
[[turns.tool_calls]]
name = "slow"
input = { label = "s1" }

[[turns]]
[[turns.tool_calls]]
name = "record"
input = { label = "r1" }

[[turns]]
text = "done"
"""


async def test_sigterm_finishes_the_turn_saves_and_hands_the_run_back(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    folder = agent_dir(tmp_path, TERM_SCRIPT)
    run, waiting = await submit(store, tenant, folder / "agent.toml", n=2)
    first = workers.start("--concurrency", "1", "--lease", "30")
    await wait_for_line(folder, f"{run.id} s1:start")
    first.send_signal(signal.SIGTERM)
    assert await workers.exit_code(first) == 0

    back = await store.get_run(tenant, run.id)
    assert (back.status, back.lease_owner, back.lease_expires_at) == (RunStatus.QUEUED, None, None)
    history = await store.load_messages(tenant, run.session_id)
    assert [m.role for m in history] == ["user", "assistant", "user"]  # the turn, finished
    assert history[-1].tool_results[0].content == "s1 done"
    untouched = await store.get_run(tenant, waiting.id)
    assert (untouched.status, untouched.attempts) == (RunStatus.QUEUED, 0)  # stopped claiming
    assert "back to the queue" in workers.log(first)

    second = workers.start("--concurrency", "2")
    done = await wait_until(store, tenant, [run.id, waiting.id])
    assert [r.status for r in done] == [RunStatus.COMPLETED] * 2
    counts = executions(folder)
    for r in (run, waiting):
        assert [counts[f"{r.id} {x}"] for x in ("s1:start", "s1:done", "r1")] == [1, 1, 1]
    second.send_signal(signal.SIGTERM)
    assert await workers.exit_code(second) == 0


async def test_two_workers_complete_200_queued_demo_runs_exactly_once(
    store: RunStore, tenant: uuid.UUID, workers: Workers
) -> None:
    procs = [workers.start("--concurrency", "20", "--name", f"w{i}") for i in range(2)]
    for p in procs:
        await workers.ready(p)
    runs = await submit(store, tenant, DEMO, n=200)
    done = await wait_until(store, tenant, [r.id for r in runs], deadline=240)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    assert [await workers.exit_code(p) for p in procs] == [0, 0]

    assert {r.status for r in done} == {RunStatus.COMPLETED}, {r.error for r in done}
    assert {r.attempts for r in done} == {1}  # claimed once each: none lost, none doubled
    assert len({r.version for r in done}) == 1  # the same number of saves for every run
    first = await store.load_messages(tenant, runs[0].session_id)
    for r in runs:
        history = await store.load_messages(tenant, r.session_id)
        assert len(history) == len(first)
        assert history[0] == Message.user(f"job {runs.index(r)}")
    # Each completion was logged by exactly one of the workers, and both took part.
    logs = [workers.log(p) for p in procs]
    for r in runs:
        assert sum(log.count(f"run {r.id} completed") for log in logs) == 1
    assert all(" completed" in log for log in logs)
