"""Memory entries in hango's database, on a real SQLite file and a real PostgreSQL server:
versions and provenance, compare-and-swap between concurrent writers (one wins, the other a
clear conflict), exactly-once writes by write key, fragments, budgets, tenants."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import anyio
import pytest

from hango import RunStore
from hango.middleware import (
    MemoryConflict,
    MemoryEdit,
    MemoryStore,
    Provenance,
    memory_store,
    search_entries,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg


def by_tool(run: uuid.UUID, call: str) -> Provenance:
    return Provenance("tool", dt.datetime.now(dt.UTC), run_id=run, tool_call_id=call)


def person() -> Provenance:
    return Provenance("person", dt.datetime.now(dt.UTC))


@pytest.fixture
def mem(store: RunStore) -> MemoryStore:
    return memory_store(store)


async def test_versions_keep_their_provenance_and_the_revision_grows(
    mem: MemoryStore, tenant: uuid.UUID
) -> None:
    run = uuid.uuid4()
    first = await mem.write_memory(
        tenant, "a", "prefs", MemoryEdit("set", "tea"), provenance=by_tool(run, "c1"),
        expected_version=0,
    )  # fmt: skip
    second = await mem.write_memory(
        tenant, "a", "prefs", MemoryEdit("append", "no sugar"), provenance=person()
    )
    assert first.entry is not None and second.entry is not None
    assert (first.entry.version, second.entry.version) == (1, 2)
    assert second.entry.content == "tea\nno sugar"
    assert second.revision > first.revision > 0
    versions = await mem.memory_versions(tenant, "a", "prefs")
    assert [(v.version, v.content, v.provenance.actor) for v in versions] == [
        (1, "tea", "tool"),
        (2, "tea\nno sugar", "person"),
    ]
    assert (versions[0].provenance.run_id, versions[0].provenance.tool_call_id) == (run, "c1")
    assert await mem.memory_revision(tenant, "a") == second.revision
    # Another tenant and another agent see nothing of it.
    assert await mem.list_memory(uuid.uuid4(), "a") == []
    assert await mem.list_memory(tenant, "b") == []


async def test_a_session_sees_its_own_entries_and_the_agent_wide_ones(
    mem: MemoryStore, tenant: uuid.UUID
) -> None:
    s1, s2 = uuid.uuid4(), uuid.uuid4()
    await mem.write_memory(tenant, "a", "shared", MemoryEdit("set", "x"), provenance=person())
    await mem.write_memory(
        tenant, "a", "mine", MemoryEdit("set", "y"), provenance=person(), session_id=s1
    )
    assert [(e.key, e.session_id) for e in await mem.list_memory(tenant, "a", s1)] == [
        ("shared", None),
        ("mine", s1),
    ]
    assert [e.key for e in await mem.list_memory(tenant, "a", s2)] == ["shared"]
    assert await mem.memory_revision(tenant, "a", s2) < await mem.memory_revision(tenant, "a", s1)


async def test_concurrent_writers_of_one_version_one_wins_the_other_conflicts(
    mem: MemoryStore, tenant: uuid.UUID
) -> None:
    async def writer(key: str, name: str, outcomes: list[Any]) -> None:
        try:
            outcomes.append(
                await mem.write_memory(
                    tenant,
                    "a",
                    key,
                    MemoryEdit("set", f"by {name}"),
                    provenance=by_tool(uuid.uuid4(), name),
                    expected_version=1,
                )
            )
        except MemoryConflict as exc:
            outcomes.append(exc)

    for i in range(5):  # five keys, two writers started together on each
        key = f"plan-{i}"
        await mem.write_memory(tenant, "a", key, MemoryEdit("set", "v1"), provenance=person())
        outcomes: list[Any] = []
        async with anyio.create_task_group() as tg:
            for name in ("run-a", "run-b"):
                tg.start_soon(writer, key, name, outcomes)
        conflicts = [o for o in outcomes if isinstance(o, MemoryConflict)]
        assert len(outcomes) == 2 and len(conflicts) == 1
        message = str(conflicts[0])
        assert "is at version 2 (last written by run " in message
        assert "not version 1: another write came first; read it again" in message
        assert len(await mem.memory_versions(tenant, "a", key)) == 2


async def test_a_write_key_already_stored_is_replayed_not_written_again(
    mem: MemoryStore, tenant: uuid.UUID
) -> None:
    run = uuid.uuid4()
    args: dict[str, Any] = {"provenance": by_tool(run, "toolu_9")}
    first = await mem.write_memory(tenant, "a", "k", MemoryEdit("append", "once"), **args)
    again = await mem.write_memory(tenant, "a", "k", MemoryEdit("append", "once"), **args)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.entry is not None and again.entry.content == "once"
    assert len(await mem.memory_versions(tenant, "a", "k")) == 1
    deleted = await mem.delete_memory(tenant, "a", "k", provenance=by_tool(run, "toolu_10"))
    replayed = await mem.delete_memory(tenant, "a", "k", provenance=by_tool(run, "toolu_10"))
    assert deleted.entry is None and replayed.replayed
    assert [v.content for v in await mem.memory_versions(tenant, "a", "k")] == ["once", None]


async def test_a_fragment_must_match_once_and_an_entry_stay_within_its_budget(
    mem: MemoryStore, tenant: uuid.UUID
) -> None:
    await mem.write_memory(tenant, "a", "k", MemoryEdit("set", "a b a"), provenance=person())
    for old, problem in (("a", "is found 2 times"), ("z", "is not found")):
        with pytest.raises(MemoryConflict, match=problem):
            await mem.write_memory(
                tenant, "a", "k", MemoryEdit("replace", "c", old), provenance=person()
            )
    done = await mem.write_memory(
        tenant, "a", "k", MemoryEdit("replace", "B", " b "), provenance=person()
    )
    assert done.entry is not None and done.entry.content == "aBa"
    with pytest.raises(MemoryConflict, match="would hold 13 characters; at most 10"):
        await mem.write_memory(
            tenant, "a", "k", MemoryEdit("append", "123456789"), provenance=person(), max_chars=10
        )
    assert len(await mem.memory_versions(tenant, "a", "k")) == 2  # refused writes wrote nothing


async def test_a_deleted_entry_can_be_written_again_with_version_zero(
    mem: MemoryStore, tenant: uuid.UUID
) -> None:
    await mem.write_memory(tenant, "a", "k", MemoryEdit("set", "x"), provenance=person())
    await mem.delete_memory(tenant, "a", "k", provenance=person(), expected_version=1)
    assert await mem.get_memory(tenant, "a", "k") is None
    with pytest.raises(MemoryConflict, match="does not exist; nothing deleted"):
        await mem.delete_memory(tenant, "a", "k", provenance=person())
    again = await mem.write_memory(
        tenant, "a", "k", MemoryEdit("set", "y"), provenance=person(), expected_version=0
    )
    assert again.entry is not None and again.entry.version == 3


def test_search_finds_every_word_best_first() -> None:
    from hango.middleware import MemoryEntry

    at = dt.datetime.now(dt.UTC)
    entries = [
        MemoryEntry(k, c, 1, None, person(), at)
        for k, c in (("a", "tea, tea and more tea"), ("b", "coffee"), ("c", "green tea"))
    ]
    assert [e.key for e in search_entries(entries, "TEA")] == ["a", "c"]
    assert search_entries(entries, "tea coffee") == []
