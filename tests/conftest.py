import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import psycopg
import pytest
from psycopg import sql

# -- PostgreSQL (tests/store/, tests/test_worker*.py) -------------------------------------------

#: Where a local PostgreSQL listens on a developer's machine and in CI (trust authentication).
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"

POSTGRES_HOWTO = (
    "PostgreSQL tests skipped: no server at " + LOCAL_POSTGRES + " ({problem}); start one there, "
    "or set HANGO_TEST_DATABASE_URL to a server where the role may CREATE DATABASE"
)


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """HANGO_TEST_DATABASE_URL, else the local server at ``LOCAL_POSTGRES`` when one answers.

    Unset and nothing answers locally: skip, saying how to enable. Set but unreachable: fail,
    since a configured server that is down must not pass as a skip."""
    url = os.environ.get("HANGO_TEST_DATABASE_URL")
    if not url:
        try:
            psycopg.connect(LOCAL_POSTGRES, connect_timeout=2).close()
        except psycopg.Error as exc:
            problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            pytest.skip(POSTGRES_HOWTO.format(problem=problem))
        return LOCAL_POSTGRES
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.fail(
            f"HANGO_TEST_DATABASE_URL={url} is unreachable ({exc}); start the server "
            "(pg_ctlcluster --skip-systemctl-redirect VERSION main start) or unset it to use "
            f"{LOCAL_POSTGRES} when a server listens there",
            pytrace=False,
        )
    return url


@pytest.fixture(scope="session")
def postgres_database(postgres_admin_url: str) -> Iterator[Callable[[], str]]:
    """A factory of empty databases with unique names (pid and random suffix, so sessions
    never collide); returns the URL of each. All are dropped when the session ends."""
    created: list[str] = []

    def create() -> str:
        name = f"hango_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(postgres_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        created.append(name)
        return urlunsplit(urlsplit(postgres_admin_url)._replace(path=f"/{name}"))

    yield create
    with psycopg.connect(postgres_admin_url, autocommit=True) as conn:
        for name in created:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(scope="session")
def postgres_url(postgres_database: Callable[[], str]) -> str:
    """One migrated database for the whole session; tests keep apart by using new tenants."""
    from hango.store import migrate

    url = postgres_database()
    migrate.upgrade(url)
    return url


# -- a database that goes away (tests/store/test_faults.py, tests/test_worker.py) ---------------


class DatabaseLink:
    """A TCP proxy on 127.0.0.1 in front of the PostgreSQL server, so a test can make the
    database go away and come back without touching the server (others' tests use it).

    ``url(database_url)`` is that URL through the proxy. ``cut()`` closes every proxied
    connection and stops listening (connections are refused: a server restart, a failover);
    ``restore()`` listens again on the same port."""

    def __init__(self, tg: anyio.abc.TaskGroup, host: str, port: int) -> None:
        self._tg = tg
        self._target = (host, port)
        self.port = 0
        self._scope: anyio.CancelScope | None = None

    def url(self, database_url: str) -> str:
        parts = urlsplit(database_url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host))

    async def restore(self) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        scope = anyio.CancelScope()
        self._scope = scope

        async def serve() -> None:
            with scope:
                async with listener, anyio.create_task_group() as conns:
                    await listener.serve(self._pipe, conns)

        self._tg.start_soon(serve)

    def cut(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    async def _pipe(self, client: anyio.abc.SocketStream) -> None:
        async def copy(src: anyio.abc.ByteStream, dst: anyio.abc.ByteStream) -> None:
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                async for chunk in src:
                    await dst.send(chunk)
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                await dst.send_eof()

        try:
            server = await anyio.connect_tcp(*self._target)
        except OSError:
            await client.aclose()
            return
        async with client, server, anyio.create_task_group() as tg:
            tg.start_soon(copy, client, server)
            tg.start_soon(copy, server, client)


@pytest.fixture
async def database_link(postgres_admin_url: str) -> AsyncIterator[DatabaseLink]:
    """A ``DatabaseLink`` to the test server, listening (call ``cut`` / ``restore``)."""
    target = urlsplit(postgres_admin_url)
    async with anyio.create_task_group() as tg:
        link = DatabaseLink(tg, target.hostname or "127.0.0.1", target.port or 5432)
        await link.restore()
        yield link
        tg.cancel_scope.cancel()
