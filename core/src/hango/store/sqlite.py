"""``SqliteRunStore``: the embedded default store, one SQLite file (stdlib ``sqlite3``).

Calls run in a worker thread, one at a time on one connection (WAL mode), so the event loop
never blocks on disk and writes never interleave. There is no connection to lose: a call either
commits and returns or rolls back and raises, so nothing here is retried (a busy file is waited
for up to 30 s by SQLite's own busy timeout).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sqlite3
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import attrs

from hango.agent.events import RunStatus
from hango.convert import message_to_json
from hango.provider.messages import Message
from hango.redact import redact_url
from hango.store import migrate
from hango.store.base import (
    AgentRecord,
    CorruptRow,
    IdKind,
    Lease,
    LeaseLost,
    NotFound,
    RunRecord,
    RunSave,
    SessionBusy,
    StaleVersion,
    StoreError,
    agent_id_for,
    corrupt_message,
    message_from_row,
    run_busy,
    run_from_row,
    sound,
    storable_json,
    storable_text,
    utcnow,
)

T = TypeVar("T")

_RUN_COLUMNS = (
    "id, tenant_id, session_id, agent_id, status, error, stop_reason, message_start, version, "
    "state_json, created_at, updated_at, attempts, lease_owner, lease_expires_at, config_json, "
    "parent_run_id, parent_tool_call_id"
)

#: How often an idle worker on SQLite looks for work: SQLite has no notifications.
POLL_SECONDS = 0.5


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///PATH`` URL (relative PATH is relative to the working dir)."""
    if not url.startswith("sqlite:///"):
        raise ValueError(f"not a sqlite URL: {redact_url(url)!r} (expected sqlite:///PATH)")
    return Path(url.removeprefix("sqlite:///"))


def _lease_time(at: dt.datetime) -> str:
    # Always with microseconds, so lease times compare correctly as text in SQL.
    return at.isoformat(timespec="microseconds")


def _parse_time(text: str | None) -> dt.datetime | None:
    return None if text is None else dt.datetime.fromisoformat(text)


class SqliteRunStore:
    """A ``RunStore`` on one SQLite file. Open with ``await SqliteRunStore.open(url)``, which
    creates the file and applies migrations; ``aclose()`` when done (or ``async with``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = anyio.Lock()

    @classmethod
    async def open(cls, url: str) -> SqliteRunStore:
        """Raises ``SchemaError`` for a database newer than this code and ``StoreError`` for
        a file SQLite cannot use."""
        path = sqlite_path(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if str(path) == ":memory:":
                conn = await anyio.to_thread.run_sync(cls._connect_memory)
                return cls(conn)
            await anyio.to_thread.run_sync(migrate.upgrade, url)
            conn = await anyio.to_thread.run_sync(cls._connect, path)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the SQLite database {path}: {exc}") from None
        return cls(conn)

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    @classmethod
    def _connect_memory(cls) -> sqlite3.Connection:
        # A ``:memory:`` database lives only on its own connection, and the migrations run on
        # yoyo's: migrate a temporary file, then copy it into a fresh in-memory database.
        with tempfile.TemporaryDirectory() as folder:
            file = Path(folder) / "hango.db"
            migrate.upgrade(f"sqlite:///{file}")
            conn = cls._connect(Path(":memory:"))
            source = sqlite3.connect(file)
            try:
                source.backup(conn)
            finally:
                source.close()
        return conn

    async def __aenter__(self) -> SqliteRunStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        async with self._lock:
            self._conn.close()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._lock:
            return await anyio.to_thread.run_sync(fn, *args)

    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    # -- agents ----------------------------------------------------------------------------

    async def put_agent(
        self, tenant_id: uuid.UUID, name: str, definition: dict[str, Any]
    ) -> AgentRecord:
        canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"))
        agent_id = agent_id_for(tenant_id, canonical)

        def put(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO agents (tenant_id, id, name, definition, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (str(tenant_id), str(agent_id), name, canonical, utcnow().isoformat()),
            )

        await self._call(self._tx, put)
        return AgentRecord(agent_id, tenant_id, name, definition)

    async def get_agent(self, tenant_id: uuid.UUID, agent_id: uuid.UUID) -> AgentRecord:
        def get() -> sqlite3.Row | None:
            return self._conn.execute(  # type: ignore[no-any-return]
                "SELECT name, definition FROM agents WHERE tenant_id = ? AND id = ?",
                (str(tenant_id), str(agent_id)),
            ).fetchone()

        row = await self._call(get)
        if row is None:
            raise NotFound(f"agent {agent_id} not found")
        try:
            definition = json.loads(row["definition"])
        except ValueError as exc:
            raise CorruptRow(f"agent {agent_id}: agents.definition: not JSON ({exc})") from None
        if not isinstance(definition, dict):
            kind = type(definition).__name__
            raise CorruptRow(f"agent {agent_id}: agents.definition: not a JSON object (a {kind})")
        return AgentRecord(agent_id, tenant_id, row["name"], definition)

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
        tenant = str(tenant_id)
        run_id = uuid.uuid4()
        now = utcnow().isoformat()
        content = storable_json(message_to_json(message)["content"], f"run {run_id}: its message")
        config_text = storable_json(config or {}, f"run {run_id}: its configuration")

        def create(conn: sqlite3.Connection) -> RunRecord:
            nonlocal session_id
            if session_id is None:
                session_id = uuid.uuid4()
                conn.execute(
                    "INSERT INTO sessions (tenant_id, id, agent_id, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (tenant, str(session_id), str(agent_id), now),
                )
            else:
                exists = conn.execute(
                    "SELECT 1 FROM sessions WHERE tenant_id = ? AND id = ?",
                    (tenant, str(session_id)),
                ).fetchone()
                if exists is None:
                    raise NotFound(f"session {session_id} not found")
                busy = conn.execute(
                    "SELECT id FROM runs WHERE tenant_id = ? AND session_id = ? "
                    "AND status IN ('queued', 'running', 'suspended')",
                    (tenant, str(session_id)),
                ).fetchone()
                if busy is not None:
                    raise SessionBusy(f"session {session_id} has an active run {busy['id']}")
            # The next index from the primary key's last entry: one index probe, however long
            # the session (a count would read every message).
            start = conn.execute(
                "SELECT coalesce(max(seq) + 1, 0) FROM messages "
                "WHERE tenant_id = ? AND session_id = ?",
                (tenant, str(session_id)),
            ).fetchone()[0]
            conn.execute(
                "INSERT INTO messages (tenant_id, session_id, seq, run_id, role, content) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (tenant, str(session_id), start, str(run_id), message.role, content),
            )
            if (
                parent_run_id is not None
                and conn.execute(
                    "SELECT 1 FROM runs WHERE tenant_id = ? AND parent_run_id = ? "
                    "AND parent_tool_call_id = ?",
                    (tenant, str(parent_run_id), parent_tool_call_id),
                ).fetchone()
            ):
                raise SessionBusy(
                    f"run {parent_run_id} has a child run for tool call {parent_tool_call_id}"
                )
            conn.execute(
                "INSERT INTO runs (tenant_id, id, session_id, agent_id, status, message_start, "
                "created_at, updated_at, config_json, parent_run_id, parent_tool_call_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant,
                    str(run_id),
                    str(session_id),
                    str(agent_id),
                    status.value,
                    start,
                    now,
                    now,
                    config_text,
                    None if parent_run_id is None else str(parent_run_id),
                    parent_tool_call_id,
                ),
            )
            return self._get_run(conn, tenant_id, run_id)

        return await self._call(self._tx, create)

    def _get_run(
        self, conn: sqlite3.Connection, tenant_id: uuid.UUID, run_id: uuid.UUID
    ) -> RunRecord:
        row = conn.execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = ? AND id = ?",
            (str(tenant_id), str(run_id)),
        ).fetchone()
        if row is None:
            raise NotFound(f"run {run_id} not found")
        return run_from_row(row)

    async def get_run(self, tenant_id: uuid.UUID, run_id: uuid.UUID) -> RunRecord:
        return sound(await self._call(self._get_run, self._conn, tenant_id, run_id), run_id)

    async def list_runs(
        self, tenant_id: uuid.UUID, *, limit: int = 50, session_id: uuid.UUID | None = None
    ) -> list[RunRecord]:
        sql = f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = ?"
        args: list[Any] = [str(tenant_id)]
        if session_id is not None:
            sql += " AND session_id = ?"
            args.append(str(session_id))
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        args.append(limit)

        def fetch() -> list[RunRecord]:
            return [run_from_row(r) for r in self._conn.execute(sql, args).fetchall()]

        return await self._call(fetch)

    async def child_runs(self, tenant_id: uuid.UUID, parent_run_id: uuid.UUID) -> list[RunRecord]:
        sql = (
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = ? AND parent_run_id = ? "
            "ORDER BY created_at, rowid"
        )

        def fetch() -> list[RunRecord]:
            rows = self._conn.execute(sql, (str(tenant_id), str(parent_run_id))).fetchall()
            return [run_from_row(r) for r in rows]

        return await self._call(fetch)

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
        # Ids are stored as canonical lowercase text, which sorts as the UUIDs do.
        sql = (
            f"SELECT id FROM {table} WHERE tenant_id = ? AND id BETWEEN ? AND ? ORDER BY id LIMIT ?"
        )

        def fetch() -> list[uuid.UUID]:
            rows = self._conn.execute(sql, (str(tenant_id), str(low), str(high), limit))
            return [uuid.UUID(r["id"]) for r in rows.fetchall()]

        return await self._call(fetch)

    async def load_messages(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, *, start: int = 0
    ) -> list[Message]:
        def fetch() -> list[sqlite3.Row]:
            return self._conn.execute(
                "SELECT seq, role, content FROM messages WHERE tenant_id = ? AND session_id = ? "
                "AND seq >= ? ORDER BY seq",
                (str(tenant_id), str(session_id), start),
            ).fetchall()

        out = []
        for row in await self._call(fetch):
            try:
                content = json.loads(row["content"])
            except ValueError as exc:
                raise corrupt_message(session_id, row["seq"], exc) from exc
            out.append(message_from_row(session_id, row["seq"], row["role"], content))
        return out

    async def load_message(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, seq: int
    ) -> Message | None:
        def fetch() -> sqlite3.Row | None:
            row: sqlite3.Row | None = self._conn.execute(
                "SELECT role, content FROM messages "
                "WHERE tenant_id = ? AND session_id = ? AND seq = ?",
                (str(tenant_id), str(session_id), seq),
            ).fetchone()
            return row

        row = await self._call(fetch)
        if row is None:
            return None
        try:
            content = json.loads(row["content"])
        except ValueError as exc:
            raise corrupt_message(session_id, seq, exc) from exc
        return message_from_row(session_id, seq, row["role"], content)

    async def save_run(self, save: RunSave) -> int:
        tenant_id, run_id, version, lease = save.tenant_id, save.run_id, save.version, save.lease
        from_index, error, stop_reason = save.from_index, save.error, save.stop_reason
        tenant = str(tenant_id)
        token = None if lease is None else str(lease.token)
        state_text = save.state_text()
        start = from_index if from_index is not None else 0
        rows = [
            (
                tenant,
                start + i,
                str(run_id),
                m.role,
                storable_json(message_to_json(m)["content"], f"run {run_id}: message {start + i}"),
            )
            for i, m in enumerate(save.messages)
        ]

        def write(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "UPDATE runs SET status = ?, error = ?, stop_reason = ?, "
                "state_json = COALESCE(?, state_json), "
                "version = version + 1, updated_at = ? "
                "WHERE tenant_id = ? AND id = ? AND version = ? "
                "AND (? IS NULL OR lease_token = ?) RETURNING session_id",
                (
                    save.status.value,
                    None if error is None else storable_text(error),
                    stop_reason.value if stop_reason else None,
                    state_text,
                    utcnow().isoformat(),
                    tenant,
                    str(run_id),
                    version,
                    token,
                    token,
                ),
            )
            hit = cur.fetchone()
            if hit is None:
                current = conn.execute(
                    "SELECT version, lease_token FROM runs WHERE tenant_id = ? AND id = ?",
                    (tenant, str(run_id)),
                ).fetchone()
                if current is None:
                    raise NotFound(f"run {run_id} not found")
                if lease is not None and current["lease_token"] != token:
                    raise LeaseLost(
                        f"run {run_id}: not saved: the lease of {lease.owner} is lost (another "
                        "worker claimed the run, or it was released)"
                    )
                raise StaleVersion(
                    f"run {run_id}: save with version {version} but the stored version is "
                    f"{current['version']}; another writer saved this run"
                )
            if from_index is None:
                return version + 1
            session = hit["session_id"]
            conn.execute(
                "DELETE FROM messages WHERE tenant_id = ? AND session_id = ? AND seq >= ?",
                (tenant, session, from_index),
            )
            conn.executemany(
                "INSERT INTO messages (tenant_id, session_id, seq, run_id, role, content) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(t, session, seq, r, role, c) for (t, seq, r, role, c) in rows],
            )
            return version + 1

        return await self._call(self._tx, write)

    # -- claims ----------------------------------------------------------------------------

    async def acquire_run(
        self, tenant_id: uuid.UUID, run_id: uuid.UUID, owner: str, *, lease_seconds: float
    ) -> Lease:
        token = uuid.uuid4()

        def acquire(conn: sqlite3.Connection) -> Lease:
            # BEGIN IMMEDIATE (in _tx): acquisitions in every process on this file are
            # serialised, so of two at once exactly one finds the run free.
            now = utcnow()
            expires = now + dt.timedelta(seconds=lease_seconds)
            row = conn.execute(
                "UPDATE runs SET lease_owner = ?, lease_token = ?, lease_expires_at = ?, "
                "lease_kind = 'direct', version = version + 1, updated_at = ? "
                "WHERE tenant_id = ? AND id = ? "
                "AND (lease_token IS NULL OR lease_expires_at < ?) RETURNING attempts",
                (
                    owner,
                    str(token),
                    _lease_time(expires),
                    now.isoformat(),
                    str(tenant_id),
                    str(run_id),
                    _lease_time(now),
                ),
            ).fetchone()
            if row is not None:
                return Lease(
                    tenant_id, run_id, token, owner, row["attempts"], lease_seconds, expires
                )
            held = conn.execute(
                "SELECT lease_owner, lease_expires_at FROM runs WHERE tenant_id = ? AND id = ?",
                (str(tenant_id), str(run_id)),
            ).fetchone()
            if held is None:
                raise NotFound(f"run {run_id} not found")
            raise run_busy(run_id, held["lease_owner"], _parse_time(held["lease_expires_at"]))

        return await self._call(self._tx, acquire)

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
        names = None if installed is None else json.dumps(sorted(installed))

        def claim(conn: sqlite3.Connection) -> Lease | None:
            # BEGIN IMMEDIATE (in _tx) takes the write lock first: claims in every process on
            # this file are serialised, so two can never pick the same row.
            now = utcnow()
            expires = now + dt.timedelta(seconds=lease_seconds)
            row = conn.execute(
                "UPDATE runs SET status = 'running', lease_owner = ?, lease_token = ?, "
                "lease_expires_at = ?, lease_kind = 'worker', attempts = attempts + 1, "
                "version = version + 1, updated_at = ? "
                "WHERE rowid = (SELECT rowid FROM runs WHERE tenant_id = ? "
                # A queued run still under a lease is being handed back: not yet.
                "AND ((status = 'queued' AND (lease_token IS NULL OR lease_expires_at < ?)) "
                # A crashed terminal's run (a direct claim) is its user's to resume, not ours.
                "OR (status IN ('running', 'cancelled') AND lease_kind = 'worker' "
                "AND lease_expires_at < ?)) "
                # Only runs whose recorded stack this worker can build (NULL: no filter).
                "AND (? IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(config_json, '$.stack') "
                "AS m WHERE json_extract(m.value, '$.name') NOT IN "
                "(SELECT value FROM json_each(?)))) "
                # A run recorded for another engine (hango submit --engine) is that engine's.
                "AND json_extract(config_json, '$.engine') IS NULL "
                "ORDER BY created_at, rowid LIMIT 1) "
                "RETURNING id, attempts",
                (
                    owner,
                    str(token),
                    _lease_time(expires),
                    now.isoformat(),
                    str(tenant_id),
                    _lease_time(now),
                    _lease_time(now),
                    names,
                    names,
                ),
            ).fetchone()
            if row is None:
                return None
            return Lease(
                tenant_id,
                uuid.UUID(row["id"]),
                token,
                owner,
                row["attempts"],
                lease_seconds,
                expires,
            )

        return await self._call(self._tx, claim)

    async def renew_lease(self, lease: Lease) -> Lease:
        expires = utcnow() + dt.timedelta(seconds=lease.seconds)

        def renew(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "UPDATE runs SET lease_expires_at = ? "
                "WHERE tenant_id = ? AND id = ? AND lease_token = ?",
                (_lease_time(expires), str(lease.tenant_id), str(lease.run_id), str(lease.token)),
            ).rowcount

        if await self._call(self._tx, renew) != 1:
            raise LeaseLost(f"run {lease.run_id}: the lease of {lease.owner} is lost")
        return attrs.evolve(lease, expires_at=expires)

    async def release_run(self, lease: Lease, *, counted: bool = False) -> bool:
        def release(conn: sqlite3.Connection) -> int:
            # A direct claim (acquire_run) only lets go: the status stays what its executor
            # saved. A worker's hands an unfinished run back to the queue.
            return conn.execute(
                "UPDATE runs SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, "
                "status = CASE WHEN lease_kind = 'worker' "
                "AND status IN ('queued', 'running', 'cancelled') THEN 'queued' "
                "ELSE status END, "
                # A hand-back or a suspension is not an attempt: the count goes back to what it
                # was before this claim. A killed worker's (counted) is, as a crash is.
                "attempts = CASE WHEN lease_kind = 'worker' AND NOT ? "
                "AND status IN ('queued', 'running', 'cancelled', 'suspended') "
                "THEN max(attempts - 1, 0) ELSE attempts END, "
                "error = CASE WHEN lease_kind = 'worker' "
                "AND status IN ('queued', 'running', 'cancelled') THEN NULL "
                "ELSE error END, "
                "lease_kind = NULL, version = version + 1, updated_at = ? "
                "WHERE tenant_id = ? AND id = ? AND lease_token = ?",
                (
                    counted,
                    utcnow().isoformat(),
                    str(lease.tenant_id),
                    str(lease.run_id),
                    str(lease.token),
                ),
            ).rowcount

        released: int = await self._call(self._tx, release)
        return released == 1

    @contextlib.asynccontextmanager
    async def watch_queue(self, tenant_id: uuid.UUID) -> AsyncIterator[_PollWatch]:
        yield _PollWatch()


class _PollWatch:
    """SQLite's queue watch: no notifications, so it sleeps ``POLL_SECONDS``."""

    async def wait(self) -> None:
        await anyio.sleep(POLL_SECONDS)
