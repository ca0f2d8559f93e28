"""The workflow of one hango run: it only sequences steps.

Every step (a model turn with its tool batch) runs in the activity ``hango.step``, which calls
hango's one execution seam; so no middleware, tool or provider runs in workflow code and none
of them needs to be deterministic. The workflow's own state is the run's status as the last
step reported it; history and state live in hango's store. A suspended run's workflow waits,
holding no worker slot, for the update ``hango.decide`` (or, with a decision timeout, until a
durable timer gives each waiting call the configured decision); cancelling the workflow cancels the
step in progress (which saves the run as cancelled) and records the run as cancelled.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from hango_temporal.shapes import (
    DECIDE_UPDATE,
    WORKFLOW_NAME,
    DecideReport,
    DecideRequest,
    RunRef,
    StepReport,
)

#: Retries of a step: Temporal's own policy (exponential backoff, no attempt limit), except for
#: the failures retrying cannot mend, named by exception class.
STEP_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    non_retryable_error_types=["RunNotResumable", "StateError", "NotFound", "ConfigError"],
)
#: A step may take long (a slow model, a slow tool); heartbeats, not this, detect a dead worker.
STEP_TIMEOUT = timedelta(hours=2)
#: Recording decisions or a cancellation is one read and one write.
BOOKKEEPING_TIMEOUT = timedelta(minutes=1)
BOOKKEEPING_RETRY = RetryPolicy(
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=["DecisionRefused", "StateError", "NotFound", "ValueError"],
)

_DONE = frozenset({"completed", "failed", "cancelled"})


@workflow.defn(name=WORKFLOW_NAME)
class RunWorkflow:
    def __init__(self) -> None:
        self._run: RunRef | None = None
        self._waiting: list[str] = []

    @workflow.run
    async def run(self, run: RunRef) -> StepReport:
        self._run = run
        try:
            while True:
                report: StepReport = await workflow.execute_activity(
                    "hango.step",
                    run,
                    result_type=StepReport,
                    start_to_close_timeout=STEP_TIMEOUT,
                    heartbeat_timeout=timedelta(seconds=run.heartbeat_seconds),
                    retry_policy=STEP_RETRY,
                    # A cancelled step saves the run as cancelled before the workflow goes on.
                    cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                )
                if report.status in _DONE:
                    return report
                if report.status == "suspended":
                    self._waiting = list(report.waiting)
                    await self._wait_for_decisions(run)
        except asyncio.CancelledError:
            # Still allowed after a cancel request: record it, then end as cancelled.
            await workflow.execute_activity(
                "hango.cancelled",
                run,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
            )
            raise

    async def _wait_for_decisions(self, run: RunRef) -> None:
        """Until no call waits; past ``run.decision_seconds`` (a durable timer) each waiting
        call gets the run's timeout decision, recorded like a person's."""
        timeout = None if run.decision_seconds is None else timedelta(seconds=run.decision_seconds)
        try:
            await workflow.wait_condition(lambda: not self._waiting, timeout=timeout)
        except TimeoutError:
            message = f"no decision within {run.decision_seconds:g} s"
            decisions = {
                call: {"type": run.timeout_decision, "message": message}
                if run.timeout_decision == "reject"
                else {"type": run.timeout_decision}
                for call in self._waiting
            }
            try:
                report: DecideReport = await workflow.execute_activity(
                    "hango.decide",
                    DecideRequest(run, decisions),
                    result_type=DecideReport,
                    start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                    retry_policy=BOOKKEEPING_RETRY,
                )
            except ActivityError:
                # A person's decision came first (this one was refused): theirs stands.
                pass
            else:
                self._waiting = list(report.waiting)
            await workflow.wait_condition(lambda: not self._waiting)

    @workflow.update(name=DECIDE_UPDATE)
    async def decide(self, request: DecideRequest) -> DecideReport:
        try:
            report: DecideReport = await workflow.execute_activity(
                "hango.decide",
                request,
                result_type=DecideReport,
                start_to_close_timeout=BOOKKEEPING_TIMEOUT,
                retry_policy=BOOKKEEPING_RETRY,
            )
        except ActivityError as exc:
            # Fails this update (the caller sees why), not the workflow.
            cause = exc.cause
            message = cause.message if isinstance(cause, ApplicationError) else str(exc)
            raise ApplicationError(message, type="DecisionRefused", non_retryable=True) from None
        self._waiting = list(report.waiting)
        return report

    @decide.validator
    def _decide_allowed(self, request: DecideRequest) -> None:
        # Refused before it enters the history: a decision makes sense only while waiting.
        if not self._waiting:
            raise ValueError(
                f"run {request.run.run_id} is not waiting for a decision in its workflow"
            )
