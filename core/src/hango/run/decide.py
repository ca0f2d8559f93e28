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
from collections.abc import Mapping

import attrs
from attrs import frozen

from hango import telemetry
from hango.agent.events import RunStatus
from hango.agent.interrupts.decide import DecisionRefused, record_decisions
from hango.agent.interrupts.records import Decision, PendingAction
from hango.agent.interrupts.trace import decided
from hango.agent.state import dump_state, load_state
from hango.store.base import RunRecord, RunSave, RunStore, StaleVersion


@frozen
class Decided:
    """What ``Harness.decide`` did: ``run`` as it now stands; the tool call ids whose decision
    was ``recorded``; those whose identical decision was already there (``unchanged``: sending
    a decision twice is a no-op); the pending actions still ``waiting`` for one."""

    run: RunRecord
    recorded: tuple[str, ...]
    unchanged: tuple[str, ...]
    waiting: tuple[PendingAction, ...]


async def decide_run(
    store: RunStore,
    tenant_id: uuid.UUID,
    run_id: uuid.UUID,
    decisions: Mapping[str, Decision],
    *,
    ready: RunStatus,
) -> Decided:
    """Record ``decisions`` (tool call id -> ``Decision``) for run ``run_id``; once none is
    waiting, the run's status becomes ``ready``.

    Raises ``NotFound``, ``StateError`` (the stored state is malformed) and
    ``DecisionRefused`` (see ``record_decisions``; also when another writer saved the run in
    between), writing nothing.
    """
    run = await store.get_run(tenant_id, run_id)
    state = load_state(run.state) if run.state != {} else None
    if state is None:
        raise DecisionRefused(f"run {run_id} is {run.status.value}, not waiting for a decision")
    with telemetry.tracer.start_as_current_span(
        telemetry.DECIDE_RUN_SPAN, attributes={telemetry.RUN_ID: str(run_id)}
    ):
        done = record_decisions(state.interrupts, decisions, status=run.status.value)
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
