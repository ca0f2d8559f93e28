"""Memory entries in hango's database (migration 0007), for SQLite and PostgreSQL.

An entry is text under a key in a namespace: a tenant, an agent (by name, so editing the
agent file keeps its memory) and either the whole agent (``session_id`` None: every session
sees it) or one session. Every write is kept as a version with its provenance (the run and
tool call that made it, or the person, and when), so a bad write can be traced and undone.

- **Compare-and-swap**: a write names the version it read (``expected_version``; 0 for "does
  not exist yet"); another writer's version in between raises ``MemoryConflict``, and
  nothing is written.
- **Exactly once**: a write carries a ``write_key`` (a tool call's is its run and call id);
  a write whose key is already stored returns what it wrote then (``replayed``), so a call
  replayed after a crash, or a PostgreSQL write retried after its connection died around
  COMMIT, never writes twice.
- **Revision**: every write gets the next id of ``memory_versions``; the largest in a
  namespace is its revision, which a run keeps to notice a change made while it was suspended.

``memory_store(run_store)`` gives the memory of an open ``RunStore``, on its connection.
During a run, ``run_memory()`` gives the memory of the store the run is executed on and the
name of its agent (the runner sets them for the run's execution).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import sqlite3
import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from attrs import frozen

from hango.store.base import RunStore, StoreError, storable_text

if TYPE_CHECKING:
    from hango.store.postgres import PostgresRunStore
    from hango.store.sqlite import SqliteRunStore

#: How a write changes an entry: replace it whole, add to its end, or replace one fragment.
EditMode = Literal["set", "append", "replace"]
EDIT_MODES: Final[tuple[EditMode, ...]] = ("set", "append", "replace")
#: Who wrote a version: a tool call of a run, or a person (``hango memory edit|delete``).
Actor = Literal["tool", "person"]

#: The namespace column for agent-wide entries.
_AGENT_WIDE: Final = ""


class MemoryConflict(StoreError):
    """A write's ``expected_version`` is not the entry's version (another writer came first),
    a fragment to replace is not found exactly once, or the entry would grow past the
    write's ``max_chars``. Nothing was written; the message says what the entry holds now."""


@frozen
class Provenance:
    """Who made one version: ``actor``, the run and tool call (None for a person), ``at``."""

    actor: Actor
    at: dt.datetime
    run_id: uuid.UUID | None = None
    tool_call_id: str | None = None

    def describe(self) -> str:
        """``run 1a2b3c4d call toolu_1 at 2026-12-02T15:00:00Z`` or ``a person at ...``."""
        when = self.at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.run_id is None:
            return f"a person at {when}"
        return f"run {str(self.run_id)[:8]} call {self.tool_call_id} at {when}"


@frozen
class MemoryEntry:
    """One live entry: ``key``, ``content``, ``version`` (1 for a new entry, +1 per write),
    ``session_id`` (None: agent-wide), the ``provenance`` of its last write, ``created_at``."""

    key: str
    content: str
    version: int
    session_id: uuid.UUID | None
    provenance: Provenance
    created_at: dt.datetime


@frozen
class MemoryVersion:
    """One write of an entry, oldest first in ``versions``: ``content`` None for a delete;
    ``revision`` its place among every write of the namespace."""

    key: str
    version: int
    content: str | None
    provenance: Provenance
    revision: int


@frozen
class MemoryEdit:
    """What a write does: ``set`` the content to ``text``, ``append`` ``text`` on a new line,
    or ``replace`` the one occurrence of ``old`` with ``text``."""

    mode: EditMode
    text: str
    old: str | None = None


@frozen
class MemoryWritten:
    """What a write or delete did: the entry now (None after a delete), the namespace's
    ``revision`` after it, and whether it was a ``replayed`` write found already stored."""

    entry: MemoryEntry | None
    revision: int
    replayed: bool = False


def apply_edit(
    key: str, current: str | None, edit: MemoryEdit, max_chars: int | None = None
) -> str:
    """The content ``edit`` makes of ``current`` (None: no entry). Raises ``MemoryConflict``
    for ``replace`` on a missing entry, an ``old`` fragment found other than once, or a
    result longer than ``max_chars``."""
    content = _edited(key, current, edit)
    if max_chars is not None and len(content) > max_chars:
        raise MemoryConflict(
            f"memory entry {key!r} would hold {len(content)} characters; at most {max_chars} "
            "(keep entries short: split it, or replace what is stale)"
        )
    return content


def _edited(key: str, current: str | None, edit: MemoryEdit) -> str:
    if edit.mode == "set" or (edit.mode == "append" and current is None):
        return edit.text
    if edit.mode == "append":
        assert current is not None
        return f"{current}\n{edit.text}" if current else edit.text
    if current is None:
        raise MemoryConflict(f"memory entry {key!r} does not exist; nothing to replace in it")
    old = edit.old or ""
    found = current.count(old) if old else 0
    if found != 1:
        times = "is not found" if found == 0 else f"is found {found} times"
        raise MemoryConflict(
            f"the fragment to replace {times} in memory entry {key!r}; give a fragment that "
            "occurs exactly once"
        )
    return current.replace(old, edit.text, 1)


def _check_version(key: str, row_version: int | None, expected: int | None, by: str) -> None:
    if expected is None:
        return
    have = row_version or 0
    if have != expected:
        now = "does not exist" if have == 0 else f"is at version {have} (last written by {by})"
        raise MemoryConflict(
            f"memory entry {key!r} {now}, not version {expected}: another write came first; "
            "read it again before writing"
        )


def _session(session_id: uuid.UUID | None) -> str:
    return _AGENT_WIDE if session_id is None else str(session_id)


def _session_of(column: str) -> uuid.UUID | None:
    return None if column == _AGENT_WIDE else uuid.UUID(column)


def _time(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(value)


def _uuid(value: Any) -> uuid.UUID | None:
    if value is None:
        return None
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def _provenance(row: Any) -> Provenance:
    return Provenance(
        row["actor"], _time(row["written_at"]), _uuid(row["run_id"]), row["tool_call_id"]
    )


def _version(row: Any) -> MemoryVersion:
    return MemoryVersion(row["key"], row["version"], row["content"], _provenance(row), row["id"])


def _entry(row: Any) -> MemoryEntry:
    return MemoryEntry(
        key=row["key"],
        content=row["content"],
        version=row["version"],
        session_id=_session_of(row["session_id"]),
        provenance=_provenance(row),
        created_at=_time(row["created_at"]),
    )


def write_key_of(provenance: Provenance) -> str:
    """The idempotency key of a tool call's write (its run and call), or a new one."""
    if provenance.run_id is not None and provenance.tool_call_id is not None:
        return f"run {provenance.run_id} call {provenance.tool_call_id}"
    return f"write {uuid.uuid4()}"


class MemoryStore(Protocol):
    """Memory entries of one database, every call scoped by tenant and agent name.

    ``session_id`` None means the agent-wide entries; for reads (``list``, ``revision``,
    ``search``) a session id means that session's entries and the agent-wide ones.
    """

    async def list_memory(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None = None
    ) -> list[MemoryEntry]:
        """Live entries, agent-wide first, then the session's, each by key."""
        ...

    async def get_memory(
        self, tenant_id: uuid.UUID, agent: str, key: str, session_id: uuid.UUID | None = None
    ) -> MemoryEntry | None:
        """The live entry ``key`` of exactly that scope, or None."""
        ...

    async def memory_versions(
        self, tenant_id: uuid.UUID, agent: str, key: str, session_id: uuid.UUID | None = None
    ) -> list[MemoryVersion]:
        """Every write of ``key`` in that scope, oldest first (deletes included)."""
        ...

    async def memory_revision(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None = None
    ) -> int:
        """The namespace's revision: the id of its latest write (0: never written)."""
        ...

    async def memory_changes(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None, since: int
    ) -> list[MemoryVersion]:
        """The writes of the namespace (agent-wide, and the session's) after revision
        ``since``, oldest first."""
        ...

    async def write_memory(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        edit: MemoryEdit,
        *,
        provenance: Provenance,
        session_id: uuid.UUID | None = None,
        expected_version: int | None = None,
        write_key: str | None = None,
        max_chars: int | None = None,
    ) -> MemoryWritten:
        """Apply ``edit`` to ``key`` (creating it), as one version with ``provenance``.
        ``write_key`` defaults to ``write_key_of(provenance)``. Raises ``MemoryConflict``
        (version, fragment, or a result over ``max_chars``) writing nothing; a stored
        ``write_key`` returns its write."""
        ...

    async def delete_memory(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        *,
        provenance: Provenance,
        session_id: uuid.UUID | None = None,
        expected_version: int | None = None,
        write_key: str | None = None,
    ) -> MemoryWritten:
        """Delete ``key`` (kept as a version with no content). Raises ``MemoryConflict`` for
        a missing entry or another version than ``expected_version``."""
        ...


def search_entries(entries: Sequence[MemoryEntry], query: str) -> list[MemoryEntry]:
    """The entries whose key or content holds every word of ``query`` (case-insensitive),
    most words matched in the content first, then by key."""
    words = [w.casefold() for w in query.split()]
    hits = []
    for entry in entries:
        text = f"{entry.key}\n{entry.content}".casefold()
        if all(w in text for w in words):
            hits.append((-sum(entry.content.casefold().count(w) for w in words), entry.key, entry))
    return [entry for *_, entry in sorted(hits, key=lambda h: (h[0], h[1]))]


# -- SQLite ---------------------------------------------------------------------------------

_ENTRY_SQL: Final = (
    "SELECT e.key, e.content, e.version, e.session_id, e.created_at, v.actor, v.written_at, "
    "v.run_id, v.tool_call_id FROM memory_entries e JOIN memory_versions v ON "
    "v.tenant_id = e.tenant_id AND v.agent = e.agent AND v.session_id = e.session_id AND "
    "v.key = e.key AND v.version = e.version "
)


class SqliteMemory:
    """``MemoryStore`` on a ``SqliteRunStore``'s connection (its lock and transactions)."""

    def __init__(self, store: SqliteRunStore) -> None:
        self._store = store

    async def list_memory(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None = None
    ) -> list[MemoryEntry]:
        def read(conn: sqlite3.Connection) -> list[MemoryEntry]:
            rows = conn.execute(
                _ENTRY_SQL + "WHERE e.tenant_id = ? AND e.agent = ? AND e.session_id IN (?, ?) "
                "AND e.deleted = 0 ORDER BY e.session_id <> '', e.key",
                (str(tenant_id), agent, _AGENT_WIDE, _session(session_id)),
            ).fetchall()
            return [_entry(r) for r in rows]

        return await self._store._call(self._store._tx, read)

    async def get_memory(
        self, tenant_id: uuid.UUID, agent: str, key: str, session_id: uuid.UUID | None = None
    ) -> MemoryEntry | None:
        def read(conn: sqlite3.Connection) -> MemoryEntry | None:
            row = conn.execute(
                _ENTRY_SQL + "WHERE e.tenant_id = ? AND e.agent = ? AND e.session_id = ? "
                "AND e.key = ? AND e.deleted = 0",
                (str(tenant_id), agent, _session(session_id), key),
            ).fetchone()
            return None if row is None else _entry(row)

        return await self._store._call(self._store._tx, read)

    async def memory_versions(
        self, tenant_id: uuid.UUID, agent: str, key: str, session_id: uuid.UUID | None = None
    ) -> list[MemoryVersion]:
        def read(conn: sqlite3.Connection) -> list[MemoryVersion]:
            rows = conn.execute(
                "SELECT * FROM memory_versions WHERE tenant_id = ? AND agent = ? AND "
                "session_id = ? AND key = ? ORDER BY version",
                (str(tenant_id), agent, _session(session_id), key),
            ).fetchall()
            return [_version(r) for r in rows]

        return await self._store._call(self._store._tx, read)

    async def memory_revision(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None = None
    ) -> int:
        def read(conn: sqlite3.Connection) -> int:
            return _sqlite_revision(conn, tenant_id, agent, session_id)

        return await self._store._call(self._store._tx, read)

    async def memory_changes(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None, since: int
    ) -> list[MemoryVersion]:
        def read(conn: sqlite3.Connection) -> list[MemoryVersion]:
            rows = conn.execute(
                "SELECT * FROM memory_versions WHERE tenant_id = ? AND agent = ? AND "
                "session_id IN (?, ?) AND id > ? ORDER BY id",
                (str(tenant_id), agent, _AGENT_WIDE, _session(session_id), since),
            ).fetchall()
            return [_version(r) for r in rows]

        return await self._store._call(self._store._tx, read)

    async def write_memory(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        edit: MemoryEdit,
        *,
        provenance: Provenance,
        session_id: uuid.UUID | None = None,
        expected_version: int | None = None,
        write_key: str | None = None,
        max_chars: int | None = None,
    ) -> MemoryWritten:
        return await self._write(
            tenant_id,
            agent,
            key,
            edit,
            provenance,
            session_id,
            expected_version,
            write_key,
            max_chars,
        )

    async def delete_memory(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        *,
        provenance: Provenance,
        session_id: uuid.UUID | None = None,
        expected_version: int | None = None,
        write_key: str | None = None,
    ) -> MemoryWritten:
        return await self._write(
            tenant_id, agent, key, None, provenance, session_id, expected_version, write_key
        )

    async def _write(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        edit: MemoryEdit | None,
        provenance: Provenance,
        session_id: uuid.UUID | None,
        expected_version: int | None,
        write_key: str | None,
        max_chars: int | None = None,
    ) -> MemoryWritten:
        wkey = write_key or write_key_of(provenance)
        scope = _session(session_id)
        tenant = str(tenant_id)

        def write(conn: sqlite3.Connection) -> MemoryWritten:
            done = conn.execute(
                "SELECT 1 FROM memory_versions WHERE tenant_id = ? AND write_key = ?",
                (tenant, wkey),
            ).fetchone()
            if done is not None:
                return MemoryWritten(
                    _sqlite_entry(conn, tenant, agent, scope, key),
                    _sqlite_revision(conn, tenant_id, agent, session_id),
                    replayed=True,
                )
            row = conn.execute(
                "SELECT content, version, deleted FROM memory_entries WHERE tenant_id = ? AND "
                "agent = ? AND session_id = ? AND key = ?",
                (tenant, agent, scope, key),
            ).fetchone()
            live = row is not None and not row["deleted"]
            current = row["content"] if live else None
            version = row["version"] if row is not None else 0
            live_version = version if live else 0
            by = _sqlite_by(conn, tenant, agent, scope, key, version)
            _check_version(key, live_version, expected_version, by)
            at = provenance.at.isoformat()
            if edit is None:
                if not live:
                    raise MemoryConflict(f"memory entry {key!r} does not exist; nothing deleted")
                content: str | None = None
                conn.execute(
                    "UPDATE memory_entries SET deleted = 1, version = ?, updated_at = ? "
                    "WHERE tenant_id = ? AND agent = ? AND session_id = ? AND key = ?",
                    (version + 1, at, tenant, agent, scope, key),
                )
            else:
                content = storable_text(apply_edit(key, current, edit, max_chars))
                conn.execute(
                    "INSERT INTO memory_entries (tenant_id, agent, session_id, key, content, "
                    "version, deleted, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?) "
                    "ON CONFLICT (tenant_id, agent, session_id, key) DO UPDATE SET "
                    "content = excluded.content, version = excluded.version, deleted = 0, "
                    "created_at = CASE WHEN memory_entries.deleted = 1 THEN excluded.created_at "
                    "ELSE memory_entries.created_at END, updated_at = excluded.updated_at",
                    (tenant, agent, scope, key, content, version + 1, at, at),
                )
            conn.execute(
                "INSERT INTO memory_versions (tenant_id, agent, session_id, key, version, "
                "content, write_key, run_id, tool_call_id, actor, written_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant,
                    agent,
                    scope,
                    key,
                    version + 1,
                    content,
                    wkey,
                    None if provenance.run_id is None else str(provenance.run_id),
                    provenance.tool_call_id,
                    provenance.actor,
                    at,
                ),
            )
            return MemoryWritten(
                _sqlite_entry(conn, tenant, agent, scope, key),
                _sqlite_revision(conn, tenant_id, agent, session_id),
            )

        return await self._store._call(self._store._tx, write)


def _sqlite_entry(
    conn: sqlite3.Connection, tenant: str, agent: str, scope: str, key: str
) -> MemoryEntry | None:
    row = conn.execute(
        _ENTRY_SQL + "WHERE e.tenant_id = ? AND e.agent = ? AND e.session_id = ? AND e.key = ? "
        "AND e.deleted = 0",
        (tenant, agent, scope, key),
    ).fetchone()
    return None if row is None else _entry(row)


def _sqlite_by(
    conn: sqlite3.Connection, tenant: str, agent: str, scope: str, key: str, version: int
) -> str:
    row = conn.execute(
        "SELECT actor, written_at, run_id, tool_call_id FROM memory_versions WHERE "
        "tenant_id = ? AND agent = ? AND session_id = ? AND key = ? AND version = ?",
        (tenant, agent, scope, key, version),
    ).fetchone()
    return "nobody" if row is None else _provenance(row).describe()


def _sqlite_revision(
    conn: sqlite3.Connection, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None
) -> int:
    row = conn.execute(
        "SELECT COALESCE(MAX(id), 0) FROM memory_versions WHERE tenant_id = ? AND agent = ? "
        "AND session_id IN (?, ?)",
        (str(tenant_id), agent, _AGENT_WIDE, _session(session_id)),
    ).fetchone()
    return int(row[0])


# -- PostgreSQL -----------------------------------------------------------------------------

_PG_ENTRY_SQL: Final = _ENTRY_SQL.replace("?", "%s")


class PostgresMemory:
    """``MemoryStore`` on a ``PostgresRunStore``'s pool, with its retries. Writers of one key
    queue on a transaction-scoped advisory lock, so compare-and-swap holds across machines."""

    def __init__(self, store: PostgresRunStore) -> None:
        self._store = store

    async def _rows(self, what: str, query: str, params: Sequence[Any]) -> list[Any]:
        async def attempt(_: int) -> list[Any]:
            async with self._store._pool.connection() as conn:
                cur = await conn.execute(query, params)
                return await cur.fetchall()

        return await self._store._retried(what, attempt)

    async def list_memory(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None = None
    ) -> list[MemoryEntry]:
        rows = await self._rows(
            f"reading the memory of agent {agent!r}",
            _PG_ENTRY_SQL + "WHERE e.tenant_id = %s AND e.agent = %s AND e.session_id IN (%s, %s) "
            "AND NOT e.deleted ORDER BY e.session_id <> '', e.key",
            (tenant_id, agent, _AGENT_WIDE, _session(session_id)),
        )
        return [_entry(r) for r in rows]

    async def get_memory(
        self, tenant_id: uuid.UUID, agent: str, key: str, session_id: uuid.UUID | None = None
    ) -> MemoryEntry | None:
        rows = await self._rows(
            f"reading memory entry {key!r}",
            _PG_ENTRY_SQL + "WHERE e.tenant_id = %s AND e.agent = %s AND e.session_id = %s "
            "AND e.key = %s AND NOT e.deleted",
            (tenant_id, agent, _session(session_id), key),
        )
        return _entry(rows[0]) if rows else None

    async def memory_versions(
        self, tenant_id: uuid.UUID, agent: str, key: str, session_id: uuid.UUID | None = None
    ) -> list[MemoryVersion]:
        rows = await self._rows(
            f"reading the versions of memory entry {key!r}",
            "SELECT * FROM memory_versions WHERE tenant_id = %s AND agent = %s AND "
            "session_id = %s AND key = %s ORDER BY version",
            (tenant_id, agent, _session(session_id), key),
        )
        return [_version(r) for r in rows]

    async def memory_revision(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None = None
    ) -> int:
        rows = await self._rows(
            f"reading the memory revision of agent {agent!r}",
            "SELECT COALESCE(MAX(id), 0) AS revision FROM memory_versions WHERE tenant_id = %s "
            "AND agent = %s AND session_id IN (%s, %s)",
            (tenant_id, agent, _AGENT_WIDE, _session(session_id)),
        )
        return int(rows[0]["revision"])

    async def memory_changes(
        self, tenant_id: uuid.UUID, agent: str, session_id: uuid.UUID | None, since: int
    ) -> list[MemoryVersion]:
        rows = await self._rows(
            f"reading the memory changes of agent {agent!r}",
            "SELECT * FROM memory_versions WHERE tenant_id = %s AND agent = %s AND "
            "session_id IN (%s, %s) AND id > %s ORDER BY id",
            (tenant_id, agent, _AGENT_WIDE, _session(session_id), since),
        )
        return [_version(r) for r in rows]

    async def write_memory(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        edit: MemoryEdit,
        *,
        provenance: Provenance,
        session_id: uuid.UUID | None = None,
        expected_version: int | None = None,
        write_key: str | None = None,
        max_chars: int | None = None,
    ) -> MemoryWritten:
        return await self._write(
            tenant_id,
            agent,
            key,
            edit,
            provenance,
            session_id,
            expected_version,
            write_key,
            max_chars,
        )

    async def delete_memory(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        *,
        provenance: Provenance,
        session_id: uuid.UUID | None = None,
        expected_version: int | None = None,
        write_key: str | None = None,
    ) -> MemoryWritten:
        return await self._write(
            tenant_id, agent, key, None, provenance, session_id, expected_version, write_key
        )

    async def _write(
        self,
        tenant_id: uuid.UUID,
        agent: str,
        key: str,
        edit: MemoryEdit | None,
        provenance: Provenance,
        session_id: uuid.UUID | None,
        expected_version: int | None,
        write_key: str | None,
        max_chars: int | None = None,
    ) -> MemoryWritten:
        # The key is fixed before the first attempt: a retry after a connection died around
        # COMMIT must find the write it may already have made.
        wkey = write_key or write_key_of(provenance)
        scope = _session(session_id)

        async def entry(conn: Any) -> MemoryEntry | None:
            cur = await conn.execute(
                _PG_ENTRY_SQL + "WHERE e.tenant_id = %s AND e.agent = %s AND e.session_id = %s "
                "AND e.key = %s AND NOT e.deleted",
                (tenant_id, agent, scope, key),
            )
            row = await cur.fetchone()
            return None if row is None else _entry(row)

        async def revision(conn: Any) -> int:
            cur = await conn.execute(
                "SELECT COALESCE(MAX(id), 0) AS revision FROM memory_versions WHERE "
                "tenant_id = %s AND agent = %s AND session_id IN (%s, %s)",
                (tenant_id, agent, _AGENT_WIDE, scope),
            )
            return int((await cur.fetchone())["revision"])

        async def attempt(_: int) -> MemoryWritten:
            async with self._store._pool.connection() as conn, conn.transaction():
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))",
                    (json.dumps([str(tenant_id), agent, scope, key]),),
                )
                cur = await conn.execute(
                    "SELECT 1 FROM memory_versions WHERE tenant_id = %s AND write_key = %s",
                    (tenant_id, wkey),
                )
                if await cur.fetchone() is not None:
                    return MemoryWritten(await entry(conn), await revision(conn), replayed=True)
                cur = await conn.execute(
                    "SELECT content, version, deleted FROM memory_entries WHERE tenant_id = %s "
                    "AND agent = %s AND session_id = %s AND key = %s",
                    (tenant_id, agent, scope, key),
                )
                row = await cur.fetchone()
                live = row is not None and not row["deleted"]
                version = row["version"] if row is not None else 0
                if expected_version is not None and (version if live else 0) != expected_version:
                    cur = await conn.execute(
                        "SELECT actor, written_at, run_id, tool_call_id FROM memory_versions "
                        "WHERE tenant_id = %s AND agent = %s AND session_id = %s AND key = %s "
                        "AND version = %s",
                        (tenant_id, agent, scope, key, version),
                    )
                    last = await cur.fetchone()
                    by = "nobody" if last is None else _provenance(last).describe()
                    _check_version(key, version if live else 0, expected_version, by)
                content: str | None
                if edit is None:
                    if not live:
                        raise MemoryConflict(
                            f"memory entry {key!r} does not exist; nothing deleted"
                        )
                    content = None
                    await conn.execute(
                        "UPDATE memory_entries SET deleted = true, version = %s, updated_at = %s "
                        "WHERE tenant_id = %s AND agent = %s AND session_id = %s AND key = %s",
                        (version + 1, provenance.at, tenant_id, agent, scope, key),
                    )
                else:
                    current = row["content"] if row is not None and live else None
                    content = storable_text(apply_edit(key, current, edit, max_chars))
                    await conn.execute(
                        "INSERT INTO memory_entries (tenant_id, agent, session_id, key, content, "
                        "version, deleted, created_at, updated_at) VALUES "
                        "(%s, %s, %s, %s, %s, %s, false, %s, %s) "
                        "ON CONFLICT (tenant_id, agent, session_id, key) DO UPDATE SET "
                        "content = excluded.content, version = excluded.version, deleted = false, "
                        "created_at = CASE WHEN memory_entries.deleted "
                        "THEN excluded.created_at ELSE memory_entries.created_at END, "
                        "updated_at = excluded.updated_at",
                        (
                            tenant_id,
                            agent,
                            scope,
                            key,
                            content,
                            version + 1,
                            provenance.at,
                            provenance.at,
                        ),
                    )
                await conn.execute(
                    "INSERT INTO memory_versions (tenant_id, agent, session_id, key, version, "
                    "content, write_key, run_id, tool_call_id, actor, written_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        tenant_id,
                        agent,
                        scope,
                        key,
                        version + 1,
                        content,
                        wkey,
                        provenance.run_id,
                        provenance.tool_call_id,
                        provenance.actor,
                        provenance.at,
                    ),
                )
                return MemoryWritten(await entry(conn), await revision(conn))

        return await self._store._retried(f"writing memory entry {key!r}", attempt)


# -- reaching it ----------------------------------------------------------------------------


def memory_store(store: RunStore) -> MemoryStore:
    """The memory of ``store`` (a ``SqliteRunStore`` or ``PostgresRunStore``), on its
    connection. Raises ``StoreError`` for a store of another kind."""
    from hango.store.sqlite import SqliteRunStore

    if isinstance(store, SqliteRunStore):
        return SqliteMemory(store)
    # Not imported here: psycopg is an extra, and a PostgreSQL store has imported it already.
    postgres = sys.modules.get("hango.store.postgres")
    if postgres is not None and isinstance(store, postgres.PostgresRunStore):
        return PostgresMemory(store)
    raise StoreError(
        f"{type(store).__name__} keeps no memory (hango's SQLite and PostgreSQL stores do)"
    )


@frozen
class RunMemory:
    """The memory a run reaches: ``store`` (its database's) and ``agent``, the name of the
    run's agent (the namespace of its entries)."""

    store: MemoryStore
    agent: str


_RUN_MEMORY: contextvars.ContextVar[tuple[RunStore, str] | None] = contextvars.ContextVar(
    "hango_run_memory", default=None
)


@contextlib.contextmanager
def memory_of_run(store: RunStore, agent: str) -> Iterator[None]:
    """Within this block (the execution of a run of agent ``agent``), ``run_memory()`` is
    ``store``'s memory of that agent."""
    token = _RUN_MEMORY.set((store, agent))
    try:
        yield
    finally:
        _RUN_MEMORY.reset(token)


def run_memory() -> RunMemory:
    """The memory of the run being executed: its store's, for its agent. Raises
    ``StoreError`` outside a run's execution (a chain driven by hand has no store) and for a
    store that keeps no memory."""
    current = _RUN_MEMORY.get()
    if current is None:
        raise StoreError("no run is being executed here, so there is no store to keep memory in")
    store, agent = current
    return RunMemory(memory_store(store), agent)
