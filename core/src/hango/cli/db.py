"""``hango db upgrade|downgrade|current``: the database schema."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TypeVar

import click

from hango.cli import (
    USER_ERRORS,
    console,
    db_option,
    db_url,
    err_console,
    json_option,
    main,
)

T = TypeVar("T")


def _db_errors() -> tuple[type[Exception], ...]:
    """Driver errors (the server is down, the file is not a database): one line, no traceback."""
    import sqlite3

    try:
        import psycopg
    except ImportError:
        return (sqlite3.Error,)
    return (sqlite3.Error, psycopg.Error)


def _migrate(step: Callable[[str], T], url: str) -> T:
    from hango.store.migrate import backend_kind
    from hango.store.sqlite import sqlite_path

    errors: tuple[type[Exception], ...] = (*USER_ERRORS, *_db_errors())
    try:
        if backend_kind(url) == "sqlite":
            sqlite_path(url).parent.mkdir(parents=True, exist_ok=True)
        return step(url)
    except errors as exc:
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)


@main.group("db")
def db_group() -> None:
    """The database schema: upgrade, downgrade, current.

    SQLite is upgraded whenever hango opens it; PostgreSQL only by `hango db upgrade` (hango
    refuses to use a PostgreSQL schema that is behind or ahead of it)."""


@db_group.command("upgrade")
@db_option
@json_option
def db_upgrade(db: str | None, as_json: bool) -> None:
    """Apply every pending migration."""
    from hango.store import migrate

    url = db_url(db)
    applied = _migrate(migrate.upgrade, url)
    head = _migrate(migrate.known, url)[-1]
    if as_json:
        console.print_json(json.dumps({"applied": applied, "current": head}))
    elif applied:
        console.print(f"applied {', '.join(applied)}; now at {head}", markup=False)
    else:
        console.print(f"already at {head}", markup=False)


@db_group.command("downgrade")
@click.option(
    "--steps",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many migrations to roll back, newest first.",
)
@click.option(
    "--yes", is_flag=True, help="Confirm: rolling back deletes what those migrations hold."
)
@db_option
@json_option
def db_downgrade(steps: int, yes: bool, db: str | None, as_json: bool) -> None:
    """Roll back the newest migrations; asks for --yes, as every rollback deletes data:
    0002.run-state drops every run's saved state (runs.state_json), 0001.base every run. On
    SQLite the next hango command that opens the file upgrades it again, with that data gone."""
    from hango.store import migrate

    url = db_url(db)
    applied = _migrate(migrate.current, url)
    if steps > len(applied):
        raise click.UsageError(f"--steps {steps}: only {len(applied)} migrations are applied")
    if not yes:
        # Every rollback drops columns or tables (see the .rollback.sql files): never silently.
        doomed = ", ".join(reversed(applied[-steps:]))
        every = ", deleting every run, session and message" if "0001.base" in doomed else ""
        raise click.UsageError(
            f"this rolls back {doomed}{every}: the data they hold is deleted; add --yes to do it"
        )
    rolled_back = _migrate(lambda u: migrate.downgrade(u, steps), url)
    current = _migrate(migrate.current, url)
    now_at = current[-1] if current else "an empty schema"
    if as_json:
        console.print_json(json.dumps({"rolled_back": rolled_back, "current": current}))
    elif rolled_back:
        console.print(f"rolled back {', '.join(rolled_back)}; now at {now_at}", markup=False)
    else:
        console.print("nothing to roll back", markup=False)


@db_group.command("current")
@db_option
@json_option
def db_current(db: str | None, as_json: bool) -> None:
    """Show the applied migrations and any pending ones. Exits 2 (refusing) when the
    database was upgraded by a newer hango."""
    from hango.store import migrate

    url = db_url(db)
    applied = _migrate(migrate.current, url)
    pending = [m for m in _migrate(migrate.known, url) if m not in applied]
    if as_json:
        console.print_json(json.dumps({"applied": applied, "pending": pending}))
        return
    for m in applied:
        console.print(m, markup=False)
    if pending:
        console.print(
            f"pending: {', '.join(pending)} (run `hango db upgrade`)", markup=False, soft_wrap=True
        )
    else:
        console.print("up to date", markup=False)
