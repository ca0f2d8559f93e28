"""Run and session ids given as unique prefixes, as git takes object names, on both back ends."""

from __future__ import annotations

import uuid

import pytest

from hango import Message
from hango.store import AmbiguousId, NotFound, RunStore, resolve_id
from hango.store.base import prefix_range

pytestmark = pytest.mark.anyio


async def _runs(store: RunStore, tenant: uuid.UUID, n: int) -> list[uuid.UUID]:
    agent = await store.put_agent(tenant, "t", {"name": "t", "model": "scripted:x"})
    return [(await store.create_run(tenant, agent.id, Message.user(f"m{i}"))).id for i in range(n)]


async def test_a_unique_prefix_names_its_run_and_session(
    store: RunStore, tenant: uuid.UUID
) -> None:
    ids = await _runs(store, tenant, 3)
    for run_id in ids:
        # The shortest prefix that no other id shares, with or without its dash.
        others = [str(i) for i in ids if i != run_id]
        n = next(n for n in range(4, 37) if not any(o.startswith(str(run_id)[:n]) for o in others))
        prefix = str(run_id)[: max(n, 10)]
        assert await resolve_id(store, tenant, "run", prefix) == run_id
        assert await resolve_id(store, tenant, "run", prefix.upper()) == run_id
    run = await store.get_run(tenant, ids[0])
    session = str(run.session_id)
    assert await resolve_id(store, tenant, "session", session[:13]) == run.session_id
    assert await resolve_id(store, tenant, "session", session[:13].replace("-", "")) == (
        run.session_id
    )


async def test_an_ambiguous_prefix_lists_the_candidates(
    store: RunStore, tenant: uuid.UUID, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 17 runs and 16 hex digits: two runs certainly share their first digit.
    ids = [str(i) for i in await _runs(store, tenant, 17)]
    monkeypatch.setattr("hango.store.base.MIN_PREFIX", 1)
    shared = next(i[0] for i in ids if sum(o[0] == i[0] for o in ids) > 1)
    with pytest.raises(AmbiguousId) as caught:
        await resolve_id(store, tenant, "run", shared)
    message = str(caught.value)
    assert f"run id prefix {shared!r} is ambiguous" in message
    assert all(i in message for i in ids if i.startswith(shared))


async def test_no_match_short_and_malformed_prefixes(store: RunStore, tenant: uuid.UUID) -> None:
    (run_id,) = await _runs(store, tenant, 1)
    other = "0000" if not str(run_id).startswith("0000") else "ffff"
    with pytest.raises(NotFound, match=f"no run id starts with '{other}'"):
        await resolve_id(store, tenant, "run", other)
    with pytest.raises(ValueError, match="at least 4"):
        await resolve_id(store, tenant, "run", str(run_id)[:3])
    for bad in ("xyz1", "12345678-12-", "0" * 33):
        with pytest.raises(ValueError, match="is not a run id"):
            await resolve_id(store, tenant, "run", bad)
    # Another tenant's ids are invisible, prefixes included.
    with pytest.raises(NotFound):
        await resolve_id(store, uuid.uuid4(), "run", str(run_id)[:8])


def test_prefix_range_spans_exactly_the_ids_with_that_prefix() -> None:
    low, high = prefix_range("3F2A")
    assert (str(low), str(high)) == (
        "3f2a0000-0000-0000-0000-000000000000",
        "3f2affff-ffff-ffff-ffff-ffffffffffff",
    )
    low, high = prefix_range("3f2a1b2c-4d")
    assert str(low).startswith("3f2a1b2c-4d00") and str(high).startswith("3f2a1b2c-4dff")
