"""``hango runs list`` and ``hango runs show``: the stored runs."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import click
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

from hango.agent.events import RunStatus
from hango.agent.state import HistoryMark, StateError
from hango.cli import (
    console,
    db_option,
    db_url,
    json_option,
    main,
    resolve,
    run_async,
)
from hango.cli.decisions import (
    pending_json,
    pending_of,
    print_pending,
)
from hango.cli.render import (
    checklist,
    clip_line,
    clip_text,
    tool_call_line,
    tool_result_lines,
)
from hango.config import (
    Config,
    ConfigError,
    StackConfig,
    hango_settings,
)
from hango.convert import message_to_json
from hango.plugins import make_plugin_manager
from hango.run.engine import OWN_ENGINE, engine_named, engine_of
from hango.store import RunStore, StoreError, open_store
from hango.store.base import RunRecord


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
        # What executes it: "hango" (the own queue, or a terminal) or an installed engine.
        "engine": engine_of(r.config),
        # The validated structured output, once the run has one (agents with output_schema).
        "output": r.state.get("output") if isinstance(r.state, dict) else None,
        # A sub-agent's child run: the run and the tool call it answers (else None).
        "parent_run_id": None if r.parent_run_id is None else str(r.parent_run_id),
        "parent_tool_call_id": r.parent_tool_call_id,
    }


async def _tree(
    store: RunStore, tenant: uuid.UUID, run_id: uuid.UUID, depth: int = 0
) -> list[tuple[int, RunRecord]]:
    """The child runs of ``run_id`` and theirs, depth first, each with its depth (0: a child)."""
    rows: list[tuple[int, RunRecord]] = []
    for child in await store.child_runs(tenant, run_id):
        rows.append((depth, child))
        rows += await _tree(store, tenant, child.id, depth + 1)
    return rows


async def _agent_names(store: RunStore, records: Sequence[RunRecord]) -> dict[uuid.UUID, str]:
    """Agent id -> name; ``?`` for an agent row that does not read (one bad row never hides
    the other runs)."""
    tenant = Config.from_env().tenant_id
    names = {}
    for agent_id in {r.agent_id for r in records}:
        try:
            names[agent_id] = (await store.get_agent(tenant, agent_id)).name
        except StoreError:
            names[agent_id] = "?"
    return names


async def _prompts(store: RunStore, records: Sequence[RunRecord]) -> dict[uuid.UUID, str]:
    """Each run's own user message (the one it was started with): that one message is read,
    never the session's history (which may hold megabytes of tool results)."""
    tenant = Config.from_env().tenant_id
    out = {}
    for r in records:
        try:
            message = await store.load_message(tenant, r.session_id, r.message_start)
        except StoreError as exc:
            out[r.id] = f"({exc})"
            continue
        out[r.id] = message.text if message is not None else ""
    return out


#: Characters of an id shown in tables: enough to be a unique prefix in practice (8 hex
#: digits: one pair in a million among 100 runs), and what `runs show` and `resume` take.
SHORT_ID = 8

#: Width of the started column (local time, minutes) and of the longest status word.
_STARTED = len("2026-01-01 00:00")
_STATUS = max(len("unreadable"), *(len(s.value) for s in RunStatus))
_AGENT = 16


#: The status shown for a run whose row does not decode (its prompt column says why).
UNREADABLE = "unreadable"


def _shown(r: RunRecord, prompts: dict[uuid.UUID, str]) -> tuple[str, str]:
    """The status and prompt columns of ``r``: for a row that does not decode, ``unreadable``
    and what is wrong with it."""
    if r.problem is not None:
        return UNREADABLE, r.problem
    return r.status.value, prompts[r.id]


def _under_parents(records: Sequence[RunRecord]) -> list[RunRecord]:
    """``records`` (newest first) with each child run moved right under its parent when the
    parent is listed too (a child is newer than its parent), children in the order they were
    started; the rest keep their order."""
    listed = {r.id for r in records}
    children: dict[uuid.UUID, list[RunRecord]] = {}
    for r in reversed(records):
        if r.parent_run_id in listed:
            children.setdefault(r.parent_run_id, []).append(r)
    out: list[RunRecord] = []

    def add(r: RunRecord) -> None:
        out.append(r)
        for child in children.get(r.id, ()):
            add(child)

    for r in records:
        if r.parent_run_id not in listed:
            add(r)
    return out


def _print_table(
    records: Sequence[RunRecord], names: dict[uuid.UUID, str], prompts: dict[uuid.UUID, str]
) -> None:
    """The terminal table. Every column but the prompt has a fixed width (ids as their unique
    8-character prefixes, status words whole), so at 80 columns only the prompt gives way."""
    prefix = SHORT_ID
    ids = [str(r.id) for r in records] + [str(r.session_id) for r in records]
    while len({i[:prefix] for i in ids}) < len(set(ids)):
        prefix += 1  # a shared 8-character prefix among those shown: show more
    agent = min(_AGENT, max(len("agent"), *(len(names[r.agent_id]) for r in records)))
    fixed = prefix + agent + prefix + _STARTED + _STATUS + 2 * 5  # two spaces between columns
    prompt_width = max(len("prompt"), console.width - fixed)
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), expand=False)
    for name, width in (("run", prefix), ("agent", agent), ("session", prefix),
                        ("started", _STARTED), ("status", _STATUS)):  # fmt: skip
        table.add_column(name, no_wrap=True, width=width, overflow="ellipsis")
    table.add_column("prompt", no_wrap=True, width=prompt_width, overflow="ellipsis")
    for r in records:
        status, prompt = _shown(r, prompts)
        style = {"completed": "green", "failed": "red", "cancelled": "yellow"}.get(status, "red")
        table.add_row(
            str(r.id)[:prefix],
            # A sub-agent's child run, listed under its parent.
            ("└ " if r.parent_run_id is not None else "") + names[r.agent_id],
            str(r.session_id)[:prefix],
            r.created_at.astimezone().strftime("%Y-%m-%d %H:%M"),
            Text(status, style=style),
            clip_line(prompt, prompt_width),
        )
    console.print(table, crop=True)


@runs.command("list")
@click.option(
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many runs, newest first.",
)
@db_option
@json_option
def runs_list(limit: int, db: str | None, as_json: bool) -> None:
    """List runs, newest first: id, agent, session, start time, status and prompt; a
    sub-agent's child run right under its parent."""

    async def main_() -> None:
        store = await open_store(db_url(db))
        try:
            newest = await store.list_runs(Config.from_env().tenant_id, limit=limit)
            records = _under_parents(newest)
            names = await _agent_names(store, records)
            prompts = await _prompts(store, records)
        finally:
            await store.aclose()
        if as_json:
            rows = [
                _run_json(r)
                | {"agent": names[r.agent_id], "prompt": prompts[r.id], "problem": r.problem}
                for r in records
            ]
            console.print_json(json.dumps(rows))
            return
        if not records:
            console.print("no runs yet: start one with `hango run --agent FILE MESSAGE`")
            return
        if console.is_terminal:
            _print_table(records, names, prompts)
        else:
            # Piped: plain, complete, one run per line, tab-separated (full ids, whole prompt
            # line), for grep, cut and awk; --json for anything more.
            for r in records:
                status, prompt = _shown(r, prompts)
                row = (str(r.id), names[r.agent_id], str(r.session_id), r.created_at.isoformat(),
                       status, clip_line(prompt, 10**6))  # fmt: skip
                sys.stdout.write("\t".join(row) + "\n")

    run_async(main_)


@runs.command("show")
@db_option
@json_option
@click.argument("run_id")
def runs_show(db: str | None, as_json: bool, run_id: str) -> None:
    """Show RUN_ID (an id or a unique prefix): status, messages, state (the plan) and its
    child runs (sub-agents), as a tree."""

    async def main_() -> None:
        store = await open_store(db_url(db))
        try:
            tenant = Config.from_env().tenant_id
            record = await store.get_run(tenant, await resolve(store, "run", run_id))
            messages = await store.load_messages(tenant, record.session_id)
            tree = await _tree(store, tenant, record.id)
            names = await _agent_names(store, [r for _, r in tree])
        finally:
            await store.aclose()
        pending = pending_of(record.state)
        if as_json:
            doc = _run_json(record) | {
                "engine_run": _engine_run(record),
                "children": [
                    _run_json(r) | {"agent": names[r.agent_id]} for depth, r in tree if depth == 0
                ],
                "pending": None if pending is None else pending_json(pending),
                "state": record.state,
                "messages": [message_to_json(m) for m in messages],
            }
            console.print_json(json.dumps(doc))
            return
        _print_run(record, messages)
        if tree:
            console.print("child runs (sub-agents):")
        for depth, r in tree:
            console.print(
                f"{'  ' * (depth + 1)}task call {r.parent_tool_call_id} -> child run {r.id}  "
                f"{names[r.agent_id]}  {r.status.value}",
                markup=False,
                soft_wrap=True,
            )
        if pending and record.status is RunStatus.SUSPENDED:
            print_pending(console, record.id, pending, db)

    run_async(main_)


def _history_mark(state: Any) -> HistoryMark | None:
    """The run's history mark when a middleware set one (a compaction), else None."""
    from hango.agent.state import load_state

    if not isinstance(state, dict) or not state:
        return None
    try:
        mark = load_state(state).history_mark
    except StateError:
        return None  # reported with the plan below
    return mark if mark.end > 0 else None


def _engine_run(record: RunRecord) -> dict[str, Any] | None:
    """What identifies the run inside its engine (a Temporal workflow id); None on the own
    queue, or when the engine's plugin is not installed here."""
    name = engine_of(record.config)
    if name == OWN_ENGINE:
        return None
    try:
        engine = engine_named(name, make_plugin_manager())
    except ConfigError:
        return None
    assert engine is not None
    return dict(engine.describe(record.id))


def _missing_here(record: RunRecord) -> str:
    """The middleware of the run's recorded stack this process's plugins cannot build, with
    their distributions ('' when none): why a worker like this one leaves it queued."""
    import warnings

    from hango.discovery import discover
    from hango.run.worker import missing_middleware

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a failing plugin is reported by `hango plugins`
        try:
            pm = make_plugin_manager()
            installed = {p.name for p in discover(StackConfig(settings=hango_settings()), pm)}
        except Exception:
            return ""
    return missing_middleware(record.config, installed)


def _print_run(record: RunRecord, messages: list[Any]) -> None:
    from hango.agent.state import load_state

    rich_text = console.is_terminal and not console.is_dumb_terminal
    console.print(f"run {record.id}  [bold]{record.status.value}[/bold]")
    console.print(f"session {record.session_id}", style="dim")
    if engine_of(record.config) != OWN_ENGINE:
        ref = _engine_run(record) or {}
        where = "  ".join(f"{k} {v}" for k, v in ref.items())
        console.print(
            f"engine {engine_of(record.config)}  {where}".rstrip(), style="dim", markup=False
        )
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
    if record.status is RunStatus.QUEUED and (missing := _missing_here(record)):
        console.print(
            f"queued for a worker that can build {missing} (not installed here)",
            markup=False,
            style="yellow",
            soft_wrap=True,
        )
    mark = _history_mark(record.state)
    for i, m in enumerate(messages):
        if mark is not None and i == mark.end:
            # The messages above are covered by a compaction: what the model sees of them.
            console.print(Text(f"── {mark.by}: {mark.note}", style="yellow"))
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
    if record.state == {}:
        return
    try:
        todos = load_state(record.state).todos
    except StateError as exc:
        console.print(f"state: {exc}", markup=False, style="red", soft_wrap=True)
        if record.status is RunStatus.SUSPENDED:
            console.print(
                "its pending tool calls cannot be read until the state is repaired",
                markup=False,
                style="red",
            )
        return
    if todos:
        console.print(checklist(todos))
