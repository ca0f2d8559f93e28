"""The ``hango`` command (click for parsing, rich for output).

User errors print one line on stderr and exit 2; a run that fails exits 1; a cancelled run
(Ctrl-C) is saved and exits 130; a run suspended for a person's decision exits 3, printing what
it waits for and the commands that decide. After a cancel or a failure, a command that resumes
the run is printed on stderr, ready to paste (``hango.resume_hint``). Run and session ids are
taken whole or as a unique prefix, as git takes object names.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import sys
import uuid
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import anyio
import click
from rich.console import Console
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from hango import resume_hint
from hango.agent.definition import AgentDefinition
from hango.agent.events import Event, MessageCompleted, RunFinished, RunStatus
from hango.agent.stack import STACK_ORDER
from hango.agent.state import StateError
from hango.config import (
    DEFAULT_TENANT,
    Config,
    ConfigError,
    HangoWarning,
    StackConfig,
    hango_settings,
)
from hango.convert import message_to_json
from hango.discovery import discover
from hango.event_json import event_to_json
from hango.pending import (
    SUSPENDED_EXIT,
    parse_decisions,
    pending_json,
    pending_of,
    print_pending,
)
from hango.plugins import PluginError, make_plugin_manager
from hango.provider.errors import ModelError, ModelSpecError, ScriptError
from hango.provider.messages import Message
from hango.render import (
    Renderer,
    checklist,
    clip_line,
    clip_text,
    tool_call_line,
    tool_result_lines,
)
from hango.run import Decided, Harness
from hango.store import RunStore, SessionBusy, StoreError, open_store, resolve_id
from hango.store.base import IdKind, RunRecord

T = TypeVar("T")
Output = Literal["text", "json", "jsonl"]

# emoji=False: rich would print a tool path "x:smile:y" or a model's ":b:" as emoji.
console = Console(highlight=False, emoji=False)
err_console = Console(stderr=True, highlight=False, emoji=False)

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
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)


def _flush_telemetry() -> None:
    """Export what the run recorded now: ``--trace console`` prints its spans here, after the
    run's output, and OTLP batches leave before the process does."""
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if flush is not None:
        flush()


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """hango's own warnings as one ``warning:`` line; any other the Python way."""
    if issubclass(category, HangoWarning):
        err_console.print(f"warning: {message}", style="yellow", markup=False, soft_wrap=True)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def _exit(code: int) -> None:
    """Exit with ``code``. After a cancelled run, exit at once: a sync tool still blocking in a
    worker thread (abandoned by the cancel) must not hold the process open."""
    _flush_telemetry()
    if code == 130:
        from opentelemetry import trace

        shutdown = getattr(trace.get_tracer_provider(), "shutdown", None)
        if shutdown is not None:
            shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _db_url(db: str | None) -> str:
    return db or Config.from_env().database_url


async def _resolve(store: RunStore, kind: IdKind, text: str) -> uuid.UUID:
    """The id ``text`` names (whole, or a unique prefix); one-line errors otherwise."""
    return await resolve_id(store, Config.from_env().tenant_id, kind, text)


db_option = click.option(
    "--db", "db", metavar="URL", help="sqlite:///PATH or postgresql://... (env HANGO_DATABASE_URL)"
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
agent_option = click.option(
    "--agent",
    "agent_path",
    type=click.Path(path_type=Path),
    default="agent.toml",
    show_default=True,
    help="The agent file.",
)
run_json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object when the run ends: ids, status, usage and the answer.",
)
jsonl_option = click.option(
    "--jsonl",
    is_flag=True,
    help="Stream every event as one JSON object per line (see docs/reference.md).",
)
model_option = click.option(
    "--model", help="Override the agent's model: scripted:PATH, anthropic:NAME, openai:NAME."
)
base_url_option = click.option(
    "--base-url", help="Base URL of an OpenAI-compatible server (with --model openai:NAME)."
)
trace_option = click.option(
    "--trace",
    type=click.Choice(["console"]),
    help="Print the run's spans on stderr after the run.",
)


class _HangoGroup(click.Group):
    """The top-level group: hango's own commands, then those plugins add through the
    ``hango_cli_commands`` hook, loaded once, when a command name is first looked up."""

    _plugin_commands: dict[str, click.Command] | None = None

    def _plugins(self) -> dict[str, click.Command]:
        if self._plugin_commands is None:
            self._plugin_commands = _load_plugin_commands(set(self.commands))
        return self._plugin_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name) or self._plugins().get(cmd_name)


def _load_plugin_commands(taken: set[str]) -> dict[str, click.Command]:
    """Commands from the ``hango_cli_commands`` hook, keyed by name. A plugin that fails to
    load or whose hook raises, and a name already taken, are warned about in one line and
    left out: the rest of the CLI keeps working."""
    try:
        pm = make_plugin_manager()
    except PluginError as exc:
        warnings.warn(f"plugin commands not loaded: {exc}", HangoWarning, stacklevel=2)
        return {}
    found: dict[str, click.Command] = {}
    for impl in pm.hook.hango_cli_commands.get_hookimpls():
        try:
            commands = cast(Sequence[click.Command], impl.function() or ())
        except Exception as exc:
            dist = pm.distribution_of(impl.plugin_name)[0]
            warnings.warn(
                f"plugin {impl.plugin_name} ({dist}): hango_cli_commands failed: {exc}",
                HangoWarning,
                stacklevel=2,
            )
            continue
        for command in commands:
            name = command.name or ""
            if name in taken or name in found:
                warnings.warn(
                    f"plugin {impl.plugin_name}: command {name!r} is taken; left out",
                    HangoWarning,
                    stacklevel=2,
                )
                continue
            found[name] = command
    return found


@click.group(cls=_HangoGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hango")
def main() -> None:
    """hango: run agents whose every feature is a middleware."""
    warnings.showwarning = _show_warning


def _output(as_json: bool, jsonl: bool) -> Output:
    if as_json and jsonl:
        raise click.UsageError("--json and --jsonl: choose one")
    return "json" if as_json else "jsonl" if jsonl else "text"


class _Resume:
    """The ``hango resume`` line for this command's runs: same database, tenant, model and
    output options as the command that ran them."""

    def __init__(
        self,
        db: str | None,
        *,
        model: str | None = None,
        base_url: str | None = None,
        trace: str | None = None,
        output: Output = "text",
    ) -> None:
        self.db_option = db  # as given; the decision commands of a suspended run name it
        url = _db_url(db)
        self.db = url if url != Config.from_env({}).database_url else None
        tenant = Config.from_env().tenant_id
        self.tenant = None if tenant == DEFAULT_TENANT else str(tenant)
        options: list[str] = []
        for flag, value in (("--model", model), ("--base-url", base_url), ("--trace", trace)):
            if value is not None:
                options += [flag, value]
        if output != "text":
            options.append(f"--{output}")
        self.options = options

    def command(self, run_id: uuid.UUID, *, force: bool = False) -> str:
        extra = ["--force"] if force else []
        return resume_hint.command(
            ["resume", str(run_id)],
            db=self.db,
            tenant=self.tenant,
            options=[*self.options, *extra],
        )


def _summary(finished: RunFinished, run: RunRecord, answer: str | None) -> dict[str, Any]:
    return {
        "run_id": str(finished.run_id),
        "session_id": str(run.session_id),
        "status": finished.status.value,
        "stop_reason": finished.stop_reason.value if finished.stop_reason else None,
        "error": finished.error,
        "usage": {
            "input_tokens": finished.usage.input_tokens,
            "output_tokens": finished.usage.output_tokens,
            # calls whose server reported no usage: the counts then miss their tokens
            "unknown_calls": finished.usage.unknown_calls,
        },
        "answer": answer,
        "pending": pending_json(finished.pending),
    }


def _hint(words: str, command: str) -> None:
    """``words``, then ``command`` alone on its line: never broken by a hard wrap, so it
    pastes whole."""
    err_console.print(words, markup=False)
    err_console.print(f"  {command}", markup=False, soft_wrap=True, style="bold")


async def _jsonl(event: Event) -> None:
    sys.stdout.write(json.dumps(event_to_json(event), ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def _quiet(_: Event) -> None:
    return None


async def _execute(harness: Harness, run: RunRecord, *, output: Output, resume: _Resume) -> int:
    """Execute ``run``, showing its events as ``output`` asks; returns the exit code."""
    finished: RunFinished | None = None
    failure: Exception | None = None
    last: Message | None = None  # the last assistant message: the answer once the run completes
    renderer = Renderer(console)
    show = {"text": renderer.event, "json": _quiet, "jsonl": _jsonl}[output]

    async def emit(event: Event) -> None:
        nonlocal last
        if isinstance(event, MessageCompleted):
            last = event.message
        await show(event)

    # Ctrl-C or SIGTERM cancels the run's scope: the harness saves it as cancelled.
    with (
        renderer if output == "text" else contextlib.nullcontext(),
        anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
    ):
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                async for _ in signals:
                    tg.cancel_scope.cancel()
                    return

            async def go() -> None:
                nonlocal finished, failure
                try:
                    finished = await harness.execute(run.id, emit=emit)
                except USER_ERRORS as exc:
                    failure = exc  # re-raised outside the task group, unwrapped
                tg.cancel_scope.cancel()

            tg.start_soon(on_signal)
            tg.start_soon(go)
            if output == "text":
                tg.start_soon(renderer.animate)
    if failure is not None:
        raise failure
    if finished is None:
        _hint("cancelled; resume with:", resume.command(run.id))
        return 130
    if output == "json":
        answer = last.text if last and finished.status is RunStatus.COMPLETED else None
        console.print_json(json.dumps(_summary(finished, run, answer)))
    elif output == "text" and finished.pending:
        print_pending(console, run.id, finished.pending, resume.db_option)
    if finished.status is RunStatus.SUSPENDED:
        return SUSPENDED_EXIT
    if finished.status is RunStatus.FAILED:
        _hint("resume with:", resume.command(run.id))
    return 0 if finished.status is RunStatus.COMPLETED else 1


async def _busy_session(
    store: RunStore, error: SessionBusy, session_id: uuid.UUID, db: str | None
) -> StoreError:
    """``SessionBusy`` said as what to do: the session's unfinished run and the command that
    recovers it."""
    tenant = Config.from_env().tenant_id
    runs = await store.list_runs(tenant, session_id=session_id, limit=10)
    busy = next((r for r in runs if r.status in (RunStatus.RUNNING, RunStatus.QUEUED)), None)
    if busy is None:
        return error
    resume = _Resume(db)
    if busy.status is RunStatus.QUEUED:
        return StoreError(
            f"session {session_id} has run {busy.id} queued for a worker: start one "
            f"(`hango worker`) or run it here with: {resume.command(busy.id)}"
        )
    expires = busy.lease_expires_at
    if expires is not None and expires > dt.datetime.now(dt.UTC):
        return StoreError(
            f"session {session_id} has run {busy.id} in progress on worker {busy.lease_owner}; "
            "continue the session once it has finished"
        )
    return StoreError(
        f"session {session_id} has run {busy.id} still marked running: if the `hango run` "
        f"that ran it is gone (killed, crashed), recover it with: "
        f"{resume.command(busy.id, force=True)}"
    )


@main.command()
@agent_option
@model_option
@base_url_option
@click.option("--session", "session", help="Continue this session (its id or a unique prefix).")
@trace_option
@db_option
@run_json_option
@jsonl_option
@click.argument("message")
def run(
    agent_path: Path,
    model: str | None,
    base_url: str | None,
    session: str | None,
    trace: str | None,
    db: str | None,
    as_json: bool,
    jsonl: bool,
    message: str,
) -> None:
    """Run the agent on MESSAGE, streaming its work."""
    output = _output(as_json, jsonl)
    from hango.telemetry.setup import configure_telemetry

    configure_telemetry(trace)

    async def main_() -> int:
        agent = AgentDefinition.from_file(agent_path)
        built = agent.build_model(model, base_url)  # a bad model or script fails before any run
        store = await open_store(_db_url(db))
        try:
            session_id = await _resolve(store, "session", session) if session else None
            # One harness starts and executes the run: plugins are loaded once.
            harness = Harness(
                store,
                tenant_id=Config.from_env().tenant_id,
                model=built,
                model_spec=model,
                base_url=base_url,
            )
            try:
                record = await harness.start(agent, message, session_id=session_id)
            except SessionBusy as exc:
                assert session_id is not None
                raise await _busy_session(store, exc, session_id, db) from None
            # The run records its model and base URL: resuming it needs neither option.
            resume = _Resume(db, trace=trace, output=output)
            return await _execute(harness, record, output=output, resume=resume)
        finally:
            await store.aclose()

    _exit(_run_async(main_))


@main.command()
@click.option(
    "--model",
    help="Continue on this model instead of the one the run started with (recorded).",
)
@click.option("--base-url", help="Base URL of an OpenAI-compatible server (with --model).")
@trace_option
@click.option("--force", is_flag=True, help="Resume a run marked running whose process died.")
@click.option("--approve", multiple=True, metavar="CALL_ID", help="Approve a pending tool call.")
@click.option(
    "--reject",
    multiple=True,
    metavar="CALL_ID[=MESSAGE]",
    help="Reject a pending call; the model gets MESSAGE as an error result.",
)
@click.option(
    "--edit",
    multiple=True,
    metavar="CALL_ID=JSON",
    help="Run a pending call with these arguments (JSON object), or 'TOOL JSON' for another tool.",
)
@click.option(
    "--respond",
    multiple=True,
    metavar="CALL_ID=TEXT",
    help="Do not run a pending call; the model gets TEXT as its result.",
)
@click.option(
    "--queue",
    is_flag=True,
    help="Record the decisions and leave the run to a worker (the default for a submitted run).",
)
@db_option
@run_json_option
@jsonl_option
@click.argument("run_id")
def resume(
    model: str | None,
    base_url: str | None,
    trace: str | None,
    force: bool,
    approve: tuple[str, ...],
    reject: tuple[str, ...],
    edit: tuple[str, ...],
    respond: tuple[str, ...],
    queue: bool,
    db: str | None,
    as_json: bool,
    jsonl: bool,
    run_id: str,
) -> None:
    """Resume RUN_ID (an id or a unique prefix) from its last saved turn boundary.

    A suspended run continues once each pending tool call has a decision (several may be
    given at once); `hango runs show RUN_ID` lists them. It continues in this terminal, or,
    if it was submitted for workers (or with --queue), goes back on the queue."""
    output = _output(as_json, jsonl)
    decisions = parse_decisions(approve, reject, edit, respond)
    from hango.telemetry.setup import configure_telemetry

    configure_telemetry(trace)

    async def main_() -> int:
        store = await open_store(_db_url(db))
        try:
            tenant = Config.from_env().tenant_id
            rid = await _resolve(store, "run", run_id)
            record = await store.get_run(tenant, rid)
            again = _Resume(db, model=model, base_url=base_url, trace=trace, output=output)
            expires = record.lease_expires_at
            if expires is not None and expires > dt.datetime.now(dt.UTC):
                raise StoreError(
                    f"run {rid} is held by worker {record.lease_owner} until "
                    f"{expires:%H:%M:%S} UTC; resume it after its lease expires"
                )
            if record.status is RunStatus.RUNNING and expires is None and not force:
                # A foreground `hango run` holds no lease: it may still be executing.
                raise StoreError(
                    f"run {rid} is running, perhaps in another `hango run`; if that process "
                    f"is gone (killed, machine lost), resume with: {again.command(rid, force=True)}"
                )
            # The run continues on the model it started with, unless --model changes it.
            harness = Harness(store, tenant_id=tenant, model_spec=model, base_url=base_url)
            if decisions:
                to_queue = queue or bool(record.config.get("queued"))
                done = await harness.decide(rid, decisions, queue=to_queue)
                finished = _decided(done, as_json=output == "json", db=db, queue=to_queue)
                if finished is not None:
                    return finished
                record = done.run
            return await _execute(harness, record, output=output, resume=again)
        finally:
            await store.aclose()

    _exit(_run_async(main_))


def _decided(done: Decided, *, as_json: bool, db: str | None, queue: bool) -> int | None:
    """Report what ``hango resume`` recorded; the exit code when there is nothing to run here
    (still waiting, left to a worker, or already finished), else None."""
    run = done.run
    if not as_json:
        for call_id in done.recorded:
            err_console.print(f"{call_id}: decision recorded", markup=False, style="dim")
        for call_id in done.unchanged:
            err_console.print(
                f"{call_id}: that decision was already recorded (no change)",
                markup=False,
                style="dim",
            )
    finished = run.status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
    if not (done.waiting or (queue and not finished) or (finished and not done.recorded)):
        return None
    if as_json:
        doc = {
            "run_id": str(run.id),
            "status": run.status.value,
            "recorded": list(done.recorded),
            "unchanged": list(done.unchanged),
            "pending": pending_json(done.waiting),
        }
        console.print_json(json.dumps(doc))
    elif done.waiting:
        print_pending(console, run.id, done.waiting, db)
    else:
        left = " for a worker" if run.status is RunStatus.QUEUED else ""
        console.print(f"run {run.id} is {run.status.value}{left}", markup=False)
    if done.waiting:
        return SUSPENDED_EXIT
    return 0 if run.status in (RunStatus.QUEUED, RunStatus.COMPLETED) else 1


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
        # What the run was started with (stack and model) and its usage so far.
        "stack": r.config.get("stack"),
        "model": r.config.get("model"),
        "base_url": r.config.get("base_url"),
        "usage": r.state.get("usage") if isinstance(r.state, dict) else None,
    }


async def _agent_names(store: RunStore, records: Sequence[RunRecord]) -> dict[uuid.UUID, str]:
    tenant = Config.from_env().tenant_id
    return {a: (await store.get_agent(tenant, a)).name for a in {r.agent_id for r in records}}


async def _prompts(store: RunStore, records: Sequence[RunRecord]) -> dict[uuid.UUID, str]:
    """Each run's own user message (the one it was started with)."""
    tenant = Config.from_env().tenant_id
    histories: dict[uuid.UUID, list[Message]] = {}
    out = {}
    for r in records:
        if r.session_id not in histories:
            histories[r.session_id] = await store.load_messages(tenant, r.session_id)
        history = histories[r.session_id]
        out[r.id] = history[r.message_start].text if r.message_start < len(history) else ""
    return out


#: Characters of an id shown in tables: enough to be a unique prefix in practice (8 hex
#: digits: one pair in a million among 100 runs), and what `runs show` and `resume` take.
SHORT_ID = 8


@runs.command("list")
@click.option("--limit", default=20, show_default=True, help="How many runs, newest first.")
@db_option
@json_option
def runs_list(limit: int, db: str | None, as_json: bool) -> None:
    """List runs, newest first: id, agent, session, start time, status and prompt."""

    async def main_() -> None:
        store = await open_store(_db_url(db))
        try:
            records = await store.list_runs(Config.from_env().tenant_id, limit=limit)
            names = await _agent_names(store, records)
            prompts = await _prompts(store, records)
        finally:
            await store.aclose()
        if as_json:
            rows = [
                _run_json(r) | {"agent": names[r.agent_id], "prompt": prompts[r.id]}
                for r in records
            ]
            console.print_json(json.dumps(rows))
            return
        if not records:
            console.print("no runs yet: start one with `hango run --agent FILE MESSAGE`")
            return
        table = Table(box=None, pad_edge=False)
        table.add_column("run", no_wrap=True)
        table.add_column("agent", no_wrap=True, max_width=16, overflow="ellipsis")
        table.add_column("session", no_wrap=True)
        table.add_column("started", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("prompt", no_wrap=True, overflow="ellipsis", ratio=1)
        for r in records:
            style = {"completed": "green", "failed": "red", "cancelled": "yellow"}.get(
                r.status.value, ""
            )
            table.add_row(
                str(r.id)[:SHORT_ID],
                names[r.agent_id],
                str(r.session_id)[:SHORT_ID],
                r.created_at.astimezone().strftime("%Y-%m-%d %H:%M"),
                Text(r.status.value, style=style),
                clip_line(prompts[r.id], 60),
            )
        console.print(table)

    _run_async(main_)


@runs.command("show")
@db_option
@json_option
@click.argument("run_id")
def runs_show(db: str | None, as_json: bool, run_id: str) -> None:
    """Show RUN_ID (an id or a unique prefix): status, messages and state (the plan)."""

    async def main_() -> None:
        store = await open_store(_db_url(db))
        try:
            tenant = Config.from_env().tenant_id
            record = await store.get_run(tenant, await _resolve(store, "run", run_id))
            messages = await store.load_messages(tenant, record.session_id)
        finally:
            await store.aclose()
        pending = pending_of(record.state)
        if as_json:
            doc = _run_json(record) | {
                "pending": None if pending is None else pending_json(pending),
                "state": record.state,
                "messages": [message_to_json(m) for m in messages],
            }
            console.print_json(json.dumps(doc))
            return
        _print_run(record, messages)
        if pending and record.status is RunStatus.SUSPENDED:
            print_pending(console, record.id, pending, db)

    _run_async(main_)


def _print_run(record: RunRecord, messages: list[Any]) -> None:
    from hango.agent.state import load_state

    rich_text = console.is_terminal and not console.is_dumb_terminal
    console.print(f"run {record.id}  [bold]{record.status.value}[/bold]")
    console.print(f"session {record.session_id}", style="dim")
    if record.config:
        stack = " > ".join(e["name"] for e in record.config.get("stack", [])) or "(none)"
        console.print(
            f"model {record.config.get('model')}  stack {stack}",
            style="dim",
            markup=False,
            soft_wrap=True,
        )
    if record.error:
        console.print(f"error: {record.error}", markup=False, style="red")
    for m in messages:
        for block in m.content:
            kind = block.type
            if kind == "text":
                console.print(f"[bold]{m.role}:[/bold]")
                # Clipped: rendering megabytes of text takes seconds (--json prints it all).
                text = clip_text(block.text)
                console.print(Markdown(text) if rich_text else Text(text))
            elif kind == "tool_use":
                console.print(tool_call_line(block), no_wrap=True, overflow="ellipsis", crop=True)
            elif kind == "tool_result":
                for line in tool_result_lines(block.content, block.is_error):
                    console.print(line, no_wrap=True, overflow="ellipsis", crop=True)
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
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    if as_json:
        rows = [
            {
                "name": p.name,
                "distribution": p.distribution,
                "version": p.version,
                "slot": _slot_label(p.slot),
                "capabilities": list(p.capabilities),
            }
            for p in placements
        ]
        console.print_json(json.dumps(rows))
        return
    if not placements:
        console.print(
            "No middleware plugins are installed: runs use the plain loop. Install some, e.g. "
            "`pip install hango-todo hango-repeat hango-allowlist hango-repair`.",
            markup=False,
        )
        return
    table = Table("slot", "name", "distribution", "version", "capabilities")
    for p in placements:
        table.add_row(
            _slot_label(p.slot), p.name, p.distribution, p.version, ", ".join(p.capabilities)
        )
    console.print(table)


def _slot_label(slot: int | None) -> str:
    """A pinned slot by name; a middleware of a plugin's own name is for agents to list."""
    return STACK_ORDER[slot] if slot is not None else "available to agents"


# -- the database schema, the queue and its workers -------------------------------------------


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

    url = _db_url(db)
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
@click.option("--yes", is_flag=True, help="Confirm rolling back the base schema (all runs).")
@db_option
@json_option
def db_downgrade(steps: int, yes: bool, db: str | None, as_json: bool) -> None:
    """Roll back the newest migrations. Their data goes: rolling back 0002.run-state drops
    every run's saved state (runs.state_json); rolling back 0001.base, every run."""
    from hango.store import migrate

    url = _db_url(db)
    applied = _migrate(migrate.current, url)
    if steps > len(applied):
        raise click.UsageError(f"--steps {steps}: only {len(applied)} migrations are applied")
    if "0001.base" in applied[-steps:] and not yes:
        raise click.UsageError(
            "this rolls back 0001.base, deleting every run, session and message; add --yes to do it"
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

    url = _db_url(db)
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


@main.command()
@agent_option
@click.option("--session", "session", help="Continue this session (its id or a unique prefix).")
@db_option
@json_option
@click.argument("message")
def submit(
    agent_path: Path, session: str | None, db: str | None, as_json: bool, message: str
) -> None:
    """Queue a run of the agent on MESSAGE for a worker; prints the run id."""

    async def main_() -> RunRecord:
        agent = AgentDefinition.from_file(agent_path)
        store = await open_store(_db_url(db))
        try:
            session_id = await _resolve(store, "session", session) if session else None
            harness = Harness(store, tenant_id=Config.from_env().tenant_id)
            return await harness.start(
                agent, message, session_id=session_id, status=RunStatus.QUEUED
            )
        finally:
            await store.aclose()

    record = _run_async(main_)
    if as_json:
        doc = {"run_id": str(record.id), "session_id": str(record.session_id), "status": "queued"}
        console.print_json(json.dumps(doc))
    else:
        console.print(str(record.id), markup=False)


@main.command()
@click.option(
    "--concurrency",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Runs executed at once.",
)
@click.option(
    "--lease",
    "lease_seconds",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a claimed run stays this worker's unless renewed (renewed every third).",
)
@click.option(
    "--max-attempts",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="Fail a run whose workers died on it this many times.",
)
@click.option("--model", help="Override every agent's model: scripted:PATH, anthropic:NAME, ...")
@click.option("--name", help="This worker's name in leases and logs (default host:pid).")
@db_option
def worker(
    concurrency: int,
    lease_seconds: float,
    max_attempts: int,
    model: str | None,
    name: str | None,
    db: str | None,
) -> None:
    """Execute queued runs until SIGTERM or Ctrl-C.

    The first signal stops claiming, lets each run finish its current turn, saves it and puts
    it back in the queue; a second one cancels the runs at once (also saved and queued)."""
    import logging

    from hango.run.worker import Worker, wait_for_store
    from hango.telemetry.setup import configure_telemetry

    configure_telemetry(None)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("hango.worker").setLevel(logging.INFO)

    async def main_() -> None:
        store = await wait_for_store(_db_url(db))
        try:
            harness = Harness(store, tenant_id=Config.from_env().tenant_id, model_spec=model)
            w = Worker(
                harness,
                name=name,
                concurrency=concurrency,
                lease_seconds=lease_seconds,
                max_attempts=max_attempts,
            )
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def on_signals() -> None:
                        async for _ in signals:
                            if w.stopping:
                                logging.getLogger("hango.worker").warning("cancelling the runs")
                                w.kill()
                                return
                            logging.getLogger("hango.worker").info(
                                "stopping: each run finishes its turn (signal again to cancel)"
                            )
                            w.stop()

                    async def work() -> None:
                        await w.run()
                        tg.cancel_scope.cancel()

                    tg.start_soon(on_signals)
                    tg.start_soon(work)
        finally:
            await store.aclose()

    _run_async(main_)
