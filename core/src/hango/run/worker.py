"""The queue worker: claim queued runs, execute them under a renewed lease, release them.

Any number of workers, in any number of processes on any number of machines, share one store
(PostgreSQL; SQLite works too, on one machine). A run is held under a lease that the worker
renews every third of its length while it works; a worker that dies stops renewing, and once
the lease has expired another worker claims the run and resumes it from its last saved turn
boundary. Every write a worker makes to a run is fenced by its lease (the claim gives the run
a new token), so a worker that only looked dead and wakes up writes nothing.

The database is not the run's business: a save that cannot reach it within
``HANGO_DB_RETRY_SECONDS`` makes the worker stop working on that run, writing nothing, and
leave it to be reclaimed; a worker whose database is unreachable (at start or later) waits for
it with backoff, saying so on stderr, for ``HANGO_DB_WAIT_SECONDS`` (default: no limit).

::

    worker = Worker(Harness(store, tenant_id=tenant), concurrency=4)
    async with anyio.create_task_group() as tg:
        await tg.start(worker.run)
        ...
        worker.stop()   # SIGTERM: stop claiming, finish the current turns, release
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Mapping
from typing import Any

import anyio
import anyio.abc
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential_jitter,
)

from hango.agent.events import RunStatus
from hango.config import duration_setting, hango_settings
from hango.run.runner import Harness
from hango.run.step import executor_name
from hango.store import RunStore, open_store
from hango.store.base import Lease, LeaseLost, QueueWatch, RunSave, StaleVersion, StoreUnavailable
from hango.store.retry import one_line

log = logging.getLogger("hango.worker")

#: Longest wait between two looks at an unreachable database, seconds.
MAX_DB_BACKOFF = 30.0


def db_wait_seconds(settings: Mapping[str, str]) -> float | None:
    """``HANGO_DB_WAIT_SECONDS``: how long a worker waits for an unreachable database before
    it gives up (``None``, the default when unset: no limit). ``ConfigError`` if not a number
    of seconds >= 0."""
    return duration_setting(settings, "HANGO_DB_WAIT_SECONDS", None)


def _waiting_for_database(what: str, give_up: float | None) -> AsyncRetrying:
    """Retries of ``StoreUnavailable`` with exponential backoff (0.5 s doubling, jittered, up
    to ``MAX_DB_BACKOFF``), each wait logged, until ``give_up`` seconds have passed."""

    def announce(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        limit = "no limit" if give_up is None else f"giving up after {give_up:g} s"
        log.warning(
            "%s: the database is unreachable (%s); waiting for it, next try in %.1f s "
            "(HANGO_DB_WAIT_SECONDS: %s)",
            what,
            one_line(failure),
            wait,
            limit,
        )

    return AsyncRetrying(
        sleep=anyio.sleep,
        retry=retry_if_exception_type(StoreUnavailable),
        wait=wait_exponential_jitter(multiplier=0.5, max=MAX_DB_BACKOFF, jitter=0.5),
        stop=stop_never if give_up is None else stop_after_delay(give_up),
        before_sleep=announce,
        reraise=True,
    )


async def wait_for_store(url: str, *, settings: Mapping[str, str] | None = None) -> RunStore:
    """``open_store(url)``, waiting (with backoff, each wait logged on ``hango.worker``) while
    the database is unreachable, for up to ``HANGO_DB_WAIT_SECONDS`` of ``settings`` (default:
    the environment; unset: no limit). Raises what ``open_store`` raises, ``StoreUnavailable``
    once the wait is over."""
    settings = hango_settings() if settings is None else settings
    async for attempt in _waiting_for_database("starting", db_wait_seconds(settings)):
        with attempt:
            return await open_store(url)
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover


def worker_name() -> str:
    """``host:pid``: who holds a lease, as ``runs show`` and the logs print it."""
    return executor_name()


def missing_middleware(config: Mapping[str, Any], installed: Collection[str]) -> str:
    """What of a run's recorded stack (``runs.config_json``) is not in ``installed``, said as
    middleware and distribution (``"middleware 'audit_log' (distribution hango-audit)"``);
    ``""`` when nothing is missing."""
    stack = config.get("stack") if isinstance(config, Mapping) else None
    missing = [
        f"middleware {e.get('name')!r} (distribution {e.get('distribution', '?')})"
        for e in (stack if isinstance(stack, list) else [])
        if isinstance(e, Mapping) and e.get("name") not in installed
    ]
    return ", ".join(missing)


class Worker:
    """Executes the queued runs of ``harness``'s tenant, ``concurrency`` at a time.

    ``lease_seconds`` is how long a claim lasts unless renewed (renewed every third of it);
    a run claimed more than ``max_attempts`` times with no release in between (its workers
    keep dying on it) is failed instead of being tried again. ``db_wait`` is how long to wait
    for an unreachable database before ``run`` raises ``StoreUnavailable`` (default:
    ``HANGO_DB_WAIT_SECONDS`` of the harness's settings; unset: no limit). Raises
    ``ValueError`` for a setting below its minimum.
    """

    def __init__(
        self,
        harness: Harness,
        *,
        name: str | None = None,
        concurrency: int = 4,
        lease_seconds: float = 30.0,
        max_attempts: int = 5,
        db_wait: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if lease_seconds <= 0:
            raise ValueError(f"the lease must be positive, got {lease_seconds} s")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.harness = harness
        self.store = harness.store
        self.name = name or worker_name()
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.db_wait = db_wait if db_wait is not None else db_wait_seconds(harness.settings)
        # Expired leases notify no one, so an idle worker also looks every so often.
        self.idle_seconds = min(lease_seconds / 2, 5.0)
        # Runs whose recorded stack needs a middleware this worker cannot build are left in
        # the queue for a worker that can (docs/how-to/run-on-postgres.md).
        self._installed = harness.installed_middleware()
        # Runs left in the queue for want of a middleware, already logged (once each).
        self._told: set[uuid.UUID] = set()
        self._stop = anyio.Event()
        self._killed = False
        self._claiming = anyio.CancelScope()
        self._runs: anyio.CancelScope | None = None

    @property
    def stopping(self) -> bool:
        """Whether ``stop`` (or ``kill``) was called."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Stop claiming; each run in progress stops at its next turn boundary, saved, and is
        released back to the queue. ``run`` returns once they all have."""
        self._stop.set()
        self._claiming.cancel()

    def kill(self) -> None:
        """Stop now: runs in progress are cancelled (saved as they are) and released back to
        the queue; an unfinished tool batch is finished by whoever resumes them. Each counts as
        an attempt, as a crash does: a run whose tool hangs every worker that takes it is
        failed after ``max_attempts``, not handed on for ever."""
        self._killed = True
        self.stop()
        if self._runs is not None:
            self._runs.cancel()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Claim and execute runs until ``stop`` (or ``kill``); signals ``task_status`` once
        it listens for work. While the database is unreachable it waits (see ``db_wait``) and
        then raises ``StoreUnavailable``; other store errors while claiming are logged and
        retried."""
        slots = anyio.Semaphore(self.concurrency)
        async with anyio.create_task_group() as runs:
            self._runs = runs.cancel_scope
            with self._claiming:
                async with self.store.watch_queue(self.harness.tenant_id) as watch:
                    log.info(
                        "worker %s ready: tenant %s, concurrency %d, lease %g s",
                        self.name,
                        self.harness.tenant_id,
                        self.concurrency,
                        self.lease_seconds,
                    )
                    task_status.started()
                    while True:
                        await slots.acquire()
                        lease = await self._claim()
                        if lease is None:
                            slots.release()
                            await self._idle(watch)
                        elif self._stop.is_set():
                            slots.release()
                            await self._release(lease)
                        else:
                            runs.start_soon(self._work, lease, slots, name=str(lease.run_id))
        log.info("worker %s stopped", self.name)

    async def _claim(self) -> Lease | None:
        lease = None
        try:
            async for attempt in _waiting_for_database("claiming a run", self.db_wait):
                with attempt:
                    # Shielded: a claim cancelled half way could take a run that nobody then
                    # works on. The waits between attempts are not: stop() ends them.
                    with anyio.CancelScope(shield=True):
                        lease = await self.store.claim_run(
                            self.harness.tenant_id,
                            self.name,
                            lease_seconds=self.lease_seconds,
                            installed=self._installed,
                        )
                    if attempt.retry_state.attempt_number > 1:
                        log.info("the database is reachable again")
        except StoreUnavailable:
            raise
        except Exception as exc:
            log.warning("claiming a run failed (retrying): %s", exc)
        return lease

    async def _tell_unclaimable(self) -> None:
        """Log once, per run, why a queued run is left for another worker: the middleware
        its recorded stack needs that this worker cannot build, and its distribution."""
        try:
            queued = await self.store.list_runs(self.harness.tenant_id, limit=100)
        except Exception:
            return  # only a hint: the next idle pass tries again
        for run in queued:
            if run.status is not RunStatus.QUEUED or run.id in self._told:
                continue
            missing = missing_middleware(run.config, self._installed)
            if missing:
                self._told.add(run.id)
                log.warning("run %s stays queued: this worker cannot build %s", run.id, missing)

    async def _idle(self, watch: QueueWatch) -> None:
        await self._tell_unclaimable()
        with anyio.move_on_after(self.idle_seconds):
            try:
                await watch.wait()
            except Exception as exc:
                log.warning("waiting for runs failed (retrying): %s", exc)
                await anyio.sleep(self.idle_seconds)

    async def _work(self, lease: Lease, slots: anyio.Semaphore) -> None:
        try:
            log.info("run %s claimed (attempt %d)", lease.run_id, lease.attempt)
            if lease.attempt > self.max_attempts:
                await self._fail(
                    lease,
                    f"abandoned after {lease.attempt - 1} attempts: every worker that claimed it "
                    "stopped without releasing it (killed, or its lease expired)",
                )
            else:
                await self._execute(lease)
        finally:
            await self._release(lease, counted=self._killed)
            slots.release()

    async def _execute(self, lease: Lease) -> None:
        # The execution seam, as for any executor: the run advances step by step under this
        # lease (renewed meanwhile; the run is stopped once it is lost) until it ends, or
        # stops at a turn boundary once ``stop`` is set.
        try:
            finished = await self.harness.step(
                lease.run_id, steps=None, lease=lease, stop=self._stop
            )
        except (StaleVersion, LeaseLost) as exc:
            log.warning("run %s: another worker owns it now; stopped (%s)", lease.run_id, exc)
            return
        except StoreUnavailable as exc:
            # Not the run's fault: it is not failed. Its last saved turn boundary is where
            # the next worker resumes it, after this one's release or its lease's expiry.
            log.error("run %s: stopped working on it, nothing more written: %s", lease.run_id, exc)
            return
        except Exception as exc:
            log.exception("run %s: could not be executed", lease.run_id)
            await self._fail(lease, f"{type(exc).__name__}: {exc}")
            return
        if finished.status is RunStatus.QUEUED:
            log.info("run %s stopped at a turn boundary; back to the queue", lease.run_id)
        elif finished.error:
            log.info("run %s %s: %s", lease.run_id, finished.status.value, finished.error)
        else:
            log.info("run %s %s", lease.run_id, finished.status.value)

    async def _fail(self, lease: Lease, error: str) -> None:
        with anyio.CancelScope(shield=True):
            try:
                run = await self.store.get_run(lease.tenant_id, lease.run_id)
                await self.store.save_run(
                    RunSave(
                        lease.tenant_id,
                        lease.run_id,
                        version=run.version,
                        status=RunStatus.FAILED,
                        state=None,
                        error=error,
                        lease=lease,  # the version read just now fences nothing; the lease does
                    )
                )
                log.error("run %s failed: %s", lease.run_id, error)
            except LeaseLost:
                log.warning(
                    "run %s: not failed (%s): another worker owns it now", lease.run_id, error
                )
            except Exception as exc:
                log.error("run %s: could not record its failure (%s): %s", lease.run_id, exc, error)

    async def _release(self, lease: Lease, *, counted: bool = False) -> None:
        # Always tried, even after a lost lease: the token makes it a no-op if someone else
        # holds the run, and otherwise it puts an unfinished run back in the queue.
        with anyio.CancelScope(shield=True):
            try:
                await self.store.release_run(lease, counted=counted)
            except Exception as exc:
                log.warning(
                    "run %s: release failed (%s); it is claimable again once the lease expires",
                    lease.run_id,
                    exc,
                )
