"""Seed 002's per-call model: a wrapper swaps the model for one call with
``attrs.evolve(req, model=other)``. The other model is called once, its deltas reach the caller
like any other, the next call goes back to the run's model, and nothing of the swap is saved."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from hango import (
    Harness,
    MessageCompleted,
    ModelResponse,
    Request,
    RunStatus,
    ScriptedModel,
    TextDelta,
    tool,
)
from hango.agent.definition import AgentDefinition
from hango.middleware import ModelHandler, ModelRequest
from hango.provider.events import StreamEvent
from hango.store.sqlite import SqliteRunStore
from hango.testing import RecordingModel
from hango.tool import ToolRegistry

pytestmark = pytest.mark.anyio


class Recording(RecordingModel):
    """A named model that keeps the requests it was sent; turn ``k`` of ``turns`` answers a
    history with ``k`` assistant messages (``ScriptedModel``'s rule)."""

    def __init__(self, name: str, turns: Sequence[dict[str, Any]]) -> None:
        super().__init__(turns, name=name)


class SwapSecondCall:
    """Sends the run's second model call (history: prompt, answer, tool result) to ``other``."""

    name = "swap_second_call"

    def __init__(self, other: object) -> None:
        self.other = other
        self.seen: list[object] = []

    async def wrap_model_call(self, req: ModelRequest, next: ModelHandler) -> ModelResponse:
        self.seen.append(req.model)
        if len(req.request.messages) == 3:
            req = attrs.evolve(req, model=self.other)
        return await next(req)


@tool
def lookup(term: str) -> str:
    """Look a term up."""
    return f"{term}: found"


UNUSED = {"text": "never sent: the other model answers this turn"}


async def run_swapped(tmp_path: Path, other: Any, run_model: Recording) -> tuple[Any, ...]:
    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    swap = SwapSecondCall(other)
    harness = Harness(
        store,
        model=run_model,
        stack=lambda _: [swap],
        tools=ToolRegistry([lookup]),
        settings={},
    )
    agent = AgentDefinition(name="t", model="scripted:inline")
    events: list[Any] = []

    async def emit(event: Any) -> None:
        events.append(event)

    try:
        finished = await harness.run(agent, "look up vent", emit=emit)
        record = await store.get_run(harness.tenant_id, finished.run_id)
        messages = await store.load_messages(harness.tenant_id, record.session_id)
    finally:
        await store.aclose()
    return finished, record, messages, events, swap


async def test_a_wrapper_swaps_the_model_for_one_call(tmp_path: Path) -> None:
    run_model = Recording(
        "run-model",
        [
            {"tool_calls": [{"name": "lookup", "input": {"term": "vent"}}]},
            UNUSED,
            {"text": "All done."},
        ],
    )
    other = Recording(
        "other-model",
        [
            UNUSED,
            {
                "text": "The other model looks again.",
                "tool_calls": [{"name": "lookup", "input": {"term": "vane"}}],
            },
        ],
    )
    finished, record, messages, events, swap = await run_swapped(tmp_path, other, run_model)

    assert finished.status is RunStatus.COMPLETED
    # The other model was called once, for the second call; the run's model before and after.
    assert len(other.requests) == 1 and len(other.requests[0].messages) == 3
    assert [len(r.messages) for r in run_model.requests] == [1, 5]
    # Every call entered the chain with the run's model: the swap lasted one call.
    assert swap.seen == [run_model] * 3
    # The request the other model got names it, not the run's model.
    assert other.requests[0].model == "other-model"
    assert {r.model for r in run_model.requests} == {"run-model"}
    # Its deltas reached the caller, in order, between the run model's two answers.
    completed = [i for i, e in enumerate(events) if isinstance(e, MessageCompleted)]
    deltas = [e.text for e in events[completed[0] : completed[1]] if isinstance(e, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "The other model looks again."
    assert [m.role for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert messages[3].text == "The other model looks again."
    assert messages[4].tool_results[0].content == "vane: found"
    # Neither the saved state nor the saved history says which model answered.
    assert "other-model" not in json.dumps(record.state)
    assert "other-model" not in json.dumps(record.config)
    assert all(set(attrs.asdict(m, recurse=False)) == {"role", "content"} for m in messages)


class Nameless:
    """A model without a ``name`` attribute (the Model protocol requires none)."""

    def __init__(self, turns: Sequence[dict[str, Any]]) -> None:
        self.inner = ScriptedModel.from_turns(turns)
        self.requests: list[Request] = []

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        async for event in self.inner.stream(request):
            yield event


async def test_a_swapped_model_without_a_name_is_named_by_its_class(tmp_path: Path) -> None:
    run_model = Recording(
        "run-model",
        [{"tool_calls": [{"name": "lookup", "input": {"term": "x"}}]}, UNUSED],
    )
    other = Nameless([UNUSED, {"text": "done"}])
    finished, *_ = await run_swapped(tmp_path, other, run_model)
    assert finished.status is RunStatus.COMPLETED
    # Never the run's model name: the chat span and the request name what was called.
    assert [r.model for r in other.requests] == ["Nameless"]
