"""The execution seam: advance a saved run by steps, under a claim, fenced and idempotent.

Every path that executes a run goes through here: ``Harness.execute`` (a terminal's ``hango
run`` and ``hango resume``, a Python caller), ``Harness.step`` (an engine such as Temporal, one
step per activity) and the queue worker (``hango.run.worker``, which passes the lease it claimed
from the queue). A step is a model turn or one tool call of a batch; each ends with a save.

- **One executor per run.** The run is held under a claim, a lease with a token
  (``RunStore.acquire_run``; a worker's from ``claim_run``): a second executor, in this process
  or another, gets ``RunBusy`` before anything runs or is written. The lease is renewed every
  third of its length while the run executes; an executor that crashed stops renewing, and
  once its lease has lapsed the next executor takes the claim over.
- **Fenced.** Every save carries the lease's token: once another executor has taken the claim
  over (the lease lapsed while this one hung), this one's writes are refused (``LeaseLost``)
  and it stops.
- **Idempotent.** A repeated step goes on from the last save: a call whose body returned is
  answered with its saved result (``InterruptBook.ran``), never run again; a non-idempotent
  call that started without a saved result is answered "outcome unknown", never silently run
  again (``hango.agent.loop``).

docs/explanation/execution-seam.md says why, and what an engine adapter must do.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
from attrs import frozen

from hango.agent.events import RunFinished, RunStatus
from hango.config import duration_setting
from hango.store.base import Lease, LeaseLost, RunStore

log = logging.getLogger("hango.run")

#: Seconds a claim taken by ``Harness.execute`` / ``step`` lasts unless renewed (default of
#: ``HANGO_RUN_LEASE_SECONDS``): how long a crashed executor's run waits to be taken over.
DEFAULT_LEASE_SECONDS = 15.0


def run_lease_seconds(settings: Mapping[str, str]) -> float:
    """``HANGO_RUN_LEASE_SECONDS`` of ``settings`` (default ``DEFAULT_LEASE_SECONDS``).
    Raises ``ConfigError`` unless it is a positive number of seconds."""
    return duration_setting(
        settings, "HANGO_RUN_LEASE_SECONDS", DEFAULT_LEASE_SECONDS, positive=True
    )


def executor_name() -> str:
    """``host:pid``: who holds a claim, as ``runs show``, ``RunBusy`` and the logs print it."""
    return f"{socket.gethostname()}:{os.getpid()}"


@frozen
class StepResult:
    """What ``Harness.step`` did: small values only, so it can cross a process or engine
    boundary as JSON (``to_json`` / ``from_json``).

    ``steps``: steps taken by this call (0: nothing to do: the run had completed, or waits for a
    decision). ``status``: the run's status after them; ``running`` means another ``step``
    advances it (``more``). ``error``: why it failed, if it did. ``pending``: the tool call
    ids a suspended run waits for decisions on."""

    run_id: uuid.UUID
    status: RunStatus
    steps: int
    error: str | None = None
    pending: tuple[str, ...] = ()

    @property
    def more(self) -> bool:
        """Whether the run can be advanced by another step now (it is ``running``)."""
        return self.status is RunStatus.RUNNING

    @classmethod
    def of(cls, finished: RunFinished, steps: int) -> StepResult:
        pending = tuple(p.tool_call_id for p in finished.pending)
        return cls(finished.run_id, finished.status, steps, finished.error, pending)

    def to_json(self) -> dict[str, Any]:
        """``{"run_id": str, "status": str, "steps": int, "error": str | None, "pending":
        [str, ...]}``."""
        return {
            "run_id": str(self.run_id),
            "status": self.status.value,
            "steps": self.steps,
            "error": self.error,
            "pending": list(self.pending),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StepResult:
        """The inverse of ``to_json``; ``KeyError`` / ``ValueError`` for a malformed doc."""
        return cls(
            uuid.UUID(doc["run_id"]),
            RunStatus(doc["status"]),
            int(doc["steps"]),
            doc.get("error"),
            tuple(doc.get("pending", ())),
        )


class StepBudget:
    """Counts the steps of one pass (the loop calls it after each one is saved); True once
    ``limit`` steps were taken (``None``: no limit, the run goes to its end)."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"steps must be at least 1 (or None), got {limit}")
        self.limit = limit
        self.taken = 0

    def __call__(self) -> bool:
        self.taken += 1
        return self.limit is not None and self.taken >= self.limit


@contextlib.asynccontextmanager
async def claimed(
    store: RunStore,
    tenant_id: uuid.UUID,
    run_id: uuid.UUID,
    *,
    lease: Lease | None,
    owner: str,
    lease_seconds: float,
) -> AsyncIterator[Lease]:
    """Hold ``run_id`` for one executor while the block runs: under ``lease`` (a worker's,
    which the worker releases) or a claim acquired here (``RunBusy`` when another executor
    holds it, writing nothing; released on leaving, however the block is left). The lease is
    renewed in the background; once it is lost (or cannot be renewed before it lapses) the
    block is cancelled, and its writes are refused by the lease's token anyway."""
    acquired = lease is None
    if lease is None:
        lease = await store.acquire_run(tenant_id, run_id, owner, lease_seconds=lease_seconds)
    held = lease
    lost = False
    failure: BaseException | None = None

    async def keep() -> None:
        nonlocal lost
        await keep_lease(store, held, tg.cancel_scope)
        lost = True

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(keep)
            # The block's exception is raised after the task group, as itself: a task group
            # would wrap it in an ExceptionGroup.
            try:
                yield lease
            except BaseException as exc:
                failure = exc
            tg.cancel_scope.cancel()
        if lost and (failure is None or isinstance(failure, anyio.get_cancelled_exc_class())):
            raise LeaseLost(
                f"run {run_id}: its claim was lost while it executed (taken over, or not "
                "renewed in time); stopped, writing nothing more"
            ) from failure
        if failure is not None:
            raise failure
    finally:
        if acquired:
            with anyio.CancelScope(shield=True):
                try:
                    await store.release_run(lease)
                except Exception as exc:
                    log.warning(
                        "run %s: releasing its claim failed (%s); it can be taken over once "
                        "the claim lapses",
                        run_id,
                        exc,
                    )


async def keep_lease(store: RunStore, lease: Lease, scope: anyio.CancelScope) -> None:
    """Renew ``lease`` every third of its length; cancel ``scope`` (the run) once the lease is
    lost, or when renewals failed or hung so long that the next one would start after the
    lease lapsed (another executor may take the run from then on)."""
    every = lease.seconds / 3
    deadline = anyio.current_time() + lease.seconds
    while True:
        await anyio.sleep(every)
        attempted = anyio.current_time()
        problem = "no answer in time"
        with anyio.move_on_after(every):  # a hung connection counts as a failed renewal
            try:
                lease = await store.renew_lease(lease)
            except LeaseLost:
                log.warning(
                    "run %s: lease lost to another worker or executor; stopping it", lease.run_id
                )
                break
            except Exception as exc:
                problem = str(exc)
            else:
                deadline = attempted + lease.seconds
                continue
        if anyio.current_time() + every >= deadline:
            log.error(
                "run %s: could not renew the lease before it expires (%s); stopping it",
                lease.run_id,
                problem,
            )
            break
        log.warning("run %s: renewing the lease failed (retrying): %s", lease.run_id, problem)
    scope.cancel()
