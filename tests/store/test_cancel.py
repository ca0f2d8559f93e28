"""Ctrl-C during a save, both back ends: whenever the cancellation lands (before, inside or just
after the statement), the run ends ``cancelled`` (or finished, if the last save was already
done), never ``running`` without an owner, and it resumes to completion."""

from __future__ import annotations

import random
import uuid
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from hango import AgentDefinition, Harness, RunStatus, ScriptedModel, ToolRegistry, tool
from hango.store import RunStore
from hango.store.sqlite import SqliteRunStore

pytestmark = pytest.mark.anyio

AGENT = AgentDefinition(name="test", model="scripted:inline", max_turns=10)
ROUNDS = 100


@tool
async def work(label: str) -> str:
    """Do one unit of work.

    Args:
        label: which one.
    """
    await anyio.lowlevel.checkpoint()  # as any real tool has: a pending Ctrl-C lands here
    return f"{label} done"


class CancelsOneSave:
    """The real store, except that one save (the ``nth`` of a run) is interrupted: another
    task cancels the run after ``delay`` seconds, while the save is under way, as Ctrl-C
    would. ``landed`` counts the cancellations that came before the save returned."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.saves = 0
        self.nth = 0
        self.delay = 0.0
        self.scope: anyio.CancelScope | None = None
        self.tg: anyio.abc.TaskGroup | None = None
        self.landed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def arm(
        self, scope: anyio.CancelScope, tg: anyio.abc.TaskGroup, nth: int, delay: float
    ) -> None:
        self.scope, self.tg, self.nth, self.delay, self.saves = scope, tg, nth, delay, 0

    async def _cancel_later(self, scope: anyio.CancelScope) -> None:
        await anyio.sleep(self.delay)
        scope.cancel()

    def _cancel_now(self) -> None:
        assert self.scope is not None
        self.scope.cancel()  # lands at the save's first checkpoint

    async def save_run(self, *args: Any, **kwargs: Any) -> int:
        self.saves += 1
        if self.saves != self.nth or self.scope is None or self.tg is None:
            return await self._store.save_run(*args, **kwargs)  # type: ignore[no-any-return]
        if self.delay:
            self.tg.start_soon(self._cancel_later, self.scope)
        else:
            self._cancel_now()
        try:
            return await self._store.save_run(*args, **kwargs)  # type: ignore[no-any-return]
        finally:
            self.landed += self.scope.cancel_called


async def test_ctrl_c_during_a_save_never_leaves_a_run_running_without_an_owner(
    store: RunStore, tenant: uuid.UUID
) -> None:
    rng = random.Random(12)  # reproducible timings
    interrupting = CancelsOneSave(store)

    def harness(s: Any) -> Harness:
        model = ScriptedModel.from_turns(
            [{"tool_calls": [{"name": "work", "input": {"label": "one"}}]}, {"text": "done"}]
        )
        return Harness(
            s,
            tenant_id=tenant,
            model=model,
            stack=lambda _: [],
            tools=ToolRegistry([work]),
            settings={},
        )

    outcomes: dict[RunStatus, int] = {}
    # How many times a run saves (after before_run, after the model's tool call, after its
    # result, at the end...): counted on a run nothing interrupts, so every round's cancel
    # lands on a save that happens.
    probe = await harness(store).start(AGENT, "probe")
    assert (await harness(interrupting).execute(probe.id)).status is RunStatus.COMPLETED
    saves_per_run = interrupting.saves
    assert saves_per_run >= 3
    # A save takes under 1 ms on SQLite and a few on PostgreSQL: a third of the rounds cancel
    # as the save starts, the others at a random moment of about a save's length.
    longest = 0.001 if isinstance(store, SqliteRunStore) else 0.004
    for i in range(ROUNDS):
        run = await harness(store).start(AGENT, f"job {i}")
        async with anyio.create_task_group() as tg:
            with anyio.CancelScope() as scope:
                delay = rng.choice([0.0, rng.uniform(0, longest), rng.uniform(0, longest)])
                interrupting.arm(scope, tg, rng.randint(1, saves_per_run), delay)
                await harness(interrupting).execute(run.id)
        after = await store.get_run(tenant, run.id)
        assert after.status is not RunStatus.RUNNING, f"round {i}: left running, no owner"
        outcomes[after.status] = outcomes.get(after.status, 0) + 1
        if after.status is RunStatus.CANCELLED:
            finished = await harness(store).execute(run.id)  # nothing saved was lost
            assert finished.status is RunStatus.COMPLETED, f"round {i}: {finished.error}"
            history = await store.load_messages(tenant, run.session_id)
            assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    # The injection is real: Ctrl-C arrived during the save in most rounds, and the runs it
    # reached before their last save ended cancelled.
    assert interrupting.landed > ROUNDS // 4, interrupting.landed
    assert outcomes.get(RunStatus.CANCELLED, 0) > ROUNDS // 10, outcomes
    assert set(outcomes) <= {RunStatus.CANCELLED, RunStatus.COMPLETED}, outcomes
