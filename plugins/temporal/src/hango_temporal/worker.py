"""A Temporal worker for hango runs: polls one task queue, executes their workflows (which only
sequence steps) and their activities (which execute the steps through hango's seam) on one
hango store."""

from __future__ import annotations

import logging
import signal
import uuid
from collections.abc import Awaitable, Callable

import anyio
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from hango import Harness, RunStore
from hango_temporal.activities import Activities
from hango_temporal.workflow import RunWorkflow

log = logging.getLogger("hango.temporal")

#: Modules the workflow sandbox imports once, outside it, instead of re-importing them for
#: every workflow run: hango and what it imports at module level. Workflow code calls none of
#: them (it only sequences activities), and their import-time work (plugin discovery, OTel
#: set-up, attrs classes) is neither deterministic nor cheap.
PASSTHROUGH = ("hango", "hango_temporal.shapes", "attrs", "cattrs", "pluggy", "opentelemetry")


def hango_worker(
    client: Client,
    store: RunStore,
    *,
    task_queue: str,
    concurrency: int = 20,
    harness_for: Callable[[uuid.UUID], Harness] | None = None,
) -> Worker:
    """A ``temporalio`` worker of ``task_queue`` executing hango runs on ``store``, at most
    ``concurrency`` steps at once; ``harness_for(tenant)`` builds each tenant's ``Harness``
    (default: ``Harness(store, tenant_id=tenant)``)."""
    activities = Activities(store, harness_for or (lambda tenant: Harness(store, tenant_id=tenant)))
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[RunWorkflow],
        activities=activities.all(),
        max_concurrent_activities=concurrency,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
        ),
    )


async def serve(worker: Worker, *, ready: Callable[[], Awaitable[None]] | None = None) -> None:
    """Run ``worker`` until SIGINT or SIGTERM, then shut it down: steps in progress are
    cancelled (each saves its run) and retried by whichever worker takes them next."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await worker.run()
                tg.cancel_scope.cancel()

            async def on_signal() -> None:
                async for _ in signals:
                    log.info("stopping: shutting the worker down")
                    await worker.shutdown()
                    return

            tg.start_soon(run)
            tg.start_soon(on_signal)
            if ready is not None:
                await ready()
