"""The execution seam (issue 23 item 1, issue 27 items 1 and 2), on SQLite and PostgreSQL: one
executor per run (``RunBusy`` before anything runs or is written), a lapsed claim taken over,
a stale executor's save refused, a finished call never run again (also when a wrapper raises
after ``next`` returned), and ``Harness.step`` advancing a run one step per call."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from hango import AgentDefinition, Harness, RunBusy, RunStatus, StepResult, ToolResult
from hango.middleware import Middleware, ToolCallRequest, ToolHandler
from hango.provider.scripted import ScriptedModel
from hango.store import LeaseLost, RunStore
from hango.testing import Killed, ToolBox
from hango.tool.registry import ToolRegistry
from hango_approval import HumanInTheLoopMiddleware
from hango_repair import RepairToolCallsMiddleware

pytestmark = pytest.mark.anyio

AGENT = AgentDefinition(name="seam", model="scripted:inline")
box = ToolBox()


@box.tool
def slow(label: str) -> str:
    """Take a while.

    Args:
        label: which call.
    """
    return f"{label} done"


@box.tool(name="charge", idempotent=False)
def charge(label: str) -> str:
    """Take an effect that must not happen twice.

    Args:
        label: which call.
    """
    return f"{label} charged"


def turns(*calls: tuple[str, str]) -> list[dict[str, Any]]:
    """One model turn calling ``calls`` (tool, label) in one batch, then a final answer."""
    batch = [{"name": name, "input": {"label": label}} for name, label in calls]
    return [{"tool_calls": batch}, {"text": "all done"}]


def harness(
    store: RunStore,
    tenant: uuid.UUID,
    script: list[dict[str, Any]],
    *,
    repair: bool,
    extra: Sequence[Middleware] = (),
    settings: dict[str, str] | None = None,
) -> Harness:
    stack: list[Middleware] = [*extra]
    if repair:
        stack.insert(0, RepairToolCallsMiddleware())
    return Harness(
        store,
        tenant_id=tenant,
        model=ScriptedModel.from_turns(script),
        stack=lambda _: list(stack),
        tools=ToolRegistry([slow, charge]),
        settings=settings or {},
    )


with_and_without_repair = pytest.mark.parametrize("repair", [False, True], ids=["bare", "repair"])


@with_and_without_repair
async def test_a_second_execute_of_a_running_run_is_refused_and_runs_nothing(
    store: RunStore, tenant: uuid.UUID, repair: bool
) -> None:
    h = harness(store, tenant, turns(("slow", "a")), repair=repair)
    run = await h.start(AGENT, "go")
    hold = box.hold("slow")
    async with anyio.create_task_group() as tg:
        first: list[Any] = []

        async def execute_first() -> None:
            first.append(await h.execute(run.id))

        tg.start_soon(execute_first)
        with anyio.fail_after(10):
            await hold.entered.wait()
        before = await store.get_run(tenant, run.id)
        before_history = await store.load_messages(tenant, run.session_id)
        # A client retrying after a timeout: the same harness, and a second one (another task).
        for again in (h, harness(store, tenant, turns(("slow", "a")), repair=repair)):
            with pytest.raises(RunBusy, match=rf"run {run.id} is being executed by "):
                await again.execute(run.id)
            with pytest.raises(RunBusy):
                await again.step(run.id)
        # Refused before anything was written.
        assert await store.get_run(tenant, run.id) == before
        assert await store.load_messages(tenant, run.session_id) == before_history
        hold.release()
    assert first[0].status is RunStatus.COMPLETED
    assert box.count("slow") == (1, 1)  # the in-flight call ran once, its result kept
    history = await store.load_messages(tenant, run.session_id)
    assert history[2].tool_results[0].content == "a done"
    done = await store.get_run(tenant, run.id)
    assert (done.lease_owner, done.lease_expires_at) == (None, None)  # released


async def test_an_executor_that_died_holding_a_claim_is_taken_over_once_it_lapses(
    store: RunStore, tenant: uuid.UUID, sql: Callable[..., Any]
) -> None:
    h = harness(store, tenant, turns(("slow", "a")), repair=False)
    run = await h.start(AGENT, "go")
    dead = await store.acquire_run(tenant, run.id, "gone:1", lease_seconds=30)
    with pytest.raises(RunBusy, match="gone:1"):
        await h.execute(run.id)
    # A worker never takes a terminal's run, even once its claim has lapsed.
    sql(
        "UPDATE runs SET lease_expires_at = ? WHERE tenant_id = ? AND id = ?",
        "2000-01-01T00:00:00.000000+00:00",
        str(tenant),
        str(run.id),
    )
    assert await store.claim_run(tenant, "worker", lease_seconds=30) is None
    finished = await h.execute(run.id)
    assert finished.status is RunStatus.COMPLETED
    assert box.count("slow") == (1, 1)
    # The dead executor's token is gone: anything it still tried would be refused.
    assert not await store.release_run(dead)
    with pytest.raises(LeaseLost):
        await store.renew_lease(dead)


async def test_a_stale_executors_saves_are_refused_once_its_claim_was_taken_over(
    store: RunStore, tenant: uuid.UUID, sql: Callable[..., Any]
) -> None:
    h = harness(store, tenant, turns(("slow", "a")), repair=False)
    run = await h.start(AGENT, "go")
    hold = box.hold("slow")
    outcome: list[BaseException | object] = []

    async def stale() -> None:
        try:
            outcome.append(await h.step(run.id, steps=None))
        except LeaseLost as exc:
            outcome.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(stale)
        with anyio.fail_after(10):
            await hold.entered.wait()
        # It hangs in the tool until its claim has lapsed; another executor takes over.
        sql(
            "UPDATE runs SET lease_expires_at = ? WHERE tenant_id = ? AND id = ?",
            "2000-01-01T00:00:00.000000+00:00",
            str(tenant),
            str(run.id),
        )
        script = [turns(("slow", "a"))[0], {"text": "taken over"}]
        other = harness(store, tenant, script, repair=False)
        taking = tg.start_soon(other.execute, run.id)
        del taking
        with anyio.fail_after(10):
            while box.count("slow")[0] < 2:  # noqa: ASYNC110 - the second executor's call
                await anyio.sleep(0.01)
        hold.release()
    assert isinstance(outcome[0], LeaseLost)
    done = await store.get_run(tenant, run.id)
    assert (done.status, done.error) == (RunStatus.COMPLETED, None)
    history = await store.load_messages(tenant, run.session_id)
    # One result for the call, and the other executor's answer: nothing of the stale one's.
    assert [m.role for m in history] == ["user", "assistant", "user", "assistant"]
    assert history[-1].content[0].text == "taken over"  # type: ignore[union-attr]


class FailsAfterNext:
    """A tool wrapper that raises after ``next`` returned the result, the first time only."""

    name = "fails_after_next"

    def __init__(self, error: type[BaseException] = RuntimeError, *, times: int = 1) -> None:
        self.error = error
        self.times = times

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        result = await next(req)
        if self.times:
            self.times -= 1
            raise self.error("broke after the tool ran")
        return result


@with_and_without_repair
@pytest.mark.parametrize("tool", ["slow", "charge"])
async def test_a_call_whose_body_finished_is_not_run_again_after_its_wrapper_raised(
    store: RunStore, tenant: uuid.UUID, repair: bool, tool: str
) -> None:
    wrapper = FailsAfterNext()
    h = harness(store, tenant, turns((tool, "a")), repair=repair, extra=[wrapper])
    run = await h.start(AGENT, "go")
    failed = await h.execute(run.id)
    assert failed.status is RunStatus.FAILED and "broke after the tool ran" in (failed.error or "")
    assert box.count(tool) == (1, 1)
    resumed = await h.execute(run.id)
    assert resumed.status is RunStatus.COMPLETED
    assert box.count(tool) == (1, 1)  # answered with the result it returned, not run again
    history = await store.load_messages(tenant, run.session_id)
    done = "a done" if tool == "slow" else "a charged"
    assert history[2].tool_results[0].content == done


@with_and_without_repair
async def test_a_crash_after_the_body_returned_does_not_run_it_again(
    store: RunStore, tenant: uuid.UUID, repair: bool
) -> None:
    # Killed: as a kill -9 right after the tool returned, before its result reached history.
    script = [*turns(("slow", "a"))[:1], *turns(("charge", "b"))]
    dies = harness(store, tenant, script, repair=repair, extra=[FailsAfterNext(Killed)])
    run = await dies.start(AGENT, "go")
    with pytest.raises(Killed):
        await dies.execute(run.id)
    # A new process: the same stack, whose wrapper does not fail this time.
    h = harness(store, tenant, script, repair=repair, extra=[FailsAfterNext(times=0)])
    assert box.count("slow") == (1, 1)
    finished = await h.execute(run.id)
    assert finished.status is RunStatus.COMPLETED
    assert box.count("slow") == (1, 1)  # answered with its saved result
    assert box.count("charge") == (1, 1)  # the next turn's call, once


@with_and_without_repair
async def test_step_advances_one_model_turn_or_one_tool_call_per_call(
    store: RunStore, tenant: uuid.UUID, repair: bool
) -> None:
    h = harness(store, tenant, turns(("slow", "a"), ("charge", "b")), repair=repair)
    run = await h.start(AGENT, "go")
    seen: list[tuple[str, int, list[str]]] = []
    for _ in range(6):
        # Only small values cross: what an engine activity returns.
        result = StepResult.from_json(json.loads(json.dumps((await h.step(run.id)).to_json())))
        history = await store.load_messages(tenant, run.session_id)
        seen.append((result.status.value, result.steps, [m.role for m in history]))
        record = await store.get_run(tenant, run.id)
        assert record.lease_owner is None  # each step gives its claim up
    assert seen == [
        ("running", 1, ["user", "assistant"]),  # the model turn
        ("running", 1, ["user", "assistant", "user"]),  # slow a
        ("running", 1, ["user", "assistant", "user"]),  # charge b, in the same result message
        ("completed", 1, ["user", "assistant", "user", "assistant"]),  # the final turn
        ("completed", 0, ["user", "assistant", "user", "assistant"]),  # repeated: nothing
        ("completed", 0, ["user", "assistant", "user", "assistant"]),
    ]
    assert (box.count("slow"), box.count("charge")) == ((1, 1), (1, 1))
    history = await store.load_messages(tenant, run.session_id)
    assert [r.content for r in history[2].tool_results] == ["a done", "b charged"]


async def test_a_repeated_step_after_a_crash_in_a_non_idempotent_call_does_not_run_it_again(
    store: RunStore, tenant: uuid.UUID
) -> None:
    h = harness(store, tenant, turns(("charge", "b")), repair=False)
    run = await h.start(AGENT, "go")
    assert (await h.step(run.id)).steps == 1  # the model turn
    box.kill("charge")  # the process dies inside the call: its outcome is unknown
    with pytest.raises(Killed):
        await h.step(run.id)
    again = await h.step(run.id)  # the engine retries the step
    assert (again.status, again.steps) == (RunStatus.RUNNING, 1)
    history = await store.load_messages(tenant, run.session_id)
    (answer,) = history[2].tool_results
    assert answer.is_error and "Outcome unknown" in answer.content
    assert box.count("charge") == (1, 0)  # started once (killed), never run again
    finished = await h.step(run.id, steps=None)
    assert finished.status is RunStatus.COMPLETED


async def test_step_reports_a_run_waiting_for_a_decision_as_it_stands(
    store: RunStore, tenant: uuid.UUID
) -> None:
    gate = HumanInTheLoopMiddleware(interrupt_on={"charge": True})
    h = harness(store, tenant, turns(("charge", "b")), repair=False, extra=[gate])
    run = await h.start(AGENT, "go")
    asked = await h.step(run.id, steps=None)
    assert (asked.status, asked.more) == (RunStatus.SUSPENDED, False)
    before = await store.get_run(tenant, run.id)
    (call_id,) = asked.pending
    again = await h.step(run.id)
    assert again == StepResult(run.id, RunStatus.SUSPENDED, 0, None, (call_id,))
    assert await store.get_run(tenant, run.id) == before  # nothing written
    assert box.count("charge") == (0, 0)


async def test_a_run_a_worker_holds_is_refused_and_a_worker_never_takes_one_executing_here(
    store: RunStore, tenant: uuid.UUID
) -> None:
    h = harness(store, tenant, turns(("slow", "a")), repair=False)
    queued = await h.start(AGENT, "go", status=RunStatus.QUEUED)
    lease = await store.claim_run(tenant, "worker-1", lease_seconds=30)
    assert lease is not None and lease.run_id == queued.id
    with pytest.raises(RunBusy, match="worker-1"):
        await h.execute(queued.id)
    assert box.count("slow") == (0, 0)
    assert await store.release_run(lease)  # handed back: queued again

    # Executed here (hango resume of a submitted run): no worker claims it meanwhile.
    hold = box.hold("slow")
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.execute, queued.id)
        with anyio.fail_after(10):
            await hold.entered.wait()
        assert await store.claim_run(tenant, "worker-2", lease_seconds=30) is None
        hold.release()
    assert (await store.get_run(tenant, queued.id)).status is RunStatus.COMPLETED
    assert box.count("slow") == (1, 1)
