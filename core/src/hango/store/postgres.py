"""``PostgresRunStore``: runs on PostgreSQL, shared by any number of workers on any number of
machines (psycopg 3, async, with a ``psycopg_pool`` connection pool; asyncio only).

``open`` does not migrate: a shared database is upgraded once, on purpose, with
``hango db upgrade``. It refuses (``SchemaError``) a database that is behind this code (run
``hango db upgrade``) or ahead of it (upgrade hango). Every statement names the tenant; a save
is one statement (one round trip), so it is atomic without an explicit transaction.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import uuid
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any
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
from hango.provider.messages import Message, StopReason
from hango.store import migrate
from hango.store.base import (
    AgentRecord,
    Lease,
    LeaseLost,
    NotFound,
    RunRecord,
    SessionBusy,
    StaleVersion,
    StoreError,
    agent_id_for,
    message_from_row,
)

_Conn = psycopg.AsyncConnection[DictRow]

_RUN_COLUMNS = (
    "id, tenant_id, session_id, agent_id, status, error, stop_reason, message_start, version, "
    "state_json, created_at, updated_at, attempts, lease_owner, lease_expires_at, config_json"
)

# One statement: the version check, the run row and the session's messages from from_index on.
# New messages are upserted and only rows past the new end are deleted, so no two parts of the
# statement touch the same row (PostgreSQL runs the parts of a WITH on one snapshot).
_SAVE = """
WITH run AS (
    UPDATE runs SET status = %(status)s, error = %(error)s, stop_reason = %(stop_reason)s,
        state_json = COALESCE(%(state)s::jsonb, state_json),
        version = version + 1, updated_at = now()
    WHERE tenant_id = %(tenant)s AND id = %(run)s AND version = %(version)s
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
        AND (status = 'queued'
            OR (status IN ('running', 'cancelled') AND lease_expires_at < now()))
        -- Only runs whose recorded stack this worker can build (NULL: no filter).
        AND (%(installed)s::text[] IS NULL OR NOT EXISTS (
            SELECT 1 FROM jsonb_array_elements(config_json -> 'stack') AS m
            WHERE NOT (m ->> 'name' = ANY(%(installed)s::text[]))))
    ORDER BY created_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE runs r SET status = 'running', lease_owner = %(owner)s, lease_token = %(token)s,
    lease_expires_at = now() + make_interval(secs => %(seconds)s),
    attempts = r.attempts + 1, version = r.version + 1, updated_at = now()
FROM next WHERE r.tenant_id = next.tenant_id AND r.id = next.id
RETURNING r.id, r.attempts, r.lease_expires_at
"""


def channel(tenant_id: uuid.UUID) -> str:
    """The NOTIFY channel of a tenant's queue (the trigger of migration 0003 sends on it)."""
    return f"hango_runs_{tenant_id.hex}"


def conninfo(url: str) -> str:
    """A libpq URL for psycopg: ``postgresql+psycopg://`` and ``postgres://`` normalised."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _run(row: DictRow) -> RunRecord:
    return RunRecord(
        id=row["id"],
        tenant_id=row["tenant_id"],
        session_id=row["session_id"],
        agent_id=row["agent_id"],
        status=RunStatus(row["status"]),
        error=row["error"],
        stop_reason=StopReason(row["stop_reason"]) if row["stop_reason"] else None,
        message_start=row["message_start"],
        version=row["version"],
        state=row["state_json"],
        config=row["config_json"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        attempts=row["attempts"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
    )


class PostgresRunStore:
    """A ``RunStore`` on PostgreSQL. Open with ``await PostgresRunStore.open(url)``;
    ``aclose()`` when done (or ``async with``). Needs the asyncio backend (psycopg)."""

    def __init__(self, pool: AsyncConnectionPool[_Conn], conninfo: str) -> None:
        self._pool = pool
        self._conninfo = conninfo

    @classmethod
    async def open(cls, url: str, *, max_connections: int = 10) -> PostgresRunStore:
        """Connect to ``url`` (``postgresql://...``) with a pool of up to ``max_connections``.

        Raises ``SchemaError`` when the schema is not exactly this code's (behind: run
        ``hango db upgrade``; ahead: upgrade hango) and ``StoreError`` when the server cannot
        be reached."""
        try:
            await anyio.to_thread.run_sync(migrate.check, url)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open the PostgreSQL database: {exc}") from None
        info = conninfo(url)
        pool = AsyncConnectionPool(
            info,
            min_size=1,
            max_size=max_connections,
            open=False,
            connection_class=psycopg.AsyncConnection[DictRow],
            kwargs={"autocommit": True, "row_factory": dict_row},
        )
        try:
            await pool.open(wait=True, timeout=10)
        except PoolTimeout as exc:
            await pool.close()
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from None
        return cls(pool, info)

    async def __aenter__(self) -> PostgresRunStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._pool.close()

    async def _one(self, query: str, params: dict[str, Any]) -> DictRow | None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(query, params)
            return await cur.fetchone()

    # -- agents ----------------------------------------------------------------------------

    async def put_agent(
        self, tenant_id: uuid.UUID, name: str, definition: dict[str, Any]
    ) -> AgentRecord:
        canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"))
        agent_id = agent_id_for(tenant_id, canonical)
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO agents (tenant_id, id, name, definition) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (tenant_id, agent_id, name, Jsonb(definition)),
            )
        return AgentRecord(agent_id, tenant_id, name, definition)

    async def get_agent(self, tenant_id: uuid.UUID, agent_id: uuid.UUID) -> AgentRecord:
        row = await self._one(
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
    ) -> RunRecord:
        run_id = uuid.uuid4()
        async with self._pool.connection() as conn, conn.transaction():
            if session_id is None:
                session_id = uuid.uuid4()
                await conn.execute(
                    "INSERT INTO sessions (tenant_id, id, agent_id) VALUES (%s, %s, %s)",
                    (tenant_id, session_id, agent_id),
                )
            else:
                # The row lock serialises runs created on one session, as SQLite's write
                # lock does: the busy check and the message index cannot race.
                cur = await conn.execute(
                    "SELECT 1 FROM sessions WHERE tenant_id = %s AND id = %s FOR UPDATE",
                    (tenant_id, session_id),
                )
                if await cur.fetchone() is None:
                    raise NotFound(f"session {session_id} not found")
                cur = await conn.execute(
                    "SELECT id FROM runs WHERE tenant_id = %s AND session_id = %s "
                    "AND status IN ('queued', 'running', 'suspended') LIMIT 1",
                    (tenant_id, session_id),
                )
                busy = await cur.fetchone()
                if busy is not None:
                    raise SessionBusy(f"session {session_id} has an active run {busy['id']}")
            cur = await conn.execute(
                "SELECT count(*) AS n FROM messages WHERE tenant_id = %s AND session_id = %s",
                (tenant_id, session_id),
            )
            counted = await cur.fetchone()
            start = counted["n"] if counted else 0
            await conn.execute(
                "INSERT INTO messages (tenant_id, session_id, seq, run_id, role, content) "
                "VALUES (%s, %s, %s, %s, %s, %s::json)",
                (
                    tenant_id,
                    session_id,
                    start,
                    run_id,
                    message.role,
                    _dumps(message_to_json(message)["content"]),
                ),
            )
            cur = await conn.execute(
                "INSERT INTO runs (tenant_id, id, session_id, agent_id, status, message_start, "
                f"config_json) VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb) RETURNING {_RUN_COLUMNS}",
                (
                    tenant_id,
                    run_id,
                    session_id,
                    agent_id,
                    status.value,
                    start,
                    _dumps(config or {}),
                ),
            )
            row = await cur.fetchone()
        assert row is not None  # INSERT ... RETURNING returns the row
        return _run(row)

    async def get_run(self, tenant_id: uuid.UUID, run_id: uuid.UUID) -> RunRecord:
        row = await self._one(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = %(tenant)s AND id = %(id)s",
            {"tenant": tenant_id, "id": run_id},
        )
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return _run(row)

    async def list_runs(
        self, tenant_id: uuid.UUID, *, limit: int = 50, session_id: uuid.UUID | None = None
    ) -> list[RunRecord]:
        query = f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = %(tenant)s"
        if session_id is not None:
            query += " AND session_id = %(session)s"
        query += " ORDER BY created_at DESC, id DESC LIMIT %(limit)s"
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                query, {"tenant": tenant_id, "session": session_id, "limit": limit}
            )
            return [_run(r) for r in await cur.fetchall()]

    async def load_messages(self, tenant_id: uuid.UUID, session_id: uuid.UUID) -> list[Message]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(
                "SELECT seq, role, content FROM messages "
                "WHERE tenant_id = %s AND session_id = %s ORDER BY seq",
                (tenant_id, session_id),
            )
            rows = await cur.fetchall()
        return [
            message_from_row(session_id, row["seq"], row["role"], row["content"]) for row in rows
        ]

    async def save_run(
        self,
        tenant_id: uuid.UUID,
        run_id: uuid.UUID,
        *,
        version: int,
        status: RunStatus,
        state: dict[str, Any] | None,
        messages: Sequence[Message] = (),
        from_index: int | None = None,
        error: str | None = None,
        stop_reason: StopReason | None = None,
    ) -> int:
        replace = from_index is not None
        new = list(messages) if replace else []
        start = from_index if from_index is not None else 0
        params = {
            "tenant": tenant_id,
            "run": run_id,
            "version": version,
            "status": status.value,
            "error": error,
            "stop_reason": stop_reason.value if stop_reason else None,
            "state": None if state is None else _dumps(state),
            "replace": replace,
            "start": start,
            "end": start + len(new),
            "roles": [m.role for m in new],
            "contents": [_dumps(message_to_json(m)["content"]) for m in new],
        }
        async with self._pool.connection() as conn:
            try:
                cur = await conn.execute(_SAVE, params)
            except psycopg.errors.UntranslatableCharacter as exc:
                raise StoreError(
                    f"run {run_id}: nothing saved: its state holds a NUL character (\\u0000), "
                    f"which PostgreSQL's jsonb cannot store ({exc.diag.message_primary})"
                ) from exc
            if await cur.fetchone() is not None:
                return version + 1
            cur = await conn.execute(
                "SELECT version FROM runs WHERE tenant_id = %s AND id = %s", (tenant_id, run_id)
            )
            current = await cur.fetchone()
        if current is None:
            raise NotFound(f"run {run_id} not found")
        raise StaleVersion(
            f"run {run_id}: save with version {version} but the stored version is "
            f"{current['version']}; another writer saved this run"
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
        row = await self._one(
            _CLAIM,
            {
                "tenant": tenant_id,
                "owner": owner,
                "token": token,
                "seconds": lease_seconds,
                "installed": None if installed is None else sorted(installed),
            },
        )
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
        row = await self._one(
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

    async def release_run(self, lease: Lease) -> bool:
        row = await self._one(
            "UPDATE runs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, "
            "status = CASE WHEN status IN ('running', 'cancelled') THEN 'queued' "
            "ELSE status END, "
            # A clean hand-back is no failure, nor is a suspension (the run waits for a
            # person): only claims since the last one count.
            "attempts = CASE WHEN status IN ('running', 'cancelled', 'suspended') THEN 0 "
            "ELSE attempts END, "
            "error = CASE WHEN status IN ('running', 'cancelled') THEN NULL ELSE error END, "
            "version = version + 1, updated_at = now() "
            "WHERE tenant_id = %(tenant)s AND id = %(run)s AND lease_token = %(token)s "
            "RETURNING id",
            {"tenant": lease.tenant_id, "run": lease.run_id, "token": lease.token},
        )
        return row is not None

    @contextlib.asynccontextmanager
    async def watch_queue(self, tenant_id: uuid.UUID) -> AsyncIterator[_ListenWatch]:
        watch = _ListenWatch(self._conninfo, channel(tenant_id))
        await watch.connect()
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
