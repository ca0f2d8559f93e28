"""Lease fencing and hand-backs, both back ends: every write a worker makes to a run checks its
lease, a worker that lost its lease writes nothing, and a graceful hand-back is not an attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from hango.agent.events import RunStatus
from hango.provider.messages import Message, TextBlock
from hango.store import LeaseLost, RunSave, RunStore, StaleVersion
from hango.store.base import Lease, RunRecord

pytestmark = pytest.mark.anyio

PAST = "2000-01-01T00:00:00.000000+00:00"


async def queued(store: RunStore, tenant: uuid.UUID) -> RunRecord:
    a = await store.put_agent(tenant, "test", {"name": "test"})
    return await store.create_run(tenant, a.id, Message.user("job"), status=RunStatus.QUEUED)


def expire(sql: Callable[..., Any], tenant: uuid.UUID, run_id: uuid.UUID) -> None:
    """The holder looks dead: its lease lapsed (as if it stopped renewing long ago)."""
    sql(
        "UPDATE runs SET lease_expires_at = ? WHERE tenant_id = ? AND id = ?",
        PAST,
        str(tenant),
        str(run_id),
    )


async def claim(store: RunStore, tenant: uuid.UUID, owner: str) -> Lease:
    lease = await store.claim_run(tenant, owner, lease_seconds=60)
    assert lease is not None
    return lease


async def test_a_save_under_a_lost_lease_writes_nothing_whatever_version_it_carries(
    store: RunStore, tenant: uuid.UUID, sql: Callable[..., Any]
) -> None:
    run = await queued(store, tenant)
    old = await claim(store, tenant, "old")
    expire(sql, tenant, run.id)
    new = await claim(store, tenant, "new")
    taken = await store.get_run(tenant, run.id)

    # The old holder even read the current version (as Worker._fail used to): still fenced.
    with pytest.raises(LeaseLost, match="the lease of old is lost"):
        await store.save_run(
            RunSave(
                tenant,
                run.id,
                version=taken.version,
                status=RunStatus.FAILED,
                state=None,
                error="stale worker",
                lease=old,
            )
        )
    assert await store.get_run(tenant, run.id) == taken
    # The holder's own saves go through, and after its release nobody's lease works.
    version = await store.save_run(
        RunSave(
            tenant, run.id, version=taken.version, status=RunStatus.COMPLETED, state={}, lease=new
        )
    )
    assert await store.release_run(new) is True
    done = await store.get_run(tenant, run.id)
    with pytest.raises(LeaseLost):
        await store.save_run(
            RunSave(
                tenant, run.id, version=version + 1, status=RunStatus.FAILED, state={}, lease=new
            )
        )
    assert await store.get_run(tenant, run.id) == done
    assert done.status is RunStatus.COMPLETED


async def test_without_a_lease_only_the_version_fences_a_save(
    store: RunStore, tenant: uuid.UUID
) -> None:
    a = await store.put_agent(tenant, "test", {"name": "test"})
    run = await store.create_run(tenant, a.id, Message.user("foreground"))
    version = await store.save_run(
        RunSave(tenant, run.id, version=0, status=RunStatus.RUNNING, state={})
    )
    with pytest.raises(StaleVersion):
        await store.save_run(RunSave(tenant, run.id, version=0, status=RunStatus.RUNNING, state={}))
    assert (await store.get_run(tenant, run.id)).version == version


async def test_a_hand_back_does_not_count_as_an_attempt_a_lost_lease_does(
    store: RunStore, tenant: uuid.UUID, sql: Callable[..., Any]
) -> None:
    run = await queued(store, tenant)
    first = await claim(store, tenant, "crashed")
    expire(sql, tenant, run.id)  # its worker died: that attempt counts
    second = await claim(store, tenant, "w")
    assert (first.attempt, second.attempt) == (1, 2)
    for i in range(5):  # five rolling restarts, each a clean SIGTERM hand-back
        lease = second if i == 0 else await claim(store, tenant, f"w{i}")
        assert lease.attempt == 2
        current = (await store.get_run(tenant, run.id)).version
        # What the Harness saves when a stop request ends the run at a turn boundary.
        await store.save_run(
            RunSave(tenant, run.id, version=current, status=RunStatus.QUEUED, state={}, lease=lease)
        )
        assert await store.release_run(lease) is True
        back = await store.get_run(tenant, run.id)
        assert (back.status, back.attempts, back.lease_owner) == (RunStatus.QUEUED, 1, None)


async def test_a_run_being_handed_back_is_not_claimed_until_released(
    store: RunStore, tenant: uuid.UUID
) -> None:
    run = await queued(store, tenant)
    lease = await claim(store, tenant, "stopping")
    current = (await store.get_run(tenant, run.id)).version
    await store.save_run(
        RunSave(tenant, run.id, version=current, status=RunStatus.QUEUED, state={}, lease=lease)
    )
    # Saved as queued, not yet released: another claim would count the hand-back as a crash.
    assert await store.claim_run(tenant, "other", lease_seconds=60) is None
    assert await store.release_run(lease) is True
    again = await claim(store, tenant, "other")
    assert (again.run_id, again.attempt) == (run.id, 1)


async def test_a_finished_run_keeps_its_count_on_release(
    store: RunStore, tenant: uuid.UUID
) -> None:
    run = await queued(store, tenant)
    lease = await claim(store, tenant, "w")
    current = (await store.get_run(tenant, run.id)).version
    messages = [Message("assistant", (TextBlock("done"),))]
    await store.save_run(
        RunSave(
            tenant,
            run.id,
            version=current,
            status=RunStatus.COMPLETED,
            state={},
            messages=messages,
            from_index=1,
            lease=lease,
        )
    )
    assert await store.release_run(lease) is True
    done = await store.get_run(tenant, run.id)
    assert (done.status, done.attempts) == (RunStatus.COMPLETED, 1)
