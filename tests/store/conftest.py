"""Fixtures of the RunStore contract tests: every test here runs against SQLite AND PostgreSQL.

PostgreSQL needs HANGO_TEST_DATABASE_URL (see ``postgres_admin_url`` in tests/conftest.py); each
session migrates one database of its own, and each test works in a tenant of its own.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hango.store import RunStore, open_store
from hango.store.sqlite import sqlite_path

SqlRunner = Callable[..., list[tuple[Any, ...]]]


@pytest.fixture
def anyio_backend() -> str:
    # psycopg's async API needs asyncio; the SQLite runs use it too, so both are alike.
    return "asyncio"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A migrated database: a new SQLite file, or the session's PostgreSQL database."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'hango.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def empty_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A database with no schema yet: a new SQLite file, or a new PostgreSQL database."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    factory: Callable[[], str] = request.getfixturevalue("postgres_database")
    return factory()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[RunStore]:
    s = await open_store(store_url)
    try:
        yield s
    finally:
        await s.aclose()


@pytest.fixture
def tenant() -> uuid.UUID:
    return uuid.uuid4()


def run_sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on ``url`` outside hango (``?`` placeholders on both back ends);
    returns its rows. Tests use it to look at or damage rows as only another writer could."""
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(sqlite_path(url), isolation_level=None)
        try:
            return conn.execute(query, params).fetchall()
        finally:
            conn.close()
    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(query.replace("?", "%s"), params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


@pytest.fixture
def sql(store_url: str) -> SqlRunner:
    """``sql(query, *params)`` on the test's database (see ``run_sql``)."""
    return lambda query, *params: run_sql(store_url, query, *params)


@pytest.fixture
def sql_on() -> Callable[..., list[tuple[Any, ...]]]:
    """``sql_on(url, query, *params)``: ``run_sql`` on any database."""
    return run_sql
