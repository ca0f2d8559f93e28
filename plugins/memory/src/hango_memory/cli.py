"""``hango memory list|show|edit|delete``: people look at and correct what agents remember.

Added to the ``hango`` command through the ``hango_cli_commands`` hook. Every command reads the
database and tenant as ``hango`` does (``--db`` / ``HANGO_DATABASE_URL``, ``HANGO_TENANT``)
and names the agent by its name or its agent file. A person's write is a version like any
other, with provenance "a person", and is compare-and-swap too: ``edit`` refuses to save over
a version written while the editor was open.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import anyio
import click

from hango import StoreError, open_store
from hango.middleware import (
    Config,
    MemoryEdit,
    MemoryEntry,
    MemoryStore,
    Provenance,
    memory_store,
)

T = TypeVar("T")


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


def _agent_name(agent: str) -> str:
    """``agent`` as an agent name: read from the file when it names an agent file."""
    path = Path(agent)
    if path.suffix != ".toml":
        return agent
    try:
        name = tomllib.loads(path.read_text(encoding="utf-8")).get("name")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        _fail(f"cannot read the agent file {agent}: {exc}")
    if not isinstance(name, str) or not name:
        _fail(f"agent file {agent}: name is missing")
    return name


def _session(text: str | None) -> uuid.UUID | None:
    if text is None:
        return None
    try:
        return uuid.UUID(text)
    except ValueError:
        _fail(f"--session must be a session id (a UUID), got {text!r}")


def _run(db: str | None, work: Callable[[MemoryStore, uuid.UUID], Awaitable[T]]) -> T:
    """``work(memory, tenant)`` on the database; a store error is one ``error:`` line."""

    async def main() -> T:
        config = Config.from_env()
        store = await open_store(db or config.database_url)
        try:
            return await work(memory_store(store), config.tenant_id)
        finally:
            await store.aclose()

    try:
        return anyio.run(main)
    except StoreError as exc:
        _fail(str(exc))


def _entry_json(entry: MemoryEntry) -> dict[str, Any]:
    p = entry.provenance
    return {
        "key": entry.key,
        "scope": "agent" if entry.session_id is None else "session",
        "session_id": None if entry.session_id is None else str(entry.session_id),
        "version": entry.version,
        "content": entry.content,
        "written_by": p.actor,
        "run_id": None if p.run_id is None else str(p.run_id),
        "tool_call_id": p.tool_call_id,
        "written_at": p.at.isoformat(),
    }


def _person() -> Provenance:
    return Provenance("person", dt.datetime.now(dt.UTC))


agent_option = click.option(
    "--agent", "agent", required=True, help="The agent: its name, or its agent file (.toml)."
)
session_option = click.option(
    "--session", "session", help="A session's entries (default: the agent-wide ones)."
)
db_option = click.option(
    "--db", "db", metavar="URL", help="sqlite:///PATH or postgresql://... (env HANGO_DATABASE_URL)"
)


@click.group("memory")
def memory() -> None:
    """What agents remember: list, show, edit and delete memory entries."""


@memory.command("list")
@agent_option
@session_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def memory_list(agent: str, session: str | None, db: str | None, as_json: bool) -> None:
    """List the agent's entries (agent-wide, and a session's with --session)."""
    name, session_id = _agent_name(agent), _session(session)

    async def work(mem: MemoryStore, tenant: uuid.UUID) -> list[MemoryEntry]:
        return await mem.list_memory(tenant, name, session_id)

    entries = _run(db, work)
    if as_json:
        click.echo(json.dumps([_entry_json(e) for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"agent {name} has no memory entries")
        return
    for e in entries:
        scope = "agent" if e.session_id is None else "session"
        first = e.content.splitlines()[0] if e.content else ""
        click.echo(f"{e.key}  [{scope}] v{e.version}  {e.provenance.describe()}  {first[:60]}")


@memory.command("show")
@click.argument("key")
@agent_option
@session_option
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def memory_show(key: str, agent: str, session: str | None, db: str | None, as_json: bool) -> None:
    """Show one entry and every version of it, with who wrote each."""
    name, session_id = _agent_name(agent), _session(session)

    async def work(mem: MemoryStore, tenant: uuid.UUID) -> Any:
        return (
            await mem.get_memory(tenant, name, key, session_id),
            await mem.memory_versions(tenant, name, key, session_id),
        )

    entry, versions = _run(db, work)
    if not versions:
        _fail(f"agent {name} has no memory entry {key!r}")
    if as_json:
        doc = {
            "entry": None if entry is None else _entry_json(entry),
            "versions": [
                {
                    "version": v.version,
                    "content": v.content,
                    "written_by": v.provenance.actor,
                    "run_id": None if v.provenance.run_id is None else str(v.provenance.run_id),
                    "tool_call_id": v.provenance.tool_call_id,
                    "written_at": v.provenance.at.isoformat(),
                }
                for v in versions
            ],
        }
        click.echo(json.dumps(doc, indent=2))
        return
    if entry is None:
        click.echo(f"{key}: deleted")
    else:
        click.echo(f"{key} (version {entry.version}):\n{entry.content}")
    click.echo("versions:")
    for v in versions:
        what = "deleted" if v.content is None else f"{len(v.content)} characters"
        click.echo(f"  v{v.version}  {v.provenance.describe()}  {what}")


@memory.command("edit")
@click.argument("key")
@agent_option
@session_option
@db_option
@click.option("--text", help="The entry's new content (default: open $EDITOR on it).")
def memory_edit(
    key: str, agent: str, session: str | None, db: str | None, text: str | None
) -> None:
    """Set an entry's content (creating it), in $EDITOR or from --text. Refused, writing
    nothing, when another write lands while the editor is open."""
    name, session_id = _agent_name(agent), _session(session)

    async def read(mem: MemoryStore, tenant: uuid.UUID) -> MemoryEntry | None:
        return await mem.get_memory(tenant, name, key, session_id)

    before = _run(db, read)
    if text is None:
        edited = click.edit(before.content if before else "", require_save=True)
        if edited is None:
            click.echo("unchanged: the editor was closed without saving")
            return
        text = edited.rstrip("\n")
    expected = 0 if before is None else before.version
    content = text

    async def write(mem: MemoryStore, tenant: uuid.UUID) -> Any:
        return await mem.write_memory(
            tenant,
            name,
            key,
            MemoryEdit("set", content),
            provenance=_person(),
            session_id=session_id,
            expected_version=expected,
        )

    written = _run(db, write)
    click.echo(f"saved {key} (version {written.entry.version})")


@memory.command("delete")
@click.argument("key")
@agent_option
@session_option
@db_option
def memory_delete(key: str, agent: str, session: str | None, db: str | None) -> None:
    """Delete an entry (its versions are kept: `hango memory show` lists them)."""
    name, session_id = _agent_name(agent), _session(session)

    async def work(mem: MemoryStore, tenant: uuid.UUID) -> Any:
        return await mem.delete_memory(
            tenant, name, key, provenance=_person(), session_id=session_id
        )

    _run(db, work)
    click.echo(f"deleted {key}")
