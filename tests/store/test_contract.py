"""The RunStore contract: the same tests against SQLite and PostgreSQL (``backend`` fixture)."""

from __future__ import annotations

import uuid

import pytest

from hango.agent.events import RunStatus
from hango.provider.messages import Message, StopReason, TextBlock, ToolResultBlock, ToolUseBlock
from hango.store import NotFound, RunSave, RunStore, SessionBusy, StaleVersion
from hango.store.base import AgentRecord

pytestmark = pytest.mark.anyio

DEFINITION = {"name": "test", "model": "scripted:inline", "max_turns": 3}


async def agent(store: RunStore, tenant: uuid.UUID) -> AgentRecord:
    return await store.put_agent(tenant, "test", DEFINITION)


def assistant_call(call_id: str, text: str = "looking") -> Message:
    return Message(
        "assistant",
        (TextBlock(text), ToolUseBlock(call_id, "lookup", {"q": 'ö "quoted" \\ \n', "n": 2})),
    )


async def test_an_agent_version_is_identified_by_its_definition(
    store: RunStore, tenant: uuid.UUID
) -> None:
    first = await agent(store, tenant)
    again = await agent(store, tenant)
    other = await store.put_agent(tenant, "test", {**DEFINITION, "max_turns": 4})
    assert first.id == again.id != other.id
    loaded = await store.get_agent(tenant, first.id)
    assert (loaded.name, loaded.definition) == ("test", DEFINITION)


async def test_a_run_starts_a_session_with_its_user_message(
    store: RunStore, tenant: uuid.UUID
) -> None:
    a = await agent(store, tenant)
    run = await store.create_run(tenant, a.id, Message.user("hello ✓"), status=RunStatus.QUEUED)
    assert (run.status, run.version, run.state, run.message_start) == (
        RunStatus.QUEUED,
        0,
        {},
        0,
    )
    assert (run.attempts, run.lease_owner, run.lease_expires_at) == (0, None, None)
    assert await store.load_messages(tenant, run.session_id) == [Message.user("hello ✓")]
    assert await store.get_run(tenant, run.id) == run


async def test_a_session_takes_one_active_run_at_a_time(store: RunStore, tenant: uuid.UUID) -> None:
    a = await agent(store, tenant)
    first = await store.create_run(tenant, a.id, Message.user("one"))
    with pytest.raises(SessionBusy):
        await store.create_run(tenant, a.id, Message.user("two"), session_id=first.session_id)
    await store.save_run(RunSave(tenant, first.id, version=0, status=RunStatus.COMPLETED, state={}))
    second = await store.create_run(tenant, a.id, Message.user("two"), session_id=first.session_id)
    assert second.message_start == 1
    with pytest.raises(NotFound):
        await store.create_run(tenant, a.id, Message.user("x"), session_id=uuid.uuid4())


async def test_runs_are_listed_newest_first(store: RunStore, tenant: uuid.UUID) -> None:
    a = await agent(store, tenant)
    ids = [(await store.create_run(tenant, a.id, Message.user(str(i)))).id for i in range(3)]
    assert [r.id for r in await store.list_runs(tenant)] == ids[::-1]
    assert [r.id for r in await store.list_runs(tenant, limit=2)] == ids[:0:-1]


async def test_save_writes_status_state_and_messages_from_an_index(
    store: RunStore, tenant: uuid.UUID
) -> None:
    a = await agent(store, tenant)
    run = await store.create_run(tenant, a.id, Message.user("hi"))
    history = [Message.user("hi"), assistant_call("c1")]
    v1 = await store.save_run(
        RunSave(
            tenant,
            run.id,
            version=0,
            status=RunStatus.RUNNING,
            state={"todos": [{"content": "plan ✓", "status": "pending"}]},
            messages=history[1:],
            from_index=1,
        )
    )
    result = Message("user", (ToolResultBlock("c1", "found", is_error=True),))
    final = Message("assistant", (TextBlock("done"),))
    v2 = await store.save_run(
        RunSave(
            tenant,
            run.id,
            version=v1,
            status=RunStatus.COMPLETED,
            state={"n": 1},
            messages=[result, final],
            from_index=2,
            stop_reason=StopReason.END_TURN,
        )
    )
    assert (v1, v2) == (1, 2)
    saved = await store.get_run(tenant, run.id)
    assert (saved.status, saved.stop_reason, saved.state, saved.version) == (
        RunStatus.COMPLETED,
        StopReason.END_TURN,
        {"n": 1},
        2,
    )
    assert await store.load_messages(tenant, run.session_id) == [*history, result, final]
    # One message by its index, without the rest (what `runs list` shows).
    assert await store.load_message(tenant, run.session_id, 2) == result
    assert await store.load_message(tenant, run.session_id, 4) is None
    # Replacing from an earlier index drops what came after it.
    await store.save_run(
        RunSave(
            tenant,
            run.id,
            version=v2,
            status=RunStatus.COMPLETED,
            state=None,
            messages=[assistant_call("c9", "again")],
            from_index=1,
        )
    )
    assert await store.load_messages(tenant, run.session_id) == [
        Message.user("hi"),
        assistant_call("c9", "again"),
    ]
    assert (await store.get_run(tenant, run.id)).state == {"n": 1}  # state=None keeps it


async def test_a_stale_version_save_is_rejected_and_writes_nothing(
    store: RunStore, tenant: uuid.UUID
) -> None:
    a = await agent(store, tenant)
    run = await store.create_run(tenant, a.id, Message.user("hi"))
    await store.save_run(
        RunSave(tenant, run.id, version=0, status=RunStatus.RUNNING, state={"mine": 1})
    )
    before = await store.get_run(tenant, run.id)
    with pytest.raises(StaleVersion, match="version 0 but the stored version is 1"):
        await store.save_run(
            RunSave(
                tenant,
                run.id,
                version=0,
                status=RunStatus.FAILED,
                state={"theirs": 1},
                messages=[assistant_call("x")],
                from_index=1,
                error="late writer",
            )
        )
    assert await store.get_run(tenant, run.id) == before
    assert await store.load_messages(tenant, run.session_id) == [Message.user("hi")]


async def test_another_tenant_sees_nothing(store: RunStore, tenant: uuid.UUID) -> None:
    a = await agent(store, tenant)
    run = await store.create_run(tenant, a.id, Message.user("secret"), status=RunStatus.QUEUED)
    intruder = uuid.uuid4()
    with pytest.raises(NotFound):
        await store.get_run(intruder, run.id)
    with pytest.raises(NotFound):
        await store.get_agent(intruder, a.id)
    with pytest.raises(NotFound):
        await store.save_run(
            RunSave(intruder, run.id, version=0, status=RunStatus.FAILED, state={})
        )
    with pytest.raises(NotFound):
        await store.create_run(intruder, a.id, Message.user("x"), session_id=run.session_id)
    assert await store.list_runs(intruder) == []
    assert await store.load_messages(intruder, run.session_id) == []
    assert await store.claim_run(intruder, "intruder", lease_seconds=30) is None
    # and the owner's run is untouched
    assert await store.get_run(tenant, run.id) == run
