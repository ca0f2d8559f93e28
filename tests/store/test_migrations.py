"""Migrations with down steps on both back ends, ``hango db ...``, and refusing a schema that is
not this code's (newer: always; behind: PostgreSQL refuses, SQLite upgrades itself on open)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from hango.agent.events import RunStatus
from hango.cli import main
from hango.provider.messages import Message
from hango.store import RunSave, SchemaError, migrate, open_store

HEAD = [
    "0001.base",
    "0002.run-state",
    "0003.run-queue",
    "0004.run-record",
    "0005.durability",
    "0006.workspace",
    "0007.memory",
    "0008.run-claim",
    "0009.child-runs",
]


@pytest.fixture
def columns(empty_url: str, sql_on: Callable[..., list[tuple[Any, ...]]]) -> Callable[[], set[str]]:
    """The column names of ``runs`` in the test's empty database, as it is now."""

    def read() -> set[str]:
        if empty_url.startswith("sqlite:"):
            return {row[1] for row in sql_on(empty_url, "PRAGMA table_info(runs)")}
        rows = sql_on(
            empty_url,
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?",
            "runs",
        )
        return {row[0] for row in rows}

    return read


def hango(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_db_commands_upgrade_report_and_downgrade(empty_url: str) -> None:
    code, out = hango("db", "current", "--db", empty_url)
    assert code == 0
    assert " ".join(out.split()) == f"pending: {', '.join(HEAD)} (run `hango db upgrade`)"
    code, out = hango("db", "upgrade", "--db", empty_url, "--json")
    assert (code, json.loads(out)) == (0, {"applied": HEAD, "current": HEAD[-1]})
    assert hango("db", "upgrade", "--db", empty_url) == (0, f"already at {HEAD[-1]}\n")
    assert hango("db", "current", "--db", empty_url) == (0, "\n".join(HEAD) + "\nup to date\n")
    steps = len(HEAD) - 1
    # Every rollback deletes data: refused without --yes, the schema untouched.
    code, out = hango("db", "downgrade", "--db", empty_url)
    assert code == 2 and f"rolls back {HEAD[-1]}: the data they hold is deleted" in out
    assert "--yes" in out
    assert hango("db", "current", "--db", empty_url) == (0, "\n".join(HEAD) + "\nup to date\n")
    code, out = hango("db", "downgrade", "--steps", str(steps), "--yes", "--db", empty_url)
    rolled_back = ", ".join(reversed(HEAD[1:]))
    assert (code, " ".join(out.split())) == (0, f"rolled back {rolled_back}; now at 0001.base")
    code, out = hango("db", "current", "--db", empty_url, "--json")
    assert json.loads(out) == {"applied": ["0001.base"], "pending": HEAD[1:]}
    code, out = hango("db", "downgrade", "--steps", "2", "--db", empty_url)
    assert code == 2 and "only 1 migrations are applied" in out
    code, out = hango("db", "downgrade", "--db", empty_url)
    assert code == 2 and "deleting every run, session and message" in out
    assert hango("db", "downgrade", "--yes", "--db", empty_url) == (
        0,
        "rolled back 0001.base; now at an empty schema\n",
    )


@pytest.mark.anyio
async def test_downgrading_run_state_drops_state_json_and_upgrading_restores_it(
    empty_url: str, columns: Callable[[], set[str]]
) -> None:
    migrate.upgrade(empty_url)
    tenant = uuid.uuid4()
    async with await open_store(empty_url) as store:
        a = await store.put_agent(tenant, "test", {"name": "test"})
        run = await store.create_run(tenant, a.id, Message.user("keep me"))
        await store.save_run(
            RunSave(tenant, run.id, version=0, status=RunStatus.RUNNING, state={"x": 1})
        )
    queue_columns = {"lease_owner", "lease_token", "lease_expires_at", "attempts"}
    assert {"state_json"} | queue_columns <= columns()

    steps = len(HEAD) - 1
    assert migrate.downgrade(empty_url, steps=steps) == list(reversed(HEAD[1:]))
    assert not ({"state_json", "config_json", "write_id"} | queue_columns) & columns()
    assert migrate.current(empty_url) == ["0001.base"]

    assert migrate.upgrade(empty_url) == HEAD[1:]
    assert {"state_json"} | queue_columns <= columns()
    async with await open_store(empty_url) as store:
        back = await store.get_run(tenant, run.id)
        # The row survived; its state went with the column and comes back as the default.
        assert (back.state, back.status, back.attempts) == ({}, RunStatus.RUNNING, 0)
        assert await store.load_messages(tenant, run.session_id) == [Message.user("keep me")]


@pytest.mark.anyio
async def test_a_database_newer_than_the_code_is_refused(
    empty_url: str, sql_on: Callable[..., list[tuple[Any, ...]]]
) -> None:
    migrate.upgrade(empty_url)
    sql_on(
        empty_url,
        "INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc) "
        "VALUES (?, ?, ?)",
        "f" * 64,
        "0099.from-a-newer-hango",
        "2030-01-01 00:00:00",
    )
    with pytest.raises(SchemaError, match="newer version"):
        await open_store(empty_url)  # SQLite's open upgrades, and refuses too
    for command in (["db", "current"], ["db", "upgrade"], ["db", "downgrade"]):
        code, out = hango(*command, "--db", empty_url)
        assert code == 2
        assert out.startswith("error: the database has migrations this hango does not know")


@pytest.mark.anyio
@pytest.mark.postgres
@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
async def test_postgres_refuses_a_schema_behind_the_code_until_upgraded(empty_url: str) -> None:
    with pytest.raises(SchemaError, match=r"missing 0001.base, .*run `hango db upgrade`"):
        await open_store(empty_url)
    migrate.upgrade(empty_url)
    migrate.downgrade(empty_url)
    with pytest.raises(SchemaError, match=rf"missing {HEAD[-1]}"):
        await open_store(empty_url)
    assert migrate.current(empty_url) == HEAD[:-1]  # refusing changed nothing
    migrate.upgrade(empty_url)
    store = await open_store(empty_url)
    await store.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("store_backend", ["sqlite"], indirect=True)
async def test_sqlite_upgrades_itself_on_open(empty_url: str) -> None:
    migrate.upgrade(empty_url)
    migrate.downgrade(empty_url, steps=3)
    store = await open_store(empty_url)
    await store.aclose()
    assert migrate.current(empty_url) == HEAD


@pytest.mark.anyio
async def test_downgrading_the_run_record_keeps_runs_and_makes_suspended_ones_resumable(
    empty_url: str, columns: Callable[[], set[str]]
) -> None:
    migrate.upgrade(empty_url)
    tenant = uuid.uuid4()
    async with await open_store(empty_url) as store:
        a = await store.put_agent(tenant, "test", {"name": "test"})
        config = {"stack": [{"name": "todo", "distribution": "hango-todo", "version": "1"}]}
        run = await store.create_run(tenant, a.id, Message.user("wait"), config=config)
        assert (await store.get_run(tenant, run.id)).config == config
        await store.save_run(
            RunSave(tenant, run.id, version=0, status=RunStatus.SUSPENDED, state={"version": 1})
        )
    newer = HEAD[HEAD.index("0004.run-record") :]
    assert migrate.downgrade(empty_url, steps=len(newer)) == newer[::-1]
    assert "config_json" not in columns()
    assert migrate.upgrade(empty_url) == newer
    async with await open_store(empty_url) as store:
        back = await store.get_run(tenant, run.id)
        assert (back.status, back.state, back.config) == (
            RunStatus.CANCELLED,
            {"version": 1},
            {},
        )
        assert await store.load_messages(tenant, run.session_id) == [Message.user("wait")]
