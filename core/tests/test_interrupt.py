"""Interrupts in core: a middleware pauses a tool call for a person's decision, the run is
suspended with the batch's frontier saved, decisions are bound to their pending action, and a
resumed run goes on from the paused call without running anything twice.

The gate here is a test middleware built on ``req.interrupt`` alone; the approval plugin's own
behaviour is tested in plugins/approval.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from hango import (
    Decision,
    DecisionRefused,
    Event,
    InterruptRaised,
    Message,
    ModelResponse,
    PendingAction,
    RunFinished,
    RunNotResumable,
    RunStatus,
    ToolCallFinished,
    ToolCallStarted,
    ToolContext,
    ToolResult,
    ToolUseBlock,
    error_result,
    tool,
)
from hango.agent.chain import Chain
from hango.agent.interrupts.records import InterruptError, interrupt_id
from hango.agent.state import STATE_VERSION, dump_state, load_state
from hango.middleware import (
    Interrupt,
    ModelHandler,
    ModelRequest,
    State,
    ToolCallRequest,
    ToolHandler,
    argument_digest,
    load_private,
    store_private,
)
from hango.testing import TestHarness, ToolBox, agent_harness
from hango.testing import saved_history as history

pytestmark = pytest.mark.anyio

box = ToolBox()
executed = box.executed


@box.tool
def look(path: str) -> str:
    """Read something (not gated)."""
    return f"looked at {path}"


@box.tool
def act(target: str) -> str:
    """Change something (gated by the tests' Gate)."""
    return f"acted on {target}"


class Gate:
    """Pauses every call to one of ``tools`` and applies the decision as written."""

    def __init__(self, tools: Sequence[str], name: str = "gate", allowed: Sequence[str] = ()):
        self.name = name
        self.tools = set(tools)
        self.allowed = tuple(allowed) or ("approve", "edit", "reject", "respond")

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        if req.call.name not in self.tools:
            return await next(req)
        decision = req.interrupt(self.name, "ask", reason="gated", decisions=self.allowed)
        if decision.type == "reject":
            return error_result("rejected: %s", decision.message)
        if decision.type == "respond":
            return ToolResult(decision.message or "")
        if decision.type == "edit":
            return await next(req.with_call(decision.edited_call(req.call)))
        return await next(req)


class CatchAll:
    """A careless error mapper: every exception from ``next`` becomes an error result."""

    name = "catch_all"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        try:
            return await next(req)
        except Exception as exc:
            return error_result("mapped: %s", exc)


class Counter:
    """Counts every call it sees in its private state, BEFORE calling next."""

    name = "counter"

    async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
        seen, _ = load_private(req.state, self.name, dict)
        store_private(req.state, self.name, {**seen, req.call.id: seen.get(req.call.id, 0) + 1})
        return await next(req)


def calls(*names_inputs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": n, "input": i} for n, i in names_inputs]}


def assert_valid(messages: Sequence[Message]) -> None:
    """Provider-valid: each assistant tool_use is answered exactly once by the user message
    right after it, and every result answers a call of the assistant message before it.
    (Weaker than hango.testing's ``assert_valid_history``: the scripted model's call ids
    repeat across the runs of a session, which the strict rules refuse.)"""
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_uses:
            reply = messages[i + 1]
            answered = [r.tool_use_id for r in reply.tool_results]
            assert sorted(answered) == sorted(u.id for u in m.tool_uses), (i, m, reply)
        if m.role == "user" and m.tool_results:
            before = messages[i - 1]
            assert {r.tool_use_id for r in m.tool_results} <= {u.id for u in before.tool_uses}


async def stored_state(h: TestHarness, run_id: uuid.UUID) -> State:
    return load_state((await h.store.get_run(h.tenant_id, run_id)).state)


# -- the pause ----------------------------------------------------------------------------------


async def test_a_paused_call_suspends_the_run_with_its_batch_frontier_saved(
    tmp_path: Path,
) -> None:
    turns = [calls(("look", {"path": "a"}), ("act", {"target": "x"}), ("look", {"path": "b"}))]
    turns.append({"text": "done"})
    events: list[Event] = []

    async def keep(event: Event) -> None:
        events.append(event)

    # One at a time: the events come in call order (concurrent pauses: test_concurrent_tools).
    async with agent_harness(
        tmp_path, turns=turns, stack=[Gate(["act"])], tools=[look, act], max_tool_concurrency=1
    ) as h:
        finished = await h.run(h.agent, "go", emit=keep)

        assert finished.status is RunStatus.SUSPENDED
        (action,) = finished.pending
        assert (action.tool_call_id, action.tool, action.input) == (
            "toolu_scripted_0_1",
            "act",
            {"target": "x"},
        )
        assert action.digest == argument_digest("act", {"target": "x"})
        assert (action.middleware, action.name, action.reason) == ("gate", "ask", "gated")
        assert action.decision is None and not action.outcome_unknown
        # The call before the gate ran; the gated call and the one after it did not.
        assert executed == ["look a"]
        kinds = [type(e).__name__ for e in events if not type(e).__name__.endswith("Delta")]
        assert kinds[-5:] == [
            "ToolCallStarted",
            "ToolCallFinished",
            "ToolCallStarted",
            "InterruptRaised",
            "RunFinished",
        ]
        # Saved in one save: the status, the finished call's result and the question.
        run = await h.store.get_run(h.tenant_id, finished.run_id)
        assert run.status is RunStatus.SUSPENDED and run.lease_owner is None
        saved = await history(h, finished.run_id)
        assert [r.tool_use_id for r in saved[-1].tool_results] == ["toolu_scripted_0_0"]
        assert (await stored_state(h, finished.run_id)).interrupts.pending == [action]

        # Without a decision it cannot go on, and trying writes nothing.
        with pytest.raises(RunNotResumable, match="waiting for a decision on tool call"):
            await h.execute(finished.run_id)
        assert (await h.store.get_run(h.tenant_id, finished.run_id)).version == run.version

        done = await h.resume(finished.run_id, {"toolu_scripted_0_1": Decision.approve()})
        assert done.status is RunStatus.COMPLETED
        assert executed == ["look a", "act x", "look b"]
        final = await history(h, finished.run_id)
        assert_valid(final)
        # One message answers the batch, in call order; nothing is pending any more.
        assert [r.content for r in final[2].tool_results] == [
            "looked at a",
            "acted on x",
            "looked at b",
        ]
        book = (await stored_state(h, finished.run_id)).interrupts
        assert book.pending == [] and book.started == {}
        used = [(a.tool_call_id, a.decision.type if a.decision else None) for a in book.decided]
        assert used == [("toolu_scripted_0_1", "approve")]


async def test_except_exception_in_a_wrapper_does_not_swallow_the_pause(tmp_path: Path) -> None:
    turns = [calls(("act", {"target": "x"})), {"text": "done"}]
    async with agent_harness(
        tmp_path, turns=turns, stack=[CatchAll(), Gate(["act"])], tools=[act]
    ) as h:
        finished = await h.run(h.agent, "go")
        assert finished.status is RunStatus.SUSPENDED
        assert not any(m.tool_results for m in await history(h, finished.run_id))
        assert executed == []


async def test_the_innermost_guard_lets_a_pause_through() -> None:
    state = State(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4())
    req = ToolCallRequest(ToolUseBlock("c1", "act", {}), None, state)

    action = PendingAction("i", "c1", "act", {}, "d", ("approve",), "m", "ask", "r", "t")

    async def base(r: ToolCallRequest) -> ToolResult:
        raise Interrupt(action)

    # Every other exception from the base becomes an error result (the guard); a pause is
    # raised through it to the loop (which refuses it there: the call had started).
    with pytest.raises(Interrupt) as caught:
        await Chain.build([]).tool_call(req, base)
    assert not isinstance(caught.value, Exception)
    assert caught.value.action is action


async def test_interrupt_ids_are_deterministic_and_scoped() -> None:
    run = uuid.uuid4()
    one = interrupt_id(run, "call_0", "gate", "ask")
    assert one == interrupt_id(run, "call_0", "gate", "ask")
    others = {
        interrupt_id(uuid.uuid4(), "call_0", "gate", "ask"),
        interrupt_id(run, "call_1", "gate", "ask"),
        interrupt_id(run, "call_0", "other", "ask"),
        interrupt_id(run, "call_0", "gate", "other"),
        # No separator confusion between the parts.
        interrupt_id(run, "call_0\x1fgate", "", "ask"),
    }
    assert one not in others and len(others) == 5


async def test_two_runs_with_the_same_call_ids_never_share_an_interrupt_id(
    tmp_path: Path,
) -> None:
    turns = [calls(("act", {"target": "x"}), ("act", {"target": "y"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["act"])], tools=[act]) as h:
        first = await h.run(h.agent, "go")
        second = await h.run(h.agent, "go")
    ids = [a.id for a in (*first.pending, *second.pending)]
    # The scripted model gives both runs the same call ids; the interrupt ids still differ,
    # within a batch (parallel calls) and across runs (langgraph#6626, seed 002's cross-agent
    # collision).
    assert [a.tool_call_id for a in first.pending] == [a.tool_call_id for a in second.pending]
    assert len(set(ids)) == 4


async def test_an_interrupt_after_the_call_ran_is_an_error_naming_the_middleware(
    tmp_path: Path,
) -> None:
    class Late:
        name = "late"

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            result = await next(req)
            req.interrupt(self.name, "too_late", reason="after the fact")
            return result

    turns = [calls(("act", {"target": "x"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Late()], tools=[act]) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None
    assert "middleware 'late'" in finished.error and "after the call ran" in finished.error
    assert executed == ["act x"]


async def test_a_pause_outside_a_tool_call_fails_the_run_naming_the_middleware(
    tmp_path: Path,
) -> None:
    class ModelGate:
        name = "model_gate"

        async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
            action = PendingAction("i", "-", "-", {}, "d", ("approve",), self.name, "ask", "r", "t")
            raise Interrupt(action)

    async with agent_harness(tmp_path, turns=[{"text": "hi"}], stack=[ModelGate()]) as h:
        finished = await h.run(h.agent, "go")
        run = await h.store.get_run(h.tenant_id, finished.run_id)
    assert finished.status is RunStatus.FAILED and run.status is RunStatus.FAILED
    assert finished.error is not None
    assert "middleware 'model_gate' raised interrupt 'ask' outside a tool call" in finished.error


async def test_an_interrupt_allowing_no_known_decision_is_an_error(tmp_path: Path) -> None:
    turns = [calls(("act", {"target": "x"})), {"text": "done"}]
    gate = Gate(["act"], allowed=["maybe"])
    async with agent_harness(tmp_path, turns=turns, stack=[gate], tools=[act]) as h:
        finished = await h.run(h.agent, "go")
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None and "middleware 'gate'" in finished.error
    assert isinstance(InterruptError("x"), Exception)


# -- later calls of a paused batch -------------------------------------------------------------


async def test_later_calls_are_asked_not_run_and_leave_no_trace(tmp_path: Path) -> None:
    batch = calls(("act", {"target": "1"}), ("look", {"path": "a"}), ("act", {"target": "2"}))
    turns = [batch, {"text": "done"}]
    stack = [Counter(), Gate(["act"])]
    async with agent_harness(tmp_path, turns=turns, stack=stack, tools=[look, act]) as h:
        finished = await h.run(h.agent, "go")
        # Both gated calls are asked in one round, under their own ids; nothing ran, and the
        # counter, which counts before calling next, counted nothing.
        assert [a.tool_call_id for a in finished.pending] == [
            "toolu_scripted_0_0",
            "toolu_scripted_0_2",
        ]
        assert len({a.id for a in finished.pending}) == 2
        assert executed == []
        assert "counter" not in (await stored_state(h, finished.run_id)).private

        done = await h.resume(
            finished.run_id,
            {"toolu_scripted_0_0": Decision.reject("no"), "toolu_scripted_0_2": Decision.approve()},
        )
        assert done.status is RunStatus.COMPLETED
        # The rejected call did not run, the approved one did, the ungated one in between too.
        assert executed == ["look a", "act 2"]
        results = {r.tool_use_id: r for r in (await history(h, finished.run_id))[2].tool_results}
        assert results["toolu_scripted_0_0"].is_error
        assert results["toolu_scripted_0_0"].content == "rejected: no"
        assert results["toolu_scripted_0_2"].content == "acted on 2"
        counted, _ = load_private(await stored_state(h, finished.run_id), "counter", dict)
        assert counted == {f"toolu_scripted_0_{i}": 1 for i in range(3)}


async def test_completed_siblings_are_never_run_again(tmp_path: Path) -> None:
    # deepagents#420: an interrupt in a batch must not re-run the calls that completed.
    turns = [calls(("look", {"path": "a"}), ("act", {"target": "x"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["act"])], tools=[look, act]) as h:
        finished = await h.run(h.agent, "go")
        assert executed == ["look a"]
        await h.resume(finished.run_id, {"toolu_scripted_0_1": Decision.approve()})
        assert executed == ["look a", "act x"]
        assert_valid(await history(h, finished.run_id))


async def test_respond_and_edit_answer_without_running_the_original(tmp_path: Path) -> None:
    turns = [calls(("act", {"target": "x"}), ("act", {"target": "y"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["act"])], tools=[act]) as h:
        finished = await h.run(h.agent, "go")
        await h.resume(
            finished.run_id,
            {
                "toolu_scripted_0_0": Decision.respond("a person's answer"),
                "toolu_scripted_0_1": Decision.edit({"target": "z"}),
            },
        )
        assert executed == ["act z"]
        results = (await history(h, finished.run_id))[2].tool_results
        assert [(r.content, r.is_error) for r in results] == [
            ("a person's answer", False),
            ("acted on z", False),
        ]


# -- decisions ---------------------------------------------------------------------------------


async def test_decisions_are_bound_to_their_pending_action(tmp_path: Path) -> None:
    turns = [calls(("act", {"target": "x"})), {"text": "done"}]
    gate = Gate(["act"], allowed=["approve", "reject"])
    async with agent_harness(tmp_path, turns=turns, stack=[gate], tools=[act]) as h:
        finished = await h.run(h.agent, "go")
        rid, call = finished.run_id, "toolu_scripted_0_0"
        before = await h.store.get_run(h.tenant_id, rid)

        refusals = {
            "toolu_nope": (Decision.approve(), "no pending action .*waiting for: " + call),
            call: (Decision.respond("hi"), "'respond' is not allowed here; allowed: approve"),
        }
        for call_id, (decision, message) in refusals.items():
            with pytest.raises(DecisionRefused, match=message):
                await h.decide(rid, {call_id: decision})
        wrong = Decision.approve(digest=argument_digest("act", {"target": "other"}))
        with pytest.raises(DecisionRefused, match="the call changed"):
            await h.decide(rid, {call: wrong})
        # All or nothing: a good decision next to a bad one is not recorded either.
        with pytest.raises(DecisionRefused):
            await h.decide(rid, {call: Decision.approve(), "toolu_nope": Decision.approve()})
        assert (await h.store.get_run(h.tenant_id, rid)).version == before.version

        right = Decision.approve(digest=finished.pending[0].digest)
        done = await h.decide(rid, {call: right})
        assert (done.recorded, done.unchanged, done.waiting) == ((call,), (), ())
        assert done.run.status is RunStatus.QUEUED
        version = (await h.store.get_run(h.tenant_id, rid)).version
        # The same decision again is a no-op and writes nothing; another one is refused.
        again = await h.decide(rid, {call: Decision.approve()})
        assert (again.recorded, again.unchanged) == ((), (call,))
        assert (await h.store.get_run(h.tenant_id, rid)).version == version
        with pytest.raises(DecisionRefused, match="already decided \\(approve"):
            await h.decide(rid, {call: Decision.reject()})

        assert (await h.execute(rid)).status is RunStatus.COMPLETED
        # After the run moved on: the same decision is still a no-op, anything else refused.
        assert (await h.decide(rid, {call: Decision.approve()})).unchanged == (call,)
        with pytest.raises(DecisionRefused, match="already decided"):
            await h.decide(rid, {call: Decision.reject()})
        with pytest.raises(DecisionRefused, match="the run is completed, not waiting"):
            await h.decide(rid, {"toolu_other": Decision.approve()})
        replay = await h.resume(rid, {call: Decision.approve()})
        assert replay.status is RunStatus.COMPLETED
        assert executed == ["act x"]


async def test_a_run_stays_suspended_until_every_pending_action_is_decided(
    tmp_path: Path,
) -> None:
    turns = [calls(("act", {"target": "x"}), ("act", {"target": "y"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["act"])], tools=[act]) as h:
        finished = await h.run(h.agent, "go")
        partly = await h.resume(finished.run_id, {"toolu_scripted_0_1": Decision.approve()})
        assert partly.status is RunStatus.SUSPENDED
        assert [a.tool_call_id for a in partly.pending] == ["toolu_scripted_0_0"]
        assert executed == []
        done = await h.resume(finished.run_id, {"toolu_scripted_0_0": Decision.approve()})
        assert done.status is RunStatus.COMPLETED
        assert executed == ["act x", "act y"]


def test_a_decision_missing_what_its_type_needs_is_refused() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        Decision("edit", input=["not", "an", "object"])
    with pytest.raises(ValueError, match="needs the text"):
        Decision("respond")
    with pytest.raises(ValueError, match="takes no arguments"):
        Decision("approve", input={"a": 1})
    with pytest.raises(ValueError, match="unknown decision"):
        Decision("maybe")  # type: ignore[arg-type]


async def test_an_answer_lives_for_one_interrupt_cycle(tmp_path: Path) -> None:
    # The model repeats the same call, under the same id, in its next batch (some servers
    # number calls per response): the earlier approval must not approve it.
    same = {"tool_calls": [{"name": "act", "input": {"target": "x"}, "id": "call_0"}]}
    turns = [same, same, {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["act"])], tools=[act]) as h:
        finished = await h.run(h.agent, "go")
        again = await h.resume(finished.run_id, {"call_0": Decision.approve()})
        assert again.status is RunStatus.SUSPENDED
        assert [a.tool_call_id for a in again.pending] == ["call_0"]
        assert executed == ["act x"]
        # The script reuses the call id: the new question is answered by its own id.
        done = await h.resume(finished.run_id, {again.pending[0].id: Decision.reject()})
        assert done.status is RunStatus.COMPLETED
        assert executed == ["act x"]
        assert_valid(await history(h, finished.run_id))


# -- calls whose outcome is unknown ------------------------------------------------------------


class Crash(BaseException):
    """The process dies here: nothing after this point is saved (as with SIGKILL)."""


keys: list[str] = []
crash_in_pay: list[bool] = []


@box.tool(idempotent=False)
def pay(amount: int, ctx: ToolContext) -> str:
    """Move money (must not happen twice)."""
    keys.append(ctx.idempotency_key)
    if crash_in_pay.pop(0) if crash_in_pay else False:
        raise Crash
    return f"paid {amount}"


async def test_a_started_call_without_a_result_is_never_run_again(tmp_path: Path) -> None:
    keys.clear()
    crash_in_pay[:] = [True]
    turns = [calls(("pay", {"amount": 5})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, tools=[pay]) as h:
        run = await h.start(h.agent, "go")
        with pytest.raises(Crash):
            await h.execute(run.id)
        started = (await stored_state(h, run.id)).interrupts.started
        assert list(started) == ["toolu_scripted_0_0"]

        done = await h.execute(run.id)
        assert done.status is RunStatus.COMPLETED
        assert executed == ["pay 5"]
        (result,) = (await history(h, run.id))[2].tool_results
        assert result.is_error and result.content.startswith("Outcome unknown: tool 'pay' started")
        assert (await stored_state(h, run.id)).interrupts.started == {}


async def test_a_gated_call_whose_outcome_is_unknown_is_asked_again(tmp_path: Path) -> None:
    keys.clear()
    crash_in_pay[:] = [True]
    turns = [calls(("pay", {"amount": 5})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["pay"])], tools=[pay]) as h:
        finished = await h.run(h.agent, "go")
        first = finished.pending[0]
        with pytest.raises(Crash):
            await h.resume(finished.run_id, {"toolu_scripted_0_0": Decision.approve()})

        # The approval was used by the attempt that died: the run asks again, saying so.
        asked = await h.execute(finished.run_id)
        assert asked.status is RunStatus.SUSPENDED
        (again,) = asked.pending
        assert again.outcome_unknown and again.digest == first.digest
        # A question of its own: the earlier approval, sent again by call id (a retried
        # request), must not answer it (issue "Run integrity II", item 3).
        assert again.reasked and again.id == f"{first.id}.1"
        with pytest.raises(DecisionRefused, match=f"name the question: --approve {again.id}"):
            await h.resume(finished.run_id, {"toolu_scripted_0_0": Decision.approve()})
        assert executed == ["pay 5"]
        assert (await stored_state(h, finished.run_id)).interrupts.waiting() == [again]

        done = await h.resume(finished.run_id, {again.id: Decision.approve()})
        assert done.status is RunStatus.COMPLETED
        # A person decided to run it again: it ran again, with the same idempotency key.
        assert executed == ["pay 5", "pay 5"]
        assert len(keys) == 2 and keys[0] == keys[1]
        assert keys[0] != str(finished.run_id)
        decided = (await stored_state(h, finished.run_id)).interrupts.decided
        assert [a.outcome_unknown for a in decided] == [False, True]


async def test_a_call_gated_twice_is_approved_once_per_question(tmp_path: Path) -> None:
    """Two gates on one call (limits' suspend, then approval): each asks its own question; the
    second is answered by its id, and the first approval sent again is refused, not taken as
    "already recorded" with the run suspended for ever (issue "Run integrity II", item 3)."""
    executed.clear()
    stack = [Gate(["act"], name="outer"), Gate(["act"], name="inner")]
    turns = [calls(("act", {"target": "x"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=stack, tools=[act]) as h:
        first = await h.run(h.agent, "go")
        (outer,) = first.pending
        assert (outer.middleware, outer.reasked) == ("outer", False)
        second = await h.resume(first.run_id, {outer.tool_call_id: Decision.approve()})
        assert second.status is RunStatus.SUSPENDED
        (inner,) = second.pending
        assert (inner.middleware, inner.reasked) == ("inner", True)
        with pytest.raises(DecisionRefused, match=f"--approve {inner.id}"):
            await h.resume(first.run_id, {inner.tool_call_id: Decision.approve()})
        assert executed == []
        done = await h.resume(first.run_id, {inner.id: Decision.approve()})
        assert done.status is RunStatus.COMPLETED and executed == ["act x"]
        # Sent again by its id (a double click): a no-op.
        again = await h.decide(first.run_id, {inner.id: Decision.approve()})
        assert again.unchanged == (inner.id,) and executed == ["act x"]


async def test_an_edit_is_checked_against_the_tool_before_it_is_recorded(
    tmp_path: Path,
) -> None:
    """An --edit whose arguments the tool's schema refuses, or that names a tool the agent
    does not have, is refused with nothing recorded; the run stays suspended and decidable
    (issue "Run integrity II", item 4)."""
    executed.clear()
    turns = [calls(("act", {"target": "x"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["act"])], tools=[act]) as h:
        first = await h.run(h.agent, "go")
        call_id = first.pending[0].tool_call_id
        for bad, expected in (
            (Decision.edit({"target": 5}), "do not fit act: $.target: 5 is not of type 'string'"),
            (Decision.edit({}), "'target' is a required property"),
            (Decision.edit({"target": "y"}, tool="nope"), "names tool 'nope'"),
        ):
            with pytest.raises(DecisionRefused, match=re.escape(expected)):
                await h.resume(first.run_id, {call_id: bad})
            state = await stored_state(h, first.run_id)
            assert [a.decision for a in state.interrupts.pending] == [None]
        done = await h.resume(first.run_id, {call_id: Decision.edit({"target": "y"})})
        assert done.status is RunStatus.COMPLETED and executed == ["act y"]


async def test_a_wrapper_may_retry_a_non_idempotent_call_in_the_same_pass(
    tmp_path: Path,
) -> None:
    attempts: list[int] = []

    @tool(idempotent=False)
    def flaky(n: int) -> str:
        """Fails the first time."""
        attempts.append(n)
        if len(attempts) == 1:
            raise OSError("try again")
        return "ok"

    class RetryOnError:
        name = "retry"

        async def wrap_tool_call(self, req: ToolCallRequest, next: ToolHandler) -> ToolResult:
            result = await next(req)
            return await next(req) if result.is_error else result

    turns = [calls(("flaky", {"n": 1})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[RetryOnError()], tools=[flaky]) as h:
        finished = await h.run(h.agent, "go")
        (result,) = (await history(h, finished.run_id))[2].tool_results
    # The retry is the wrapper's own decision in this pass: the start it recorded itself does
    # not make the outcome "unknown" (only a start left by a pass that stopped does).
    assert attempts == [1, 1] and result.content == "ok"


async def test_a_non_idempotent_call_is_recorded_as_started_before_it_runs(
    tmp_path: Path,
) -> None:
    crash_in_pay[:] = [False]
    seen: list[dict[str, Any]] = []

    @tool(idempotent=False)
    async def peek(ctx: ToolContext) -> str:
        """Look at what is saved while running."""
        run = await h.store.get_run(h.tenant_id, ctx.state.run_id)
        seen.append(run.state["interrupts"]["started"])  # type: ignore[index]
        return "ok"

    turns = [calls(("peek", {})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, tools=[peek]) as h:
        await h.run(h.agent, "go")
    assert list(seen[0]) == ["toolu_scripted_0_0"]


# -- persisted state ---------------------------------------------------------------------------


def test_a_version_1_state_document_loads_with_no_interrupts() -> None:
    ids = {k: str(uuid.uuid4()) for k in ("run_id", "session_id", "agent_id", "tenant_id")}
    state = load_state({"version": 1, **ids, "todos": [], "private": {}})
    assert state.interrupts.pending == [] and state.interrupts.started == {}
    assert dump_state(state)["version"] == STATE_VERSION == 2


def test_interrupts_round_trip_and_malformed_ones_are_named() -> None:
    state = State(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4())
    action = PendingAction(
        "id1", "c1", "act", {"target": "x"}, "d" * 16, ("approve", "reject"), "gate", "ask",
        "gated", "2026-01-01T00:00:00+00:00", decision=Decision.reject("no", digest="d" * 16),
    )  # fmt: skip
    state.interrupts.ask(action)
    state.interrupts.start("c2", "pay", "e" * 16)
    again = load_state(dump_state(state))
    assert again.interrupts == state.interrupts
    doc = dump_state(state)
    doc["interrupts"]["pending"][0]["decision"]["type"] = "maybe"  # type: ignore[index]
    with pytest.raises(Exception, match=r"interrupts.pending\[0\].decision"):
        load_state(doc)


async def test_events_of_a_suspended_run(tmp_path: Path) -> None:
    events: list[Event] = []

    async def keep(event: Event) -> None:
        events.append(event)

    turns = [calls(("act", {"target": "x"}), ("look", {"path": "a"})), {"text": "done"}]
    async with agent_harness(tmp_path, turns=turns, stack=[Gate(["act"])], tools=[act, look]) as h:
        finished = await h.run(h.agent, "go", emit=keep)
    raised = [e for e in events if isinstance(e, InterruptRaised)]
    assert [e.action for e in raised] == list(finished.pending)
    assert not any(isinstance(e, ToolCallFinished) for e in events)
    assert [e.call.name for e in events if isinstance(e, ToolCallStarted)] == ["act"]
    assert isinstance(events[-1], RunFinished) and events[-1].pending == finished.pending
