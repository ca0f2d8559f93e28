"""Workspace blobs: file contents kept in hango's own database, per session, by SHA-256.

A middleware that keeps files in the database (hango-filesystem's ``store`` backend) writes
each content here once, under its digest, and keeps the path -> digest manifest in its own
session-scoped private state. The manifest is saved with the run's state, in the same save as
the tool result that changed it; a blob written by a call whose result was never saved (a
``kill -9`` between the two) is not reachable from any manifest and does no harm. So a run
resumed after a crash, or continued by a worker on another machine, sees exactly the files its
saved history says were written, in SQLite or in PostgreSQL alike.

Rows belong to a session (``tenant_id``, ``session_id``): ``delete_blobs(tenant, session)``
removes a session's contents, so retention follows the session's data.

The run's store is bound for the duration of ``Harness.execute`` (``bound_store``); a
middleware reaches it through ``hango.middleware.workspace_blobs(state)``, which returns None
outside a run (a chain driven by hand) or for a store kind without workspace tables.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import sqlite3
import uuid
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from attrs import frozen

from hango.store.base import RunStore

if TYPE_CHECKING:
    from hango.agent.state import State
    from hango.store.postgres import PostgresRunStore
    from hango.store.sqlite import SqliteRunStore

T = TypeVar("T")

#: The store of the run being executed in this context (set by ``bound_store``).
_CURRENT: contextvars.ContextVar[RunStore | None] = contextvars.ContextVar(
    "hango_workspace_store", default=None
)


def digest_of(content: bytes) -> str:
    """The key a content is stored under: ``sha256:`` and 64 hex digits."""
    return "sha256:" + hashlib.sha256(content).hexdigest()


class BlobStore(Protocol):
    """Blob tables of one database. Every call is scoped by tenant and session."""

    async def put_blob(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digest: str, content: bytes
    ) -> None:
        """Store ``content`` under ``digest`` (its ``digest_of``); storing it again is a no-op,
        so a retried or repeated write is harmless."""
        ...

    async def get_blob(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digest: str
    ) -> bytes | None:
        """The content stored under ``digest`` in this session, or None."""
        ...

    async def delete_blobs(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digests: Collection[str] | None = None
    ) -> int:
        """Delete the given digests of the session (None: all of them); returns how many rows
        went."""
        ...


class _SqliteBlobs:
    def __init__(self, store: SqliteRunStore) -> None:
        self._store = store

    def _tx(self, fn: Callable[[sqlite3.Connection], T]) -> Any:
        return self._store._call(self._store._tx, fn)

    async def put_blob(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digest: str, content: bytes
    ) -> None:
        def put(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO workspace_blobs (tenant_id, session_id, digest, size, "
                "content, created_at) VALUES (?, ?, ?, ?, ?, datetime('now'))",
                (str(tenant_id), str(session_id), digest, len(content), content),
            )

        await self._tx(put)

    async def get_blob(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digest: str
    ) -> bytes | None:
        def get(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT content FROM workspace_blobs WHERE tenant_id = ? AND session_id = ? "
                "AND digest = ?",
                (str(tenant_id), str(session_id), digest),
            ).fetchone()
            return None if row is None else bytes(row[0])

        result: bytes | None = await self._tx(get)
        return result

    async def delete_blobs(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digests: Collection[str] | None = None
    ) -> int:
        def delete(conn: sqlite3.Connection) -> int:
            where = "tenant_id = ? AND session_id = ?"
            if digests is None:
                cur = conn.execute(
                    f"DELETE FROM workspace_blobs WHERE {where}", (str(tenant_id), str(session_id))
                )
                return cur.rowcount
            gone = 0
            for digest in digests:
                cur = conn.execute(
                    f"DELETE FROM workspace_blobs WHERE {where} AND digest = ?",
                    (str(tenant_id), str(session_id), digest),
                )
                gone += cur.rowcount
            return gone

        count: int = await self._tx(delete)
        return count


class _PostgresBlobs:
    def __init__(self, store: PostgresRunStore) -> None:
        self._store = store

    async def put_blob(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digest: str, content: bytes
    ) -> None:
        async def attempt(_: int) -> None:  # ON CONFLICT DO NOTHING: repeatable
            async with self._store._pool.connection() as conn:
                await conn.execute(
                    "INSERT INTO workspace_blobs (tenant_id, session_id, digest, size, content) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (tenant_id, session_id, digest, len(content), content),
                )

        await self._store._retried(f"storing workspace content {digest[:19]}", attempt)

    async def get_blob(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digest: str
    ) -> bytes | None:
        row = await self._store._one(
            f"reading workspace content {digest[:19]}",
            "SELECT content FROM workspace_blobs WHERE tenant_id = %(tenant)s "
            "AND session_id = %(session)s AND digest = %(digest)s",
            {"tenant": tenant_id, "session": session_id, "digest": digest},
        )
        return None if row is None else bytes(row["content"])

    async def delete_blobs(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, digests: Collection[str] | None = None
    ) -> int:
        async def attempt(_: int) -> int:  # deleting what is already gone deletes nothing
            async with self._store._pool.connection() as conn:
                if digests is None:
                    cur = await conn.execute(
                        "DELETE FROM workspace_blobs WHERE tenant_id = %s AND session_id = %s",
                        (tenant_id, session_id),
                    )
                else:
                    cur = await conn.execute(
                        "DELETE FROM workspace_blobs WHERE tenant_id = %s AND session_id = %s "
                        "AND digest = ANY(%s)",
                        (tenant_id, session_id, list(digests)),
                    )
                return cur.rowcount

        return await self._store._retried("deleting workspace content", attempt)


def blob_store(store: RunStore) -> BlobStore | None:
    """The blob tables of ``store``'s database (migration 0006), or None for a store kind
    that has none (a third-party ``RunStore``)."""
    from hango.store.sqlite import SqliteRunStore

    if isinstance(store, SqliteRunStore):
        return _SqliteBlobs(store)
    if type(store).__module__ == "hango.store.postgres":
        # Imported only for a PostgreSQL store: psycopg is an optional extra.
        from hango.store.postgres import PostgresRunStore

        if isinstance(store, PostgresRunStore):
            return _PostgresBlobs(store)
    return None


@contextlib.contextmanager
def bound_store(store: RunStore) -> Iterator[None]:
    """Make ``store`` the one ``workspace_blobs`` answers with in this context (and in tasks
    started from it), for the duration of one run's execution."""
    token = _CURRENT.set(store)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@frozen
class WorkspaceBlobs:
    """The workspace blobs of one run's session: content in, digest out, and back.

    ``put(content) -> digest`` stores bytes (idempotent: the key is the SHA-256 of the
    content), ``get(digest)`` returns them or None, ``delete(digests)`` removes some (all with
    None) and returns how many rows went. Raises what the store raises (``StoreUnavailable``
    when the database stays unreachable, ``StoreError``)."""

    store: BlobStore
    tenant_id: uuid.UUID
    session_id: uuid.UUID

    async def put(self, content: bytes) -> str:
        digest = digest_of(content)
        await self.store.put_blob(self.tenant_id, self.session_id, digest, content)
        return digest

    async def get(self, digest: str) -> bytes | None:
        return await self.store.get_blob(self.tenant_id, self.session_id, digest)

    async def delete(self, digests: Collection[str] | None = None) -> int:
        return await self.store.delete_blobs(self.tenant_id, self.session_id, digests)


def workspace_blobs(state: State) -> WorkspaceBlobs | None:
    """The workspace blobs of ``state``'s session in the store of the run being executed, or
    None outside a run (no store bound) or for a store without workspace tables."""
    store = _CURRENT.get()
    blobs = None if store is None else blob_store(store)
    if blobs is None:
        return None
    return WorkspaceBlobs(blobs, state.tenant_id, state.session_id)


__all__ = [
    "BlobStore",
    "WorkspaceBlobs",
    "blob_store",
    "bound_store",
    "digest_of",
    "workspace_blobs",
]
