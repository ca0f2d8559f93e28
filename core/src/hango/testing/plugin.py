"""The ``hango.testing`` pytest plugin (entry point ``pytest11``: loaded in every pytest session
of an environment where hango is installed).

Fixtures:

- ``postgres_admin_url`` (session): the test server (see ``hango.testing.databases``); skips
  when nothing answers and nothing is configured, fails when a configured server is down.
- ``postgres_database`` (session): a factory of new empty databases, ``postgres_database()``
  -> URL; all are dropped when the session ends.
- ``postgres_url`` (session): one migrated database for the session; tests keep apart by
  using new tenants.
- ``store_backend``: ``"sqlite"`` and ``"postgres"`` (marked ``postgres``): a test using it,
  or a fixture below, runs once per back end. ``@pytest.mark.parametrize("store_backend",
  ["sqlite"], indirect=True)`` keeps one.
- ``database_url``: a migrated database of that back end: a new SQLite file under
  ``tmp_path``, or the session's PostgreSQL database. ``empty_database_url``: one with no
  schema yet (a new file, a new PostgreSQL database).
- ``tenant``: a new tenant id. ``store``: ``open_store(database_url)``, closed after the test.
- ``sql``: ``sql(query, *params)`` on the test's database outside hango (``run_sql``).
- ``agent_dir``: ``agent_dir(agent=..., script=..., tools={...})`` writes an agent into
  ``tmp_path`` (``write_agent``) and returns the agent file's path.
- ``hango_cli``: a ``HangoCli`` in ``tmp_path`` on ``tmp_path / "hango.db"``.
- ``database_link``: a ``DatabaseLink`` (a proxy to the test server, listening) whose
  ``cut()`` / ``restore()`` make the database go away and come back (asyncio or trio).
- ``tool_box``: a new ``ToolBox``. Every ``ToolBox`` (module-level ones too) is emptied before
  each test.

The PostgreSQL store needs asyncio (psycopg): a test module or folder running on both anyio
back ends sets ``anyio_backend`` to ``"asyncio"`` where it uses these stores.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
import pytest

from hango.testing.cli import HangoCli, write_agent
from hango.testing.databases import NoServer, ScratchDatabases, run_sql, sqlite_url
from hango.testing.faults import DatabaseLink
from hango.testing.tools import ToolBox, clear_all_boxes

if TYPE_CHECKING:
    from hango.store.base import RunStore


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres: needs a PostgreSQL server (HANGO_TEST_DATABASE_URL)"
    )


@pytest.fixture(autouse=True)
def _hango_empty_tool_boxes() -> None:
    clear_all_boxes()


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    from hango.testing import databases

    try:
        return databases.postgres_admin_url()
    except NoServer as exc:
        if exc.skip:
            pytest.skip(str(exc))
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def postgres_database(postgres_admin_url: str) -> Iterator[Callable[[], str]]:
    databases = ScratchDatabases(postgres_admin_url)
    yield databases.create
    databases.drop_all()


@pytest.fixture(scope="session")
def postgres_url(postgres_database: Callable[..., str]) -> str:
    return postgres_database(migrated=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(store_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store_backend == "sqlite":
        return sqlite_url(tmp_path / "hango.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def empty_database_url(store_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if store_backend == "sqlite":
        return sqlite_url(tmp_path / "empty.db")
    factory: Callable[[], str] = request.getfixturevalue("postgres_database")
    return factory()


@pytest.fixture
def tenant() -> uuid.UUID:
    return uuid.uuid4()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[RunStore]:
    from hango.store import open_store

    opened = await open_store(database_url)
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
def sql(database_url: str) -> Callable[..., list[tuple[Any, ...]]]:
    return lambda query, *params: run_sql(database_url, query, *params)


@pytest.fixture
def agent_dir(tmp_path: Path) -> Callable[..., Path]:
    return lambda **parts: write_agent(tmp_path, **parts)


@pytest.fixture
def hango_cli(tmp_path: Path) -> HangoCli:
    return HangoCli(tmp_path)


@pytest.fixture
def tool_box() -> ToolBox:
    return ToolBox()


@pytest.fixture
async def database_link(postgres_admin_url: str) -> AsyncIterator[DatabaseLink]:
    target = urlsplit(postgres_admin_url)
    async with anyio.create_task_group() as tg:
        link = DatabaseLink(tg, target.hostname or "127.0.0.1", target.port or 5432)
        await link.restore()
        yield link
        tg.cancel_scope.cancel()
