"""The activities a run's workflow sequences: a step, decisions, a cancellation. Each opens
nothing of its own: it calls the ``Harness`` of its tenant on the worker's store.

``advance`` is the one place a step is executed: it calls hango's execution seam
(``Harness.step``), so the Temporal worker and hango's own queue worker run a run the same
way.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

from temporalio import activity
from temporalio.exceptions import ApplicationError

from hango import (
    Decision,
    DecisionRefused,
    Harness,
    RunNotResumable,
    RunSave,
    RunStatus,
    RunStore,
)
from hango_temporal.shapes import DecideReport, DecideRequest, RunRef, StepReport

_FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
#: Characters of a failed run's error carried back to the workflow (the whole error is saved
#: with the run in hango's store).
ERROR_CHARS = 500


async def advance(harness: Harness, run_id: uuid.UUID) -> StepReport:
    """Advance the saved run ``run_id`` by one step (a model turn, or one tool call of a batch)
    through hango's execution seam, ``Harness.step``: under a claim of its own (another
    executor holding the run is ``RunBusy``, retried by Temporal until the claim lapses),
    fenced, and idempotent (a retried step never re-runs a call whose body returned). A run
    that completed or waits for decisions is reported as it stands."""
    done = await harness.step(run_id, steps=1)
    return StepReport(done.status.value, waiting=list(done.pending), error=_clip(done.error))


@contextlib.asynccontextmanager
async def heartbeating(every: float) -> AsyncIterator[None]:
    """Heartbeat the current activity every ``every`` seconds while the block runs, so the
    server notices a dead worker and the activity is told of a cancellation."""

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Activities:
    """The activities of one worker, on ``store``; ``harness_for(tenant)`` builds the
    ``Harness`` of a tenant (one per tenant, kept: plugins load once)."""

    def __init__(self, store: RunStore, harness_for: Callable[[uuid.UUID], Harness]) -> None:
        self.store = store
        self._harness_for = harness_for
        self._harnesses: dict[uuid.UUID, Harness] = {}

    def harness(self, tenant_id: str) -> Harness:
        tenant = uuid.UUID(tenant_id)
        if tenant not in self._harnesses:
            self._harnesses[tenant] = self._harness_for(tenant)
        return self._harnesses[tenant]

    @activity.defn(name="hango.step")
    async def step(self, run: RunRef) -> StepReport:
        """One step of ``run``; raises what ``advance`` raises (retried by the workflow's
        policy unless retrying cannot help: ``RunNotResumable``, a bad stored state)."""
        harness = self.harness(run.tenant_id)
        run_id = uuid.UUID(run.run_id)
        record = await harness.store.get_run(harness.tenant_id, run_id)
        if record.status in (RunStatus.FAILED, RunStatus.CANCELLED):
            # A retry of the step that ended the run, whose report never reached the server:
            # report the end, do not resume the run.
            return StepReport(record.status.value, error=_clip(record.error))
        async with heartbeating(run.heartbeat_seconds / 3):
            return await advance(harness, run_id)

    @activity.defn(name="hango.decide")
    async def decide(self, request: DecideRequest) -> DecideReport:
        """Record the decisions (``Harness.decide``: bound to each pending action's arguments);
        the run is left ``running`` for the workflow's next step. A refused decision fails
        this activity without retries, naming the call."""
        harness = self.harness(request.run.tenant_id)
        try:
            decisions = {
                call_id: Decision(
                    doc["type"],
                    input=doc.get("input"),
                    tool=doc.get("tool"),
                    message=doc.get("message"),
                    digest=doc.get("digest"),
                )
                for call_id, doc in request.decisions.items()
            }
            done = await harness.decide(uuid.UUID(request.run.run_id), decisions, queue=False)
        except (DecisionRefused, RunNotResumable, ValueError, KeyError) as exc:
            raise ApplicationError(str(exc), type="DecisionRefused", non_retryable=True) from None
        return DecideReport(
            done.run.status.value,
            recorded=list(done.recorded),
            unchanged=list(done.unchanged),
            waiting=[p.tool_call_id for p in done.waiting],
        )

    @activity.defn(name="hango.cancelled")
    async def cancelled(self, run: RunRef) -> None:
        """Save the run as cancelled unless it has finished (the cancelled step usually
        saved it so already)."""
        harness = self.harness(run.tenant_id)
        record = await harness.store.get_run(harness.tenant_id, uuid.UUID(run.run_id))
        if record.status in _FINISHED:
            return
        await harness.store.save_run(
            RunSave(
                harness.tenant_id,
                record.id,
                version=record.version,
                status=RunStatus.CANCELLED,
                state=None,
                error="cancelled through its Temporal workflow",
            )
        )

    def all(self) -> list[Callable[..., object]]:
        return [self.step, self.decide, self.cancelled]


def _clip(error: str | None) -> str | None:
    if error is None:
        return None
    first = error.splitlines()[0] if error else error
    return first[:ERROR_CHARS]
