"""Pending actions on the command line: ``hango resume``'s decision options, and what a
suspended run prints (what it waits for and the exact commands to decide)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console
from rich.text import Text

from hango.agent.interrupts.records import Decision, PendingAction
from hango.agent.state import StateError, load_state
from hango.cli import resume_hint
from hango.config import DEFAULT_TENANT, Config
from hango.convert import CONVERTER
from hango.provider.messages import JSON

#: Exit code of a command whose run ended suspended, waiting for decisions.
SUSPENDED_EXIT = 3


def _split(option: str, value: str, *, required: bool) -> tuple[str, str | None]:
    call_id, sep, rest = value.partition("=")
    call_id = call_id.strip()
    if not call_id:
        raise click.BadParameter(f"{value!r}: expected CALL_ID first", param_hint=option)
    if required and not sep:
        raise click.BadParameter(f"{value!r}: expected CALL_ID=...", param_hint=option)
    return call_id, rest if sep else None


def _edit(value: str, spec: str) -> Decision:
    """``JSON`` (new arguments) or ``TOOL JSON`` (another tool and its arguments)."""
    tool: str | None = None
    text = spec.strip()
    named = re.fullmatch(r"([A-Za-z_][\w.-]*)\s+(\{.*)", text, re.DOTALL)
    if named:
        tool, text = named.groups()
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"{value!r}: arguments are not JSON: {exc}", param_hint="--edit"
        ) from None
    if not isinstance(arguments, dict):
        raise click.BadParameter(
            f"{value!r}: the arguments must be a JSON object", param_hint="--edit"
        )
    return Decision.edit(arguments, tool=tool or None)


def parse_decisions(
    approve: Sequence[str], reject: Sequence[str], edit: Sequence[str], respond: Sequence[str]
) -> dict[str, Decision]:
    """The decisions given as options, by tool call id. Raises ``click.BadParameter`` naming
    the option for a malformed value, and for a call given two decisions."""
    out: dict[str, Decision] = {}

    def add(option: str, call_id: str, decision: Decision) -> None:
        if call_id in out:
            raise click.BadParameter(
                f"tool call {call_id!r} is given two decisions", param_hint=option
            )
        out[call_id] = decision

    for value in approve:
        add("--approve", _split("--approve", value, required=False)[0], Decision.approve())
    for value in reject:
        call_id, message = _split("--reject", value, required=False)
        add("--reject", call_id, Decision.reject(message or None))
    for value in edit:
        call_id, spec = _split("--edit", value, required=True)
        add("--edit", call_id, _edit(value, spec or ""))
    for value in respond:
        call_id, text = _split("--respond", value, required=True)
        add("--respond", call_id, Decision.respond(text or ""))
    return out


def pending_of(state: JSON) -> list[PendingAction] | None:
    """The pending actions in a stored ``state_json``; None when it does not load."""
    if not isinstance(state, dict) or not state:
        return [] if state == {} else None
    try:
        return load_state(state).interrupts.pending
    except StateError:
        return None


def pending_json(actions: Sequence[PendingAction]) -> list[dict[str, Any]]:
    """Pending actions as JSON objects (``tool_call_id``, ``tool``, ``input``, ``decisions``,
    ``digest``, ``reason``, ``middleware``, ``name``, ``id``, ``decision``, ...)."""
    return [CONVERTER.unstructure(a) for a in actions]


def decide_commands(
    run_id: uuid.UUID, actions: Sequence[PendingAction], db: str | None = None
) -> list[str]:
    """The commands that decide each of ``actions``, one per allowed decision (naming the call,
    or for a question asked again about it, the question's id): pasteable as
    they are, started the way this hango was (``uv run hango`` under uv), with the same
    database and tenant (``hango.cli.resume_hint``)."""
    tenant = Config.from_env().tenant_id
    lines: list[str] = []
    for a in actions:
        arguments = json.dumps(a.input, ensure_ascii=False)
        # A question asked again about a call is answered by its own id (never by call id).
        key = a.id if a.reasked else a.tool_call_id
        options = {
            "approve": ["--approve", key],
            "edit": ["--edit", f"{key}={arguments}"],
            "reject": ["--reject", f"{key}=REASON"],
            "respond": ["--respond", f"{key}=TEXT"],
        }
        lines += [
            resume_hint.command(
                ["resume", str(run_id)],
                db=db,
                tenant=None if tenant == DEFAULT_TENANT else str(tenant),
                options=options[d],
            )
            for d in a.decisions
        ]
    return lines


def print_pending(
    console: Console, run_id: uuid.UUID, actions: Sequence[PendingAction], db: str | None = None
) -> None:
    """What the run waits for, one line per call, then the commands to decide."""
    waiting = [a for a in actions if a.decision is None]
    if not waiting:
        return
    console.print(Text("pending:", style="bold"))
    for a in waiting:
        unknown = " (an earlier attempt's outcome is unknown)" if a.outcome_unknown else ""
        arguments = json.dumps(a.input, ensure_ascii=False)
        console.print(
            f"  {a.tool_call_id}  {a.tool} {arguments}  [{a.reason}{unknown}]",
            markup=False,
            soft_wrap=True,
        )
    console.print(Text("decide with one of:", style="bold"))
    for line in decide_commands(run_id, waiting, db):
        console.print(f"  {line}", markup=False, soft_wrap=True)
