"""hango-summarization: each peer's public bug, as a run with a scripted model (at the wire,
through the Anthropic SDK and the strict fake Messages API, where the wire matters).

The runs use a small context window so compaction recurs. ``look`` returns about 300 tokens,
so a run of 30 calls outgrows a 4,000-token window several times over.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

import hango_summarization
from hango import (
    ContextCompacted,
    Event,
    Harness,
    Message,
    ModelError,
    Request,
    RunStatus,
    ScriptedModel,
    TextBlock,
    ThinkingBlock,
)
from hango.agent.state import load_state
from hango.provider.events import StreamEvent
from hango.testing import (
    FakeAnthropic,
    RecordingModel,
    ToolBox,
    agent_harness,
    assert_installed,
    history_problems,
    saved_history,
    wire_problems,
)
from hango.testing.providers import anthropic_answer
from hango_summarization import (
    INSTRUCTION,
    MAX_SUMMARY_FAILURES,
    Settings,
    SummarizationMiddleware,
    SummarizationState,
    context_window,
    history,
)
from hango_todo import TodoMiddleware

pytestmark = pytest.mark.anyio

box = ToolBox()


@box.tool
def look(n: int) -> str:
    """Look at item n."""
    return f"item {n}: " + "lorem ipsum dolor " * 66


#: A 4,000-token window: every run below compacts; summaries keep about 600 tokens.
SMALL = Settings(context_window=4000, keep_tokens=600, clear_tool_results=False)
GOAL = "Look at every item and report what they say."


def calls(n: int, *, parallel: int = 1, thinking: bool = False) -> list[dict[str, Any]]:
    """``n`` scripted turns calling ``look`` (``parallel`` calls each), then an answer."""
    turns: list[dict[str, Any]] = []
    for i in range(n):
        batch = [{"name": "look", "input": {"n": i * parallel + j}} for j in range(parallel)]
        turn: dict[str, Any] = {"tool_calls": batch}
        if thinking:
            turn["thinking"] = {"thinking": f"I should look at batch {i}.", "signature": f"sig{i}"}
        turns.append(turn)
    return [*turns, {"text": "All items are lorem ipsum."}]


def is_summary(request: Request) -> bool:
    last = request.messages[-1].content[-1]
    return isinstance(last, TextBlock) and last.text == INSTRUCTION


def asks_summary(body: dict[str, Any]) -> bool:
    """Whether a Messages API body is a summary request."""
    return bool(body["messages"][-1]["content"][-1].get("text") == INSTRUCTION)


def turn_requests(model: RecordingModel) -> list[Request]:
    return [r for r in model.requests if not is_summary(r)]


async def record_of(harness: Harness, run_id: uuid.UUID) -> SummarizationState:
    run = await harness.store.get_run(harness.tenant_id, run_id)
    raw = load_state(run.state).private["summarization"]
    from hango.convert import CONVERTER

    return CONVERTER.structure(raw, SummarizationState)


def test_installed_through_entry_point() -> None:
    placed = assert_installed(
        "summarization", "hango-summarization", hango_summarization, middleware="summarization"
    )
    assert isinstance(placed.middleware, SummarizationMiddleware)
    assert placed.capabilities == ("model_wrapper",)


async def test_a_long_run_compacts_repeatedly_and_every_request_is_valid(tmp_path: Path) -> None:
    model = RecordingModel(calls(30), strict=True)
    events: list[Event] = []

    async def keep(event: Event) -> None:
        events.append(event)

    async with agent_harness(
        tmp_path, model=model, stack=[SummarizationMiddleware(SMALL)], tools=[look], max_turns=40
    ) as h:
        run = await h.start(h.agent, GOAL)
        finished = await h.execute(run.id, emit=keep)
        assert finished.status is RunStatus.COMPLETED, finished.error
        assert model.problems == []
        summaries = [r for r in model.requests if is_summary(r)]
        compacted = [e for e in events if isinstance(e, ContextCompacted)]
        assert len(summaries) == len(compacted) >= 2
        assert all(e.tier == "summary" and e.tokens_after < e.tokens_before for e in compacted)
        # Every turn of the script ran once: the scripted model counts through summaries.
        assert len(turn_requests(model)) == 31
        assert box.count("look") == (30, 30)
        # Append-only: the store keeps every message; the record covers a prefix of them.
        saved = await saved_history(h, finished.run_id)
        assert len(saved) == 1 + 30 * 2 + 1
        st = await record_of(h, finished.run_id)
        assert st.compaction is not None and st.compaction.number == len(summaries)
        assert st.compaction.start == 1 and st.compaction.goal == GOAL
        record = await h.store.get_run(h.tenant_id, finished.run_id)
        mark = load_state(record.state).history_mark
        # The covered range ends at the record's end; loads start at the last user prompt
        # before it, here the run's own (the only one).
        assert (mark.end, mark.index, mark.by) == (st.compaction.end, 0, "summarization")
        # Every request after the first compaction is bounded, opens with the goal.
        for request in turn_requests(model)[-10:]:
            assert sum(len(str(m)) for m in request.messages) < 4000 * 4
            assert request.messages[0].content[0] == TextBlock(GOAL)


async def test_the_summary_call_reuses_the_cached_prefix(tmp_path: Path) -> None:
    """deepagents#5319, strands harness-sdk#3089: the summary request is the request an
    earlier call sent, up to the cut, with the instruction as the last block."""
    model = RecordingModel(calls(30), strict=True)
    async with agent_harness(
        tmp_path, model=model, stack=[SummarizationMiddleware(SMALL)], tools=[look], max_turns=40
    ) as h:
        finished = await h.run(h.agent, GOAL)
        assert finished.status is RunStatus.COMPLETED, finished.error
    sent = model.requests
    checked = 0
    for i, request in enumerate(sent):
        if not is_summary(request):
            continue
        *prefix, last = request.messages
        asked = [*prefix, Message(last.role, last.content[:-1])]
        earlier = [r for r in sent[:i] if not is_summary(r)]
        # Some earlier call of the run sent exactly these messages, these tools and system.
        assert any(
            list(r.messages) == asked and r.tools == request.tools and r.system == request.system
            for r in earlier
        )
        checked += 1
    assert checked >= 2


async def test_the_summary_call_hits_the_prompt_cache_at_the_wire(tmp_path: Path) -> None:
    """The wire bodies: the summary request repeats the cached prefix (tools, system and
    messages byte for byte) and carries the prompt cache's breakpoints."""
    from hango_prompt_cache import PromptCacheMiddleware

    turn = 0

    def answer(request: Any) -> Any:
        nonlocal turn
        body = json.loads(request.content)
        last = body["messages"][-1]["content"][-1]
        if last.get("type") == "text" and last["text"].startswith("<summarize>"):
            return anthropic_answer("The model looked at items; all say lorem ipsum.")
        turn += 1
        if turn > 14:
            return anthropic_answer("done")
        # The input tokens a real API would report: about a quarter of the body's characters.
        size = len(request.content) // 4
        return anthropic_answer(calls=[(f"toolu_{turn}", "look", {"n": turn})], uncached=size)

    server = FakeAnthropic(answer)
    stack = [SummarizationMiddleware(SMALL), PromptCacheMiddleware()]
    async with agent_harness(
        tmp_path, model=server.model(), stack=stack, tools=[look], max_turns=30
    ) as h:
        finished = await h.run(h.agent, GOAL)
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert server.problems == []
    bodies = server.bodies
    summary_at = [i for i, b in enumerate(bodies) if asks_summary(b)]
    assert summary_at

    def unmarked(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
        if isinstance(value, list):
            return [unmarked(v) for v in value]
        return value

    for i in summary_at:
        body = bodies[i]
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        prefix = unmarked(body["messages"])
        prefix[-1]["content"] = prefix[-1]["content"][:-1]
        assert any(
            unmarked(b["messages"]) == prefix
            and unmarked(b["tools"]) == unmarked(body["tools"])
            and unmarked(b.get("system")) == unmarked(body.get("system"))
            for b in bodies[:i]
        )


async def test_the_cut_never_separates_a_tool_use_from_its_result(tmp_path: Path) -> None:
    """langchain#38352, #34282, deepagents#270: parallel calls, cut repeatedly, at the wire."""
    turn = 0

    def answer(request: Any) -> Any:
        nonlocal turn
        body = json.loads(request.content)
        last = body["messages"][-1]["content"][-1]
        if last.get("type") == "text" and last["text"].startswith("<summarize>"):
            return anthropic_answer("Looked at items so far; all lorem ipsum.")
        turn += 1
        if turn > 12:
            return anthropic_answer("done")
        return anthropic_answer(
            calls=[(f"toolu_{turn}_{j}", "look", {"n": turn * 3 + j}) for j in range(3)],
            uncached=len(request.content) // 4,
        )

    server = FakeAnthropic(answer)
    async with agent_harness(
        tmp_path,
        model=server.model(),
        stack=[SummarizationMiddleware(SMALL)],
        tools=[look],
        max_turns=30,
    ) as h:
        finished = await h.run(h.agent, GOAL)
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert server.problems == []
    assert all(wire_problems(b) == [] for b in server.bodies)
    summaries = [b for b in server.bodies if asks_summary(b)]
    assert len(summaries) >= 2
    assert box.count("look") == (36, 36)


async def test_thinking_blocks_stay_with_their_calls(tmp_path: Path) -> None:
    """langchain#34794: every assistant message a request carries is one of the history's,
    whole: its thinking block, with its signature, next to its calls."""
    model = RecordingModel(calls(20, thinking=True), strict=True)
    async with agent_harness(
        tmp_path, model=model, stack=[SummarizationMiddleware(SMALL)], tools=[look], max_turns=30
    ) as h:
        finished = await h.run(h.agent, GOAL)
        assert finished.status is RunStatus.COMPLETED, finished.error
        saved = await saved_history(h, finished.run_id)
    history = [m for m in saved if m.role == "assistant"]
    assert model.problems == []
    assert any(is_summary(r) for r in model.requests)
    for request in turn_requests(model)[1:]:
        sent = [m for m in request.messages if m.role == "assistant"]
        assert sent and all(m in history for m in sent)
        # The current turn's last assistant message keeps its thinking.
        assert isinstance(sent[-1].content[0], ThinkingBlock)
        assert sent[-1].content[0].signature.startswith("sig")


async def test_plan_and_goal_survive_compaction(tmp_path: Path) -> None:
    """codex#31659, hermes-agent#84718: after any compaction the plan still reaches the
    model through its system block, and the goal is the first message, verbatim."""
    plan = {
        "name": "write_todos",
        "input": {"todos": [{"content": "Look at every item", "status": "in_progress"}]},
    }
    turns = [{"tool_calls": [plan]}, *calls(20)]
    model = RecordingModel(turns, strict=True)
    async with agent_harness(
        tmp_path,
        model=model,
        stack=[SummarizationMiddleware(SMALL), TodoMiddleware()],
        tools=[look],
        max_turns=30,
    ) as h:
        finished = await h.run(h.agent, GOAL)
    assert finished.status is RunStatus.COMPLETED, finished.error
    after = turn_requests(model)[2:]
    first_summary = next(i for i, r in enumerate(model.requests) if is_summary(r))
    compacted = [r for r in model.requests[first_summary:] if not is_summary(r)]
    assert compacted
    for request in [*after, *compacted]:
        assert any("Look at every item" in b.text for b in request.system)
    for request in compacted:
        assert request.messages[0].content[0] == TextBlock(GOAL)
        assert "<summary>" in request.messages[0].content[1].text  # type: ignore[union-attr]


async def test_the_summary_is_not_summarized_again(tmp_path: Path) -> None:
    """deer-flow#2622, LibreChat#15294: one summary call per compaction; the next calls go
    on from the record; a later summary folds the earlier one in once."""
    model = RecordingModel(calls(30), strict=True)
    async with agent_harness(
        tmp_path, model=model, stack=[SummarizationMiddleware(SMALL)], tools=[look], max_turns=40
    ) as h:
        finished = await h.run(h.agent, GOAL)
        st = await record_of(h, finished.run_id)
    kinds = ["s" if is_summary(r) else "t" for r in model.requests]
    assert "ss" not in "".join(kinds)  # never two summaries in a row
    assert st.compaction is not None and kinds.count("s") == st.compaction.number
    for request in model.requests:
        if is_summary(request):
            text = " ".join(
                b.text for m in request.messages for b in m.content if isinstance(b, TextBlock)
            )
            assert text.count("<summary>") <= 1


async def test_the_summarizer_sees_all_it_summarizes_in_chunks_its_window_holds(
    tmp_path: Path,
) -> None:
    """langchain's trim_tokens_to_summarize (a tail only) and deepagents#5913 (everything at
    once): a summarizer with a smaller window gets every covered message, in chunks."""
    summarizer = RecordingModel(ScriptedModel([], name="summarizer-32k"))
    model = RecordingModel(calls(150), strict=True)
    settings = Settings(
        context_window=200_000, trigger_tokens=45_000, keep_tokens=2000, clear_tool_results=False
    )
    async with agent_harness(
        tmp_path,
        model=model,
        stack=[SummarizationMiddleware(settings, summarizer=summarizer)],
        tools=[look],
        max_turns=160,
    ) as h:
        finished = await h.run(h.agent, GOAL)
        st = await record_of(h, finished.run_id)
        saved = await saved_history(h, finished.run_id)
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert not any(is_summary(r) for r in model.requests)  # the summarizer was called
    assert st.compaction is not None
    assert len(summarizer.requests) > st.compaction.number  # chunked: several per compaction
    for request in summarizer.requests:
        # The estimate the middleware plans with (characters / 4).
        assert history.tokens(request.messages) < context_window(summarizer.inner)
    seen = {u.id for r in summarizer.requests for m in r.messages for u in m.tool_uses}
    covered = saved[st.compaction.start : st.compaction.end]
    assert {u.id for m in covered for u in m.tool_uses} <= seen


def test_the_context_window_is_per_model() -> None:
    server = FakeAnthropic()
    assert context_window(server.model("claude-sonnet-4-5")) == 200_000
    assert context_window(server.model("claude-sonnet-4-5-20250929")) == 200_000
    assert context_window(server.openai_model("gpt-4o")) == 128_000
    assert context_window(ScriptedModel([])) == hango_summarization.DEFAULT_CONTEXT_WINDOW
    mw = SummarizationMiddleware()
    assert mw.trigger(server.model("claude-sonnet-4-5")) == 170_000
    assert mw.trigger(server.openai_model("gpt-4o")) == int(128_000 * 0.85)
    assert SummarizationMiddleware(Settings(context_window=1000)).trigger(None) == 850
    assert SummarizationMiddleware(Settings(trigger_tokens=77)).trigger(None) == 77


async def test_a_compaction_that_reclaims_too_little_does_not_run(tmp_path: Path) -> None:
    """Hysteresis: the history over the trigger is the latest turn itself; nothing older is
    worth a summary, so none is asked for, call after call."""
    big = ToolBox()

    @big.tool
    def dump() -> str:
        """Everything at once."""
        return "x " * 9000

    turns = [{"tool_calls": [{"name": "dump"}]}, {"text": "ok"}]
    model = RecordingModel(turns, strict=True)
    async with agent_harness(
        tmp_path, model=model, stack=[SummarizationMiddleware(SMALL)], tools=[dump]
    ) as h:
        finished = await h.run(h.agent, GOAL)
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert not any(is_summary(r) for r in model.requests)
    assert len(model.requests) == 2


class FailingSummaries:
    """Scripted turns; every summary request fails (counted). The scripted model counts its
    turns from its own summaries, and a window has none, so each turn is chosen from the
    whole stored history (``whole``)."""

    name = "failing-summaries"

    def __init__(self, turns: Sequence[dict[str, Any]]) -> None:
        self.inner = ScriptedModel.from_turns(list(turns))
        self.summary_calls = 0
        self.requests: list[Request] = []
        self.whole: Callable[[], Awaitable[list[Message]]] | None = None

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if is_summary(request):
            self.summary_calls += 1
            raise ModelError("overloaded", status=529, transient=True)
        assert self.whole is not None
        whole = attrs.evolve(request, messages=tuple(await self.whole()))
        async for event in self.inner.stream(whole):
            yield event


async def test_three_failed_summaries_fall_back_to_a_sliding_window(tmp_path: Path) -> None:
    model = FailingSummaries(calls(25))
    events: list[Event] = []

    async def keep(event: Event) -> None:
        events.append(event)

    async with agent_harness(
        tmp_path, model=model, stack=[SummarizationMiddleware(SMALL)], tools=[look], max_turns=30
    ) as h:
        run = await h.start(h.agent, GOAL)
        model.whole = lambda: h.store.load_messages(h.tenant_id, run.session_id)
        finished = await h.execute(run.id, emit=keep)
        st = await record_of(h, run.id)
    assert finished.status is RunStatus.COMPLETED, finished.error
    # Three tries in the run, then no more: old messages are dropped instead.
    assert model.summary_calls == MAX_SUMMARY_FAILURES
    assert st.compaction is not None and st.compaction.tier == "window"
    assert st.failures == MAX_SUMMARY_FAILURES
    # The window moved more than once; its note says how far, once, and does not grow.
    assert st.compaction.number >= 2
    assert st.compaction.summary.count("Later messages, up to message") == 1
    windows = [e for e in events if isinstance(e, ContextCompacted) and e.tier == "window"]
    assert windows and all(e.tokens_after < e.tokens_before for e in windows)
    assert all(history_problems(r.messages) == [] for r in model.requests)


async def test_summary_calls_count_in_the_runs_usage_and_limits(tmp_path: Path) -> None:
    """The summary call goes through the rest of the chain: hango-limits counts it and its
    tokens, and its usage is the run's."""
    from hango.convert import CONVERTER
    from hango_limits import LimitPolicy, LimitsMiddleware
    from hango_limits.middleware import LimitsState

    turn = 0

    def answer(request: Any) -> Any:
        nonlocal turn
        body = json.loads(request.content)
        size = len(request.content) // 4
        if asks_summary(body):
            return anthropic_answer("Looked at items; all lorem ipsum.", uncached=size)
        turn += 1
        if turn > 14:
            return anthropic_answer("done", uncached=size)
        return anthropic_answer(calls=[(f"toolu_{turn}", "look", {"n": turn})], uncached=size)

    server = FakeAnthropic(answer)
    stack = [SummarizationMiddleware(SMALL), LimitsMiddleware(LimitPolicy())]
    async with agent_harness(
        tmp_path, model=server.model(), stack=stack, tools=[look], max_turns=30
    ) as h:
        finished = await h.run(h.agent, GOAL)
        run = await h.store.get_run(h.tenant_id, finished.run_id)
    assert finished.status is RunStatus.COMPLETED, finished.error
    bodies = server.bodies
    summaries = [b for b in bodies if asks_summary(b)]
    assert summaries
    limits = CONVERTER.structure(load_state(run.state).private["limits"], LimitsState)
    assert limits.run.model_calls == len(bodies)  # the turns and the summaries
    sent = sum(len(r.content) // 4 for r in server.requests)
    assert limits.run.input_tokens == sent
    assert finished.usage.input_tokens == sent
    assert finished.usage.output_tokens == len(bodies)
