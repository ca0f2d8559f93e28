"""hango-summarization across processes and runs, on SQLite and PostgreSQL: a kill -9 around a
compaction, a provider's "prompt is too long", and a session of many runs that loads and
sends a bounded history (deepagents#2876: a checkpoint that grows without bound)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hango import (
    AgentDefinition,
    Harness,
    Message,
    ModelError,
    Request,
    RunStatus,
    ScriptedModel,
    TextBlock,
    ToolRegistry,
)
from hango.agent.state import load_state
from hango.convert import CONVERTER
from hango.provider.events import StreamEvent
from hango.store.base import RunStore
from hango.testing import Killed, ToolBox, history_problems, kill_and_resume
from hango_repair import RepairToolCallsMiddleware
from hango_summarization import INSTRUCTION, Settings, SummarizationMiddleware, SummarizationState

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    # psycopg's async API needs asyncio; the SQLite runs use it too, so both are alike.
    return "asyncio"


box = ToolBox()


@box.tool
def look(n: int) -> str:
    """Look at item n."""
    return f"item {n}: " + "lorem ipsum dolor " * 66


SMALL = Settings(context_window=4000, keep_tokens=600, clear_tool_results=False)
AGENT = AgentDefinition(name="long", model="scripted:inline", max_turns=40)


def calls(n: int) -> list[dict[str, Any]]:
    turns = [{"tool_calls": [{"name": "look", "input": {"n": i}}]} for i in range(n)]
    return [*turns, {"text": "All items are lorem ipsum."}]


def is_summary(request: Request) -> bool:
    last = request.messages[-1].content[-1]
    return isinstance(last, TextBlock) and last.text == INSTRUCTION


def private(record: Any) -> SummarizationState:
    raw = load_state(record.state).private["summarization"]
    return CONVERTER.structure(raw, SummarizationState)


class Scripted:
    """The scripted model, keeping every request; ``kill_at`` names the call (by kind and
    number) that ends the process as a kill -9 would."""

    name = "scripted"

    def __init__(self, turns: list[dict[str, Any]], kill_at: tuple[str, int] | None = None):
        self.inner = ScriptedModel.from_turns(turns)
        self.kill_at = kill_at
        self.requests: list[Request] = []
        self.summaries = 0
        self.after_summary = 0  # turn calls since the last summary call

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if is_summary(request):
            self.summaries += 1
            self.after_summary = 0
            if self.kill_at == ("summary", self.summaries):
                self.kill_at = None
                raise Killed
        else:
            self.after_summary += 1
            if self.kill_at == ("compacted", self.summaries) and self.after_summary == 1:
                self.kill_at = None
                raise Killed
        async for event in self.inner.stream(request):
            yield event


def harness_for(model: Scripted) -> Any:
    def make(store: RunStore) -> Harness:
        return Harness(
            store,
            model=model,
            stack=lambda _config: [SummarizationMiddleware(SMALL)],
            tools=ToolRegistry([look]),
            settings={},
        )

    return make


async def test_a_kill_after_the_first_summary_resumes_without_a_second_one(
    store: RunStore,
) -> None:
    """Killed while the first compacted call is in flight: the summary was saved before it
    was sent, so the resumed run pays for no second summary and sends the same request."""
    model = Scripted(calls(30), kill_at=("compacted", 1))
    killed = await kill_and_resume(store, harness_for(model), AGENT, "Look", killed_by=Killed)
    assert killed.finished.status is RunStatus.COMPLETED, killed.finished.error
    at_kill = private(killed.killed)
    assert at_kill.compaction is not None and at_kill.compaction.number == 1
    first = next(i for i, r in enumerate(model.requests) if is_summary(r))
    sent_before_kill = model.requests[first + 1]
    resumed_first = model.requests[first + 2]
    assert not is_summary(resumed_first)
    assert resumed_first == sent_before_kill  # byte-identical: built from the record
    # Every summary call made is one compaction of the record: none was paid twice.
    final = private(killed.record)
    assert final.compaction is not None and model.summaries == final.compaction.number >= 2
    assert box.count("look") == (30, 30)
    assert all(history_problems(r.messages) == [] for r in model.requests)


async def test_a_kill_during_the_summary_call_pays_for_that_summary_once_more(
    store: RunStore,
) -> None:
    """Killed before the summary came back: nothing of it was saved, so the resumed run
    asks once more (one call), and goes on exactly as an unkilled run would."""
    model = Scripted(calls(30), kill_at=("summary", 1))
    killed = await kill_and_resume(store, harness_for(model), AGENT, "Look", killed_by=Killed)
    assert killed.finished.status is RunStatus.COMPLETED, killed.finished.error
    assert private(killed.killed).compaction is None
    final = private(killed.record)
    assert final.compaction is not None
    assert model.summaries == final.compaction.number + 1
    summaries = [r for r in model.requests if is_summary(r)]
    assert summaries[0] == summaries[1]  # the same request, asked again


class TooLong:
    """Scripted turns; a request whose messages hold more than ``limit`` characters is
    refused as Anthropic refuses it (400, "prompt is too long"). ``always_after``: from that
    turn call on, every request is refused."""

    name = "too-long"

    def __init__(self, turns: list[dict[str, Any]], limit: int, always_after: int | None = None):
        self.inner = ScriptedModel.from_turns(turns)
        self.limit = limit
        self.always_after = always_after
        self.turn_calls = 0
        self.refused: list[Request] = []
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        if not is_summary(request):
            self.turn_calls += 1
            size = sum(len(json.dumps(CONVERTER.unstructure(m))) for m in request.messages)
            always = self.always_after is not None and self.turn_calls > self.always_after
            if always or size > self.limit:
                self.refused.append(request)
                raise ModelError("prompt is too long: 210000 tokens > 200000 maximum", status=400)
        async for event in self.inner.stream(request):
            yield event


async def test_prompt_too_long_compacts_once_and_retries_the_call_once(store: RunStore) -> None:
    # A window the middleware believes is large: only the provider's refusal tells.
    settings = Settings(context_window=1_000_000, keep_tokens=600, clear_tool_results=False)
    model = TooLong(calls(20), limit=16_000)
    harness = Harness(
        store,
        model=model,
        stack=lambda _config: [SummarizationMiddleware(settings)],
        tools=ToolRegistry([look]),
        settings={},
    )
    finished = await harness.run(AGENT, "Look")
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert model.refused
    for refused in model.refused:
        i = model.requests.index(refused)
        # The refusal is followed by one summary and one retry, which is accepted.
        assert is_summary(model.requests[i + 1])
        assert model.requests[i + 2] not in model.refused


async def test_a_call_still_too_long_after_its_compaction_fails_the_run(store: RunStore) -> None:
    settings = Settings(context_window=1_000_000, keep_tokens=600, clear_tool_results=False)
    model = TooLong(calls(20), limit=10**9, always_after=6)
    harness = Harness(
        store,
        model=model,
        stack=lambda _config: [SummarizationMiddleware(settings)],
        tools=ToolRegistry([look]),
        settings={},
    )
    finished = await harness.run(AGENT, "Look")
    assert finished.status is RunStatus.FAILED
    assert finished.error is not None and "prompt is too long" in finished.error
    # The call was sent twice (once compacted), never a third time; one summary between.
    assert model.turn_calls == 6 + 2
    assert len(model.refused) == 2
    assert sum(1 for r in model.requests if is_summary(r)) == 1


class Loads:
    """The store, counting what each ``load_messages`` call returns."""

    def __init__(self, store: RunStore) -> None:
        self._store = store
        self.loaded: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def load_messages(
        self, tenant_id: uuid.UUID, session_id: uuid.UUID, *, start: int = 0
    ) -> list[Message]:
        out = await self._store.load_messages(tenant_id, session_id, start=start)
        self.loaded.append(len(out))
        return out


async def test_a_session_of_many_runs_loads_and_sends_a_bounded_history(store: RunStore) -> None:
    runs = 40
    # Each run: one look, then an answer (4 messages a run).
    turns: list[dict[str, Any]] = []
    for i in range(runs):
        turns += [{"tool_calls": [{"name": "look", "input": {"n": i}}]}, {"text": f"done {i}"}]
    model = Scripted(turns)
    loads = Loads(store)
    # With repair, which trims a history that does not open with a prompt: a load from the
    # mark opens with one, so nothing is trimmed (and nothing rewritten in the store).
    harness = Harness(
        loads,  # type: ignore[arg-type]
        model=model,
        stack=lambda _config: [SummarizationMiddleware(SMALL), RepairToolCallsMiddleware()],
        tools=ToolRegistry([look]),
        settings={},
    )
    session = None
    sizes: list[int] = []
    states: list[int] = []
    for i in range(runs):
        run = await harness.start(AGENT, f"Look at item {i}", session_id=session)
        session = run.session_id
        sent_before = len(model.requests)
        finished = await harness.execute(run.id)
        assert finished.status is RunStatus.COMPLETED, finished.error
        sent = [r for r in model.requests[sent_before:] if not is_summary(r)]
        sizes.append(sum(len(str(m)) for r in sent for m in r.messages))
        record = await store.get_run(harness.tenant_id, run.id)
        states.append(len(json.dumps(record.state)))
    assert session is not None
    whole = await store.load_messages(harness.tenant_id, session)
    assert len(whole) == runs * 4  # append-only: every message is still there
    assert [m.text for m in whole[::4]] == [f"Look at item {i}" for i in range(runs)]
    # What a run loads, sends and saves no longer grows with the session: it rises until a
    # compaction (about every 9 runs here) and falls back, in the last 20 runs as in the first.
    assert max(loads.loaded[20:]) <= max(loads.loaded[:20]) <= 48
    assert max(sizes[20:]) <= 1.3 * max(sizes[:20])
    assert max(states[20:]) <= 1.3 * max(states[:20])
    assert min(loads.loaded[20:]) < 10
    assert all(history_problems(r.messages) == [] for r in model.requests)
    # Every run answered its own prompt: the scripted turns line up across compactions.
    last = whole[-1]
    assert last.role == "assistant" and last.text == f"done {runs - 1}"
