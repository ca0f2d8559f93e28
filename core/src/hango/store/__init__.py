"""Run persistence: the RunStore protocol, SQLite (default) and PostgreSQL back ends."""

from __future__ import annotations

from hango.store.base import (
    AgentRecord,
    AmbiguousId,
    Lease,
    LeaseLost,
    NotFound,
    QueueWatch,
    RunRecord,
    RunStore,
    SchemaError,
    SessionBusy,
    StaleVersion,
    StoreError,
    resolve_id,
)
from hango.store.migrate import backend_kind


async def open_store(url: str) -> RunStore:
    """Open the store at ``url``: ``sqlite:///PATH`` (migrated on open) or ``postgresql://...``
    (needs the ``hango[postgres]`` extra)."""
    if backend_kind(url) == "sqlite":
        from hango.store.sqlite import SqliteRunStore

        return await SqliteRunStore.open(url)
    from hango.store.postgres import PostgresRunStore

    return await PostgresRunStore.open(url)


__all__ = [
    "AgentRecord",
    "AmbiguousId",
    "Lease",
    "LeaseLost",
    "NotFound",
    "QueueWatch",
    "RunRecord",
    "RunStore",
    "SchemaError",
    "SessionBusy",
    "StaleVersion",
    "StoreError",
    "open_store",
    "resolve_id",
]
