"""The queue half of the RunStore contract: claim, renew, release, watch; both back ends."""

from __future__ import annotations

import uuid

import anyio
import pytest

from hango.agent.events import RunStatus
from hango.provider.messages import Message
from hango.store import LeaseLost, RunSave, RunStore, StaleVersion, open_store
from hango.store.base import RunRecord

pytestmark = pytest.mark.anyio


async def queue(store: RunStore, tenant: uuid.UUID, n: int) -> list[RunRecord]:
    a = await store.put_agent(tenant, "test", {"name": "test"})
    return [
        await store.create_run(tenant, a.id, Message.user(f"job {i}"), status=RunStatus.QUEUED)
        for i in range(n)
    ]


async def test_a_claim_takes_the_oldest_queued_run_under_a_lease(
    store: RunStore, tenant: uuid.UUID
) -> None:
    runs = await queue(store, tenant, 2)
    lease = await store.claim_run(tenant, "w1", lease_seconds=30)
    assert lease is not None
    assert (lease.run_id, lease.owner, lease.attempt, lease.seconds) == (runs[0].id, "w1", 1, 30)
    claimed = await store.get_run(tenant, runs[0].id)
    assert (claimed.status, claimed.attempts, claimed.lease_owner) == (RunStatus.RUNNING, 1, "w1")
    assert claimed.lease_expires_at == lease.expires_at
    # The claim is a write: whoever read the run before it holds a stale version now.
    assert claimed.version == runs[0].version + 1
    second = await store.claim_run(tenant, "w2", lease_seconds=30)
    assert second is not None and second.run_id == runs[1].id
    assert await store.claim_run(tenant, "w3", lease_seconds=30) is None


async def test_runs_without_a_lease_or_finished_are_never_claimed(
    store: RunStore, tenant: uuid.UUID
) -> None:
    a = await store.put_agent(tenant, "test", {"name": "test"})
    # `hango run` in a terminal: running, no lease. Claiming it would run it twice.
    await store.create_run(tenant, a.id, Message.user("foreground"))
    done = await store.create_run(tenant, a.id, Message.user("done"), status=RunStatus.QUEUED)
    await store.save_run(RunSave(tenant, done.id, version=0, status=RunStatus.COMPLETED, state={}))
    assert await store.claim_run(tenant, "w", lease_seconds=30) is None


async def test_an_expired_lease_is_reclaimed_and_its_old_holder_is_fenced_off(
    store: RunStore, tenant: uuid.UUID
) -> None:
    (run,) = await queue(store, tenant, 1)
    old = await store.claim_run(tenant, "old", lease_seconds=0.2)
    assert old is not None
    old_version = (await store.get_run(tenant, run.id)).version
    assert await store.claim_run(tenant, "new", lease_seconds=30) is None  # still held
    await anyio.sleep(0.3)
    new = await store.claim_run(tenant, "new", lease_seconds=30)
    assert new is not None and new.run_id == run.id and new.attempt == 2
    taken = await store.get_run(tenant, run.id)

    with pytest.raises(LeaseLost):
        await store.renew_lease(old)
    with pytest.raises(StaleVersion):
        await store.save_run(
            RunSave(
                tenant, run.id, version=old_version, status=RunStatus.COMPLETED, state={"old": 1}
            )
        )
    assert await store.release_run(old) is False
    assert await store.get_run(tenant, run.id) == taken  # the old holder wrote nothing
    assert (taken.status, taken.lease_owner, taken.attempts) == (RunStatus.RUNNING, "new", 2)


async def test_renewing_keeps_the_run_past_its_first_expiry(
    store: RunStore, tenant: uuid.UUID
) -> None:
    await queue(store, tenant, 1)
    lease = await store.claim_run(tenant, "w", lease_seconds=0.4)
    assert lease is not None
    version = (await store.get_run(tenant, lease.run_id)).version
    for _ in range(4):
        await anyio.sleep(0.15)
        renewed = await store.renew_lease(lease)
        assert renewed.expires_at > lease.expires_at
        lease = renewed
    assert await store.claim_run(tenant, "thief", lease_seconds=30) is None
    # Renewal is a heartbeat, not a save: the Harness's version stays valid.
    assert (await store.get_run(tenant, lease.run_id)).version == version


async def test_release_puts_an_unfinished_run_back_and_leaves_a_finished_one(
    store: RunStore, tenant: uuid.UUID
) -> None:
    unfinished, finished = await queue(store, tenant, 2)
    first = await store.claim_run(tenant, "w", lease_seconds=30)
    second = await store.claim_run(tenant, "w", lease_seconds=30)
    assert first is not None and second is not None
    version = (await store.get_run(tenant, finished.id)).version
    await store.save_run(
        RunSave(tenant, finished.id, version=version, status=RunStatus.COMPLETED, state={})
    )

    assert await store.release_run(first) is True
    assert await store.release_run(second) is True
    assert await store.release_run(second) is False  # a lease is released once
    back = await store.get_run(tenant, unfinished.id)
    kept = await store.get_run(tenant, finished.id)
    assert (back.status, back.lease_owner, back.lease_expires_at) == (RunStatus.QUEUED, None, None)
    assert (kept.status, kept.lease_owner) == (RunStatus.COMPLETED, None)
    assert (back.attempts, kept.attempts) == (0, 1)  # a hand-back is not a failed attempt
    again = await store.claim_run(tenant, "w2", lease_seconds=30)
    assert again is not None and (again.run_id, again.attempt) == (unfinished.id, 1)


async def test_a_worker_killed_after_saving_cancelled_does_not_strand_its_run(
    store: RunStore, tenant: uuid.UUID
) -> None:
    (run,) = await queue(store, tenant, 1)
    lease = await store.claim_run(tenant, "w", lease_seconds=0.2)
    assert lease is not None
    version = (await store.get_run(tenant, run.id)).version
    # The Harness saves a cancelled run as cancelled; the worker died before releasing it.
    await store.save_run(
        RunSave(tenant, run.id, version=version, status=RunStatus.CANCELLED, state={})
    )
    await anyio.sleep(0.3)
    again = await store.claim_run(tenant, "w2", lease_seconds=30)
    assert again is not None and again.run_id == run.id


async def test_concurrent_claims_from_separate_stores_never_share_a_run(
    store_url: str, tenant: uuid.UUID
) -> None:
    async with await open_store(store_url) as first, await open_store(store_url) as second:
        runs = await queue(first, tenant, 30)
        claimed: list[uuid.UUID] = []

        async def claimer(s: RunStore, owner: str) -> None:
            while (lease := await s.claim_run(tenant, owner, lease_seconds=30)) is not None:
                claimed.append(lease.run_id)

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(claimer, (first, second)[i % 2], f"w{i}")
    assert sorted(claimed) == sorted(r.id for r in runs)  # each exactly once


@pytest.mark.postgres
@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
async def test_a_listening_worker_is_notified_of_its_tenants_runs_only(
    store: RunStore, tenant: uuid.UUID, store_url: str
) -> None:
    other_tenant = uuid.uuid4()
    async with store.watch_queue(tenant) as watch, await open_store(store_url) as submitter:
        await queue(submitter, other_tenant, 1)
        with anyio.move_on_after(0.5) as idle:
            await watch.wait()
        assert idle.cancelled_caught, "woken by another tenant's run"

        await queue(submitter, tenant, 1)  # queued while nobody waits: kept, not lost
        with anyio.fail_after(10):
            await watch.wait()
        # A released run is queued again, and that notifies too.
        lease = await submitter.claim_run(tenant, "w", lease_seconds=30)
        assert lease is not None
        await submitter.release_run(lease)
        with anyio.fail_after(10):
            await watch.wait()
