"""A property over random histories (parallel calls, orphans, empty turns, thinking blocks)
and random triggers: every request the middleware hands on after compacting passes the strict
provider rules whenever the history it was given does, and the compacted view is the same
when built again from the saved state (a resumed run sends what the killed one sent)."""

from __future__ import annotations

import json
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango import (
    Message,
    ModelResponse,
    Request,
    StopReason,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from hango.middleware import ModelRequest
from hango.testing import history_problems, new_state
from hango_repair.history import repair_history
from hango_summarization import Settings, SummarizationMiddleware
from hango_summarization.history import cut_points, sendable

WORDS = st.text(alphabet="abcdefgh ", min_size=1, max_size=400).filter(str.strip)


@st.composite
def histories(draw: Any) -> list[Message]:
    """A history as a run leaves it: prompts, turns with 0-3 parallel calls (thinking and
    text optional), their results (some missing, some orphaned), empty end_turns."""
    messages = [Message("user", (TextBlock(draw(WORDS)),))]
    n = 0
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["calls", "calls", "calls", "answer", "empty"]))
        blocks: list[Any] = []
        if draw(st.booleans()):
            blocks.append(ThinkingBlock(draw(WORDS), f"sig{n}"))
        if kind == "empty":
            messages.append(Message("assistant", ()))
            messages.append(Message("user", (TextBlock(draw(WORDS)),)))
            continue
        if draw(st.booleans()) or kind == "answer":
            blocks.append(TextBlock(draw(WORDS)))
        if kind == "answer":
            messages.append(Message("assistant", tuple(blocks)))
            messages.append(Message("user", (TextBlock(draw(WORDS)),)))
            continue
        uses = []
        for _ in range(draw(st.integers(1, 3))):
            n += 1
            uses.append(ToolUseBlock(f"toolu_{n}", "look", {"n": n}))
        messages.append(Message("assistant", (*blocks, *uses)))
        results = [ToolResultBlock(u.id, draw(WORDS)) for u in uses if draw(st.integers(0, 9)) > 0]
        if draw(st.integers(0, 9)) == 0:
            results.append(ToolResultBlock("toolu_orphan", "lost"))
        if results:
            messages.append(Message("user", tuple(results)))
    if messages[-1].role == "assistant":
        messages.append(Message("user", (TextBlock(draw(WORDS)),)))
    return messages


def as_sent(messages: list[Message]) -> tuple[Message, ...]:
    return tuple(m for m in (sendable(x) for x in messages) if m is not None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    histories(),
    st.integers(50, 3000),
    st.integers(1, 1500),
    st.booleans(),
    st.integers(0, 4),
)
def test_every_compacted_request_is_valid_and_rebuilt_the_same(
    raw: list[Message], trigger: int, keep: int, clear: bool, keep_results: int
) -> None:
    # The loop sends a history repair has made whole (before the run, as hango-repair does).
    repaired = repair_history(raw, frozenset())
    history = list(repaired.messages) if repaired is not None else raw
    if history_problems(as_sent(history)):
        return  # not a history the loop sends (repair's own property covers those)
    mw = SummarizationMiddleware(
        Settings(
            trigger_tokens=trigger,
            keep_tokens=keep,
            clear_tool_results=clear,
            keep_tool_results=keep_results,
        )
    )
    state = new_state(history)
    sent: list[Request] = []

    async def next_(req: ModelRequest) -> ModelResponse:
        sent.append(req.request)
        text = "a summary" if req.purpose == "summary" else "ok"
        return ModelResponse(Message("assistant", (TextBlock(text),)), StopReason.END_TURN, Usage())

    async def call() -> None:
        request = Request(model="m", messages=as_sent(history))
        await mw.wrap_model_call(ModelRequest(request, state), next_)

    anyio.run(call)
    for request in sent:
        assert history_problems(request.messages) == [], request.messages
        assert request.messages[0].role == "user"
    # Rebuilt from the saved state, in a new process: the same request.
    saved = json.loads(json.dumps(state.private))
    again = new_state(history)
    again.private = saved
    again.history_mark = state.history_mark
    from hango.middleware import load_private
    from hango_summarization.middleware import SummarizationState

    st_again, _ = load_private(again, mw.name, SummarizationState)
    rebuilt = mw.view(st_again, again, Request(model="m", messages=as_sent(history)))
    assert rebuilt.messages == sent[-1].messages


@given(histories())
@settings(max_examples=100, deadline=None)
def test_a_cut_point_never_separates_a_call_from_its_result(history: list[Message]) -> None:
    for k in cut_points(history):
        kept = history[k:]
        answered_later = {r.tool_use_id for m in kept for r in m.tool_results}
        called_before = {u.id for m in history[:k] for u in m.tool_uses}
        assert not answered_later & called_before
        assert history[k].role == "assistant" and history[k - 1].role == "user"
