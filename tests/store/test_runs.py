"""Runs through the Harness and the Worker, on both back ends: the plan and every middleware's
typed state survive the database, a stop request ends a run at a turn boundary, corrupt state
fails only its own run, a worker that lost its lease writes nothing (not even "failed"), and a
database that could not take a save stops the run without failing it."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from attrs import evolve, field, frozen

from hango import (
    AgentDefinition,
    Event,
    Harness,
    Message,
    ModelResponse,
    RunStarted,
    RunStatus,
    ScriptedModel,
    StateError,
    ToolRegistry,
    ToolResult,
    tool,
)
from hango.agent.middleware import Middleware
from hango.agent.state import dump_state, load_state
from hango.config import StackConfig
from hango.discovery import default_stack
from hango.middleware import (
    ModelHandler,
    ModelRequest,
    State,
    Todo,
    ToolCallRequest,
    ToolHandler,
    load_private,
    store_private,
)
from hango.plugins import make_plugin_manager
from hango.run.worker import Worker
from hango.store import (
    RunSave,
    RunStore,
    StoreError,
    StoreRetryPolicy,
    StoreUnavailable,
    open_store,
)
from hango.store.base import RunRecord
from hango.store.postgres import PostgresRunStore

pytestmark = pytest.mark.anyio

DEMO = Path(__file__).parents[2] / "examples" / "demo" / "agent.toml"
AGENT = AgentDefinition(name="test", model="scripted:inline", max_turns=10)
FINISHED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}


@frozen
class Entry:
    label: str
    amount: int
    ratio: float | None = None


@frozen
class Ledger:
    """Private state with the JSON shapes a jsonb round trip could change."""

    entries: tuple[Entry, ...] = ()
    by_key: dict[str, int] = field(factory=dict)
    flags: dict[str, bool] = field(factory=dict)
    note: str = ""


LEDGER = Ledger(
    entries=(Entry("ünïcödé ✓ 🚀", 2**62, 0.1), Entry('quote " back \\ slash\nnewline', -7)),
    by_key={"b": 2, "a": 1, "": 0, "ключ": 3},
    flags={"yes": True, "no": False},
    note="   spaced   ",
)


class LedgerMiddleware:
    """Writes LEDGER on the first tool call; counts calls in ``by_key['calls']``."""

    name = "ledger"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        ledger, found = load_private(req.state, self.name, Ledger)
        base = ledger if found else LEDGER
        calls = base.by_key.get("calls", 0) + 1
        store_private(req.state, self.name, evolve(base, by_key={**base.by_key, "calls": calls}))
        return await next(req)


class Probe:
    """Innermost: snapshots the whole state document before every model call, so the last
    snapshot is the run's final state as the middlewares left it."""

    name = "probe"

    def __init__(self) -> None:
        self.last: dict[str, Any] = {}

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        self.last = json.loads(json.dumps(dump_state(req.state)))
        return await next(req)


async def test_the_plan_and_every_middlewares_typed_state_survive_the_database(
    store: RunStore, store_url: str, tenant: uuid.UUID
) -> None:
    """The demo agent with the installed feature plugins (hango-todo writes the plan,
    hango-repeat counts calls in private state) plus a middleware with awkward JSON."""
    repeat = pytest.importorskip("hango_repeat.middleware")
    plugins = make_plugin_manager(env={})
    probe = Probe()

    def stack(config: StackConfig) -> Sequence[Middleware]:
        return [*default_stack(config, plugins), LedgerMiddleware(), probe]

    harness = Harness(store, tenant_id=tenant, stack=stack, settings={})
    finished = await harness.run(AgentDefinition.from_file(DEMO), "What are the open risks?")
    assert finished.status is RunStatus.COMPLETED, finished.error

    async with await open_store(store_url) as fresh:  # nothing cached: read it back
        record = await fresh.get_run(tenant, finished.run_id)
    stored = record.state
    assert isinstance(stored, dict)
    # The last call's usage, and its count in hango-limits, are added after the probe's
    # snapshot; the rest is as it saw it.
    assert stored["usage"] == attrs.asdict(finished.usage) and finished.usage.output_tokens > 0

    def before_last_call(doc: dict[str, Any]) -> dict[str, Any]:
        private = {k: v for k, v in doc["private"].items() if k != "limits"}
        return {**doc, "usage": None, "private": private}

    assert before_last_call(stored) == before_last_call(probe.last)
    if "limits" in stored["private"]:
        counted = [d["private"]["limits"]["run"]["model_calls"] for d in (probe.last, stored)]
        assert counted[1] == counted[0] + 1
    assert stored["todos"], "hango-todo wrote no plan"
    assert set(stored["private"]) >= {"repeat_call", "ledger"}

    reloaded, expected = load_state(stored), load_state(probe.last)
    assert reloaded.todos == expected.todos
    assert all(isinstance(t, Todo) for t in reloaded.todos)
    for name, cls in (("repeat_call", repeat.RepeatCounts), ("ledger", Ledger)):
        value, found = load_private(reloaded, name, cls)
        assert found and value == load_private(expected, name, cls)[0]
    ledger, _ = load_private(reloaded, "ledger", Ledger)
    assert evolve(ledger, by_key={k: v for k, v in ledger.by_key.items() if k != "calls"}) == LEDGER


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
@pytest.mark.postgres
async def test_a_state_postgres_cannot_store_fails_the_save_clearly(
    store: RunStore, tenant: uuid.UUID
) -> None:
    a = await store.put_agent(tenant, "test", {"name": "test"})
    run = await store.create_run(tenant, a.id, Message.user("go"))
    with pytest.raises(StoreError, match=r"NUL character"):
        await store.save_run(
            RunSave(tenant, run.id, version=0, status=RunStatus.RUNNING, state={"todo": "a\x00b"})
        )
    assert (await store.get_run(tenant, run.id)).version == 0


def two_step_model() -> ScriptedModel:
    return ScriptedModel.from_turns(
        [
            {"tool_calls": [{"name": "work", "input": {"label": "one"}}]},
            {"tool_calls": [{"name": "work", "input": {"label": "two"}}]},
            {"text": "done"},
        ]
    )


async def test_a_stop_request_ends_the_run_at_the_next_turn_boundary(
    store: RunStore, store_url: str, tenant: uuid.UUID
) -> None:
    executed: list[str] = []
    stop = anyio.Event()

    @tool
    async def work(label: str) -> str:
        """Do one unit of work.

        Args:
            label: which one.
        """
        executed.append(label)
        stop.set()  # the SIGTERM arrives while the batch runs: the batch still finishes
        return f"{label} done"

    def harness(s: RunStore) -> Harness:
        return Harness(
            s,
            tenant_id=tenant,
            model=two_step_model(),
            stack=lambda _: [],
            tools=ToolRegistry([work]),
            settings={},
        )

    events: list[Event] = []

    async def keep(event: Event) -> None:
        events.append(event)

    run = await harness(store).start(AGENT, "go")
    first = await harness(store).execute(run.id, emit=keep, stop=stop)
    assert (first.status, first.error, executed) == (RunStatus.QUEUED, None, ["one"])
    saved = await store.get_run(tenant, run.id)
    history = await store.load_messages(tenant, run.session_id)
    assert saved.status is RunStatus.QUEUED
    assert [m.role for m in history] == ["user", "assistant", "user"]
    assert history[-1].tool_results[0].content == "one done"

    async with await open_store(store_url) as other:  # another process continues it
        second = await harness(other).execute(run.id, emit=keep)
    assert second.status is RunStatus.COMPLETED
    assert executed == ["one", "two"]  # the saved call did not run again
    started = [e.resumed for e in events if isinstance(e, RunStarted)]
    assert started == [False, True]


async def test_a_claimed_run_that_never_ran_does_not_start_as_resumed(
    store: RunStore, tenant: uuid.UUID
) -> None:
    harness = Harness(
        store,
        tenant_id=tenant,
        model=ScriptedModel.from_turns([{"text": "hi"}]),
        stack=lambda _: [],
        settings={},
    )
    run = await harness.start(AGENT, "go", status=RunStatus.QUEUED)
    lease = await store.claim_run(tenant, "w", lease_seconds=30)
    assert lease is not None
    events: list[Event] = []

    async def keep(event: Event) -> None:
        events.append(event)

    await harness.execute(run.id, emit=keep, lease=lease)
    assert [e.resumed for e in events if isinstance(e, RunStarted)] == [False]


@frozen
class Calls:
    count: int = 0


class StrictCounter:
    """Reads its private state in before_run, as any middleware that resumes would."""

    name = "counter"

    async def before_run(self, state: State) -> None:
        calls, _ = load_private(state, self.name, Calls)
        store_private(state, self.name, evolve(calls, count=calls.count + 1))


async def wait_finished(
    store: RunStore, tenant: uuid.UUID, ids: Sequence[uuid.UUID], deadline: float = 30
) -> list[RunRecord]:
    with anyio.fail_after(deadline):
        while True:
            runs = [await store.get_run(tenant, i) for i in ids]
            # Finished and released: a worker saves the end of a run, then gives up its lease.
            if all(r.status in FINISHED and r.lease_owner is None for r in runs):
                return runs
            await anyio.sleep(0.05)


class Running:
    """A worker started by ``start_worker``; ``finished`` is set once its ``run`` returned."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.finished = anyio.Event()

    async def run(self, *, task_status: Any) -> None:
        try:
            await self.worker.run(task_status=task_status)
        finally:
            self.finished.set()


StartWorker = Callable[[Worker], Awaitable[Running]]


@pytest.fixture
async def start_worker(store: RunStore) -> AsyncIterator[StartWorker]:
    """Start in-process workers, listening once this returns; killed when the test ends (so
    a failing test cannot hang on a run that waits forever)."""
    async with anyio.create_task_group() as tg:
        started: list[Running] = []

        async def start(worker: Worker) -> Running:
            running = Running(worker)
            await tg.start(running.run)
            started.append(running)
            return running

        yield start
        for r in started:
            r.worker.kill()


async def test_corrupt_state_fails_only_its_own_run_naming_the_middleware_and_field(
    store: RunStore,
    backend: str,
    tenant: uuid.UUID,
    sql: Callable[..., Any],
    start_worker: StartWorker,
) -> None:
    harness = Harness(
        store,
        tenant_id=tenant,
        model=ScriptedModel.from_turns([{"text": "fine"}]),
        stack=lambda _: [StrictCounter()],
        settings={},
    )
    runs = [await harness.start(AGENT, f"job {i}", status=RunStatus.QUEUED) for i in range(4)]

    def document(run: RunRecord, **changes: Any) -> str:
        doc = dump_state(State(run.id, run.session_id, run.agent_id, run.tenant_id))
        return json.dumps({**doc, **changes})

    corrupt = {
        runs[1].id: document(runs[1], private={"counter": {"count": "many"}}),
        runs[2].id: document(runs[2], todos=[{"content": "plan", "status": "someday"}]),
    }
    if backend == "sqlite":  # jsonb refuses text that is not JSON; SQLite stores anything
        corrupt[runs[3].id] = "{not json"
    for run_id, text in corrupt.items():
        sql(
            "UPDATE runs SET state_json = ? WHERE tenant_id = ? AND id = ?",
            text,
            str(tenant),
            str(run_id),
        )

    await start_worker(Worker(harness, concurrency=2, lease_seconds=5))
    done = await wait_finished(store, tenant, [r.id for r in runs])

    assert done[0].status is RunStatus.COMPLETED
    assert done[1].status is RunStatus.FAILED
    assert done[1].error == str(
        StateError("counter", "$.count", "expected an integer, got str 'many'")
    )
    assert done[2].status is RunStatus.FAILED
    assert done[2].error is not None
    assert "run state (state_json)" in done[2].error and "$.todos[0].status" in done[2].error
    if backend == "sqlite":
        assert done[3].status is RunStatus.FAILED
        assert done[3].error == str(StateError("state", "$", "state_json is not an object"))
        assert done[3].state == "{not json"  # kept as it was: nothing lost
    else:
        assert done[3].status is RunStatus.COMPLETED
    assert done[1].state["private"] == {"counter": {"count": "many"}}  # type: ignore[index]
    assert all(r.lease_owner is None for r in done)


async def test_a_worker_that_lost_its_lease_stops_and_writes_nothing(
    store: RunStore,
    tenant: uuid.UUID,
    sql: Callable[..., Any],
    start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = anyio.Event()
    never = anyio.Event()

    @tool
    async def wait_forever(label: str) -> str:
        """Wait for something that never happens.

        Args:
            label: what for.
        """
        started.set()
        await never.wait()
        return "unreachable"

    harness = Harness(
        store,
        tenant_id=tenant,
        model=ScriptedModel.from_turns(
            [{"tool_calls": [{"name": "wait_forever", "input": {"label": "x"}}]}, {"text": "ok"}]
        ),
        stack=lambda _: [],
        tools=ToolRegistry([wait_forever]),
        settings={},
    )
    run = await harness.start(AGENT, "go", status=RunStatus.QUEUED)
    old = await start_worker(Worker(harness, name="old", lease_seconds=1.5))
    with anyio.fail_after(10):
        await started.wait()

    # The old worker looks dead to the others (its lease lapsed); a new one takes the run.
    new = None
    with anyio.fail_after(10):
        while new is None:
            sql(
                "UPDATE runs SET lease_expires_at = ? WHERE tenant_id = ? AND id = ?",
                "2000-01-01T00:00:00.000000+00:00",
                str(tenant),
                str(run.id),
            )
            new = await store.claim_run(tenant, "new", lease_seconds=60)
    taken = await store.get_run(tenant, run.id)

    # Only the failed renewal can end the old worker's run: its tool waits forever and a stop
    # request acts at turn boundaries only.
    old.worker.stop()
    with anyio.fail_after(10):
        await old.finished.wait()
    after = await store.get_run(tenant, run.id)
    assert after == taken  # its cancel-time save was refused (StaleVersion), nothing written
    assert (after.lease_owner, after.status) == ("new", RunStatus.RUNNING)
    assert "lease lost to another worker" in caplog.text
    assert "another worker owns it now" in caplog.text


async def test_a_run_its_workers_keep_dying_on_is_failed_after_max_attempts(
    store: RunStore, tenant: uuid.UUID, start_worker: StartWorker
) -> None:
    harness = Harness(
        store,
        tenant_id=tenant,
        model=ScriptedModel.from_turns([{"text": "never"}]),
        stack=lambda _: [],
        settings={},
    )
    run = await harness.start(AGENT, "poison", status=RunStatus.QUEUED)
    for _ in range(2):  # two workers claimed it and died
        assert await store.claim_run(tenant, "dead", lease_seconds=0.01) is not None
        await anyio.sleep(0.05)
    await start_worker(Worker(harness, max_attempts=2, lease_seconds=5))
    (done,) = await wait_finished(store, tenant, [run.id])
    assert done.status is RunStatus.FAILED
    assert done.error is not None and done.error.startswith("abandoned after 2 attempts")
    assert done.attempts == 3


@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("store_backend", ["sqlite"], indirect=True)
async def test_the_worker_runs_on_trio_with_sqlite(store: RunStore, tenant: uuid.UUID) -> None:
    harness = Harness(
        store,
        tenant_id=tenant,
        model=two_step_model(),
        stack=lambda _: [],
        tools=ToolRegistry([_echo_work]),
        settings={},
    )
    runs = [await harness.start(AGENT, f"job {i}", status=RunStatus.QUEUED) for i in range(3)]
    worker = Worker(harness, concurrency=2, lease_seconds=5)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        done = await wait_finished(store, tenant, [r.id for r in runs])
        worker.stop()
    assert [r.status for r in done] == [RunStatus.COMPLETED] * 3
    history = await store.load_messages(tenant, runs[0].session_id)
    assert [r.content for m in history for r in m.tool_results] == ["one done", "two done"]


@tool(name="work")
async def _echo_work(label: str) -> str:
    """Do one unit of work.

    Args:
        label: which one.
    """
    return f"{label} done"


class HangingRenewals:
    """The real store, except that lease renewals never answer (a database that went away
    without closing the connection), and only one claim is granted, so the handed-back run
    stays queued for the test to see instead of being claimed again at once."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self._claimed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def renew_lease(self, lease: Any) -> Any:
        await anyio.sleep_forever()

    async def claim_run(self, *args: Any, **kwargs: Any) -> Any:
        if self._claimed:
            return None
        self._claimed = True
        return await self._store.claim_run(*args, **kwargs)


async def test_a_worker_that_cannot_renew_stops_the_run_before_its_lease_expires(
    store: RunStore,
    tenant: uuid.UUID,
    start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    started = anyio.Event()

    @tool(name="work")
    async def wait_forever(label: str) -> str:
        """Wait for something that never happens.

        Args:
            label: what for.
        """
        started.set()
        await anyio.sleep_forever()
        return "unreachable"

    harness = Harness(
        HangingRenewals(store),  # type: ignore[arg-type]
        tenant_id=tenant,
        model=two_step_model(),
        stack=lambda _: [],
        tools=ToolRegistry([wait_forever]),
        settings={},
    )
    run = await harness.start(AGENT, "go", status=RunStatus.QUEUED)
    worker = await start_worker(Worker(harness, lease_seconds=0.9))
    with anyio.fail_after(10):
        await started.wait()
        while True:
            if (await store.get_run(tenant, run.id)).status is RunStatus.QUEUED:
                break
            await anyio.sleep(0.05)
    back = await store.get_run(tenant, run.id)
    # Stopped by the worker itself (saved as cancelled, then handed back), with no other
    # worker involved: the tool waited forever and no stop was requested.
    assert (back.lease_owner, back.attempts, back.error) == (None, 0, None)
    assert "could not renew the lease before it expires (no answer in time)" in caplog.text
    assert not worker.finished.is_set()  # the worker itself carries on


class HeldBeforeExecuting:
    """The real store, except that the first ``get_run`` (the Harness reading the run it was
    given) waits until ``go`` is set: a worker paused between its claim and its work."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.waiting = anyio.Event()
        self.go = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def get_run(self, *args: Any) -> Any:
        if not self.waiting.is_set():
            self.waiting.set()
            await self.go.wait()
        return await self._store.get_run(*args)


async def test_a_worker_that_lost_its_lease_does_not_fail_the_run_it_finds_completed(
    store: RunStore,
    tenant: uuid.UUID,
    sql: Callable[..., Any],
    start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="hango.worker")
    held = HeldBeforeExecuting(store)
    harness = Harness(
        held,  # type: ignore[arg-type]
        tenant_id=tenant,
        model=ScriptedModel.from_turns([{"text": "done"}]),
        stack=lambda _: [],
        settings={},
    )
    run = await harness.start(AGENT, "go", status=RunStatus.QUEUED)
    # One slot, so that this worker does not claim the run again itself.
    await start_worker(Worker(harness, name="paused", concurrency=1, lease_seconds=60))
    with anyio.fail_after(10):
        await held.waiting.wait()

    # Its lease lapses; another worker takes the run and completes it.
    sql(
        "UPDATE runs SET lease_expires_at = ? WHERE tenant_id = ? AND id = ?",
        "2000-01-01T00:00:00.000000+00:00",
        str(tenant),
        str(run.id),
    )
    other = await store.claim_run(tenant, "other", lease_seconds=60)
    assert other is not None and other.run_id == run.id
    version = (await store.get_run(tenant, run.id)).version
    await store.save_run(
        RunSave(tenant, run.id, version=version, status=RunStatus.COMPLETED, state={}, lease=other)
    )
    assert await store.release_run(other)
    completed = await store.get_run(tenant, run.id)

    held.go.set()  # the paused worker wakes up and finds the run completed: nothing to step
    with anyio.fail_after(10):
        while f"run {run.id} completed" not in caplog.text:  # noqa: ASYNC110 - a log line
            await anyio.sleep(0.02)
    assert await store.get_run(tenant, run.id) == completed  # it wrote nothing
    assert "failed" not in caplog.text


@pytest.mark.postgres
@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
async def test_a_worker_cut_off_from_the_database_leaves_its_run_to_be_reclaimed_not_failed(
    store: RunStore,
    store_url: str,
    tenant: uuid.UUID,
    database_link: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, go = anyio.Event(), anyio.Event()
    calls: list[str] = []

    @tool(name="work")
    async def work(label: str) -> str:
        """Do one unit of work; the first one waits for ``go``.

        Args:
            label: which one.
        """
        calls.append(label)
        if not started.is_set():
            started.set()
            await go.wait()
        return f"{label} done"

    worker_store = await PostgresRunStore.open(
        database_link.url(store_url), retry=StoreRetryPolicy(0.5)
    )
    harness = Harness(
        worker_store,
        tenant_id=tenant,
        model=two_step_model(),
        stack=lambda _: [],
        tools=ToolRegistry([work]),
        settings={},
    )
    run = await harness.start(AGENT, "go", status=RunStatus.QUEUED)
    worker = Worker(harness, lease_seconds=1.5)
    async with worker_store, anyio.create_task_group() as tg:
        await tg.start(worker.run)
        with anyio.fail_after(10):
            await started.wait()
        database_link.cut()  # the database goes away while the tool runs
        go.set()  # its result cannot be saved
        # Back after the save gave up (waiting 1 s for a connection, the pool's shortest wait)
        # but while a "failed" write, had anything tried one then, would still be retrying.
        await anyio.sleep(1.5)
        await database_link.restore()
        (done,) = await wait_finished(store, tenant, [run.id])
        worker.stop()
    # It gave up on the save, or its lease ran out first and the save was fenced off: either
    # way it wrote nothing more.
    assert (
        "stopped working on it, nothing more written" in caplog.text
        or "another worker owns it now" in caplog.text
    )
    # Completed, never failed; handed back (attempts 1) or reclaimed after the lease expired
    # (2), depending on whether the database was back when the worker released it.
    assert (done.status, done.error) == (RunStatus.COMPLETED, None)
    assert done.attempts in (1, 2)
    # The call whose result never reached the database ran again on the reclaim.
    assert calls == ["one", "one", "two"]


class OneSaveUnavailable:
    """The real store, except that the ``nth`` save finds the database unavailable (after its
    retry time: ``StoreUnavailable``) and every later call works again."""

    def __init__(self, store: RunStore, nth: int) -> None:
        self._store = store
        self.nth = nth
        self.saves = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def save_run(self, *args: Any, **kwargs: Any) -> int:
        self.saves += 1
        if self.saves == self.nth:
            raise StoreUnavailable("saving run: the database was unavailable for 15 s")
        return await self._store.save_run(*args, **kwargs)  # type: ignore[no-any-return]


async def test_a_save_the_database_could_not_take_stops_the_run_without_failing_it(
    store: RunStore, tenant: uuid.UUID, start_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    executed: list[str] = []

    @tool(name="work")
    async def work(label: str) -> str:
        """Do one unit of work.

        Args:
            label: which one.
        """
        executed.append(label)
        return f"{label} done"

    # The save of the first tool result (saves: the run's first, after before_run; the model's
    # message; the result).
    flaky = OneSaveUnavailable(store, nth=3)
    harness = Harness(
        flaky,  # type: ignore[arg-type]
        tenant_id=tenant,
        model=two_step_model(),
        stack=lambda _: [],
        tools=ToolRegistry([work]),
        settings={},
    )
    run = await harness.start(AGENT, "go", status=RunStatus.QUEUED)
    await start_worker(Worker(harness, lease_seconds=5))
    (done,) = await wait_finished(store, tenant, [run.id])
    # Not failed: handed back (the database answered the release), resumed, completed.
    assert (done.status, done.error, done.attempts) == (RunStatus.COMPLETED, None, 1)
    assert "stopped working on it, nothing more written" in caplog.text
    assert executed == ["one", "one", "two"]  # the unsaved result's call ran again
