"""The ``hango`` command (click for parsing, rich for output).

User errors print one line on stderr and exit 2; a run that fails exits 1; a cancelled run
(Ctrl-C) is saved and exits 130 with the command that resumes it.
"""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import click
from rich.console import Console
from rich.table import Table

from hango.agent.definition import AgentDefinition
from hango.agent.events import Event, RunFinished, RunStatus
from hango.agent.stack import StackConfig, discover
from hango.agent.state import StateError
from hango.config import Config, ConfigError, hango_settings
from hango.convert import message_to_json
from hango.plugins import PluginError, make_plugin_manager
from hango.provider.model import ModelError
from hango.provider.scripted import ScriptError
from hango.provider.select import ModelSpecError
from hango.render import Renderer, checklist
from hango.store import StoreError, open_store
from hango.store.base import RunRecord, RunStore

T = TypeVar("T")

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

#: Exceptions that are the user's to fix: shown as one line, never a traceback.
USER_ERRORS = (
    ConfigError,
    ScriptError,
    ModelSpecError,
    ModelError,
    StoreError,
    PluginError,
    StateError,
    ValueError,
    OSError,
)


def _run_async(fn: Callable[[], Awaitable[T]]) -> T:
    try:
        return anyio.run(fn)
    except USER_ERRORS as exc:
        err_console.print(f"error: {exc}", markup=False)
        sys.exit(2)


def _parse_uuid(value: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a {what} id (a UUID)") from None


def _db_url(db: str | None) -> str:
    return db or Config.from_env().database_url


db_option = click.option(
    "--db", "db", metavar="URL", help="sqlite:///PATH or postgresql://... (env HANGO_DATABASE_URL)"
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


@click.group()
@click.version_option(package_name="hango")
def main() -> None:
    """hango: run agents whose every feature is a middleware."""


def _summary(finished: RunFinished, run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": str(finished.run_id),
        "session_id": str(run.session_id),
        "status": finished.status.value,
        "stop_reason": finished.stop_reason.value if finished.stop_reason else None,
        "error": finished.error,
        "usage": {
            "input_tokens": finished.usage.input_tokens,
            "output_tokens": finished.usage.output_tokens,
        },
    }


async def _execute(
    store: RunStore, run: RunRecord, *, model: str | None, base_url: str | None, as_json: bool
) -> int:
    from hango.run import Harness

    harness = Harness(store, tenant_id=run.tenant_id, model_spec=model)
    if base_url:
        agent_record = await store.get_agent(run.tenant_id, run.agent_id)
        agent = AgentDefinition.from_json(agent_record.definition)
        harness.model = agent.build_model(model, base_url)
    renderer = Renderer(console)
    emit: Callable[[Event], Awaitable[None]] = _quiet if as_json else renderer.event
    finished: RunFinished | None = None
    cancelled = False
    async with anyio.create_task_group() as tg:

        async def on_signal() -> None:
            nonlocal cancelled
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    cancelled = True
                    tg.cancel_scope.cancel()
                    return

        async def go() -> None:
            nonlocal finished
            finished = await harness.execute(run.id, emit=emit)
            tg.cancel_scope.cancel()

        tg.start_soon(on_signal)
        tg.start_soon(go)
    if finished is None:
        where = f" --db {store_url}" if (store_url := getattr(store, "url", None)) else ""
        err_console.print(f"\ncancelled; resume with: hango resume{where} {run.id}", markup=False)
        return 130 if cancelled else 1
    if as_json:
        console.print_json(json.dumps(_summary(finished, run)))
    return 0 if finished.status is RunStatus.COMPLETED else 1


async def _quiet(_: Event) -> None:
    return None


@main.command()
@click.option(
    "--agent", "agent_path", type=click.Path(path_type=Path), default="agent.toml",
    show_default=True, help="The agent file.",
)
@click.option("--model", help="Override the agent's model: scripted:PATH, anthropic:NAME, openai:NAME.")
@click.option("--base-url", help="Base URL of an OpenAI-compatible server (with --model openai:NAME).")
@click.option("--session", "session", help="Continue this session (a UUID) with a new message.")
@click.option("--trace", type=click.Choice(["console"]), help="Print the run's spans.")
@db_option
@json_option
@click.argument("message")
def run(
    agent_path: Path,
    model: str | None,
    base_url: str | None,
    session: str | None,
    trace: str | None,
    db: str | None,
    as_json: bool,
    message: str,
) -> None:
    """Run the agent on MESSAGE, streaming its work."""
    session_id = _parse_uuid(session, "session") if session else None
    from hango.telemetry_setup import configure_telemetry

    configure_telemetry(trace)

    async def main_() -> int:
        agent = AgentDefinition.from_file(agent_path)
        if model is not None:
            agent.build_model(model, base_url)  # fail early on a bad --model
        store = await open_store(_db_url(db))
        try:
            from hango.run import Harness

            record = await Harness(store, tenant_id=Config.from_env().tenant_id).start(
                agent, message, session_id=session_id
            )
            return await _execute(store, record, model=model, base_url=base_url, as_json=as_json)
        finally:
            await store.aclose()

    sys.exit(_run_async(main_))


@main.command()
@click.option("--model", help="Override the agent's model.")
@click.option("--base-url", help="Base URL of an OpenAI-compatible server.")
@db_option
@json_option
@click.argument("run_id")
def resume(model: str | None, base_url: str | None, db: str | None, as_json: bool, run_id: str) -> None:
    """Resume RUN_ID from its last saved turn boundary."""
    rid = _parse_uuid(run_id, "run")

    async def main_() -> int:
        store = await open_store(_db_url(db))
        try:
            record = await store.get_run(Config.from_env().tenant_id, rid)
            return await _execute(store, record, model=model, base_url=base_url, as_json=as_json)
        finally:
            await store.aclose()

    sys.exit(_run_async(main_))


@main.group()
def runs() -> None:
    """List and inspect stored runs."""


def _run_json(r: RunRecord) -> dict[str, Any]:
    return {
        "run_id": str(r.id),
        "session_id": str(r.session_id),
        "agent_id": str(r.agent_id),
        "status": r.status.value,
        "error": r.error,
        "stop_reason": r.stop_reason.value if r.stop_reason else None,
        "version": r.version,
        "created_at": r.created_at.isoformat(),
        "updated_at": r.updated_at.isoformat(),
    }


@runs.command("list")
@click.option("--limit", default=20, show_default=True, help="How many runs, newest first.")
@db_option
@json_option
def runs_list(limit: int, db: str | None, as_json: bool) -> None:
    """List runs, newest first."""

    async def main_() -> None:
        store = await open_store(_db_url(db))
        try:
            records = await store.list_runs(Config.from_env().tenant_id, limit=limit)
        finally:
            await store.aclose()
        if as_json:
            console.print_json(json.dumps([_run_json(r) for r in records]))
            return
        table = Table("run", "status", "session", "updated", "error")
        for r in records:
            table.add_row(
                str(r.id), r.status.value, str(r.session_id)[:8],
                r.updated_at.strftime("%Y-%m-%d %H:%M:%S"), r.error or "",
            )
        console.print(table)

    _run_async(main_)


@runs.command("show")
@db_option
@json_option
@click.argument("run_id")
def runs_show(db: str | None, as_json: bool, run_id: str) -> None:
    """Show RUN_ID: status, messages and state (the plan)."""
    rid = _parse_uuid(run_id, "run")

    async def main_() -> None:
        store = await open_store(_db_url(db))
        try:
            tenant = Config.from_env().tenant_id
            record = await store.get_run(tenant, rid)
            messages = await store.load_messages(tenant, record.session_id)
        finally:
            await store.aclose()
        if as_json:
            doc = _run_json(record) | {
                "state": record.state,
                "messages": [message_to_json(m) for m in messages],
            }
            console.print_json(json.dumps(doc))
            return
        _print_run(record, messages)

    _run_async(main_)


def _print_run(record: RunRecord, messages: list[Any]) -> None:
    from hango.agent.state import load_state

    console.print(f"run {record.id}  [bold]{record.status.value}[/bold]")
    if record.error:
        console.print(f"error: {record.error}", markup=False, style="red")
    for m in messages:
        for block in m.content:
            kind = block.type
            if kind == "text":
                console.print(f"[bold]{m.role}:[/bold] ", end="")
                console.print(block.text, markup=False)
            elif kind == "tool_use":
                console.print(f"  → {block.name} {json.dumps(block.input)}", markup=False, style="cyan")
            elif kind == "tool_result":
                style = "red" if block.is_error else "dim"
                console.print("  ← " + " ".join(block.content.split())[:100], markup=False, style=style)
    if isinstance(record.state, dict) and record.state:
        try:
            todos = load_state(record.state).todos
        except StateError as exc:
            console.print(f"state: {exc}", markup=False, style="red")
            return
        if todos:
            console.print(checklist(todos))


@main.command()
@json_option
def plugins(as_json: bool) -> None:
    """List installed middleware plugins and the slot each fills."""
    try:
        placements = discover(StackConfig(settings=hango_settings()), make_plugin_manager())
    except USER_ERRORS as exc:
        err_console.print(f"error: {exc}", markup=False)
        sys.exit(2)
    rows = [
        {
            "name": p.name,
            "distribution": p.distribution,
            "version": p.version,
            "slot": p.slot if p.slot is not None else "unplaced",
            "capabilities": list(p.capabilities),
        }
        for p in placements
    ]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table("slot", "name", "distribution", "version", "capabilities")
    for r in rows:
        table.add_row(str(r["slot"]), r["name"], r["distribution"], r["version"], ", ".join(r["capabilities"]))
    console.print(table)
