"""``PostgresRunStore``: runs on PostgreSQL, shared by any number of workers on any number of
machines (psycopg 3, async, with a ``psycopg_pool`` connection pool; asyncio only).

``open`` does not migrate: a shared database is upgraded once, on purpose, with
``hango db upgrade``. It refuses (``SchemaError``) a database that is behind this code (run
``hango db upgrade``) or ahead of it (upgrade hango). Every statement names the tenant; a save
is one statement (one round trip), so it is atomic without an explicit transaction.

Transient faults (``is_transient``: the connection was terminated, refused or timed out) are
retried on a fresh connection for ``StoreRetryPolicy.seconds`` (``hango.store.retry``); the pool
checks a connection before handing it out and discards dead ones. A write whose connection
died around COMMIT may have been applied, so each write is repeatable: a save or release
recognises its own ``write_id``, a claim its own lease token, a new run its own id.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio.to_thread
import attrs
import psycopg
from psycopg import sql
from psycopg.rows import DictRow, dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from hango.agent.events import RunStatus
from hango.convert import message_to_json
from hango.provider.messages import Message
from hango.store import migrate
from hango.store.base import (
    AgentRecord,
    IdKind,
    Lease,
    LeaseLost,
    NotFound,
    RunRecord,
    RunSave,
    SessionBusy,
    StaleVersion,
    StoreError,
    StoreUnavailable,
    UnstorableContent,
    agent_id_for,
    message_from_row,
    run_busy,
    run_from_row,
    sound,
    storable_json,
    storable_text,
)
from hango.store.retry import StoreRetryPolicy, one_line, with_retries

T = TypeVar("T")

log = logging.getLogger("hango.store")

_Conn = psycopg.AsyncConnection[DictRow]

_RUN_COLUMNS = (
    "id, tenant_id, session_id, agent_id, status, error, stop_reason, message_start, version, "
    "state_json, created_at, updated_at, attempts, lease_owner, lease_expires_at, config_json, "
    "parent_run_id, parent_tool_call_id"
)

# One statement: the version (and lease) check, the run row and the session's messages from
# from_index on. New messages are upserted and only rows past the new end are deleted, so no two
# parts of the statement touch the same row (PostgreSQL runs the parts of a WITH on one
# snapshot).
_SAVE = """
WITH run AS (
    UPDATE runs SET status = %(status)s, error = %(error)s, stop_reason = %(stop_reason)s,
        state_json = COALESCE(%(state)s::jsonb, state_json),
        version = version + 1, updated_at = now(), write_id = %(write_id)s
    WHERE tenant_id = %(tenant)s AND id = %(run)s AND version = %(version)s
        AND (%(lease)s::uuid IS NULL OR lease_token = %(lease)s::uuid)
    RETURNING session_id
), trimmed AS (
    DELETE FROM messages m USING run
    WHERE %(replace)s AND m.tenant_id = %(tenant)s AND m.session_id = run.session_id
        AND m.seq >= %(end)s
), written AS (
    INSERT INTO messages (tenant_id, session_id, seq, run_id, role, content)
    SELECT %(tenant)s, run.session_id, %(start)s + n.ord - 1, %(run)s, n.role, n.content::json
    FROM run, unnest(%(roles)s::text[], %(contents)s::text[])
        WITH ORDINALITY AS n(role, content, ord)
    ON CONFLICT (tenant_id, session_id, seq) DO UPDATE
        SET run_id = EXCLUDED.run_id, role = EXCLUDED.role, content = EXCLUDED.content
)
SELECT session_id FROM run
"""

_CLAIM = """
WITH next AS (
    SELECT tenant_id, id FROM runs
    WHERE tenant_id = %(tenant)s
        AND ((status = 'queued' AND (lease_token IS NULL OR lease_expires_at < now()))
            -- A crashed terminal's run (a direct claim) is its user's to resume, not ours.
            OR (status IN ('running', 'cancelled') AND lease_kind = 'worker'
                AND lease_expires_at < now()))
        -- Only runs whose recorded stack this worker can build (NULL: no filter).
        AND (%(installed)s::text[] IS NULL OR NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(config_json -> 'stack') AS m
            WHERE NOT (m ->> 'name' = ANY(%(installed)s::text[]))))
        -- A run recorded for another engine (hango submit --engine) is that engine's alone.
        AND config_json -> 'engine' IS NULL
    ORDER BY created_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE runs r SET status = 'running', lease_owner = %(owner)s, lease_token = %(token)s,
    lease_expires_at = now() + make_interval(secs => %(seconds)s), lease_kind = 'worker',
    attempts = r.attempts + 1, version = r.version + 1, updated_at = now()
FROM next WHERE r.tenant_id = next.tenant_id AND r.id = next.id
RETURNING r.id, r.attempts, r.lease_expires_at
"""

# A claim whose connection died around COMMIT: the run it took holds its token.
_CLAIMED = """
SELECT id, attempts, lease_expires_at FROM runs
WHERE tenant_id = %(tenant)s AND lease_token = %(token)s
"""

# A direct claim (acquire_run) only lets go: the status stays what its executor saved. A
# worker's hands an unfinished run back to the queue.
_RELEASE = """
UPDATE runs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL,
    status = CASE WHEN lease_kind = 'worker' AND status IN ('queued', 'running', 'cancelled')
        THEN 'queued' ELSE status END,
    -- A hand-back or a suspension is not an attempt: the count goes back to what it was
    -- before this claim. A killed worker's (counted) is, as a crash is.
    attempts = CASE WHEN lease_kind = 'worker' AND NOT %(counted)s
            AND status IN ('queued', 'running', 'cancelled', 'suspended')
        THEN greatest(attempts - 1, 0) ELSE attempts END,
    error = CASE WHEN lease_kind = 'worker' AND status IN ('queued', 'running', 'cancelled')
        THEN NULL ELSE error END,
    lease_kind = NULL, version = version + 1, updated_at = now(), write_id = %(write_id)s
WHERE tenant_id = %(tenant)s AND id = %(run)s AND lease_token = %(token)s
RETURNING id
"""

# Free means no live claim; a row lock makes a second acquisition at the same moment wait and
# then find the first one's claim.
_ACQUIRE = """
UPDATE runs SET lease_owner = %(owner)s, lease_token = %(token)s,
    lease_expires_at = now() + make_interval(secs => %(seconds)s), lease_kind = 'direct',
    version = version + 1, updated_at = now()
WHERE tenant_id = %(tenant)s AND id = %(run)s
    AND (lease_token IS NULL OR lease_expires_at < now())
RETURNING attempts, lease_expires_at
"""

#: Seconds the pool keeps reconnecting one connection before it gives up (see ``open``).
RECONNECT_SECONDS: Final = 5.0

#: SQLSTATEs of failures that are the server's state, not the statement's: the connection
#: class 08, the server shutting down or starting (57P01-57P03), too many connections.
_TRANSIENT_STATES: Final = frozenset({"57P01", "57P02", "57P03", "53300"})


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is an infrastructure fault worth retrying on a fresh connection: the
    pool had no connection in time (``PoolTimeout``), the connection failed or was terminated
    (an ``OperationalError`` without a server SQLSTATE, or class 08), the server is shutting
    down, starting up or full. Statement errors (constraints, bad values, limits) are not."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _TRANSIENT_STATES


def channel(tenant_id: uuid.UUID) -> str:
    """The NOTIFY channel of a tenant's queue (the trigger of migration 0003 sends on it)."""
    return f"hango_runs_{tenant_id.hex}"


def conninfo(url: str) -> str:
    """A libpq URL for psycopg: ``postgresql+psycopg://`` and ``postgres://`` normalised."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


class PostgresRunStore:
    """A ``RunStore`` on PostgreSQL. Open with ``await PostgresRunStore.open(url)``;
    ``aclose()`` when done (or ``async with``). Needs the asyncio backend (psycopg)."""

    def __init__(
        self, pool: AsyncConnectionPool[_Conn], conninfo: str, retry: StoreRetryPolicy
    ) -> None:
        self._pool = pool
        self._conninfo = conninfo
        self.retry = retry

    @classmethod
    async def open(
        cls, url: str, *, max_connections: int = 10, retry: StoreRetryPolicy | None = None
    ) -> PostgresRunStore:
        """Connect to ``url`` (``postgresql://...``) with a pool of up to ``max_connections``;
        transient faults of later calls are retried as ``retry`` says (default: 15 s).

        Raises ``SchemaError`` when the schema is not exactly this code's (behind: run
        ``hango db upgrade``; ahead: upgrade hango), ``StoreUnavailable`` when the server cannot
        be reached now (a caller may wait and try again: ``hango worker`` does) and
        ``StoreError`` for any other failure to open."""
        retry = retry or StoreRetryPolicy()
        try:
            await anyio.to_thread.run_sync(migrate.check, url)
        except psycopg.Error as exc:
            kind = StoreUnavailable if is_transient(exc) else StoreError
            raise kind(f"cannot open the PostgreSQL database: {one_line(exc)}") from None
        info = conninfo(url)
        pool = AsyncConnectionPool(
            info,
            min_size=1,
            max_size=max_connections,
            open=False,
            connection_class=psycopg.AsyncConnection[DictRow],
            kwargs={"autocommit": True, "row_factory": dict_row},
            # A connection the server terminated while it sat in the pool is found out and
            # replaced before it is handed out, instead of failing the next statement.
            check=AsyncConnectionPool.check_connection,
            # Waiting for a connection is bounded by the retry time, not the pool's 30 s.
            timeout=max(retry.seconds, 1.0),
            # The pool reconnects with a doubling delay; giving up after a few seconds lets
            # the next caller start again from a 1 s delay, so after an outage of any length
            # the store is back within about 2 s of the database.
            reconnect_timeout=RECONNECT_SECONDS,
        )
        try:
            await pool.open(wait=True, timeout=10)
        except PoolTimeout as exc:
            await pool.close()
            raise StoreUnavailable(f"cannot connect to PostgreSQL: {one_line(exc)}") from None
        return cls(pool, info, retry)

    async def __aenter__(self) -> PostgresRunStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._pool.close()

    async def _retried(self, what: str, call: Callable[[int], Awaitable[T]]) -> T:
        """``call(attempt)`` under the retry policy (see ``hango.store.retry.with_retries``)."""
        return await with_retries(call, policy=self.retry, transient=is_transient, what=what)

    async def _one(self, what: str, query: str, params: dict[str, Any]) -> DictRow | None:
        """The first row of one idempotent statement, retried on transient faults."""

        async def attempt(_: int) -> DictRow | None:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query, params)
                return await cur.fetchone()

        return await self._retried(what, attempt)

    # -- agents ----------------------------------------------------------------------------

    async def put_agent(
        self, tenant_id: uuid.UUID, name: str, definition: dict[str, Any]
    ) -> AgentRecord:
        canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"))
        agent_id = agent_id_for(tenant_id, canonical)

        async def attempt(_: int) -> None:  # ON CONFLICT DO NOTHING: repeatable
            async with self._pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO agents (tenant_id, id, name, definition) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT DO NOTHING",
                    (tenant_id, agent_id, name, Jsonb(definition)),
                )

        await self._retried(f"storing agent {name!r}", attempt)
        return AgentRecord(agent_id, tenant_id, name, definition)

    async def get_agent(self, tenant_id: uuid.UUID, agent_id: uuid.UUID) -> AgentRecord:
        row = await self._one(
            f"reading agent {agent_id}",
            "SELECT name, definition FROM agents WHERE tenant_id = %(tenant)s AND id = %(id)s",
            {"tenant": tenant_id, "id": agent_id},
        )
        if row is None:
            raise NotFound(f"agent {agent_id} not found")
        return AgentRecord(agent_id, tenant_id, row["name"], row["definition"])

    # -- runs ------------------------------------------------------------------------------

    async def create_run(
        self,
        tenant_id: uuid.UUID,
        agent_id: uuid.UUID,
        message: Message,
        *,
        session_id: uuid.UUID | None = None,
        status: RunStatus = RunStatus.RUNNING,
        config: dict[str, Any] | None = None,
        parent_run_id: uuid.UUID | None = None,
        parent_tool_call_id: str | None = None,
    ) -> RunRecord:
        run_id = uuid.uuid4()
        new_session = session_id is None
        session = uuid.uuid4() if session_id is None else session_id
        content = storable_json(message_to_json(message)["content"], f"run {run_id}: its message")
        config_text = storable_json(config or {}, f"run {run_id}: its configuration")

        async def attempt(n: int) -> DictRow | None:
            async with self._pool.connection() as conn, conn.transaction():
                if n > 1:  # the first attempt may have committed before its connection died
                    cur = await conn.execute(
                        f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = %s AND id = %s",
                        (tenant_id, run_id),
                    )
                    if (done := await cur.fetchone()) is not None:
                        return done
                if new_session:
                    await conn.execute(
                        "INSERT INTO sessions (tenant_id, id, agent_id) VALUES (%s, %s, %s)",
                        (tenant_id, session, agent_id),
                    )
                else:
                    # The row lock serialises runs created on one session, as SQLite's write
                    # lock does: the busy check and the message index cannot race.
                    cur = await conn.execute(
                        "SELECT 1 FROM sessions WHERE tenant_id = %s AND id = %s FOR UPDATE",
                        (tenant_id, session),
                    )
                    if await cur.fetchone() is None:
                        raise NotFound(f"session {session} not found")
                    cur = await conn.execute(
                        "SELECT id FROM runs WHERE tenant_id = %s AND session_id = %s "
                        "AND status IN ('queued', 'running', 'suspended') LIMIT 1",
                        (tenant_id, session),
                    )
                    busy = await cur.fetchone()
                    if busy is not None:
                        raise SessionBusy(f"session {session} has an active run {busy['id']}")
                # The next index from the primary key's last entry: one index probe, however
                # long the session (a count would read every message).
                cur = await conn.execute(
                    "SELECT coalesce(max(seq) + 1, 0) AS n FROM messages "
                    "WHERE tenant_id = %s AND session_id = %s",
                    (tenant_id, session),
                )
                counted = await cur.fetchone()
                start = counted["n"] if counted else 0
                await conn.execute(
                    "INSERT INTO messages (tenant_id, session_id, seq, run_id, role, content) "
                    "VALUES (%s, %s, %s, %s, %s, %s::json)",
                    (tenant_id, session, start, run_id, message.role, content),
                )
                if parent_run_id is not None:
                    cur = await conn.execute(
                        "SELECT 1 FROM runs WHERE tenant_id = %s AND parent_run_id = %s "
                        "AND parent_tool_call_id = %s",
                        (tenant_id, parent_run_id, parent_tool_call_id),
                    )
                    if await cur.fetchone() is not None:
                        raise SessionBusy(
                            f"run {parent_run_id} has a child run for tool call "
                            f"{parent_tool_call_id}"
                        )
                cur = await conn.execute(
                    "INSERT INTO runs (tenant_id, id, session_id, agent_id, status, "
                    "message_start, config_json, parent_run_id, parent_tool_call_id) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s) "
                    f"RETURNING {_RUN_COLUMNS}",
                    (
                        tenant_id,
                        run_id,
                        session,
                        agent_id,
                        status.value,
                        start,
                        config_text,
                        parent_run_id,
                        parent_tool_call_id,
                    ),
                )
                return await cur.fetchone()

        row = await self._retried(f"creating run {run_id}", attempt)
        assert row is not None  # INSERT ... RETURNING returns the row
        return run_from_row(row)

    async def get_run(self, tenant_id: uuid.UUID, run_id: uuid.UUID) -> RunRecord:
        row = await self._one(
            f"reading run {run_id}",
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = %(tenant)s AND id = %(id)s",
            {"tenant": tenant_id, "id": run_id},
        )
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return sound(run_from_row(row), run_id)

    async def list_runs(
        self, tenant_id: uuid.UUID, *, limit: int = 50, session_id: uuid.UUID | None = None
    ) -> list[RunRecord]:
        query = f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = %(tenant)s"
        if session_id is not None:
            query += " AND session_id = %(session)s"
        query += " ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
        params = {"tenant": tenant_id, "session": session_id, "limit": limit}

        async def attempt(_: int) -> list[DictRow]:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query, params)
                return await cur.fetchall()

        return [run_from_row(r) for r in await self._retried("listing runs", attempt)]

    async def child_runs(self, tenant_id: uuid.UUID, parent_run_id: uuid.UUID) -> list[RunRecord]:
        query = (
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = %(tenant)s "
            "AND parent_run_id = %(parent)s ORDER BY created_at, id"
        )
        params = {"tenant": tenant_id, "parent": parent_run_id}

        async def attempt(_: int) -> list[DictRow]:
            async with self._pool.connection() as conn:
                cur = await conn.execute(query, params)
                return await cur.fetchall()

        rows = await self._retried(f"listing the child runs of {parent_run_id}", attempt)
        return [run_from_row(r) for r in rows]

    async def ids_between(
        self,
        tenant_id: uuid.UUID,
        kind: IdKind,
        low: uuid.UUID,
        high: uuid.UUID,
        *,
        limit: int = 10,
    ) -> list[uuid.UUID]:
        table = {"run": "runs", "session": "sessions"}[kind]
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT id FROM {table} WHERE tenant_id = %s AND id BETWEEN %s AND %s "
                "ORDER BY id LIMIT %s",
                (tenant_id, low, high, limit),
            )
            return [r["id"] for r in await cur.fetchall()]

    async def load_messages(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, *, start: int = 0
    ) -> list[Message]:
        async def attempt(_: int) -> list[DictRow]:
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT seq, role, content FROM messages "
                    "WHERE tenant_id = %s AND session_id = %s AND seq >= %s ORDER BY seq",
                    (tenant_id, session_id, start),
                )
                return await cur.fetchall()

        rows = await self._retried(f"loading session {session_id}", attempt)
        return [
            message_from_row(session_id, row["seq"], row["role"], row["content"]) for row in rows
        ]

    async def load_message(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, seq: int
    ) -> Message | None:
        async def attempt(_: int) -> DictRow | None:
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT role, content FROM messages "
                    "WHERE tenant_id = %s AND session_id = %s AND seq = %s",
                    (tenant_id, session_id, seq),
                )
                return await cur.fetchone()

        row = await self._retried(f"loading session {session_id}", attempt)
        return (
            None if row is None else message_from_row(session_id, seq, row["role"], row["content"])
        )

    async def save_run(self, save: RunSave) -> int:
        tenant_id, run_id, version, lease = save.tenant_id, save.run_id, save.version, save.lease
        from_index = save.from_index
        replace = from_index is not None
        new = list(save.messages) if replace else []
        start = from_index if from_index is not None else 0
        write_id = uuid.uuid4()
        params = {
            "tenant": tenant_id,
            "run": run_id,
            "version": version,
            "lease": None if lease is None else lease.token,
            "write_id": write_id,
            "status": save.status.value,
            "error": None if save.error is None else storable_text(save.error),
            "stop_reason": save.stop_reason.value if save.stop_reason else None,
            "state": save.state_text(),
            "replace": replace,
            "start": start,
            "end": start + len(new),
            "roles": [m.role for m in new],
            "contents": [
                storable_json(message_to_json(m)["content"], f"run {run_id}: message {start + i}")
                for i, m in enumerate(new)
            ],
        }

        async def attempt(_: int) -> DictRow | None:
            async with self._pool.connection() as conn:
                try:
                    cur = await conn.execute(_SAVE, params)
                except psycopg.errors.UntranslatableCharacter as exc:
                    raise UnstorableContent(
                        f"run {run_id}: its state holds a NUL character (\\u0000), which "
                        "PostgreSQL's jsonb cannot store; nothing was saved "
                        f"({exc.diag.message_primary})"
                    ) from exc
                if await cur.fetchone() is not None:
                    return None
                cur = await conn.execute(
                    "SELECT version, lease_token, write_id FROM runs "
                    "WHERE tenant_id = %s AND id = %s",
                    (tenant_id, run_id),
                )
                current = await cur.fetchone()
            if current is None:
                raise NotFound(f"run {run_id} not found")
            return current

        current = await self._retried(f"saving run {run_id}", attempt)
        if current is None or current["write_id"] == write_id:
            return version + 1  # saved (by an attempt whose connection died after COMMIT)
        if lease is not None and current["lease_token"] != lease.token:
            raise LeaseLost(
                f"run {run_id}: not saved: the lease of {lease.owner} is lost (another worker "
                "claimed the run, or it was released)"
            )
        raise StaleVersion(
            f"run {run_id}: save with version {version} but the stored version is "
            f"{current['version']}; another writer saved this run"
        )

    # -- claims ----------------------------------------------------------------------------

    async def acquire_run(
        self, tenant_id: uuid.UUID, run_id: uuid.UUID, owner: str, *, lease_seconds: float
    ) -> Lease:
        token = uuid.uuid4()
        params = {
            "tenant": tenant_id,
            "run": run_id,
            "owner": owner,
            "token": token,
            "seconds": lease_seconds,
        }

        async def attempt(n: int) -> DictRow | None:
            async with self._pool.connection() as conn:
                if n > 1:  # the first attempt may have taken the claim before its connection died
                    cur = await conn.execute(_CLAIMED, params)
                    if (claimed := await cur.fetchone()) is not None:
                        return claimed
                cur = await conn.execute(_ACQUIRE, params)
                if (row := await cur.fetchone()) is not None:
                    return row
                cur = await conn.execute(
                    "SELECT lease_owner, lease_expires_at FROM runs "
                    "WHERE tenant_id = %(tenant)s AND id = %(run)s",
                    params,
                )
                held = await cur.fetchone()
            if held is None:
                raise NotFound(f"run {run_id} not found")
            raise run_busy(run_id, held["lease_owner"], held["lease_expires_at"])

        row = await self._retried(f"claiming run {run_id}", attempt)
        assert row is not None  # a run not acquired raised
        return Lease(
            tenant_id, run_id, token, owner, row["attempts"], lease_seconds, row["lease_expires_at"]
        )

    # -- the queue -------------------------------------------------------------------------

    async def claim_run(
        self,
        tenant_id: uuid.UUID,
        owner: str,
        *,
        lease_seconds: float,
        installed: Collection[str] | None = None,
    ) -> Lease | None:
        token = uuid.uuid4()
        params = {
            "tenant": tenant_id,
            "owner": owner,
            "token": token,
            "seconds": lease_seconds,
            "installed": None if installed is None else sorted(installed),
        }

        async def attempt(n: int) -> DictRow | None:
            async with self._pool.connection() as conn:
                if n > 1:  # the first attempt may have claimed a run before its connection died
                    cur = await conn.execute(_CLAIMED, params)
                    if (claimed := await cur.fetchone()) is not None:
                        return claimed
                cur = await conn.execute(_CLAIM, params)
                return await cur.fetchone()

        row = await self._retried("claiming a run", attempt)
        if row is None:
            return None
        return Lease(
            tenant_id,
            row["id"],
            token,
            owner,
            row["attempts"],
            lease_seconds,
            row["lease_expires_at"],
        )

    async def renew_lease(self, lease: Lease) -> Lease:
        row = await self._one(  # sets the expiry from now: repeatable
            f"renewing the lease of run {lease.run_id}",
            "UPDATE runs SET lease_expires_at = now() + make_interval(secs => %(seconds)s) "
            "WHERE tenant_id = %(tenant)s AND id = %(run)s AND lease_token = %(token)s "
            "RETURNING lease_expires_at",
            {
                "seconds": lease.seconds,
                "tenant": lease.tenant_id,
                "run": lease.run_id,
                "token": lease.token,
            },
        )
        if row is None:
            raise LeaseLost(f"run {lease.run_id}: the lease of {lease.owner} is lost")
        expires: dt.datetime = row["lease_expires_at"]
        return attrs.evolve(lease, expires_at=expires)

    async def release_run(self, lease: Lease, *, counted: bool = False) -> bool:
        write_id = uuid.uuid4()
        params = {
            "tenant": lease.tenant_id,
            "run": lease.run_id,
            "token": lease.token,
            "write_id": write_id,
            "counted": counted,
        }

        async def attempt(n: int) -> bool:
            async with self._pool.connection() as conn:
                cur = await conn.execute(_RELEASE, params)
                if await cur.fetchone() is not None:
                    return True
                if n == 1:
                    return False
                # The first attempt may have released it before its connection died.
                cur = await conn.execute(
                    "SELECT 1 FROM runs WHERE tenant_id = %(tenant)s AND id = %(run)s "
                    "AND write_id = %(write_id)s",
                    params,
                )
                return await cur.fetchone() is not None

        return await self._retried(f"releasing run {lease.run_id}", attempt)

    @contextlib.asynccontextmanager
    async def watch_queue(self, tenant_id: uuid.UUID) -> AsyncIterator[_ListenWatch]:
        watch = _ListenWatch(self._conninfo, channel(tenant_id))
        try:
            await watch.connect()
        except psycopg.OperationalError as exc:
            if not is_transient(exc):
                raise
            # The database is away: the first wait connects, and returns at once so that
            # the caller looks for runs queued meanwhile.
            log.warning("listening for queued runs failed (retrying): %s", one_line(exc))
        try:
            yield watch
        finally:
            await watch.aclose()


class _ListenWatch:
    """LISTEN on one channel, on a connection of its own (a pooled connection would be handed
    to other queries, and a notification goes to the session that listens)."""

    def __init__(self, conninfo: str, channel: str) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def connect(self) -> None:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        self._conn = conn

    async def wait(self) -> None:
        if self._conn is None:
            # Reconnecting after a failure: runs may have been queued meanwhile, so return.
            await self.connect()
            return
        notifies = self._conn.notifies(stop_after=1)
        try:
            async with contextlib.aclosing(notifies):
                async for _ in notifies:
                    return
        except psycopg.OperationalError:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
