"""Versioned SQL migrations (yoyo-migrations) with down steps, one folder per back end.

Migration ids are ``NNNN.name``; each has a ``.rollback.sql`` down step. ``check`` refuses a
database that has migrations this code does not know (it is newer than the code).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from yoyo import get_backend, read_migrations

from hango.redact import redact_url
from hango.store.base import SchemaError

_FOLDER = Path(__file__).parent / "migrations"


def backend_kind(url: str) -> str:
    """``"sqlite"`` or ``"postgres"`` for a database URL; ``ValueError`` for anything else."""
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("postgresql", "postgres", "postgresql+psycopg"):
        return "postgres"
    raise ValueError(
        f"unsupported database URL {redact_url(url)!r} (sqlite:///PATH or postgresql://...)"
    )


def _yoyo_url(url: str) -> str:
    if backend_kind(url) == "postgres":
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


@contextlib.contextmanager
def _open(url: str) -> Iterator[tuple[Any, Any]]:
    backend = get_backend(_yoyo_url(url))
    try:
        yield backend, read_migrations(str(_FOLDER / backend_kind(url)))
    finally:
        backend.connection.close()


def known(url: str) -> list[str]:
    """Ids of the migrations this code ships for ``url``'s back end, in order."""
    with _open(url) as (_, migrations):
        return [m.id for m in migrations]


def current(url: str) -> list[str]:
    """Ids of the migrations applied to the database, in order; raises ``SchemaError`` when
    the database has migrations this code does not know."""
    with _open(url) as (backend, migrations):
        return _applied(backend, migrations)


def _applied(backend: Any, migrations: Any) -> list[str]:
    hashes = set(backend.get_applied_migration_hashes())
    ours = {m.hash for m in migrations}
    if hashes - ours:
        raise SchemaError(
            "the database has migrations this hango does not know (it was upgraded by a newer "
            "version); upgrade hango instead of using this one"
        )
    return [m.id for m in migrations if m.hash in hashes]


def upgrade(url: str) -> list[str]:
    """Apply every pending migration; returns the ids applied. ``SchemaError`` if newer."""
    with _open(url) as (backend, migrations), backend.lock():
        _applied(backend, migrations)
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
        return [m.id for m in pending]


def downgrade(url: str, steps: int = 1) -> list[str]:
    """Roll back the newest ``steps`` applied migrations; returns the ids rolled back."""
    with _open(url) as (backend, migrations), backend.lock():
        _applied(backend, migrations)
        todo = list(backend.to_rollback(migrations))[:steps]
        backend.rollback_migrations(todo)
        return [m.id for m in todo]


def check(url: str) -> None:
    """Raise ``SchemaError`` unless the database is exactly at this code's newest migration."""
    applied = current(url)
    expected = known(url)
    if applied != expected:
        missing = [m for m in expected if m not in applied]
        raise SchemaError(
            f"the database schema is behind this hango (missing {', '.join(missing)}); "
            "run `hango db upgrade`"
        )
