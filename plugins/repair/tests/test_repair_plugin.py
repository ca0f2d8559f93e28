"""hango-repair: dangling tool calls answered, orphan results dropped, a clean history left
alone, a cancelled batch resumed with a valid history, the plugin entry point."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span

import hango_repair
from hango import (
    Message,
    RunStatus,
    ScriptedModel,
    TextBlock,
    Tool,
    ToolCallFinished,
    ToolCallStarted,
    ToolResultBlock,
    ToolUseBlock,
    tool,
)
from hango.discovery import default_stack
from hango.middleware import StackConfig, State
from hango.plugins import make_plugin_manager
from hango.testing import (
    RecordingModel,
    TestHarness,
    agent_harness,
    assert_installed,
    assert_valid_history,
    history_problems,
    new_state,
)
from hango_repair import INTERRUPTED, RepairToolCallsMiddleware, repair_history
from hango_repair.middleware import HISTORY_REPAIRED, RESULTS_ADDED, RESULTS_DROPPED


def use(id_: str, name: str = "f") -> ToolUseBlock:
    return ToolUseBlock(id_, name, {})


def result(id_: str, content: str = "ok") -> ToolResultBlock:
    return ToolResultBlock(id_, content)


def interrupted(id_: str) -> ToolResultBlock:
    return ToolResultBlock(id_, INTERRUPTED, is_error=True)


def user(*blocks: Any) -> Message:
    return Message("user", tuple(blocks))


def assistant(*blocks: Any) -> Message:
    return Message("assistant", tuple(blocks))


def problems(messages: Sequence[Message]) -> list[str]:
    """What a provider would reject: a call not answered exactly once in the next message, a
    result that answers no call of the message before it."""
    found = []
    for i, m in enumerate(messages):
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        if m.role == "assistant" and m.tool_uses:
            ids = sorted(u.id for u in m.tool_uses)
            got = sorted(r.tool_use_id for r in nxt.tool_results) if nxt is not None else []
            if nxt is None or nxt.role != "user" or got != ids:
                found.append(f"message {i}: calls {ids} answered by {got}")
        if m.role == "user" and m.tool_results:
            prev = messages[i - 1] if i else None
            calls = {u.id for u in prev.tool_uses} if prev and prev.role == "assistant" else set()
            orphans = [r.tool_use_id for r in m.tool_results if r.tool_use_id not in calls]
            if orphans:
                found.append(f"message {i}: results {orphans} answer no call")
        if not m.content:
            found.append(f"message {i} is empty")
    return found


# -- the plugin ------------------------------------------------------------------------------


def test_installed_through_entry_point() -> None:
    placed = assert_installed(
        "repair", "hango-repair", hango_repair, middleware="repair_tool_calls"
    )
    assert isinstance(placed.middleware, RepairToolCallsMiddleware)
    assert placed.capabilities == ("run_hook",)


def test_removing_the_plugin_removes_only_its_slot() -> None:
    every = [m.name for m in default_stack(StackConfig(), make_plugin_manager(env={}))]
    pm = make_plugin_manager(env={"HANGO_DISABLE_PLUGINS": "repair"})
    without = [m.name for m in default_stack(StackConfig(), pm)]
    assert "repair_tool_calls" in every
    assert without == [n for n in every if n != "repair_tool_calls"]


# -- repair_history --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_clean_history_is_left_exactly_as_it_is() -> None:
    messages = [
        user(TextBlock("go")),
        assistant(TextBlock("looking"), use("a"), use("b")),
        user(result("a"), result("b")),
        assistant(TextBlock("done")),
        user(TextBlock("thanks")),
    ]
    originals = list(messages)
    assert repair_history(messages) is None
    state = new_state(messages)
    await RepairToolCallsMiddleware().before_run(state)
    assert state.messages is messages
    assert all(a is b for a, b in zip(state.messages, originals, strict=True))


def test_a_dangling_last_batch_gets_a_new_results_message() -> None:
    messages = [user(TextBlock("go")), assistant(use("a"), use("b"))]
    repair = repair_history(messages)
    assert repair is not None
    assert repair.messages == [*messages, user(interrupted("a"), interrupted("b"))]
    assert repair.messages[0] is messages[0] and repair.messages[1] is messages[1]
    assert (repair.added, repair.dropped) == (2, 0)


def test_a_half_answered_batch_is_completed_in_its_own_results_message() -> None:
    messages = [
        user(TextBlock("go")),
        assistant(use("a"), use("b"), use("c")),
        user(result("a"), TextBlock("a note after the results")),
    ]
    repair = repair_history(messages)
    assert repair is not None
    assert repair.messages[2] == user(
        result("a"), interrupted("b"), interrupted("c"), TextBlock("a note after the results")
    )
    assert len(repair.messages) == 3


def test_a_user_message_without_results_gets_the_results_inserted_before_it() -> None:
    messages = [user(TextBlock("go")), assistant(use("a")), user(TextBlock("next question"))]
    repair = repair_history(messages)
    assert repair is not None
    assert repair.messages == [
        messages[0],
        messages[1],
        user(interrupted("a")),
        messages[2],
    ]
    assert repair.messages[3] is messages[2]


def test_orphan_and_duplicate_results_are_dropped() -> None:
    messages = [
        user(TextBlock("go"), result("ghost")),
        assistant(use("a")),
        user(result("a"), result("a", "again"), result("b")),
        assistant(TextBlock("ok")),
        user(result("late")),
    ]
    repair = repair_history(messages)
    assert repair is not None
    assert repair.messages == [
        user(TextBlock("go")),
        messages[1],
        user(result("a")),
        messages[3],
    ]
    assert (repair.added, repair.dropped) == (0, 4)


def test_a_result_one_message_too_late_is_an_orphan_and_its_call_interrupted() -> None:
    messages = [
        user(TextBlock("go")),
        assistant(use("a")),
        user(TextBlock("hm?")),
        user(result("a")),
    ]
    repair = repair_history(messages)
    assert repair is not None
    assert repair.messages == [*messages[:2], user(interrupted("a")), messages[2]]
    assert not problems(repair.messages)


@pytest.mark.anyio
async def test_before_run_repairs_in_place_and_records_what_it_did(
    recording_span: Callable[[], AbstractContextManager[Span]], exporter: InMemorySpanExporter
) -> None:
    messages = [user(TextBlock("go"), result("ghost")), assistant(use("a"))]
    state = new_state(messages)
    with recording_span():
        await RepairToolCallsMiddleware().before_run(state)
    assert state.messages is messages
    assert messages == [user(TextBlock("go")), assistant(use("a")), user(interrupted("a"))]
    (span,) = exporter.get_finished_spans()
    (event,) = [e for e in span.events if e.name == HISTORY_REPAIRED]
    assert dict(event.attributes or {})[RESULTS_ADDED] == 1
    assert dict(event.attributes or {})[RESULTS_DROPPED] == 1


ids = st.sampled_from(["t0", "t1", "t2", "t3"])
text = st.builds(TextBlock, st.sampled_from(["hi", "note"]))
assistant_messages = st.builds(
    lambda names, with_text: assistant(*([TextBlock("x")] if with_text else []), *map(use, names)),
    st.lists(ids, max_size=3, unique=True),
    st.booleans(),
).filter(lambda m: bool(m.content))
user_messages = st.builds(
    lambda names, texts: user(*map(result, names), *texts),
    st.lists(ids, max_size=3, unique=True),
    st.lists(text, max_size=2),
).filter(lambda m: bool(m.content))
histories = st.lists(st.one_of(assistant_messages, user_messages), max_size=8)


def strict_problems(messages: Sequence[Message]) -> list[str]:
    """``history_problems`` (a strict provider's rules), less the uniqueness of ids: the
    generated histories reuse call ids across messages on purpose, and repair renames none."""
    return [
        p
        for p in history_problems(messages)
        if "is not unique" not in p and "a second result" not in p
    ]


def has_prompt(history: Sequence[Message]) -> bool:
    return any(m.role == "user" and len(m.tool_results) < len(m.content) for m in history)


@given(histories)
def test_repair_makes_any_history_valid_and_is_idempotent(history: list[Message]) -> None:
    repair = repair_history(history)
    if repair is None:
        assert problems(history) == []
        if has_prompt(history):
            assert strict_problems(history) == []
        return
    assert problems(repair.messages) == []
    if has_prompt(history):  # every run's history has one: its own prompt
        assert strict_problems(repair.messages) == []
    assert repair_history(repair.messages) is None
    synthetic = [r for m in repair.messages for r in m.tool_results if r.content == INTERRUPTED]
    assert len(synthetic) == repair.added
    # Every message that needed no change is carried over as the same object; only what came
    # before the first user prompt is dropped whole.
    carried = {id(m) for m in repair.messages}
    kept = history[repair.trimmed :]
    assert all(id(m) in carried for m in kept if m.role == "assistant")


# -- through the runner: cancel mid-batch, resume ---------------------------------------------

log: list[str] = []


@tool
def fast(n: int) -> str:
    """Answers at once.

    Args:
        n: a number.
    """
    log.append(f"fast {n}")
    return f"fast {n} done"


@tool
async def slow() -> str:
    """Takes a minute."""
    log.append("slow started")
    await anyio.sleep(60)
    log.append("slow finished")
    return "slow done"


class Tools:
    name = "tools"

    def provide_tools(self, state: State) -> tuple[Tool, ...]:
        return (fast, slow)


TURNS: list[dict[str, Any]] = [
    {
        "tool_calls": [
            {"name": "fast", "input": {"n": 1}},
            {"name": "slow", "input": {}},
            {"name": "fast", "input": {"n": 2}},
        ]
    },
    {"text": "The slow call was interrupted; fine."},
]


async def cancel_in_slow(h: TestHarness) -> uuid.UUID:
    """Start a run and cancel it while ``slow`` runs; returns the run id."""
    run = await h.start(h.agent, "go")
    async with h.stream(run.id) as events:
        async for event in events:
            if isinstance(event, ToolCallStarted) and event.call.name == "slow":
                await anyio.sleep(0.05)  # let slow start
                break
    return run.id


def test_leading_orphan_results_leave_a_history_that_opens_with_the_user() -> None:
    # A history cut in the middle of a batch: results of calls no longer in it, the model's
    # reply to them, then the user's next question.
    history = [
        user(result("gone_1"), result("gone_2")),
        assistant(TextBlock("Both calls succeeded."), use("t9")),
        user(result("t9")),
        assistant(TextBlock("Done.")),
        user(TextBlock("Next question")),
        assistant(TextBlock("Sure.")),
    ]
    repair = repair_history(history)
    assert repair is not None
    assert repair.messages == history[4:]
    assert (repair.added, repair.dropped, repair.trimmed) == (0, 0, 4)
    assert_valid_history(repair.messages)
    assert repair_history(repair.messages) is None
    # A prompt that came with the orphans stays, without them.
    kept = repair_history([user(result("gone"), TextBlock("hi")), assistant(TextBlock("hello"))])
    assert kept is not None and kept.messages == [
        user(TextBlock("hi")),
        assistant(TextBlock("hello")),
    ]


@pytest.mark.anyio
async def test_cancel_mid_batch_then_resume_gives_the_provider_a_valid_history(
    tmp_path: Path,
) -> None:
    log.clear()
    stack = [RepairToolCallsMiddleware(), Tools()]
    # One at a time: fast 2 waits behind slow, so the cancel leaves it unrun.
    async with agent_harness(tmp_path, turns=TURNS, stack=stack, max_tool_concurrency=1) as h:
        run_id = await cancel_in_slow(h)
        cancelled = await h.store.get_run(h.tenant_id, run_id)
        assert cancelled.status is RunStatus.CANCELLED
        saved = await h.store.load_messages(h.tenant_id, cancelled.session_id)
        assert [m.role for m in saved] == ["user", "assistant", "user"]
        assert problems(saved)  # the batch is half answered

        model = RecordingModel(TURNS)
        h.model = model
        finished = await h.execute(run_id)
        stored = await h.store.load_messages(h.tenant_id, cancelled.session_id)
    assert finished.status is RunStatus.COMPLETED
    (request,) = model.requests
    assert problems(request.messages) == []
    calls = request.messages[1].tool_uses
    assert request.messages[2].tool_results == (
        ToolResultBlock(calls[0].id, "fast 1 done"),
        interrupted(calls[1].id),
        interrupted(calls[2].id),
    )
    # The interrupted calls were answered, not re-run.
    assert log == ["fast 1", "slow started"]
    assert stored == [*request.messages, stored[-1]]
    assert stored[-1].text == "The slow call was interrupted; fine."


@pytest.mark.anyio
async def test_cancel_mid_concurrent_batch_keeps_the_finished_results(tmp_path: Path) -> None:
    """The batch runs at once: both fast calls finish while slow runs; the cancel cancels
    slow (it never finishes) and keeps both results; the repair answers slow alone, and
    nothing is run again."""
    log.clear()
    stack = [RepairToolCallsMiddleware(), Tools()]
    async with agent_harness(tmp_path, turns=TURNS, stack=stack) as h:
        run = await h.start(h.agent, "go")
        async with h.stream(run.id) as events:
            finished_calls = 0
            async for event in events:
                if isinstance(event, ToolCallFinished):
                    finished_calls += 1
                    if finished_calls == 2:
                        break
        cancelled = await h.store.get_run(h.tenant_id, run.id)
        assert cancelled.status is RunStatus.CANCELLED
        saved = await h.store.load_messages(h.tenant_id, cancelled.session_id)
        assert [r.content for r in saved[2].tool_results] == ["fast 1 done", "fast 2 done"]
        model = RecordingModel(TURNS)
        h.model = model
        finished = await h.execute(run.id)
    assert finished.status is RunStatus.COMPLETED
    (request,) = model.requests
    assert problems(request.messages) == []
    calls = request.messages[1].tool_uses
    assert request.messages[2].tool_results == (
        ToolResultBlock(calls[0].id, "fast 1 done"),
        interrupted(calls[1].id),
        ToolResultBlock(calls[2].id, "fast 2 done"),
    )
    assert sorted(log) == ["fast 1", "fast 2", "slow started"]  # slow was cancelled, once


@pytest.mark.anyio
async def test_the_repaired_history_is_saved_before_the_first_model_call(tmp_path: Path) -> None:
    log.clear()
    stack = [RepairToolCallsMiddleware(), Tools()]
    # One at a time: fast 2 waits behind slow, so the cancel leaves it unrun.
    async with agent_harness(tmp_path, turns=TURNS, stack=stack, max_tool_concurrency=1) as h:
        run_id = await cancel_in_slow(h)
        h.model = ScriptedModel.from_turns([])  # the resumed run fails at its first model call
        finished = await h.execute(run_id)
        record = await h.store.get_run(h.tenant_id, run_id)
        stored = await h.store.load_messages(h.tenant_id, record.session_id)
    assert finished.status is RunStatus.FAILED
    assert problems(stored) == []
    assert stored[2].tool_results[1].content == INTERRUPTED


@pytest.mark.anyio
async def test_a_new_run_after_a_cancelled_batch_starts_from_a_valid_history(
    tmp_path: Path,
) -> None:
    """The next message in the session lands after the half-answered batch; the repair
    answers the batch before that message, and the old calls are not run by the new run."""
    log.clear()
    stack = [RepairToolCallsMiddleware(), Tools()]
    # One at a time: fast 2 waits behind slow, so the cancel leaves it unrun.
    async with agent_harness(tmp_path, turns=TURNS, stack=stack, max_tool_concurrency=1) as h:
        first = await cancel_in_slow(h)
        session = (await h.store.get_run(h.tenant_id, first)).session_id
        model = RecordingModel([{"text": "unused"}, {"text": "Here is the next answer."}])
        h.model = model
        second = await h.start(h.agent, "next question", session_id=session)
        finished = await h.execute(second.id)
    assert finished.status is RunStatus.COMPLETED
    (request,) = model.requests
    assert problems(request.messages) == []
    assert [m.role for m in request.messages] == ["user", "assistant", "user", "user"]
    assert [r.content for r in request.messages[2].tool_results] == [
        "fast 1 done",
        INTERRUPTED,
        INTERRUPTED,
    ]
    assert request.messages[3].text == "next question"
    assert log == ["fast 1", "slow started"]
