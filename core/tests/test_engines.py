"""The engine registry (``hango.run.engine``): engines come from the ``hango_engines`` hook, by
name; a name no plugin provides, two plugins providing one name, the own queue's name taken,
and a hook returning something that is not an engine are each one line naming the culprit."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from hango import (
    AgentDefinition,
    ConfigError,
    Decision,
    Delivered,
    Engine,
    Harness,
    RunSave,
    RunStatus,
    RunStore,
)
from hango.middleware import hookimpl
from hango.plugins import make_plugin_manager
from hango.run.engine import OWN_ENGINE, engine_named, engine_of, installed_engines


class Recording:
    """An engine that records what it was asked (the registry is what is tested here; the
    real engine, hango-temporal, has its own tests against a real server)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []

    async def submit(self, harness: Harness, run_id: uuid.UUID) -> None:
        self.asked.append(f"submit {run_id}")

    async def decide(
        self, harness: Harness, run_id: uuid.UUID, decisions: Mapping[str, Decision]
    ) -> Delivered:
        return Delivered(tuple(decisions), (), ())

    async def cancel(self, harness: Harness, run_id: uuid.UUID) -> None:
        self.asked.append(f"cancel {run_id}")

    def describe(self, run_id: uuid.UUID) -> Mapping[str, Any]:
        return {"ref": str(run_id)}


def plugin(*engines: object) -> SimpleNamespace:
    @hookimpl
    def hango_engines() -> list[object]:
        return list(engines)

    return SimpleNamespace(hango_engines=hango_engines)


def manager(**plugins: SimpleNamespace) -> Any:
    pm = make_plugin_manager(env={}, load_entrypoints=False)
    for name, p in plugins.items():
        pm.register(p, name=name)
    return pm


def test_an_engine_is_found_by_name_and_the_own_queue_is_none() -> None:
    engine = Recording("mine")
    pm = manager(mine=plugin(engine))
    assert isinstance(engine, Engine)
    assert engine_named("mine", pm) is engine
    assert engine_named(OWN_ENGINE, pm) is None
    assert installed_engines(pm) == {"mine": engine}


def test_an_unknown_name_is_one_line_listing_the_installed() -> None:
    pm = manager(mine=plugin(Recording("mine")))
    with pytest.raises(ConfigError) as caught:
        engine_named("minee", pm)
    assert str(caught.value) == "unknown engine 'minee' (--engine): installed: hango, mine"
    with pytest.raises(ConfigError, match=r"install hango-temporal"):
        engine_named("temporal", manager())


def test_two_plugins_with_one_engine_name_are_refused_naming_both() -> None:
    pm = manager(a=plugin(Recording("x")), b=plugin(Recording("x")))
    with pytest.raises(ConfigError, match=r"engine 'x' is provided by both .* and .*"):
        installed_engines(pm)


def test_the_own_queues_name_cannot_be_taken() -> None:
    with pytest.raises(ConfigError, match=r"engine 'hango' is provided by both hango and"):
        installed_engines(manager(a=plugin(Recording(OWN_ENGINE))))


def test_a_hook_returning_something_else_is_refused_naming_the_plugin() -> None:
    with pytest.raises(ConfigError, match=r"plugin odd .*: hango_engines returned 42"):
        installed_engines(manager(odd=plugin(42)))


def test_a_run_records_its_engine() -> None:
    assert engine_of({}) == OWN_ENGINE
    assert engine_of({"engine": "temporal"}) == "temporal"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # psycopg
async def test_the_own_queue_never_claims_a_run_recorded_for_another_engine(
    store: RunStore, tenant: uuid.UUID
) -> None:
    harness = Harness(store, tenant_id=tenant, settings={})
    agent = AgentDefinition(name="e", model="scripted:none.toml")
    theirs = await harness.start(agent, "for the engine", engine="temporal")
    assert (theirs.status, theirs.config["engine"]) == (RunStatus.RUNNING, "temporal")
    # Between two of the engine's steps the run is saved whole and unheld, as a queued run is.
    await store.save_run(
        RunSave(tenant, theirs.id, version=theirs.version, status=RunStatus.QUEUED, state=None)
    )
    assert await store.claim_run(tenant, "own-worker", lease_seconds=5) is None
    ours = await harness.start(agent, "for the queue", status=RunStatus.QUEUED)
    lease = await store.claim_run(tenant, "own-worker", lease_seconds=5)
    assert lease is not None and lease.run_id == ours.id
