import os
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

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
