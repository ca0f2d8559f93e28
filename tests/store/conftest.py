"""The RunStore contract tests: every test here runs against SQLite AND PostgreSQL, through
hango.testing's ``store_backend`` / ``database_url`` / ``store`` / ``tenant`` / ``sql``
fixtures (``@pytest.mark.parametrize("store_backend", [...], indirect=True)`` keeps one).
The names below are this folder's for the kit's fixtures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hango.testing import run_sql


@pytest.fixture
def anyio_backend() -> str:
    # psycopg's async API needs asyncio; the SQLite runs use it too, so both are alike.
    return "asyncio"


@pytest.fixture
def backend(store_backend: str) -> str:
    return store_backend


@pytest.fixture
def store_url(database_url: str) -> str:
    """A migrated database: a new SQLite file, or the session's PostgreSQL database."""
    return database_url


@pytest.fixture
def empty_url(empty_database_url: str) -> str:
    """A database with no schema yet: a new SQLite file, or a new PostgreSQL database."""
    return empty_database_url


@pytest.fixture
def sql_on() -> Callable[..., list[tuple[Any, ...]]]:
    """``sql_on(url, query, *params)``: ``run_sql`` on any database."""
    return run_sql
