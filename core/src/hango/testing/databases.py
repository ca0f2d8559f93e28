"""Databases for tests: find the PostgreSQL server (``postgres_admin_url``), make scratch
databases on it and drop them (``scratch_databases``), and run SQL outside hango
(``run_sql``), as only another writer could.

PostgreSQL is ``HANGO_TEST_DATABASE_URL`` when set (a server down there fails the test: a
configured server must not pass as a skip), else the local server at ``LOCAL_POSTGRES`` when
one answers; only when nothing answers there do the PostgreSQL tests skip, saying how to run
them. The role needs CREATE DATABASE.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: Where a local PostgreSQL listens on a developer's machine and in CI (trust authentication).
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"

#: The variable naming the test server.
DATABASE_VARIABLE = "HANGO_TEST_DATABASE_URL"

POSTGRES_HOWTO = (
    "PostgreSQL tests skipped: no server at {local} ({problem}); start one there, "
    "or set HANGO_TEST_DATABASE_URL to a server where the role may CREATE DATABASE"
)


class NoServer(Exception):
    """No PostgreSQL server answers where the tests look: ``skip`` says whether the tests
    should skip (nothing configured, nothing local) or fail (a configured server is down);
    the message says which server and how to fix it."""

    def __init__(self, message: str, *, skip: bool) -> None:
        super().__init__(message)
        self.skip = skip


def postgres_admin_url(env: dict[str, str] | None = None) -> str:
    """The URL of the test server's admin database (see the module docstring); reads
    ``os.environ`` unless ``env`` is given. Raises ``NoServer``."""
    import psycopg

    url = (os.environ if env is None else env).get(DATABASE_VARIABLE)
    if not url:
        local = LOCAL_POSTGRES
        try:
            psycopg.connect(local, connect_timeout=2).close()
        except psycopg.Error as exc:
            problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise NoServer(POSTGRES_HOWTO.format(local=local, problem=problem), skip=True) from exc
        return local
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.Error as exc:
        raise NoServer(
            f"{DATABASE_VARIABLE}={url} is unreachable ({exc}); start the server "
            "(pg_ctlcluster --skip-systemctl-redirect VERSION main start) or unset it to use "
            f"{LOCAL_POSTGRES} when a server listens there",
            skip=False,
        ) from exc
    return url


def with_database(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name``."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


class ScratchDatabases:
    """Makes empty databases on one server (``create``) and drops them all (``drop_all``).
    Names carry the process id and a random suffix, so parallel sessions never collide."""

    def __init__(self, admin_url: str, prefix: str = "hango_test") -> None:
        self.admin_url = admin_url
        self.prefix = prefix
        self.created: list[str] = []

    def create(self, *, migrated: bool = False) -> str:
        """The URL of a new empty database (with hango's schema when ``migrated``)."""
        import psycopg
        from psycopg import sql

        name = f"{self.prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        url = with_database(self.admin_url, name)
        if migrated:
            from hango.store import migrate

            migrate.upgrade(url)
        return url

    def drop_all(self) -> None:
        """Drop every database made here, closing what is still connected to it."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for name in self.created:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
        self.created.clear()


@contextlib.contextmanager
def scratch_database(admin_url: str, *, prefix: str = "hango_test") -> Iterator[str]:
    """One migrated scratch database on ``admin_url``'s server, dropped on exit."""
    databases = ScratchDatabases(admin_url, prefix)
    try:
        yield databases.create(migrated=True)
    finally:
        databases.drop_all()


def sqlite_url(path: os.PathLike[str] | str) -> str:
    """The store URL of the SQLite file at ``path``."""
    return f"sqlite:///{path}"


def run_sql(url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on ``url`` outside hango (``?`` placeholders on both back ends);
    returns its rows. Tests use it to look at or damage rows as only another writer could."""
    if url.startswith("sqlite:"):
        from hango.store.sqlite import sqlite_path

        conn = sqlite3.connect(sqlite_path(url), isolation_level=None)
        try:
            return conn.execute(query, params).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        cur = pg.execute(query.replace("?", "%s"), params)
        return cur.fetchall() if cur.description else []
