"""The store side of ``Harness.decide``: load a suspended run, bind the decisions
(``hango.agent.interrupts.decide``) and save them.

The decisions are written into the run's ``state_json`` (``State.interrupts``) in one save,
fenced by the run's version, together with the status the run moves to: still ``suspended``
while a pending action has no decision, else ``queued`` (a worker continues it) or ``running``
(this process continues it). The history is not touched: the run goes on from its unfinished
batch when it is executed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import attrs
import jsonschema
from attrs import frozen

from hango import telemetry
from hango.agent.events import RunStatus
from hango.agent.interrupts.decide import DecisionRefused, record_decisions
from hango.agent.interrupts.records import Decision, PendingAction
from hango.agent.interrupts.trace import decided
from hango.agent.state import dump_state, load_state
from hango.store.base import RunRecord, RunSave, RunStore, StaleVersion
from hango.tool.registry import ToolRegistry


@frozen
class Decided:
    """What ``Harness.decide`` did: ``run`` as it now stands; the tool call ids whose decision
    was ``recorded``; those whose identical decision was already there (``unchanged``: sending
    a decision twice is a no-op); the pending actions still ``waiting`` for one."""

    run: RunRecord
    recorded: tuple[str, ...]
    unchanged: tuple[str, ...]
    waiting: tuple[PendingAction, ...]


def check_edits(recorded: Sequence[PendingAction], tools: ToolRegistry | None) -> None:
    """Refuse an edit whose tool does not exist or whose arguments its tool's JSON Schema
    refuses (``DecisionRefused``), before anything is recorded. ``tools`` gives the agent's
    own tools; a tool a middleware provides (``write_todos``, MCP tools) is not among them, so
    an edit of such a call keeps its tool and is checked when it runs."""
    edits = [a for a in recorded if a.decision is not None and a.decision.type == "edit"]
    if not edits or tools is None:
        return
    for action in edits:
        assert action.decision is not None
        target = action.decision.tool or action.tool
        tool = tools.view().get(target)
        if tool is None:
            if target == action.tool:
                continue  # a middleware's tool: checked when it runs
            raise DecisionRefused(
                f"tool call {action.tool_call_id!r}: --edit names tool {target!r}, which this "
                "agent does not have; nothing was recorded"
            )
        schema = tool.spec.input_schema
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(action.decision.input))
        if error is not None:
            raise DecisionRefused(
                f"tool call {action.tool_call_id!r}: the edited arguments do not fit {target}: "
                f"{error.json_path}: {error.message}; nothing was recorded"
            )


async def decide_run(
    store: RunStore,
    tenant_id: uuid.UUID,
    run_id: uuid.UUID,
    decisions: Mapping[str, Decision],
    *,
    ready: RunStatus,
    tools: ToolRegistry | None = None,
) -> Decided:
    """Record ``decisions`` (question id or tool call id -> ``Decision``) for run ``run_id``;
    once none is waiting, the run's status becomes ``ready``. An edit is checked against
    ``tools`` (the agent's tools, asked for only when there is an edit) first.

    Raises ``NotFound``, ``StateError`` (the stored state is malformed) and
    ``DecisionRefused`` (see ``record_decisions`` and ``check_edits``; also when another writer
    saved the run in between), writing nothing.
    """
    run = await store.get_run(tenant_id, run_id)
    state = load_state(run.state) if run.state != {} else None
    if state is None:
        raise DecisionRefused(f"run {run_id} is {run.status.value}, not waiting for a decision")
    with telemetry.tracer.start_as_current_span(
        telemetry.DECIDE_RUN_SPAN, attributes={telemetry.RUN_ID: str(run_id)}
    ):
        done = record_decisions(state.interrupts, decisions, status=run.status.value)
        check_edits(done.recorded, tools)
        if not done.recorded:
            return Decided(run, (), done.unchanged, done.waiting)
        status = RunStatus.SUSPENDED if done.waiting else ready
        document = dump_state(state)
        try:
            version = await store.save_run(
                RunSave(
                    tenant_id,
                    run_id,
                    version=run.version,
                    status=status,
                    state=document,
                    stop_reason=run.stop_reason,
                )
            )
        except StaleVersion:
            raise DecisionRefused(
                f"run {run_id} changed while the decisions were being recorded (another "
                "decision, or a worker); nothing was recorded: look at it again"
            ) from None
        for action in done.recorded:
            decided(action)
    saved = attrs.evolve(run, status=status, version=version, state=document, error=None)
    return Decided(
        saved, tuple(a.tool_call_id for a in done.recorded), done.unchanged, done.waiting
    )
