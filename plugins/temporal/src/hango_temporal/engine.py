"""The ``temporal`` engine: ``hango submit --engine temporal`` starts a run's workflow, and
``hango resume`` of such a run delivers its decisions as the workflow's update."""

from __future__ import annotations

import atexit
import gc
import json
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode

from hango import Decision, Delivered, EngineError, Harness
from hango_temporal.settings import TemporalSettings
from hango_temporal.shapes import (
    DECIDE_UPDATE,
    MAX_PAYLOAD_BYTES,
    WORKFLOW_NAME,
    DecideReport,
    DecideRequest,
    RunRef,
    workflow_id,
)

#: Seconds to reach the server before saying it is unreachable.
CONNECT_SECONDS = 10.0
#: Seconds a decision waits for a worker to take it (the update runs on a worker).
DECIDE_SECONDS = 60.0


class _Connections:
    """The process's Temporal clients, one per server (``TemporalSettings``), on a runtime of
    hango's own that is dropped at exit.

    The SDK's default runtime lives until the interpreter finalizes, and its Tokio threads then
    call into a half torn-down interpreter: a short command (``hango resume`` of a temporal
    run) died of SIGABRT or SIGSEGV at exit about one time in six (sdk-python#300). Dropping
    the clients and the runtime from an ``atexit`` hook, while the interpreter is whole, joins
    those threads first."""

    def __init__(self) -> None:
        self._runtime: Runtime | None = None
        self._clients: dict[TemporalSettings, Client] = {}

    async def client(self, settings: TemporalSettings) -> Client:
        if settings not in self._clients:
            if self._runtime is None:
                self._runtime = Runtime(telemetry=TelemetryConfig())
                atexit.register(self.release)
            self._clients[settings] = await Client.connect(
                settings.address, namespace=settings.namespace, runtime=self._runtime
            )
        return self._clients[settings]

    def release(self) -> None:
        self._clients.clear()
        self._runtime = None
        gc.collect()  # a client's last reference may sit in a cycle


_connections = _Connections()


async def connect(settings: TemporalSettings) -> Client:
    """The client of the server ``settings`` name (one per process and server); ``EngineError``
    in one line naming the address (and the variable that sets it) when it cannot be reached."""
    try:
        with anyio.fail_after(CONNECT_SECONDS):
            return await _connections.client(settings)
    except (TimeoutError, RuntimeError, RPCError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "no answer"
        raise EngineError(
            f"temporal: cannot reach the server at {settings.address} "
            f"(HANGO_TEMPORAL_ADDRESS), namespace {settings.namespace}: {reason}"
        ) from None


class TemporalEngine:
    """Runs hango runs as Temporal workflows (one per run, id ``hango-run-<run id>``)."""

    name = "temporal"

    async def _client(self, harness: Harness) -> tuple[Client, TemporalSettings]:
        settings = TemporalSettings.from_settings(harness.settings)
        return await connect(settings), settings

    def _ref(self, harness: Harness, run_id: uuid.UUID, settings: TemporalSettings) -> RunRef:
        return RunRef(
            str(run_id),
            str(harness.tenant_id),
            settings.heartbeat_seconds,
            settings.decision_seconds,
            settings.timeout_decision,
        )

    async def submit(self, harness: Harness, run_id: uuid.UUID) -> None:
        client, settings = await self._client(harness)
        try:
            await client.start_workflow(
                WORKFLOW_NAME,
                self._ref(harness, run_id, settings),
                id=workflow_id(str(run_id)),
                task_queue=settings.task_queue,
                # Submitting twice (a retried command) starts the run once.
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
        except RPCError as exc:
            raise EngineError(f"temporal: run {run_id} was not started: {exc}") from None

    async def decide(
        self, harness: Harness, run_id: uuid.UUID, decisions: Mapping[str, Decision]
    ) -> Delivered:
        client, settings = await self._client(harness)
        request = DecideRequest(
            self._ref(harness, run_id, settings),
            {
                call_id: {
                    "type": d.type,
                    "input": d.input,
                    "tool": d.tool,
                    "message": d.message,
                    "digest": d.digest,
                }
                for call_id, d in decisions.items()
            },
        )
        size = len(json.dumps(request.decisions).encode())
        if size > MAX_PAYLOAD_BYTES:
            raise EngineError(
                f"temporal: the decisions for run {run_id} take {size} bytes, above Temporal's "
                f"payload limit of {MAX_PAYLOAD_BYTES}; send a smaller --edit"
            )
        handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(workflow_id(str(run_id)))
        try:
            with anyio.fail_after(DECIDE_SECONDS):
                report = await handle.execute_update(
                    DECIDE_UPDATE, request, result_type=DecideReport
                )
        except TimeoutError:
            raise EngineError(
                f"temporal: no worker took the decision for run {run_id} within "
                f"{DECIDE_SECONDS:g} s (task queue {settings.task_queue}); start one with "
                f"`hango temporal worker --task-queue {settings.task_queue}` and send it again"
            ) from None
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            reason = cause.message if isinstance(cause, ApplicationError) else str(cause)
            raise EngineError(f"temporal: decision refused: {reason}") from None
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise EngineError(
                    f"temporal: run {run_id} has no running workflow "
                    f"{workflow_id(str(run_id))} (it finished, or was never started)"
                ) from None
            raise EngineError(f"temporal: decision not delivered: {exc}") from None
        return Delivered(tuple(report.recorded), tuple(report.unchanged), tuple(report.waiting))

    async def cancel(self, harness: Harness, run_id: uuid.UUID) -> None:
        client, _ = await self._client(harness)
        try:
            await client.get_workflow_handle(workflow_id(str(run_id))).cancel()
        except RPCError as exc:
            raise EngineError(f"temporal: run {run_id} was not cancelled: {exc}") from None

    def describe(self, run_id: uuid.UUID) -> Mapping[str, Any]:
        return {"workflow_id": workflow_id(str(run_id))}
