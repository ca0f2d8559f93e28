"""Run persistence: the RunStore protocol, SQLite (default) and PostgreSQL back ends."""

from __future__ import annotations

from collections.abc import Mapping

from hango.config import hango_settings
from hango.store.base import (
    AgentRecord,
    AmbiguousId,
    Lease,
    LeaseLost,
    NotFound,
    QueueWatch,
    RunBusy,
    RunRecord,
    RunSave,
    RunStore,
    SchemaError,
    SessionBusy,
    StaleVersion,
    StoreError,
    StoreUnavailable,
    UnstorableContent,
    resolve_id,
)
from hango.store.migrate import backend_kind
from hango.store.retry import StoreRetryPolicy


async def open_store(
    url: str,
    *,
    retry: StoreRetryPolicy | None = None,
    settings: Mapping[str, str] | None = None,
) -> RunStore:
    """Open the store at ``url``: ``sqlite:///PATH`` (migrated on open) or ``postgresql://...``
    (needs the ``hango[postgres]`` extra). ``retry`` bounds the retries of transient faults
    (default: ``HANGO_DB_RETRY_SECONDS`` of ``settings``, which default to the environment);
    SQLite has none to retry.

    Raises ``StoreUnavailable`` when the server cannot be reached now, ``SchemaError`` for a
    schema that is not this code's, ``StoreError`` otherwise, ``ConfigError`` for a bad
    ``HANGO_DB_RETRY_SECONDS``."""
    if backend_kind(url) == "sqlite":
        from hango.store.sqlite import SqliteRunStore

        return await SqliteRunStore.open(url)
    from hango.store.postgres import PostgresRunStore

    if retry is None:
        retry = StoreRetryPolicy.from_settings(hango_settings() if settings is None else settings)
    return await PostgresRunStore.open(url, retry=retry)


__all__ = [
    "AgentRecord",
    "AmbiguousId",
    "Lease",
    "LeaseLost",
    "NotFound",
    "QueueWatch",
    "RunBusy",
    "RunRecord",
    "RunSave",
    "RunStore",
    "SchemaError",
    "SessionBusy",
    "StaleVersion",
    "StoreError",
    "StoreRetryPolicy",
    "StoreUnavailable",
    "UnstorableContent",
    "open_store",
    "resolve_id",
]
