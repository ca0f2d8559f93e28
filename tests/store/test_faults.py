"""Transient database faults on PostgreSQL: a connection terminated under a statement, one that
died right after its COMMIT, dead connections in the pool, a database away for longer than the
retry time. The server itself is never restarted (other tests use it): connections are
terminated with ``pg_terminate_backend`` (each store here has an ``application_name`` of its
own, so only its connections are hit) or cut by a proxy (``database_link``).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg_pool import PoolTimeout

from hango.agent.events import RunStatus
from hango.provider.messages import Message, TextBlock
from hango.store import RunSave, StoreRetryPolicy, StoreUnavailable
from hango.store.base import RunRecord
from hango.store.postgres import PostgresRunStore, is_transient

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


def named(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


@pytest.fixture
def app_name() -> str:
    return f"hango_fault_{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def pg(postgres_url: str, app_name: str) -> AsyncIterator[PostgresRunStore]:
    store = await PostgresRunStore.open(named(postgres_url, app_name), retry=StoreRetryPolicy(10))
    try:
        yield store
    finally:
        await store.aclose()


async def terminate(admin_url: str, app_name: str, *, waiting_on_a_lock: bool = False) -> int:
    """Terminate the backends of the store named ``app_name``; returns how many."""
    query = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE application_name = %s AND pid <> pg_backend_pid()"
    )
    if waiting_on_a_lock:
        query += " AND wait_event_type = 'Lock'"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        cur = await conn.execute(query, (app_name,))
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def queued(store: PostgresRunStore, tenant: uuid.UUID, n: int = 1) -> list[RunRecord]:
    a = await store.put_agent(tenant, "test", {"name": "test"})
    return [
        await store.create_run(tenant, a.id, Message.user(f"job {i}"), status=RunStatus.QUEUED)
        for i in range(n)
    ]


ANSWER = [Message("assistant", (TextBlock("done"),))]


async def test_a_save_whose_connection_is_terminated_mid_statement_is_retried_and_applied_once(
    pg: PostgresRunStore,
    postgres_url: str,
    postgres_admin_url: str,
    app_name: str,
    tenant: uuid.UUID,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (run,) = await queued(pg, tenant)
    saved: list[int] = []
    async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
        # Another transaction holds the run's row: the save waits on it, mid-statement.
        await blocker.execute(
            "SELECT 1 FROM runs WHERE tenant_id = %s AND id = %s FOR UPDATE", (tenant, run.id)
        )
        async with anyio.create_task_group() as tg:

            async def save() -> None:
                saved.append(
                    await pg.save_run(
                        RunSave(
                            tenant,
                            run.id,
                            version=run.version,
                            status=RunStatus.COMPLETED,
                            state={"todos": []},
                            messages=ANSWER,
                            from_index=1,
                        )
                    )
                )

            tg.start_soon(save)
            killed = 0
            with anyio.fail_after(10):
                while not killed:
                    await anyio.sleep(0.02)
                    killed = await terminate(postgres_admin_url, app_name, waiting_on_a_lock=True)
            await blocker.commit()
    done = await pg.get_run(tenant, run.id)
    assert saved == [run.version + 1] == [done.version]
    assert done.status is RunStatus.COMPLETED
    assert await pg.load_messages(tenant, run.session_id) == [Message.user("job 0"), *ANSWER]
    assert f"saving run {run.id}: database unavailable (AdminShutdown" in caplog.text


class DiesAfterCommit:
    """The store's pool, except that right after the first statement (or transaction) whose
    SQL contains ``marker`` has committed, the server terminates that connection before the
    answer is read: the writer cannot know whether its write was applied."""

    def __init__(self, pool: Any, marker: str) -> None:
        self._pool = pool
        self.marker = marker
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    @contextlib.asynccontextmanager
    async def connection(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with self._pool.connection(*args, **kwargs) as conn:
            yield _Dying(conn, self)

    async def die(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.fired = True
        await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")


class _Dying:
    def __init__(self, conn: psycopg.AsyncConnection[Any], owner: DiesAfterCommit) -> None:
        self._conn = conn
        self._owner = owner
        self._in_transaction = False
        self._armed = False

    async def execute(self, query: Any, params: Any = None) -> Any:
        cur = await self._conn.execute(query, params)
        if not self._owner.fired and self._owner.marker in str(query):
            if self._in_transaction:
                self._armed = True  # dies once the transaction has committed
            else:
                await self._owner.die(self._conn)
        return cur

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        self._in_transaction = True
        async with self._conn.transaction():
            yield
        self._in_transaction = False
        if self._armed:
            await self._owner.die(self._conn)


@contextlib.contextmanager
def dying(store: PostgresRunStore, marker: str) -> Any:
    original = store._pool
    store._pool = DiesAfterCommit(original, marker)  # type: ignore[assignment]
    try:
        yield store._pool
    finally:
        store._pool = original


async def test_a_save_whose_connection_died_after_commit_knows_it_was_applied(
    pg: PostgresRunStore, tenant: uuid.UUID
) -> None:
    (run,) = await queued(pg, tenant)
    with dying(pg, "WITH run AS") as fault:
        version = await pg.save_run(
            RunSave(
                tenant,
                run.id,
                version=run.version,
                status=RunStatus.COMPLETED,
                state={},
                messages=ANSWER,
                from_index=1,
            )
        )
    assert fault.fired
    done = await pg.get_run(tenant, run.id)
    assert version == run.version + 1 == done.version  # not StaleVersion against itself
    assert await pg.load_messages(tenant, run.session_id) == [Message.user("job 0"), *ANSWER]


async def test_a_claim_whose_connection_died_after_commit_returns_the_run_it_took(
    pg: PostgresRunStore, tenant: uuid.UUID
) -> None:
    runs = await queued(pg, tenant, 2)
    with dying(pg, "FOR UPDATE SKIP LOCKED") as fault:
        lease = await pg.claim_run(tenant, "w", lease_seconds=60)
    assert fault.fired and lease is not None
    assert lease.run_id == runs[0].id and lease.attempt == 1
    untouched = await pg.get_run(tenant, runs[1].id)  # the retry did not take a second run
    assert (untouched.status, untouched.attempts) == (RunStatus.QUEUED, 0)


async def test_a_release_whose_connection_died_after_commit_reports_it_released(
    pg: PostgresRunStore, tenant: uuid.UUID
) -> None:
    (run,) = await queued(pg, tenant)
    lease = await pg.claim_run(tenant, "w", lease_seconds=60)
    assert lease is not None
    with dying(pg, "lease_owner = NULL") as fault:
        assert await pg.release_run(lease) is True
    assert fault.fired
    back = await pg.get_run(tenant, run.id)
    assert (back.status, back.attempts, back.lease_owner) == (RunStatus.QUEUED, 0, None)


async def test_a_new_run_whose_connection_died_after_commit_is_created_once(
    pg: PostgresRunStore, tenant: uuid.UUID
) -> None:
    a = await pg.put_agent(tenant, "test", {"name": "test"})
    first = await pg.create_run(tenant, a.id, Message.user("one"))
    await pg.save_run(RunSave(tenant, first.id, version=0, status=RunStatus.COMPLETED, state={}))
    with dying(pg, "INSERT INTO runs") as fault:
        second = await pg.create_run(tenant, a.id, Message.user("two"), session_id=first.session_id)
    assert fault.fired
    assert [r.id for r in await pg.list_runs(tenant)] == [second.id, first.id]
    history = await pg.load_messages(tenant, first.session_id)
    assert history == [Message.user("one"), Message.user("two")]


async def test_dead_connections_in_the_pool_are_replaced_before_they_are_used(
    postgres_url: str, postgres_admin_url: str, app_name: str, tenant: uuid.UUID
) -> None:
    # No retries at all: only the pool's check can keep the next call from failing.
    store = await PostgresRunStore.open(named(postgres_url, app_name), retry=StoreRetryPolicy(0))
    async with store:
        (run,) = await queued(store, tenant)
        assert await terminate(postgres_admin_url, app_name) >= 1
        assert (await store.get_run(tenant, run.id)).id == run.id


async def test_a_database_away_longer_than_the_retry_time_is_reported_then_recovered_from(
    database_link: Any, postgres_url: str, tenant: uuid.UUID
) -> None:
    store = await PostgresRunStore.open(
        database_link.url(postgres_url), retry=StoreRetryPolicy(0.5)
    )
    async with store:
        (run,) = await queued(store, tenant)
        database_link.cut()
        with pytest.raises(StoreUnavailable, match=r"was unavailable for 0\.5 s .*RETRY_SECONDS"):
            await store.get_run(tenant, run.id)
        await database_link.restore()
        # The same store recovers by itself (the pool reconnects within seconds).
        with anyio.fail_after(15):
            while True:
                with contextlib.suppress(StoreUnavailable):
                    assert (await store.get_run(tenant, run.id)).status is RunStatus.QUEUED
                    break


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (psycopg.errors.AdminShutdown("terminating connection"), True),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
        (psycopg.errors.ConnectionFailure("connection failure"), True),
        (psycopg.errors.TooManyConnections("too many clients"), True),
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (PoolTimeout("couldn't get a connection after 15 s"), True),
        (psycopg.errors.ProgramLimitExceeded("value too long"), False),
        (psycopg.errors.QueryCanceled("canceling statement"), False),
        (psycopg.errors.UniqueViolation("duplicate key"), False),
        (psycopg.errors.UntranslatableCharacter("\\u0000"), False),
        (ValueError("not a database error"), False),
    ],
)
def test_infrastructure_faults_are_told_from_statement_errors(
    exc: Exception, transient: bool
) -> None:
    assert is_transient(exc) is transient


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
