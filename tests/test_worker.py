"""``hango worker`` processes against SQLite and PostgreSQL: a worker killed with SIGKILL mid-run
is replaced and no completed call runs twice; SIGTERM hands the run back at a turn boundary, and
five hand-backs of one run are no attempts; a paused worker writes nothing to a run another
completed; two workers drain 200 queued demo runs, each exactly once; every PostgreSQL backend
terminated twice under two workers loses, fails and repeats nothing; a worker waits for a
database that is not there yet, or goes away.

The tools of the test agent append one line per execution to a file, so the counts are the
tools' own, not the harness's. The PostgreSQL server itself is never restarted (other tests
run against it): its backends are terminated (``pg_terminate_backend``) in a database of the
test's own, or a proxy in front of it (``database_link``) cuts the connections.
"""

from __future__ import annotations

import collections
import functools
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import psycopg
import pytest

from hango import AgentDefinition, Harness, Message, RunStatus
from hango.store import RunStore, migrate, open_store
from hango.store.base import RunRecord
from hango.testing import hango_executable, write_agent

pytestmark = pytest.mark.anyio

HANGO = hango_executable()
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


@tool
def step(label: str, ctx: ToolContext) -> str:
    """Wait until the test lets this step finish (file ``go-LABEL``; at most 30 s), so the
    test's stop signal always lands while the step runs, however loaded the machine.

    Args:
        label: what to record.
    """
    note(ctx, label + ":start")
    go = HERE / f"go-{label}"
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    note(ctx, label + ":done")
    return f"{label} done"


@tool
def pause_once(label: str, ctx: ToolContext) -> str:
    """The first execution takes 1 s (long enough to be paused in); later ones return.

    Args:
        label: what to record.
    """
    note(ctx, label + ":start")
    mark = HERE / "paused.mark"
    if not mark.exists():
        mark.touch()
        time.sleep(1.0)
    note(ctx, label + ":done")
    return f"{label} done"


@tool
def hang(label: str, ctx: ToolContext) -> str:
    """Never return, deaf to cancellation (a tool stuck on a dead socket).

    Args:
        label: what to record.
    """
    note(ctx, label + ":start")
    while True:
        time.sleep(0.05)


TOOLS = [record, block_once, slow, step, pause_once, hang]
'''


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg


class Workers:
    """``hango worker`` processes of one test, logging to files; all stopped at the end."""

    def __init__(self, tmp_path: Path, database_url: str, tenant: uuid.UUID, **env: str) -> None:
        self.tmp_path = tmp_path
        self.env = {
            **os.environ,
            "HANGO_DATABASE_URL": database_url,
            "HANGO_TENANT": str(tenant),
            **env,
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
                proc.send_signal(signal.SIGCONT)  # a paused one must be able to die
                proc.kill()
                proc.wait()


@pytest.fixture
def workers(tmp_path: Path, database_url: str, tenant: uuid.UUID) -> Iterator[Workers]:
    w = Workers(tmp_path, database_url, tenant)
    try:
        yield w
    finally:
        w.stop_all()


def agent_dir(tmp_path: Path, turns: str, extra: str = "") -> Path:
    agent = 'name = "worker-test"\nmodel = "scripted:script.toml"\ntools = ["worktools:TOOLS"]\n'
    agent += extra
    return write_agent(
        tmp_path / "agent", agent=agent, script=turns, tools={"worktools": TOOLS}
    ).parent


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
            # Finished and released: a worker saves a run's end, then gives up its lease.
            if all(r.status in FINISHED and r.lease_owner is None for r in runs):
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


async def test_a_sigterm_delivered_twice_at_once_is_one_stop(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    """`kill -TERM -PGID` of `uv run hango worker` delivers the signal twice (the group, then
    uv forwarding it): that is one stop, which finishes the turn, not a cancel of the run
    mid-tool (issue "Run integrity II", item 9)."""
    folder = agent_dir(tmp_path, TERM_SCRIPT)
    (run,) = await submit(store, tenant, folder / "agent.toml")
    proc = workers.start("--concurrency", "1", "--lease", "30")
    await wait_for_line(folder, f"{run.id} s1:start")
    proc.send_signal(signal.SIGTERM)
    await anyio.sleep(0.3)  # uv forwards the group's signal a moment later
    proc.send_signal(signal.SIGTERM)
    assert await workers.exit_code(proc) == 0
    assert "cancelling the runs" not in workers.log(proc)
    history = await store.load_messages(tenant, run.session_id)
    assert history[-1].tool_results[0].content == "s1 done"  # the turn finished
    assert executions(folder)[f"{run.id} s1:done"] == 1


async def test_a_worker_says_once_why_it_leaves_a_run_queued(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    """A queued run whose recorded stack needs a middleware no installed plugin provides is
    left for another worker, and the worker says so once, naming the middleware and its
    distribution; `runs show` says the same (issue "Run integrity II", item 8)."""
    folder = agent_dir(tmp_path, TERM_SCRIPT)
    (run,) = await submit(store, tenant, folder / "agent.toml")
    held = await store.get_run(tenant, run.id)
    config = {**held.config, "stack": [
        *held.config["stack"], {"name": "audit_log", "distribution": "hango-audit", "version": "1"}
    ]}  # fmt: skip
    needy = await store.create_run(
        tenant, run.agent_id, Message.user("audit me"), status=RunStatus.QUEUED, config=config
    )
    proc = workers.start("--lease", "30")
    (done,) = await wait_until(store, tenant, [run.id])  # the other run is worked on
    assert done.status is RunStatus.COMPLETED
    await anyio.sleep(3)  # several idle passes
    line = (
        f"run {needy.id} stays queued: this worker cannot build middleware 'audit_log' "
        "(distribution hango-audit)"
    )
    assert workers.log(proc).count(line) == 1
    assert (await store.get_run(tenant, needy.id)).status is RunStatus.QUEUED
    proc.send_signal(signal.SIGTERM)
    assert await workers.exit_code(proc) == 0
    shown = await anyio.run_process(
        [HANGO, "runs", "show", str(needy.id)], env=workers.env | {"NO_COLOR": "1"}, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert (
        "queued for a worker that can build middleware 'audit_log' (distribution hango-audit)"
        in " ".join(shown.stdout.decode().split())
    )


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


HAND_BACK_SCRIPT = (
    "\n".join(
        f"""
[[turns]]
[[turns.tool_calls]]
name = "step"
input = {{ label = "s{i}" }}
"""
        for i in range(1, 7)
    )
    + '\n[[turns]]\ntext = "done"\n'
)


@pytest.mark.postgres
@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)  # both: tests/store
async def test_five_sigterm_hand_backs_are_no_attempts_and_the_run_then_completes(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    folder = agent_dir(tmp_path, HAND_BACK_SCRIPT)
    # Six idle workers at once (a rolling restart): each hand-back goes to the next one.
    procs = {
        f"w{i}": workers.start("--concurrency", "1", "--max-attempts", "5", "--name", f"w{i}")
        for i in range(6)
    }
    for proc in procs.values():
        await workers.ready(proc)
    (run,) = await submit(store, tenant, folder / "agent.toml")
    stopped: list[str] = []
    for i in range(1, 6):
        await wait_for_line(folder, f"{run.id} s{i}:start")
        owner = (await store.get_run(tenant, run.id)).lease_owner
        assert owner is not None and owner not in stopped
        procs[owner].send_signal(signal.SIGTERM)  # mid-turn: finish it, save, hand back
        with anyio.fail_after(30):  # the signal is handled before the step is let go
            while "stopping: " not in workers.log(procs[owner]):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        (folder / f"go-s{i}").touch()
        assert await workers.exit_code(procs[owner]) == 0
        stopped.append(owner)
        back = await store.get_run(tenant, run.id)
        if back.status is RunStatus.QUEUED:  # unless the next worker has it already
            assert (back.attempts, back.lease_owner) == (0, None)

    await wait_for_line(folder, f"{run.id} s6:start")
    (folder / "go-s6").touch()
    (done,) = await wait_until(store, tenant, [run.id])
    assert (done.status, done.error) == (RunStatus.COMPLETED, None)
    assert done.attempts == 1  # only the last claim: five hand-backs counted for nothing
    counts = executions(folder)
    for i in range(1, 7):
        assert (counts[f"{run.id} s{i}:start"], counts[f"{run.id} s{i}:done"]) == (1, 1)
    for name in stopped:
        assert "back to the queue" in workers.log(procs[name])


HANG_SCRIPT = """
[[turns]]
[[turns.tool_calls]]
name = "hang"
input = { label = "h" }

[[turns]]
[[turns.tool_calls]]
name = "record"
input = { label = "after" }

[[turns]]
text = "done"
"""


async def test_a_hung_tool_times_out_the_run_goes_on_and_the_worker_still_exits(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    folder = agent_dir(tmp_path, HANG_SCRIPT, extra="tool_timeout = 1\n")
    (run,) = await submit(store, tenant, folder / "agent.toml")
    proc = workers.start("--concurrency", "1")
    (done,) = await wait_until(store, tenant, [run.id])
    assert (done.status, done.attempts) == (RunStatus.COMPLETED, 1)
    history = await store.load_messages(tenant, run.session_id)
    (result,) = history[2].tool_results
    assert result.is_error and "did not finish within 1 s" in result.content, result.content
    counts = executions(folder)
    assert (counts[f"{run.id} h:start"], counts[f"{run.id} after"]) == (1, 1)
    # Its thread still spins: a normal interpreter exit would wait for it for ever.
    proc.send_signal(signal.SIGTERM)
    assert await workers.exit_code(proc) == 0
    assert "stopped" in workers.log(proc)


async def test_a_second_signal_exits_a_worker_stuck_in_a_tool_and_counts_the_attempt(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    folder = agent_dir(tmp_path, HANG_SCRIPT)  # the default timeout: 300 s
    (run,) = await submit(store, tenant, folder / "agent.toml")
    first = workers.start("--concurrency", "1", "--lease", "30")
    await wait_for_line(folder, f"{run.id} h:start")
    first.send_signal(signal.SIGTERM)  # the turn never ends ...
    with anyio.fail_after(30):
        while "stopping: " not in workers.log(first):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    await anyio.sleep(1.2)  # past the second within which signals are one stop
    first.send_signal(signal.SIGTERM)  # ... so the second signal cancels it
    assert await workers.exit_code(first) == 0, workers.log(first)
    back = await store.get_run(tenant, run.id)
    # Handed back, and the claim counts: a tool that hangs every worker is not passed on
    # for ever.
    assert (back.status, back.lease_owner, back.attempts) == (RunStatus.QUEUED, None, 1)

    second = workers.start("--concurrency", "1", "--max-attempts", "1")
    (failed,) = await wait_until(store, tenant, [run.id])
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.startswith("abandoned after 1 attempts")
    assert executions(folder)[f"{run.id} h:start"] == 1  # the second worker never ran it
    second.send_signal(signal.SIGTERM)
    assert await workers.exit_code(second) == 0


PAUSE_SCRIPT = """
[[turns]]
[[turns.tool_calls]]
name = "pause_once"
input = { label = "p" }

[[turns]]
text = "done"
"""


@pytest.mark.postgres
@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)  # both: tests/store
async def test_a_worker_paused_past_its_lease_writes_nothing_to_the_run_another_completed(
    store: RunStore, tenant: uuid.UUID, workers: Workers, tmp_path: Path
) -> None:
    folder = agent_dir(tmp_path, PAUSE_SCRIPT)
    (run,) = await submit(store, tenant, folder / "agent.toml")
    paused = workers.start("--concurrency", "1", "--lease", "1", "--name", "paused")
    await wait_for_line(folder, f"{run.id} p:start")
    paused.send_signal(signal.SIGSTOP)  # in the middle of its tool, for longer than its lease

    second = workers.start("--lease", "5", "--name", "second")
    (done,) = await wait_until(store, tenant, [run.id])
    assert done.status is RunStatus.COMPLETED, done.error
    history = await store.load_messages(tenant, run.session_id)

    paused.send_signal(signal.SIGCONT)  # its tool returns; it tries to save and release
    with anyio.fail_after(30):
        while "another worker owns it now" not in workers.log(paused):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert await store.get_run(tenant, run.id) == done  # not one write
    assert await store.load_messages(tenant, run.session_id) == history
    for proc in (paused, second):
        proc.send_signal(signal.SIGTERM)
        assert await workers.exit_code(proc) == 0


FAULT_SCRIPT = """
[[turns]]
[[turns.tool_calls]]
name = "record"
input = { label = "a" }
[[turns.tool_calls]]
name = "record"
input = { label = "b" }

[[turns]]
text = "done"
"""


def terminate_backends(admin_url: str, database_url: str, at_least: int = 4) -> int:
    """``pg_terminate_backend`` on every backend of the test's own database, once it has at
    least ``at_least`` (so the injection hits the workers' connections, not a pool that is
    still reconnecting); returns how many were terminated."""
    name = urlsplit(database_url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone()
            if row and row[0] >= at_least:
                break
            time.sleep(0.005)
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.postgres
async def test_every_backend_terminated_twice_under_two_workers_loses_fails_and_repeats_nothing(
    postgres_database: Callable[[], str],
    postgres_admin_url: str,
    tenant: uuid.UUID,
    tmp_path: Path,
) -> None:
    url = postgres_database()  # a database of this test's own: its backends are all ours
    migrate.upgrade(url)
    folder = agent_dir(tmp_path, FAULT_SCRIPT)
    fleet = Workers(tmp_path, url, tenant)
    try:
        procs = [
            fleet.start("--concurrency", "10", "--lease", "5", "--name", f"w{i}") for i in range(2)
        ]
        for proc in procs:
            await fleet.ready(proc)
        async with await open_store(url) as store:
            runs = await submit(store, tenant, folder / "agent.toml", n=100)
            terminated = []
            for calls in (40, 100):  # of 200: with runs in flight, twice
                with anyio.fail_after(60):
                    while sum(executions(folder).values()) < calls:  # noqa: ASYNC110
                        await anyio.sleep(0.01)
                terminated.append(
                    await anyio.to_thread.run_sync(terminate_backends, postgres_admin_url, url)
                )
            done = await wait_until(store, tenant, [r.id for r in runs], deadline=60)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        assert [await fleet.exit_code(p) for p in procs] == [0, 0]
    finally:
        fleet.stop_all()

    statuses = collections.Counter(r.status for r in done)
    counts = executions(folder)
    retried = sum(fleet.log(p).count("retrying") for p in procs)
    print(
        f"\nfault injection: backends terminated {terminated}; runs {dict(statuses)}; "
        f"tool executions {sum(counts.values())} (most for one call: {max(counts.values())}); "
        f"retries logged by the workers {retried}"
    )
    assert all(n >= 4 for n in terminated), terminated  # the workers' pools and LISTENs
    assert retried >= 1  # and statements in flight: the workers retried them
    assert statuses == {RunStatus.COMPLETED: 100}, {r.error for r in done}
    assert len(counts) == 200 and set(counts.values()) == {1}  # no call ran twice
    assert all(r.attempts == 1 for r in done)  # none abandoned, none reclaimed


@pytest.mark.postgres
@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
async def test_a_worker_waits_for_a_database_that_is_not_there_yet_or_goes_away(
    store: RunStore,
    database_url: str,
    tenant: uuid.UUID,
    database_link: Any,
    tmp_path: Path,
) -> None:
    folder = agent_dir(tmp_path, FAULT_SCRIPT)
    database_link.cut()
    # Each call gives up after 1 s (not 15): the worker says sooner that it waits.
    fleet = Workers(tmp_path, database_link.url(database_url), tenant, HANGO_DB_RETRY_SECONDS="1")
    try:
        proc = fleet.start("--lease", "5")
        with anyio.fail_after(30):
            while "waiting for it" not in fleet.log(proc):
                assert proc.poll() is None, fleet.log(proc)
                await anyio.sleep(0.05)
        assert "starting: the database is unreachable" in fleet.log(proc)
        (first,) = await submit(store, tenant, folder / "agent.toml")
        await database_link.restore()
        (done,) = await wait_until(store, tenant, [first.id], deadline=30)
        assert done.status is RunStatus.COMPLETED, done.error

        database_link.cut()  # it goes away under the running worker
        with anyio.fail_after(30):
            while "claiming a run: the database is unreachable" not in fleet.log(proc):
                assert proc.poll() is None, fleet.log(proc)
                await anyio.sleep(0.05)
        (second,) = await submit(store, tenant, folder / "agent.toml")
        await database_link.restore()
        (done,) = await wait_until(store, tenant, [second.id], deadline=30)
        assert done.status is RunStatus.COMPLETED, done.error
        assert "the database is reachable again" in fleet.log(proc)
        proc.send_signal(signal.SIGTERM)
        assert await fleet.exit_code(proc) == 0
    finally:
        fleet.stop_all()


@pytest.mark.postgres
@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
async def test_a_worker_gives_up_on_the_database_after_hango_db_wait_seconds(
    database_url: str, tenant: uuid.UUID, database_link: Any, tmp_path: Path
) -> None:
    database_link.cut()
    fleet = Workers(tmp_path, database_link.url(database_url), tenant, HANGO_DB_WAIT_SECONDS="1")
    try:
        proc = fleet.start()
        assert await fleet.exit_code(proc) == 2
        last = fleet.log(proc).strip().splitlines()[-1]
        assert last.startswith("error: cannot open the PostgreSQL database: OperationalError")
        assert "giving up after 1 s" in fleet.log(proc)
    finally:
        fleet.stop_all()
