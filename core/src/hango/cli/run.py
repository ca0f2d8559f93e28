"""``hango run``, ``hango resume`` and ``hango submit``: start, continue and queue runs."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import signal
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import anyio
import click

from hango.agent.definition import AgentDefinition
from hango.agent.events import Event, MessageCompleted, RunFinished, RunStatus
from hango.agent.interrupts.records import Decision
from hango.cli import (
    USER_ERRORS,
    agent_option,
    base_url_option,
    console,
    db_option,
    db_url,
    err_console,
    exit_with,
    json_option,
    jsonl_option,
    main,
    message_file_option,
    model_option,
    read_message,
    resolve,
    resume_hint,
    run_async,
    run_json_option,
    trace_option,
)
from hango.cli.decisions import (
    SUSPENDED_EXIT,
    parse_decisions,
    pending_json,
    pending_of,
    print_pending,
)
from hango.cli.jsonl import event_to_json
from hango.cli.render import (
    Renderer,
)
from hango.config import (
    DEFAULT_TENANT,
    Config,
)
from hango.provider.errors import ModelSpecError
from hango.provider.messages import Message, Usage
from hango.run import Decided, Harness
from hango.run.engine import OWN_ENGINE, EngineError, engine_named, engine_of
from hango.store import RunStore, SessionBusy, StoreError, open_store
from hango.store.base import RunRecord, RunSave, run_busy

Output = Literal["text", "json", "jsonl"]


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
        url = db_url(db)
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

    def command(self, run_id: uuid.UUID) -> str:
        return resume_hint.command(
            ["resume", str(run_id)], db=self.db, tenant=self.tenant, options=self.options
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
        # The validated structured output of an agent that declares one (else null).
        "output": finished.output,
        "pending": pending_json(finished.pending),
    }


def _hint(words: str, command: str) -> None:
    """``words``, then ``command`` alone on its line: never broken by a hard wrap, so it
    pastes whole."""
    err_console.print(words, markup=False)
    err_console.print(f"  {command}", markup=False, soft_wrap=True, style="bold")


async def _jsonl(event: Event) -> None:
    try:
        sys.stdout.write(json.dumps(event_to_json(event), ensure_ascii=False) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        console.on_broken_pipe()


async def _quiet(_: Event) -> None:
    return None


#: Exit codes of a run cancelled by a signal (128 + the signal's number, as shells report).
_SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


async def _execute(harness: Harness, run: RunRecord, *, output: Output, resume: _Resume) -> int:
    """Execute ``run``, showing its events as ``output`` asks; returns the exit code.

    Ctrl-C or SIGTERM cancels the run (the harness saves it as cancelled); a closed output
    (``| head``) does too, quietly. Either way the run's saved status decides what is printed
    and the exit code, so a signal that lands after the run was saved completed still reports
    it completed, and ``--json`` / ``--jsonl`` always end with the run's summary."""
    finished: RunFinished | None = None
    failure: Exception | None = None
    last: Message | None = None  # the last assistant message: the answer once the run completes
    stopped_by: list[signal.Signals] = []
    renderer = Renderer(console)
    show = {"text": renderer.event, "json": _quiet, "jsonl": _jsonl}[output]
    stop = anyio.CancelScope()  # replaced by the task group's scope below

    async def emit(event: Event) -> None:
        nonlocal last
        if isinstance(event, MessageCompleted):
            last = event.message
        if not console.closed:
            await show(event)
            if console.closed:  # the reader went away: stop the run, quietly
                stop.cancel()

    # Once the run is saved, a late Ctrl-C or SIGTERM must not cut the report short: these
    # handlers take over when the receiver below gives the signals back.
    for signum in _SIGNAL_EXIT:
        signal.signal(signum, lambda received, _: stopped_by.append(signal.Signals(received)))
    with (
        renderer if output == "text" else contextlib.nullcontext(),
        anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals,
    ):
        async with anyio.create_task_group() as tg:
            stop = tg.cancel_scope

            async def on_signal() -> None:
                async for signum in signals:
                    stopped_by.append(signal.Signals(signum))
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
        finished = await _saved(harness, run.id)
    code = _report(finished, run, last, output=output, resume=resume)
    if finished.status is RunStatus.CANCELLED:
        if output == "jsonl":
            await _jsonl(finished)
        if not console.closed or output == "text":
            _hint("cancelled; resume with:", resume.command(run.id))
        return _SIGNAL_EXIT.get(stopped_by[0], 130) if stopped_by else 130
    return code


async def _saved(harness: Harness, run_id: uuid.UUID) -> RunFinished:
    """The run as saved, as a ``RunFinished``: what a cancelled ``execute`` left in the store
    (cancelled, or completed when the signal landed after the last save)."""
    from hango.agent.state import load_state
    from hango.cli.decisions import pending_of

    record = await harness.store.get_run(harness.tenant_id, run_id)
    usage = (
        load_state(record.state).usage if isinstance(record.state, dict) and record.state else None
    )
    return RunFinished(
        run_id,
        record.status,
        record.stop_reason,
        record.error,
        usage if usage is not None else Usage(),
        tuple(pending_of(record.state) or ()) if record.status is RunStatus.SUSPENDED else (),
    )


def _report(
    finished: RunFinished, run: RunRecord, last: Message | None, *, output: Output, resume: _Resume
) -> int:
    """Print how the run ended as ``output`` asks; the exit code."""
    if output == "json":
        answer = last.text if last and finished.status is RunStatus.COMPLETED else None
        console.print_json(json.dumps(_summary(finished, run, answer)))
    elif output == "text" and finished.pending:
        print_pending(console, run.id, finished.pending, resume.db_option)
    elif output == "text" and finished.output is not None:
        console.print("output:", style="bold")
        console.print_json(json.dumps(finished.output, ensure_ascii=False))
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
            f"session {session_id} has run {busy.id} in progress on {busy.lease_owner}; "
            "continue the session once it has finished"
        )
    return StoreError(
        f"session {session_id} has run {busy.id} still marked running, and nothing executes "
        f"it (its executor is gone: killed, crashed); recover it with: {resume.command(busy.id)}"
    )


async def _unclaimed(store: RunStore, record: RunRecord, *, wait: bool) -> RunRecord:
    """``record`` once no other executor holds its claim, checked before any decision is
    recorded (``Harness.execute`` takes the claim itself, atomically). While one does:
    ``RunBusy``; with ``wait`` (``--force``) only after waiting once for the claim to lapse,
    which a crashed executor's does and a live one's never does (it renews it)."""
    expires = record.lease_expires_at
    now = dt.datetime.now(dt.UTC)
    if expires is None or expires <= now:
        return record
    if wait:
        await anyio.sleep((expires - now).total_seconds() + 0.05)
        record = await store.get_run(record.tenant_id, record.id)
        expires = record.lease_expires_at
        if expires is None or expires <= dt.datetime.now(dt.UTC):
            return record
    busy = run_busy(record.id, record.lease_owner, expires)
    if wait:
        raise busy
    raise type(busy)(f"{busy}; with --force, resume waits for the claim to lapse")


@main.command()
@agent_option
@model_option
@base_url_option
@click.option("--session", "session", help="Continue this session (its id or a unique prefix).")
@trace_option
@db_option
@run_json_option
@jsonl_option
@message_file_option
@click.argument("message", required=False)
def run(
    agent_path: Path,
    model: str | None,
    base_url: str | None,
    session: str | None,
    trace: str | None,
    db: str | None,
    as_json: bool,
    jsonl: bool,
    message_file: Path | None,
    message: str | None,
) -> None:
    """Run the agent on MESSAGE (- reads it from standard input), streaming its work."""
    output = _output(as_json, jsonl)
    text = read_message(message, message_file)
    from hango.telemetry.setup import configure_telemetry

    configure_telemetry(trace)

    async def main_() -> int:
        agent = AgentDefinition.from_file(agent_path)
        chosen = model or agent.model
        if base_url is not None and isinstance(chosen, str) and chosen.startswith("scripted:"):
            raise ModelSpecError(
                f"--base-url: model {chosen!r} has no base URL (anthropic:NAME and "
                "openai:NAME take one)"
            )
        built = agent.build_model(model, base_url)  # a bad model or script fails before any run
        store = await open_store(db_url(db))
        try:
            session_id = await resolve(store, "session", session) if session else None
            # One harness starts and executes the run: plugins are loaded once.
            harness = Harness(
                store,
                tenant_id=Config.from_env().tenant_id,
                model=built,
                model_spec=model,
                base_url=base_url,
            )
            try:
                record = await harness.start(agent, text, session_id=session_id)
            except SessionBusy as exc:
                assert session_id is not None
                raise await _busy_session(store, exc, session_id, db) from None
            # The run records its model and base URL: resuming it needs neither option.
            resume = _Resume(db, trace=trace, output=output)
            return await _execute(harness, record, output=output, resume=resume)
        finally:
            await store.aclose()

    exit_with(run_async(main_))


@main.command()
@click.option(
    "--model",
    help="Continue on this model instead of the one the run started with (recorded).",
)
@click.option("--base-url", help="Base URL of an OpenAI-compatible server (with --model).")
@trace_option
@click.option(
    "--force",
    is_flag=True,
    help="If another executor holds the run, wait once for its claim to lapse, then resume.",
)
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
        store = await open_store(db_url(db))
        try:
            tenant = Config.from_env().tenant_id
            rid = await resolve(store, "run", run_id)
            record = await store.get_run(tenant, rid)
            if engine_of(record.config) != OWN_ENGINE:
                return await _resume_on_engine(store, record, decisions, output=output, db=db)
            again = _Resume(db, model=model, base_url=base_url, trace=trace, output=output)
            # One executor per run: every executor holds a claim that it renews, so a run
            # whose executor died is free once its claim lapses; --force never takes a live one.
            record = await _unclaimed(store, record, wait=force)
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

    exit_with(run_async(main_))


async def _resume_on_engine(
    store: RunStore,
    record: RunRecord,
    decisions: Mapping[str, Decision],
    *,
    output: Output,
    db: str | None,
) -> int:
    """``hango resume`` of a run an engine executes: its decisions go through the engine, which
    continues the run; nothing is executed here. Returns the exit code."""
    name = engine_of(record.config)
    harness = Harness(store, tenant_id=record.tenant_id)
    engine = engine_named(name, harness.plugins)
    assert engine is not None  # engine_of is not the own queue
    if not decisions:
        raise StoreError(
            f"run {record.id} runs on engine {name}, which continues it by itself; a "
            "suspended one goes on once decided (hango resume RUN_ID --approve CALL_ID)"
        )
    if record.status is not RunStatus.SUSPENDED:
        raise StoreError(
            f"run {record.id} is {record.status.value} on engine {name}, not waiting for a decision"
        )
    delivered = await engine.decide(harness, record.id, decisions)
    after = await store.get_run(record.tenant_id, record.id)
    waiting = tuple(p for p in pending_of(after.state) or () if p.tool_call_id in delivered.waiting)
    done = Decided(after, delivered.recorded, delivered.unchanged, waiting)
    code = _decided(done, as_json=output == "json", db=db, queue=True, engine=name)
    return 0 if code is None else code


def _decided(
    done: Decided, *, as_json: bool, db: str | None, queue: bool, engine: str = OWN_ENGINE
) -> int | None:
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
        if engine != OWN_ENGINE and not finished:
            left = f" on engine {engine}"
        console.print(f"run {run.id} is {run.status.value}{left}", markup=False)
    if done.waiting:
        return SUSPENDED_EXIT
    if engine != OWN_ENGINE:
        return 0 if run.status is not RunStatus.FAILED else 1
    return 0 if run.status in (RunStatus.QUEUED, RunStatus.COMPLETED) else 1


@main.command()
@agent_option
@click.option("--session", "session", help="Continue this session (its id or a unique prefix).")
@click.option(
    "--engine",
    default=OWN_ENGINE,
    show_default=True,
    metavar="NAME",
    help="What executes the run: hango (the own queue, `hango worker`) or an installed engine "
    "(temporal, from hango-temporal).",
)
@db_option
@json_option
@message_file_option
@click.argument("message", required=False)
def submit(
    agent_path: Path,
    session: str | None,
    engine: str,
    db: str | None,
    as_json: bool,
    message_file: Path | None,
    message: str | None,
) -> None:
    """Queue a run of the agent on MESSAGE (- reads it from standard input) for a worker (or
    an engine); prints the run id."""
    text = read_message(message, message_file)

    async def main_() -> RunRecord:
        agent = AgentDefinition.from_file(agent_path)
        store = await open_store(db_url(db))
        try:
            session_id = await resolve(store, "session", session) if session else None
            harness = Harness(store, tenant_id=Config.from_env().tenant_id)
            # An unknown engine is refused before anything is recorded.
            executor = engine_named(engine, harness.plugins)
            if executor is None:
                return await harness.start(
                    agent, text, session_id=session_id, status=RunStatus.QUEUED
                )
            record = await harness.start(agent, text, session_id=session_id, engine=engine)
            try:
                await executor.submit(harness, record.id)
            except EngineError as exc:
                # Recorded but never started: failed, with the reason, so nothing waits on it.
                await store.save_run(
                    RunSave(
                        record.tenant_id,
                        record.id,
                        version=record.version,
                        status=RunStatus.FAILED,
                        state=None,
                        error=str(exc),
                    )
                )
                raise
            return record
        finally:
            await store.aclose()

    record = run_async(main_)
    status = "queued" if engine == OWN_ENGINE else record.status.value
    if as_json:
        doc = {
            "run_id": str(record.id),
            "session_id": str(record.session_id),
            "status": status,
            "engine": engine,
        }
        console.print_json(json.dumps(doc))
    else:
        console.print(str(record.id), markup=False)
